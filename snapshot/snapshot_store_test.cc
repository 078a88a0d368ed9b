// SnapshotStore against real bookies, the embedded metadata store and real
// RocksDB: consistency under concurrent writes, retention, corruption and
// fallback, empty and large snapshots.
#include <atomic>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/fault_point.h"
#include "gtest/gtest.h"
#include "metadata/metadata_store.h"
#include "proto/metadata.pb.h"
#include "rocksdb/write_batch.h"
#include "snapshot/snapshot_test_util.h"

namespace ledgerkv::snapshot {
namespace {

using testing::Contents;
using testing::CorruptJournal;
using testing::KeyValues;
using testing::SnapshotTest;

constexpr uint64_t kRange = 7;
// The range's bookkeeping keys, in the same batches as the data (as the KV
// server keeps its applied seqno).
constexpr char kAppliedSeqnoKey[] = "\x01" "applied_seqno";
constexpr char kRevisionKey[] = "\x01" "revision";

std::string ValueFor(int64_t key, int64_t version) {
  // Opaque bytes: the KV server keeps its per-key metadata in the value.
  std::string v = absl::StrCat("meta:v", version, ":value-", key, "-");
  while (v.size() < static_cast<size_t>(80 + key % 64)) v += static_cast<char>('a' + (v.size() * 7 + key) % 26);
  return v;
}

std::string KeyFor(int64_t i) { return absl::StrCat("key/", 100000000 + i); }

// Reads V and S at the snapshot being copied.
absl::StatusOr<SnapshotPoint> ReadPoint(rocksdb::DB* db, const rocksdb::ReadOptions& at) {
  std::string seqno;
  std::string revision;
  rocksdb::Status s = db->Get(at, kAppliedSeqnoKey, &seqno);
  if (s.ok()) s = db->Get(at, kRevisionKey, &revision);
  if (!s.ok()) return absl::InternalError(s.ToString());
  SnapshotPoint point;
  if (!absl::SimpleAtoi(seqno, &point.seqno) || !absl::SimpleAtoi(revision, &point.revision)) {
    return absl::InternalError("bad applied seqno or revision");
  }
  return point;
}

TEST_F(SnapshotTest, SnapshotIsExactlyTheStateAtTheRocksdbSnapshotWhileWritesGoOn) {
  // Small entries, windows and SST files, so that many entries are in
  // flight, the restore reads several windows and ingests several files.
  options_.entry_target_bytes = 64 << 10;
  options_.restore_read_window = 4;
  options_.max_sst_bytes = 256 << 10;
  NewClientAndStore();
  auto db = OpenDb("source");
  constexpr int kKeys = 20000;
  uint64_t seqno = 0;
  {
    rocksdb::WriteBatch batch;
    for (int i = 0; i < kKeys; ++i) batch.Put(KeyFor(i), ValueFor(i, 0));
    batch.Put(kAppliedSeqnoKey, absl::StrCat(++seqno));
    batch.Put(kRevisionKey, absl::StrCat(seqno * 10));
    rocksdb::WriteOptions write;
    write.disableWAL = true;
    ASSERT_TRUE(db->Write(write, &batch).ok());
    ASSERT_TRUE(db->Flush(rocksdb::FlushOptions()).ok());  // part SST, part memtable
  }

  // A writer that overwrites, inserts and deletes keys, bumping S and V in
  // the same batch, until told to stop.
  std::atomic<bool> stop{false};
  std::atomic<int64_t> batches{0};
  std::thread writer([&] {
    uint64_t s = seqno;
    rocksdb::WriteOptions write;
    write.disableWAL = true;
    for (int64_t n = 1; !stop.load(); ++n) {
      rocksdb::WriteBatch batch;
      batch.Put(KeyFor((n * 7919) % kKeys), ValueFor(n, n));
      batch.Put(KeyFor(kKeys + n), ValueFor(kKeys + n, n));
      batch.Delete(KeyFor((n * 104729) % kKeys));
      ++s;
      batch.Put(kAppliedSeqnoKey, absl::StrCat(s));
      batch.Put(kRevisionKey, absl::StrCat(s * 10));
      ASSERT_TRUE(db->Write(write, &batch).ok());
      batches.fetch_add(1);
      absl::SleepFor(absl::Microseconds(100));
    }
  });
  while (batches.load() < 50) absl::SleepFor(absl::Milliseconds(1));

  const rocksdb::Snapshot* at = db->GetSnapshot();
  SnapshotSource source;
  source.db = db.get();
  source.snapshot = at;
  source.read_point = [&](const rocksdb::ReadOptions& read) {
    // The snapshot is being taken: let the writer land a batch first, so
    // that writes provably go on meanwhile even if a loaded machine would
    // not schedule it during the (short) write of the snapshot.
    const int64_t seen = batches.load();
    const absl::Time until = absl::Now() + absl::Seconds(10);
    while (batches.load() == seen && absl::Now() < until) absl::SleepFor(absl::Milliseconds(1));
    return ReadPoint(db.get(), read);
  };
  const int64_t before = batches.load();
  auto info = store_->TakeSnapshot(kRange, source);
  const int64_t during = batches.load() - before;
  ASSERT_TRUE(info.ok()) << info.status();
  // The writes went on while the snapshot was written.
  EXPECT_GT(during, 0);
  stop = true;
  writer.join();

  const KeyValues expected = Contents(*db, at);
  ASSERT_GT(expected.size(), static_cast<size_t>(kKeys / 2));
  rocksdb::ReadOptions at_read;
  at_read.snapshot = at;
  LKV_ASSIGN_OR_FAIL(SnapshotPoint point, ReadPoint(db.get(), at_read));
  EXPECT_GT(info->ledger_id, 0u);
  EXPECT_EQ(info->range_id, kRange);
  EXPECT_EQ(info->seqno, point.seqno);
  EXPECT_EQ(info->revision, point.revision);
  EXPECT_EQ(info->record_count, expected.size());
  EXPECT_NE(Contents(*db), expected) << "the writer changed nothing after the snapshot point";

  // Many entries: one per ~64 KiB, plus header and footer.
  LKV_ASSIGN_OR_FAIL(auto meta, client_->GetLedgerMetadata(info->ledger_id));
  EXPECT_EQ(meta.state(), meta::v1::CLOSED);
  EXPECT_GT(meta.last_entry_id(), 20);

  auto target = OpenDb("restored");
  auto restored = store_->RestoreNewestValid(kRange, {.db = target.get()});
  ASSERT_TRUE(restored.ok()) << restored.status();
  EXPECT_EQ(restored->ledger_id, info->ledger_id);
  EXPECT_EQ(restored->revision, point.revision);
  EXPECT_EQ(restored->seqno, point.seqno);
  EXPECT_EQ(restored->record_count, info->record_count);
  EXPECT_EQ(restored->bytes, info->bytes);
  const KeyValues got = Contents(*target);
  EXPECT_EQ(got.size(), expected.size());
  EXPECT_TRUE(got == expected) << "restored state differs from the state at the snapshot";
  LKV_ASSIGN_OR_FAIL(SnapshotPoint restored_point, ReadPoint(target.get(), rocksdb::ReadOptions()));
  EXPECT_EQ(restored_point.seqno, point.seqno);
  // Bulk load: the data arrived as ingested SST files, not through the
  // memtable.
  std::string memtable_entries;
  ASSERT_TRUE(target->GetProperty("rocksdb.num-entries-active-mem-table", &memtable_entries));
  EXPECT_EQ(memtable_entries, "0");
  std::vector<rocksdb::LiveFileMetaData> files;
  target->GetLiveFilesMetaData(&files);
  EXPECT_GT(files.size(), 1u);
  EXPECT_FALSE(std::filesystem::exists(dir_.path() + "/restored.restore"))
      << "the scratch directory was left behind";
  EXPECT_EQ(store_->stats().restore_failures, 0);
  db->ReleaseSnapshot(at);
}

TEST_F(SnapshotTest, ASnapshotIsPublishedOnlyWithTheKeyCountOfItsRecords) {
  auto db = OpenDb("source");
  for (int i = 0; i < 3; ++i) Put(*db, KeyFor(i), ValueFor(i, 1));

  // A count taken at another moment than the copy (one key short): restore
  // would refuse it as corrupt, after the log below it was truncated. It is
  // not published, and its ledger is gone.
  SnapshotSource stale = Source(*db, 1, 1);
  stale.point.key_count = 2;
  auto refused = store_->TakeSnapshot(kRange, stale);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition) << refused.status();
  EXPECT_TRUE(absl::StrContains(refused.status().message(), "would not restore"))
      << refused.status();
  LKV_ASSIGN_OR_FAIL(auto listed, store_->ListSnapshots(kRange));
  EXPECT_TRUE(listed.empty());

