#include "ledger/bookie/journal_format.h"

#include <string>

#include "base/entry_checksum.h"
#include "gtest/gtest.h"
#include "ledger/bookie/journal_reader.h"
#include "ledger/bookie/test_util.h"

namespace ledgerkv::bookie {
namespace {

RecordHeader SampleHeader() {
  RecordHeader h;
  h.type = RecordType::kEntry;
  h.flags = kFlagRecovery;
  h.payload_size = 5;
  h.ledger_id = 0x0102030405060708ull;
  h.entry_id = 42;
  h.lac = 41;
  h.entry_checksum = EntryChecksum(h.ledger_id, h.entry_id, h.lac, "hello");
  h.batch_offset = 100;
  return h;
}

TEST(JournalFormatTest, HeaderRoundTrips) {
  RecordHeader h = SampleHeader();
  char buf[kRecordHeaderSize];
  EncodeRecordHeader(h, 3, 148, buf);
  RecordHeader out;
  ASSERT_TRUE(DecodeRecordHeader(buf, 3, 148, &out));
  EXPECT_EQ(out.type, h.type);
  EXPECT_EQ(out.flags, h.flags);
  EXPECT_EQ(out.payload_size, h.payload_size);
  EXPECT_EQ(out.entry_checksum, h.entry_checksum);
  EXPECT_EQ(out.ledger_id, h.ledger_id);
  EXPECT_EQ(out.entry_id, h.entry_id);
  EXPECT_EQ(out.lac, h.lac);
  EXPECT_EQ(out.batch_offset, h.batch_offset);
  EXPECT_TRUE(VerifyEntryPayload(out, "hello"));
  EXPECT_FALSE(VerifyEntryPayload(out, "hellp"));
}

// Every byte of a header is protected (L10: corruption is detected).
TEST(JournalFormatTest, EveryFlippedHeaderByteIsDetected) {
  char buf[kRecordHeaderSize];
  EncodeRecordHeader(SampleHeader(), 3, 148, buf);
  for (size_t i = 0; i < kRecordHeaderSize; ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      char copy[kRecordHeaderSize];
      std::memcpy(copy, buf, sizeof(copy));
      copy[i] ^= static_cast<char>(1 << bit);
      RecordHeader out;
      EXPECT_FALSE(DecodeRecordHeader(copy, 3, 148, &out)) << "byte " << i << " bit " << bit;
    }
  }
}

// A sync mark is a header-only batch of its own that names nothing; any
// other shape is not a valid record (with a payload, a scanner would skip
// real records as its payload).
TEST(JournalFormatTest, SyncMarkIsAHeaderOnlyBatchOfItsOwn) {
  RecordHeader mark;
  mark.type = RecordType::kSyncMark;
  mark.ledger_id = 0;
  mark.batch_offset = 148;
  char buf[kRecordHeaderSize];
  EncodeRecordHeader(mark, 3, 148, buf);
  RecordHeader out;
  ASSERT_TRUE(DecodeRecordHeader(buf, 3, 148, &out));
  EXPECT_EQ(out.type, RecordType::kSyncMark);
  EXPECT_EQ(out.payload_size, 0u);
  for (int variant = 0; variant < 4; ++variant) {
    RecordHeader bad = mark;
    if (variant == 0) bad.payload_size = 10;
    if (variant == 1) bad.batch_offset = 100;  // continuing an earlier batch
    if (variant == 2) bad.ledger_id = 7;
    if (variant == 3) bad.flags = kFlagRecovery;
    EncodeRecordHeader(bad, 3, 148, buf);
    EXPECT_FALSE(DecodeRecordHeader(buf, 3, 148, &out)) << "variant " << variant;
  }
}

// A header copied elsewhere (say, inside a payload) does not verify there,
// so scanning for records never mistakes stored bytes for records.
TEST(JournalFormatTest, HeaderOnlyValidAtItsOwnPosition) {
  char buf[kRecordHeaderSize];
  EncodeRecordHeader(SampleHeader(), 3, 148, buf);
  RecordHeader out;
  EXPECT_FALSE(DecodeRecordHeader(buf, 3, 196, &out));
  EXPECT_FALSE(DecodeRecordHeader(buf, 4, 148, &out));
}

TEST(JournalFormatTest, FileNames) {
  EXPECT_EQ(JournalFileName(42), "journal-000042.log");
  EXPECT_EQ(JournalFileName(1234567), "journal-1234567.log");
  uint64_t n = 0;
  EXPECT_TRUE(ParseJournalFileName("journal-000042.log", &n));
  EXPECT_EQ(n, 42u);
  EXPECT_TRUE(ParseJournalFileName("journal-1234567.log", &n));
  EXPECT_EQ(n, 1234567u);
  EXPECT_FALSE(ParseJournalFileName("journal-42.log", &n));
  EXPECT_FALSE(ParseJournalFileName("journal-000042.log.tmp", &n));
  EXPECT_FALSE(ParseJournalFileName("journal-00004x.log", &n));
  EXPECT_FALSE(ParseJournalFileName("journal-000000.log", &n));
}

// Builds a journal file of `batches` batches of two entry records each.
std::string WriteJournal(const std::string& path, int batches, std::vector<uint64_t>* offsets) {
  std::string data;
  for (int b = 0; b < batches; ++b) {
    const uint64_t batch_offset = data.size();
    for (int i = 0; i < 2; ++i) {
      const int64_t entry = b * 2 + i;
      std::string payload = testing::Payload(1, entry);
      RecordHeader h;
      h.payload_size = static_cast<uint32_t>(payload.size());
      h.ledger_id = 1;
      h.entry_id = entry;
      h.lac = entry - 1;
      h.entry_checksum = EntryChecksum(1, entry, entry - 1, payload);
      h.batch_offset = batch_offset;
      char header[kRecordHeaderSize];
      offsets->push_back(data.size());
      EncodeRecordHeader(h, 1, data.size(), header);
      data.append(header, kRecordHeaderSize);
      data += payload;
    }
  }
  EXPECT_TRUE(WriteFileAtomically(Env::Default(), path, data).ok());
  return data;
}

TEST(JournalScannerTest, ReadsRecordsAndStopsAtBadSpots) {
  const std::string dir = testing::NewTempDir("scanner");
  const std::string path = dir + "/journal-000001.log";
  std::vector<uint64_t> offsets;
  std::string data = WriteJournal(path, 3, &offsets);
  auto file = Env::Default()->NewRandomAccessFile(path);
  ASSERT_TRUE(file.ok());

  JournalScanner all(file->get(), 1, data.size(), 0);
  for (int i = 0; i < 6; ++i) {
    auto r = all.Next();
    ASSERT_TRUE(r.ok());
    ASSERT_EQ(*r, JournalScanner::Result::kRecord) << i;
    EXPECT_EQ(all.header().entry_id, i);
    EXPECT_EQ(all.payload(), testing::Payload(1, i));
    EXPECT_EQ(all.record_offset(), offsets[i]);
  }
  EXPECT_EQ(*all.Next(), JournalScanner::Result::kEnd);

  // A cut-off record is kTruncated, and the scanner stays at it.
  JournalScanner cut(file->get(), 1, offsets[5] + 10, offsets[4]);
  EXPECT_EQ(*cut.Next(), JournalScanner::Result::kRecord);
  EXPECT_EQ(*cut.Next(), JournalScanner::Result::kTruncated);
  EXPECT_EQ(cut.offset(), offsets[5]);
  JournalScanner cut_payload(file->get(), 1, data.size() - 1, offsets[5]);
  EXPECT_EQ(*cut_payload.Next(), JournalScanner::Result::kTruncated);
}

TEST(JournalScannerTest, BadPayloadAndBadHeaderAreTold) {
  const std::string dir = testing::NewTempDir("scanner");
  const std::string path = dir + "/journal-000001.log";
  std::vector<uint64_t> offsets;
  std::string data = WriteJournal(path, 3, &offsets);
  testing::FlipByte(path, offsets[1] + kRecordHeaderSize + 2);  // payload of entry 1
  testing::FlipByte(path, offsets[3] + 20);                     // header of entry 3
  auto file = Env::Default()->NewRandomAccessFile(path);
  ASSERT_TRUE(file.ok());
  JournalScanner s(file->get(), 1, data.size(), 0);
  EXPECT_EQ(*s.Next(), JournalScanner::Result::kRecord);
  EXPECT_EQ(*s.Next(), JournalScanner::Result::kBadPayload);
  EXPECT_EQ(s.header().entry_id, 1);
  EXPECT_EQ(*s.Next(), JournalScanner::Result::kRecord);
  EXPECT_EQ(*s.Next(), JournalScanner::Result::kBadHeader);
  EXPECT_EQ(s.offset(), offsets[3]);

  // Entry 3 sits in batch 1 (entries 2, 3); batch 2 (entries 4, 5) follows.
  EXPECT_TRUE(*LaterBatchExists(file->get(), 1, data.size(), offsets[3]));
  // In the last batch nothing later exists: that is what a torn tail looks like.
  EXPECT_FALSE(*LaterBatchExists(file->get(), 1, data.size(), offsets[4]));
  // Records of the same batch do not count as "later".
  EXPECT_FALSE(*LaterBatchExists(file->get(), 1, offsets[4], offsets[2]));
}

}  // namespace
}  // namespace ledgerkv::bookie
