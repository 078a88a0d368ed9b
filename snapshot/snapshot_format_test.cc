// The entry formats and the manifest's insertion rule: round trips, and
// every truncation or damaged kind byte is DATA_LOSS, never a short read.
#include "snapshot/snapshot_format.h"

#include <string>

#include "gtest/gtest.h"
#include "snapshot/manifest.h"

namespace ledgerkv::snapshot {
namespace {

SnapshotHeader SampleHeader() {
  SnapshotHeader h;
  h.range_id = 42;
  h.revision = 1234567890123ull;
  h.seqno = 987654321ull;
  h.key_count = -1;
  h.ctime_unix_ms = 1700000000000;
  h.comparator = "leveldb.BytewiseComparator";
  return h;
}

TEST(SnapshotFormatTest, HeaderRoundTripsAndEveryTruncationIsDataLoss) {
  const std::string encoded = EncodeHeader(SampleHeader());
  auto decoded = DecodeHeader(encoded);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->format_version, kFormatVersion);
  EXPECT_EQ(decoded->range_id, 42u);
  EXPECT_EQ(decoded->revision, 1234567890123ull);
  EXPECT_EQ(decoded->seqno, 987654321ull);
  EXPECT_EQ(decoded->key_count, -1);
  EXPECT_EQ(decoded->ctime_unix_ms, 1700000000000);
  EXPECT_EQ(decoded->comparator, "leveldb.BytewiseComparator");
  for (size_t n = 0; n < encoded.size(); ++n) {
    EXPECT_EQ(DecodeHeader(encoded.substr(0, n)).status().code(), absl::StatusCode::kDataLoss)
        << "truncated to " << n;
  }
  EXPECT_EQ(DecodeHeader(encoded + "x").status().code(), absl::StatusCode::kDataLoss);
  std::string wrong_magic = encoded;
  wrong_magic[2] ^= 1;
  EXPECT_EQ(DecodeHeader(wrong_magic).status().code(), absl::StatusCode::kDataLoss);
  std::string wrong_version = encoded;
  wrong_version[5] = 2;
  EXPECT_EQ(DecodeHeader(wrong_version).status().code(), absl::StatusCode::kDataLoss);
  // A footer or data entry is not a header.
  EXPECT_EQ(DecodeHeader(EncodeFooter({})).status().code(), absl::StatusCode::kDataLoss);
}

TEST(SnapshotFormatTest, FooterRoundTripsAndEveryTruncationIsDataLoss) {
  SnapshotFooter f;
  f.record_count = 20000;
  f.bytes = 1ull << 33;
  f.data_entries = 77;
  f.crc32c = 0xdeadbeef;
  const std::string encoded = EncodeFooter(f);
  auto decoded = DecodeFooter(encoded);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->record_count, 20000u);
  EXPECT_EQ(decoded->bytes, 1ull << 33);
  EXPECT_EQ(decoded->data_entries, 77u);
  EXPECT_EQ(decoded->crc32c, 0xdeadbeefu);
  for (size_t n = 0; n < encoded.size(); ++n) {
    EXPECT_EQ(DecodeFooter(encoded.substr(0, n)).status().code(), absl::StatusCode::kDataLoss);
  }
  EXPECT_EQ(DecodeFooter(encoded + "x").status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(DecodeFooter(EncodeHeader(SampleHeader())).status().code(),
            absl::StatusCode::kDataLoss);
}

TEST(SnapshotFormatTest, DataEntryRoundTripsAndEveryTruncationIsDataLoss) {
  DataEntryBuilder b;
  const std::string big(300, 'v');
  b.Add("a", "1");
  b.Add("", "");  // empty keys and values are records too
  b.Add("key-with-long-value", big);
  EXPECT_EQ(b.count(), 3u);
  size_t expected_bytes = kDataHeaderBytes + EncodedRecordSize("a", "1") +
                          EncodedRecordSize("", "") + EncodedRecordSize("key-with-long-value", big);
  EXPECT_EQ(b.bytes(), expected_bytes);
  const std::string encoded = b.Finish();
  EXPECT_EQ(encoded.size(), expected_bytes);
  EXPECT_EQ(b.count(), 0u);
  EXPECT_EQ(b.bytes(), kDataHeaderBytes);

  auto decoded = DecodeData(encoded);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  ASSERT_EQ(decoded->records.size(), 3u);
  EXPECT_EQ(decoded->records[0].key, "a");
  EXPECT_EQ(decoded->records[0].value, "1");
  EXPECT_EQ(decoded->records[1].key, "");
  EXPECT_EQ(decoded->records[2].value, big);
  EXPECT_EQ(decoded->record_bytes, RecordBytes(encoded));
  EXPECT_EQ(decoded->record_bytes.size(), encoded.size() - kDataHeaderBytes);

  for (size_t n = 0; n < encoded.size(); ++n) {
    EXPECT_EQ(DecodeData(encoded.substr(0, n)).status().code(), absl::StatusCode::kDataLoss)
        << "truncated to " << n;
  }
  EXPECT_EQ(DecodeData(encoded + "x").status().code(), absl::StatusCode::kDataLoss);
  std::string wrong_count = encoded;
  wrong_count[1] = 2;
  EXPECT_EQ(DecodeData(wrong_count).status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(DecodeData(DataEntryBuilder().Finish()).status().code(), absl::StatusCode::kDataLoss);
}

meta::v1::SnapshotRecord Record(uint64_t ledger, uint64_t seqno) {
  SnapshotInfo info;
  info.ledger_id = ledger;
  info.range_id = 3;
  info.seqno = seqno;
  return ToRecord(info);
}

TEST(SnapshotManifestTest, KeepsTheNewestKBySeqnoAndRefusesOlderThanAllRetained) {
  meta::v1::SnapshotManifest m;
  m.set_range_id(3);
  EXPECT_TRUE(*AddToManifest(&m, Record(10, 100), 2));
  EXPECT_TRUE(*AddToManifest(&m, Record(11, 200), 2));
  EXPECT_TRUE(*AddToManifest(&m, Record(12, 300), 2));
  ASSERT_EQ(m.snapshots_size(), 2);
  EXPECT_EQ(m.snapshots(0).ledger_id(), 11u);
  EXPECT_EQ(m.snapshots(1).ledger_id(), 12u);
  ASSERT_EQ(m.ledgers_to_delete_size(), 1);
  EXPECT_EQ(m.ledgers_to_delete(0), 10u);

  // Publishing again is a no-op.
  EXPECT_FALSE(*AddToManifest(&m, Record(12, 300), 2));
  EXPECT_EQ(m.snapshots_size(), 2);

  // Older than every retained snapshot: refused, nothing changes.
  const std::string before = m.SerializeAsString();
  EXPECT_EQ(AddToManifest(&m, Record(13, 150), 2).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(m.SerializeAsString(), before);

  // Between the retained ones: kept, the oldest dropped.
  EXPECT_TRUE(*AddToManifest(&m, Record(14, 250), 2));
  ASSERT_EQ(m.snapshots_size(), 2);
  EXPECT_EQ(m.snapshots(0).ledger_id(), 14u);
  EXPECT_EQ(m.snapshots(1).ledger_id(), 12u);
  EXPECT_EQ(m.ledgers_to_delete_size(), 2);

  EXPECT_EQ(ManifestKey("c1", 5), "/ledgerkv/c1/snapshots/00000000000000000005");
}

}  // namespace
}  // namespace ledgerkv::snapshot