  // The count read at the point being copied, while a write goes on: the
  // late key is neither copied nor counted, and the snapshot restores.
  SnapshotSource source = Source(*db, 2, 2);
  source.read_point = [&](const rocksdb::ReadOptions& at) -> absl::StatusOr<SnapshotPoint> {
    Put(*db, KeyFor(99), ValueFor(99, 1));  // after the point
    std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(at));
    int64_t count = 0;
    for (it->SeekToFirst(); it->Valid(); it->Next()) ++count;
    return SnapshotPoint{.revision = 2, .seqno = 2, .key_count = count};
  };
  LKV_ASSIGN_OR_FAIL(SnapshotInfo info, store_->TakeSnapshot(kRange, source));
  EXPECT_EQ(info.record_count, 3u);
  auto target = OpenDb("restored");
  auto restored = store_->RestoreNewestValid(kRange, {.db = target.get()});
  ASSERT_TRUE(restored.ok()) << restored.status();
  EXPECT_EQ(restored->ledger_id, info.ledger_id);
  EXPECT_EQ(Contents(*target).size(), 3u);
}

TEST_F(SnapshotTest, APublishWithAnUnknownOutcomeKeepsItsLedgerForALateArrival) {
  // The manifest CAS times out unapplied, but is still on its way (an etcd
  // request past its client's deadline) and lands after the writer gave
  // up. The ledger it names must still be there.
  ledger::testing::FlakyStore flaky(cluster_->store());
  SnapshotOptions options = options_;
  options.metadata = &flaky;
  LKV_ASSIGN_OR_FAIL(auto store, SnapshotStore::Create(options));
  auto db = OpenDb("source");
  for (int i = 0; i < 3; ++i) Put(*db, KeyFor(i), ValueFor(i, 1));

  flaky.defer_puts = 1;
  auto taken = store->TakeSnapshot(kRange, Source(*db, 1, 1));
  EXPECT_TRUE(absl::IsUnavailable(taken.status())) << taken.status();
  EXPECT_TRUE(absl::StrContains(taken.status().message(), "ledger kept")) << taken.status();

  const std::vector<absl::Status> landed = flaky.ApplyDeferredPuts();
  ASSERT_EQ(landed.size(), 1u);
  LKV_ASSERT_OK(landed[0]);
  LKV_ASSIGN_OR_FAIL(auto listed, store->ListSnapshots(kRange));
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_TRUE(LedgerExists(listed[0].ledger_id));
  auto target = OpenDb("restored");
  auto restored = store->RestoreNewestValid(kRange, {.db = target.get()});
  ASSERT_TRUE(restored.ok()) << restored.status();
  EXPECT_EQ(restored->ledger_id, listed[0].ledger_id);
  EXPECT_EQ(Contents(*target).size(), 3u);
}

TEST_F(SnapshotTest, RetentionKeepsTheLastTwoAndDeletesTheOldestLedger) {
  auto db = OpenDb("source");
  std::vector<SnapshotInfo> taken;
  for (int i = 1; i <= 3; ++i) {
    Put(*db, KeyFor(i), ValueFor(i, i));
    LKV_ASSIGN_OR_FAIL(SnapshotInfo info, store_->TakeSnapshot(kRange, Source(*db, i * 10, i)));
    taken.push_back(info);
  }
  LKV_ASSIGN_OR_FAIL(auto listed, store_->ListSnapshots(kRange));
  ASSERT_EQ(listed.size(), 2u);
  EXPECT_EQ(listed[0].ledger_id, taken[1].ledger_id);
  EXPECT_EQ(listed[1].ledger_id, taken[2].ledger_id);
  EXPECT_EQ(listed[1].seqno, 3u);
  EXPECT_EQ(listed[1].revision, 30u);
  EXPECT_EQ(listed[1].record_count, 3u);
  LKV_ASSIGN_OR_FAIL(uint64_t oldest, store_->OldestRetainedSeqno(kRange));
  EXPECT_EQ(oldest, 2u);

  EXPECT_EQ(client_->GetLedgerMetadata(taken[0].ledger_id).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_TRUE(LedgerExists(taken[1].ledger_id));
  EXPECT_TRUE(LedgerExists(taken[2].ledger_id));
  // Nothing left pending deletion in the manifest.
  LKV_ASSIGN_OR_FAIL(auto raw, cluster_->store()->Get(store_->ManifestKey(kRange)));
  meta::v1::SnapshotManifest manifest;
  ASSERT_TRUE(manifest.ParseFromString(raw.value));
  EXPECT_EQ(manifest.snapshots_size(), 2);
  EXPECT_EQ(manifest.ledgers_to_delete_size(), 0);

  // A snapshot older than the oldest retained one (a stale owner) is refused
  // and its ledger deleted: the log may already be truncated below seqno 2.
  auto stale = store_->TakeSnapshot(kRange, Source(*db, 5, 1));
  EXPECT_EQ(stale.status().code(), absl::StatusCode::kFailedPrecondition) << stale.status();
  LKV_ASSIGN_OR_FAIL(listed, store_->ListSnapshots(kRange));
  EXPECT_EQ(listed.size(), 2u);
  LKV_ASSIGN_OR_FAIL(auto ledgers, cluster_->store()->List(
                                       metadata::Keys(options_.cluster).LedgersPrefix()));
  EXPECT_EQ(ledgers.size(), 2u) << "a refused snapshot's ledger leaked";

  // Another range is independent.
  EXPECT_EQ(store_->OldestRetainedSeqno(kRange + 1).status().code(), absl::StatusCode::kNotFound);

  // Dropping the range deletes every snapshot ledger and the manifest.
  LKV_ASSERT_OK(store_->RemoveRange(kRange));
  EXPECT_FALSE(LedgerExists(taken[1].ledger_id));
  EXPECT_FALSE(LedgerExists(taken[2].ledger_id));
  EXPECT_EQ(cluster_->store()->Get(store_->ManifestKey(kRange)).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(store_->OldestRetainedSeqno(kRange).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(SnapshotTest, CorruptNewestSnapshotOnDiskFallsBackToTheOlderOne) {
  auto db = OpenDb("source");
  for (int i = 0; i < 200; ++i) Put(*db, KeyFor(i), ValueFor(i, 0));
  LKV_ASSIGN_OR_FAIL(SnapshotInfo older, store_->TakeSnapshot(kRange, Source(*db, 100, 10)));
  const KeyValues older_state = Contents(*db);
  const std::string marker = "NEWEST-SNAPSHOT-MARKER-";
  Put(*db, KeyFor(500), marker + std::string(100, 'x'));
  LKV_ASSIGN_OR_FAIL(SnapshotInfo newest, store_->TakeSnapshot(kRange, Source(*db, 200, 20)));

  // Flip a byte of the newest snapshot's data on every bookie that holds it.
  store_.reset();
  client_.reset();
  for (int i = 0; i < cluster_->size(); ++i) cluster_->StopBookie(i);
  int hits = 0;
  for (int i = 0; i < cluster_->size(); ++i) hits += CorruptJournal(cluster_->data_dir(i), marker);
  EXPECT_EQ(hits, options_.write_quorum);
  for (int i = 0; i < cluster_->size(); ++i) LKV_ASSERT_OK(cluster_->RestartBookie(i));
  NewClientAndStore();

  // Restoring it directly: DATA_LOSS that names the ledger; the target
  // stays empty.
  auto target = OpenDb("restored");
  auto direct = store_->Restore(newest, {.db = target.get()});
  EXPECT_EQ(direct.status().code(), absl::StatusCode::kDataLoss) << direct.status();
  EXPECT_NE(direct.status().message().find(absl::StrCat("snapshot ledger ", newest.ledger_id)),
            absl::string_view::npos)
      << direct.status();
  EXPECT_TRUE(Contents(*target).empty());
  EXPECT_EQ(store_->stats().restore_failures, 1);

  ::testing::internal::CaptureStderr();
  auto used = store_->RestoreNewestValid(kRange, {.db = target.get()});
  const std::string log = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(used.ok()) << used.status();
  EXPECT_EQ(used->ledger_id, older.ledger_id);
  EXPECT_EQ(used->seqno, 10u);
  EXPECT_EQ(used->revision, 100u);
  EXPECT_TRUE(Contents(*target) == older_state);
  EXPECT_EQ(store_->stats().restore_failures, 2);
  EXPECT_NE(log.find(absl::StrCat("snapshot ledger ", newest.ledger_id)), std::string::npos) << log;
}

TEST_F(SnapshotTest, NewestSnapshotWithABadFooterCrcFallsBackToTheOlderOne) {
  auto db = OpenDb("source");
  for (int i = 0; i < 100; ++i) Put(*db, KeyFor(i), ValueFor(i, 0));
  LKV_ASSIGN_OR_FAIL(SnapshotInfo older, store_->TakeSnapshot(kRange, Source(*db, 1, 1)));
  const KeyValues older_state = Contents(*db);
  Put(*db, KeyFor(1000), "later");
  SnapshotInfo newest;
  {
    ScopedFaultPoints faults;
    FaultPoints::Get().ArmAlways("snapshot.writer.bad_footer_crc");
    LKV_ASSIGN_OR_FAIL(newest, store_->TakeSnapshot(kRange, Source(*db, 2, 2)));
  }
  auto target = OpenDb("restored");
  auto direct = store_->Restore(newest, {.db = target.get()});
  EXPECT_EQ(direct.status().code(), absl::StatusCode::kDataLoss) << direct.status();
  EXPECT_NE(direct.status().message().find("CRC32C"), absl::string_view::npos) << direct.status();
  EXPECT_NE(direct.status().message().find(absl::StrCat("snapshot ledger ", newest.ledger_id)),
            absl::string_view::npos)
      << direct.status();
  EXPECT_TRUE(Contents(*target).empty()) << "data became visible before the CRC was checked";

  auto used = store_->RestoreNewestValid(kRange, {.db = target.get()});
  ASSERT_TRUE(used.ok()) << used.status();
  EXPECT_EQ(used->ledger_id, older.ledger_id);
  EXPECT_TRUE(Contents(*target) == older_state);
  EXPECT_EQ(store_->stats().restore_failures, 2);
}

TEST_F(SnapshotTest, AllSnapshotsCorruptIsAnErrorNotAnEmptyRange) {
  auto target = OpenDb("restored");
  EXPECT_EQ(store_->RestoreNewestValid(kRange, {.db = target.get()}).status().code(),
            absl::StatusCode::kNotFound);

  auto db = OpenDb("source");
  for (int i = 0; i < 50; ++i) Put(*db, KeyFor(i), ValueFor(i, 0));
  std::vector<uint64_t> ledgers;
  {
    ScopedFaultPoints faults;
    FaultPoints::Get().ArmAlways("snapshot.writer.bad_footer_crc");
    for (int i = 1; i <= 2; ++i) {
      LKV_ASSIGN_OR_FAIL(SnapshotInfo info, store_->TakeSnapshot(kRange, Source(*db, i, i)));
      ledgers.push_back(info.ledger_id);
    }
  }
  auto all = store_->RestoreNewestValid(kRange, {.db = target.get()});
  EXPECT_EQ(all.status().code(), absl::StatusCode::kDataLoss) << all.status();
  for (uint64_t id : ledgers) {
    EXPECT_NE(all.status().message().find(absl::StrCat("snapshot ledger ", id)),
              absl::string_view::npos)
        << all.status();
  }
  EXPECT_TRUE(Contents(*target).empty());
  EXPECT_EQ(store_->stats().restore_failures, 2);
}

TEST_F(SnapshotTest, EmptyDbSnapshotRoundTrips) {
  auto db = OpenDb("source");
  LKV_ASSIGN_OR_FAIL(SnapshotInfo info, store_->TakeSnapshot(kRange, Source(*db, 0, 0)));
  EXPECT_EQ(info.record_count, 0u);
  EXPECT_EQ(info.bytes, 0u);
  LKV_ASSIGN_OR_FAIL(auto meta, client_->GetLedgerMetadata(info.ledger_id));
  EXPECT_EQ(meta.last_entry_id(), 1);  // header and footer only

  auto target = OpenDb("restored");
  auto restored = store_->RestoreNewestValid(kRange, {.db = target.get()});
  ASSERT_TRUE(restored.ok()) << restored.status();
  EXPECT_EQ(restored->ledger_id, info.ledger_id);
  EXPECT_EQ(restored->record_count, 0u);
  EXPECT_TRUE(Contents(*target).empty());
}

TEST_F(SnapshotTest, LargeValuesRoundTrip) {
  auto db = OpenDb("source");
  KeyValues written;
  for (int i = 0; i < 8; ++i) {
    std::string big(512 << 10, '\0');
    for (size_t j = 0; j < big.size(); ++j) big[j] = static_cast<char>((j * 31 + i * 17) & 0xff);
    Put(*db, KeyFor(2 * i), big);
    Put(*db, KeyFor(2 * i + 1), ValueFor(i, 1));
  }
  LKV_ASSIGN_OR_FAIL(SnapshotInfo info, store_->TakeSnapshot(kRange, Source(*db, 3, 4)));
  EXPECT_EQ(info.record_count, 16u);
  EXPECT_GT(info.bytes, 8u * (512 << 10));

  auto target = OpenDb("restored");
  auto restored = store_->RestoreNewestValid(kRange, {.db = target.get()});
  ASSERT_TRUE(restored.ok()) << restored.status();
  EXPECT_TRUE(Contents(*target) == Contents(*db));

  // A record larger than the largest entry is refused, and the half-written
  // ledger does not leak.
  options_.entry_target_bytes = 128 << 10;
  options_.max_entry_bytes = 256 << 10;
  NewClientAndStore();
  LKV_ASSIGN_OR_FAIL(auto before, cluster_->store()->List(
                                      metadata::Keys(options_.cluster).LedgersPrefix()));
  auto refused = store_->TakeSnapshot(kRange, Source(*db, 5, 5));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted) << refused.status();
  EXPECT_NE(refused.status().message().find(absl::StrCat("range ", kRange)),
            absl::string_view::npos);
  LKV_ASSIGN_OR_FAIL(auto after, cluster_->store()->List(
                                     metadata::Keys(options_.cluster).LedgersPrefix()));
  EXPECT_EQ(after.size(), before.size());
}

TEST_F(SnapshotTest, RestoreRefusesANonEmptyTargetAndAMismatchedManifest) {
  auto db = OpenDb("source");
  for (int i = 0; i < 10; ++i) Put(*db, KeyFor(i), ValueFor(i, 0));
  LKV_ASSIGN_OR_FAIL(SnapshotInfo info, store_->TakeSnapshot(kRange, Source(*db, 9, 9)));

  auto target = OpenDb("restored");
  Put(*target, "stale", "state");
  auto refused = store_->RestoreNewestValid(kRange, {.db = target.get()});
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition) << refused.status();
  EXPECT_EQ(store_->stats().restore_failures, 0) << "a bad target is not a bad snapshot";
  EXPECT_EQ(Contents(*target).size(), 1u);

  // A manifest record that does not match the ledger's header is corrupt.
  auto fresh = OpenDb("fresh");
  SnapshotInfo wrong = info;
  wrong.seqno = 10;
  auto mismatch = store_->Restore(wrong, {.db = fresh.get()});
  EXPECT_EQ(mismatch.status().code(), absl::StatusCode::kDataLoss) << mismatch.status();
  EXPECT_TRUE(Contents(*fresh).empty());
  LKV_ASSIGN_OR_FAIL(SnapshotInfo ok, store_->Restore(info, {.db = fresh.get()}));
  EXPECT_EQ(ok.seqno, 9u);
  EXPECT_EQ(Contents(*fresh), Contents(*db));
}

}  // namespace
}  // namespace ledgerkv::snapshot
