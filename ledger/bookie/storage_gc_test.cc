// Ledger deletion and journal reclamation in BookieStorage.
#include <algorithm>
#include <atomic>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "base/fault_point.h"
#include "base/file.h"
#include "base/small_tmpfs.h"
#include "gtest/gtest.h"
#include "ledger/bookie/bookie_storage.h"
#include "ledger/bookie/index.h"
#include "ledger/bookie/journal_format.h"
#include "ledger/bookie/journal_reader.h"
#include "ledger/bookie/test_util.h"

namespace ledgerkv::bookie {
namespace {

using testing::AddOne;
using testing::FenceSync;
using testing::FlipByte;
using testing::JournalPath;
using testing::NewTempDir;
using testing::ReadBack;

class StorageGcTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = NewTempDir("gc"); }

  StorageOptions Options() {
    StorageOptions o;
    o.dir = dir_;
    o.journal_roll_bytes = 2048;
    o.checkpoint_on_close = false;
    return o;
  }

  std::unique_ptr<BookieStorage> Open() {
    auto s = BookieStorage::Open(Options());
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? std::move(*s) : nullptr;
  }

  std::string dir_;
};

TEST_F(StorageGcTest, DeletedLedgersAreGoneAfterRestartOthersStay) {
  auto s = Open();
  for (uint64_t l = 1; l <= 3; ++l) {
    for (int64_t e = 0; e < 5; ++e) ASSERT_EQ(AddOne(*s, l, e), v1::OK);
  }
  ASSERT_EQ(FenceSync(*s, 4), v1::OK);
  EXPECT_EQ(s->LedgerIds(), (std::vector<uint64_t>{1, 2, 3, 4}));
  const std::vector<uint64_t> dead = {2, 4};
  ASSERT_TRUE(s->DeleteLedgers(dead).ok());
  EXPECT_EQ(s->LedgerIds(), (std::vector<uint64_t>{1, 3}));
  EXPECT_FALSE(s->GetLedger(2).has_value());
  s.reset();  // a crash: the deletion was checkpointed, replay must not undo it
  s = Open();
  EXPECT_EQ(s->LedgerIds(), (std::vector<uint64_t>{1, 3}));
  for (int64_t e = 0; e < 5; ++e) {
    EXPECT_EQ(ReadBack(*s, 1, e), v1::OK);
    EXPECT_EQ(ReadBack(*s, 3, e), v1::OK);
    EXPECT_EQ(ReadBack(*s, 2, e), v1::NO_SUCH_ENTRY);
  }
}

TEST_F(StorageGcTest, AddPublishedDuringDeletionLeavesNoOrphanIndexEntry) {
  auto s = Open();
  ASSERT_EQ(AddOne(*s, 7, 0), v1::OK);
  BookieStorage* storage = s.get();
  std::atomic<bool> once{false};
  // Inside DeleteLedgers, after its barrier, with the applier held off: a
  // zombie writer's add is acknowledged and published, and reaches the
  // applier only after the ledger left the index.
  FaultPoints::Get().Arm("bookie.gc.deleting", [&](std::string_view) {
    if (once.exchange(true)) return false;
    EXPECT_EQ(AddOne(*storage, 7, 1, 0), v1::OK);
    return false;
  });
  const std::vector<uint64_t> dead = {7};
  ASSERT_TRUE(s->DeleteLedgers(dead).ok());
  FaultPoints::Get().DisarmAll();
  ASSERT_TRUE(once.load()) << "the hook must have run inside DeleteLedgers";
  ASSERT_TRUE(s->Checkpoint().ok());  // the applier has run
  EXPECT_FALSE(s->GetLedger(7).has_value());
  EXPECT_EQ(ReadBack(*s, 7, 1), v1::NO_SUCH_ENTRY) << "orphan index entry";
  EXPECT_EQ(ReadBack(*s, 7, 0), v1::NO_SUCH_ENTRY);
  s.reset();
  s = Open();
  EXPECT_EQ(ReadBack(*s, 7, 1), v1::NO_SUCH_ENTRY) << "orphan index entry after restart";
}

// L5 through deletion: deleting a ledger's state would delete its fence
// mark, and a deposed writer could then get adds acknowledged again. The
// tombstone keeps the deleted ledger fenced, also after a restart, while a
// new ledger is not refused.
TEST_F(StorageGcTest, L5_ADeletedLedgerRefusesAddsAsFencedAlsoAfterRestart) {
  auto s = Open();
  ASSERT_EQ(AddOne(*s, 7, 0), v1::OK);
  ASSERT_EQ(FenceSync(*s, 7), v1::OK);
  ASSERT_EQ(AddOne(*s, 7, 1), v1::FENCED);
  const std::vector<uint64_t> dead = {7};
  ASSERT_TRUE(s->DeleteLedgers(dead).ok());
  ASSERT_FALSE(s->GetLedger(7).has_value());
  EXPECT_EQ(AddOne(*s, 7, 1), v1::FENCED) << "the fence went with the ledger's state";
  EXPECT_EQ(AddOne(*s, 7, 2, 1), v1::FENCED);
  EXPECT_FALSE(s->GetLedger(7).has_value()) << "a refused add brought the ledger back";
  EXPECT_EQ(AddOne(*s, 7, 3, 1, /*recovery=*/true), v1::FENCED)
      << "a recovery add would bring the deleted ledger back unfenced";
  EXPECT_FALSE(s->GetLedger(7).has_value()) << "a refused recovery add brought the ledger back";
  EXPECT_EQ(AddOne(*s, 8, 0), v1::OK) << "a new ledger must not be refused";
  EXPECT_EQ(AddOne(*s, 8, 1), v1::OK);
  s.reset();
  s = Open();
  EXPECT_EQ(AddOne(*s, 7, 1), v1::FENCED) << "after a restart";
  EXPECT_EQ(ReadBack(*s, 7, 0), v1::NO_SUCH_ENTRY);
  EXPECT_EQ(AddOne(*s, 9, 0), v1::OK);
  EXPECT_EQ(ReadBack(*s, 8, 1), v1::OK);
}

// A data directory whose index holds both a deleted ledger's tombstone and
// an unfenced state for it (written by a bookie before 9c70106, whose add
// published after the deletion re-created the ledger) loads the ledger
// fenced: a held ledger's tombstone is not looked up on add, so without
// this the deposed writer's adds were acknowledged after every restart.
TEST_F(StorageGcTest, L5_ALedgerLoadedWithATombstoneIsFenced) {
  {
    auto s = Open();
    ASSERT_EQ(AddOne(*s, 7, 0), v1::OK);
    ASSERT_EQ(FenceSync(*s, 7), v1::OK);
    const std::vector<uint64_t> dead = {7};
    ASSERT_TRUE(s->DeleteLedgers(dead).ok());
    ASSERT_TRUE(s->Checkpoint().ok());
  }
  {
    // What the old race left: the tombstone, and a state without the fence.
    auto index = Index::Open(dir_ + "/index", /*may_create=*/false);
    ASSERT_TRUE(index.ok()) << index.status();
    ASSERT_TRUE(*(*index)->IsDeleted(7));
    Index::Batch batch;
    batch.PutLedger(7, LedgerState{.fenced = false, .lac = 0, .last_entry_id = 1});
    ASSERT_TRUE((*index)->Write(batch).ok());
    ASSERT_TRUE((*index)->Flush().ok());
  }
  auto s = Open();
  ASSERT_TRUE(s->GetLedger(7).has_value());
  EXPECT_TRUE(s->GetLedger(7)->fenced);
  EXPECT_EQ(AddOne(*s, 7, 2, 1), v1::FENCED) << "a deleted ledger took a deposed writer's add";
  EXPECT_EQ(AddOne(*s, 8, 0), v1::OK) << "a new ledger must not be refused";
}

// L5 and L7 through deletion, the race: a recovery add (a slow second
// recoverer's) to a fenced ledger is decided while the ledger is held, so
// without the tombstone lookup, and published after garbage collection
// erased the ledger. Published as it was, it brought the ledger back in
// memory, unfenced, and nothing read the tombstone again: the deposed
// writer's next normal adds were acknowledged. The deletion wins: the add
// is answered FENCED and the ledger stays deleted, also after a restart.
TEST_F(StorageGcTest, L5_AnAddDecidedBeforeADeletionAndPublishedAfterItIsFenced) {
  auto s = Open();
  ASSERT_EQ(AddOne(*s, 7, 0), v1::OK);
  ASSERT_EQ(FenceSync(*s, 7), v1::OK);
  ASSERT_EQ(AddOne(*s, 7, 1), v1::FENCED);
  BookieStorage* storage = s.get();
  std::atomic<bool> hold_next_sync{false};
  absl::Notification synced;
  absl::Notification release;
  // The writer stops after the add's batch is synced, before it is published.
  FaultPoints::Get().Arm("bookie.journal.synced", [&](std::string_view) {
    if (hold_next_sync.exchange(false)) {
      synced.Notify();
      release.WaitForNotification();
    }
    return false;
  });
  std::atomic<bool> once{false};
  Code recovery_add = v1::CODE_UNSPECIFIED;
  std::thread adder;
  std::thread releaser;
  // Inside DeleteLedgers, after its barrier, before the tombstone and the
  // erase: the add is decided (ledger 7 held and fenced: a recovery add
  // passes) and synced.
  FaultPoints::Get().Arm("bookie.gc.deleting", [&](std::string_view) {
    if (once.exchange(true)) return false;
    hold_next_sync = true;
    adder = std::thread(
        [&] { recovery_add = AddOne(*storage, 7, 1, 0, /*recovery=*/true); });
    if (!synced.WaitForNotificationWithTimeout(absl::Seconds(10))) {
      // The add never reached the journal's sync: fail, do not hang.
      ADD_FAILURE() << "the recovery add was never synced";
      hold_next_sync = false;
      release.Notify();
      return false;
    }
    // Released once the deletion has erased the ledger from memory (its
    // checkpoint, next, needs the writer), or after 10 s.
    releaser = std::thread([&] {
      const absl::Time until = absl::Now() + absl::Seconds(10);
      while (storage->GetLedger(7).has_value() && absl::Now() < until) {
        absl::SleepFor(absl::Milliseconds(1));
      }
      release.Notify();
    });
    return false;
  });
  const std::vector<uint64_t> dead = {7};
  ASSERT_TRUE(s->DeleteLedgers(dead).ok());
  adder.join();
  if (releaser.joinable()) releaser.join();
  FaultPoints::Get().DisarmAll();
  ASSERT_TRUE(once.load()) << "the hook must have run inside DeleteLedgers";
  EXPECT_EQ(recovery_add, v1::FENCED) << "an add to a ledger deleted before its publication";
  EXPECT_FALSE(s->GetLedger(7).has_value()) << "the add brought the deleted ledger back";
  EXPECT_EQ(AddOne(*s, 7, 2, 1), v1::FENCED) << "the deposed writer's add was acknowledged";
  EXPECT_EQ(ReadBack(*s, 7, 1), v1::NO_SUCH_ENTRY);
  ASSERT_TRUE(s->Checkpoint().ok());
  s.reset();
  s = Open();
  EXPECT_FALSE(s->GetLedger(7).has_value());
  EXPECT_EQ(AddOne(*s, 7, 2, 1), v1::FENCED) << "after a restart";
}

// Files with no live entries are deleted; files mostly dead are compacted
// (live entries copied forward); files mostly live are left alone.
TEST_F(StorageGcTest, CompactionReclaimsDeadFilesAndKeepsLiveEntries) {
  auto s = Open();
  // Phase 1: only ledger 1 (to be deleted) -> files that become fully dead.
  for (int64_t e = 0; e < 60; ++e) ASSERT_EQ(AddOne(*s, 1, e), v1::OK);
  // Phase 2: ledger 2 (kept) interleaved with 3 (deleted), 1:4 -> mostly dead.
  for (int64_t e = 0; e < 60; ++e) {
    ASSERT_EQ(AddOne(*s, 2, e), v1::OK);
    for (int k = 0; k < 4; ++k) ASSERT_EQ(AddOne(*s, 3, e * 4 + k), v1::OK);
  }
  // Phase 3: only ledger 4 (kept) -> fully live files.
  for (int64_t e = 0; e < 60; ++e) ASSERT_EQ(AddOne(*s, 4, e), v1::OK);
  ASSERT_EQ(FenceSync(*s, 2), v1::OK);

  const std::vector<uint64_t> before = s->JournalFiles();
  ASSERT_GT(before.size(), 10u);
  const uint64_t bytes_before = s->GetStats().journal_bytes;
  const std::vector<uint64_t> dead = {1, 3};
  ASSERT_TRUE(s->DeleteLedgers(dead).ok());
  auto r = s->CompactJournal(0.5);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_GT(r->files_deleted, r->files_compacted);
  EXPECT_GT(r->files_compacted, 0);
  EXPECT_GT(r->entries_copied, 0u);
  EXPECT_LE(r->entries_copied, 60u);  // only ledger 2's entries needed copying
  EXPECT_LT(s->GetStats().journal_bytes, bytes_before / 2);
  // Fully live files (ledger 4's) remain.
  std::vector<uint64_t> after = s->JournalFiles();
  EXPECT_LT(after.size(), before.size());

  auto check = [&] {
    for (int64_t e = 0; e < 60; ++e) {
      ASSERT_EQ(ReadBack(*s, 2, e), v1::OK) << e;
      ASSERT_EQ(ReadBack(*s, 4, e), v1::OK) << e;
    }
    EXPECT_TRUE(s->GetLedger(2)->fenced);
    EXPECT_EQ(s->GetLedger(2)->last_entry_id, 59);
  };
  check();
  s.reset();
  s = Open();
  check();
  EXPECT_EQ(s->JournalFiles(), after);
  // A second round finds nothing more to do.
  r = s->CompactJournal(0.5);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->entries_copied, 0u);
}

// A crash after a deletion's index flush but before CHECKPOINT moved:
// replay from the older checkpoint brings the ledger back from a record
// after it (here a recovery add), while its fence mark was recorded before
// it. The tombstone, flushed with the deletion, keeps it fenced.
TEST_F(StorageGcTest, L5_ALedgerReplayBringsBackAfterItsDeletionStaysFenced) {
  auto s = Open();
  ASSERT_EQ(AddOne(*s, 7, 0), v1::OK);
  ASSERT_EQ(FenceSync(*s, 7), v1::OK);
  ASSERT_TRUE(s->Checkpoint().ok());  // the fence mark is now before CHECKPOINT
  ASSERT_EQ(AddOne(*s, 7, 1, 0, /*recovery=*/true), v1::OK);
  FaultPoints::Get().Arm("bookie.checkpoint.flushed", [](std::string_view) { return true; });
  const std::vector<uint64_t> dead = {7};
  EXPECT_FALSE(s->DeleteLedgers(dead).ok()) << "the fault point must have failed the checkpoint";
  FaultPoints::Get().DisarmAll();
  s.reset();  // the crash: CHECKPOINT still names the position before the recovery add
  s = Open();
  ASSERT_TRUE(s->GetLedger(7).has_value()) << "replay did not bring the ledger back: the "
                                              "scenario did not happen";
  EXPECT_TRUE(s->GetLedger(7)->fenced);
  EXPECT_EQ(AddOne(*s, 7, 2, 1), v1::FENCED);
}

// Writes files that become dead (ledger 1) and files that become mostly
// dead (ledger 2 kept, 1 entry in 5), then deletes ledgers 1 and 3.
void WriteDeadAndSparseFiles(BookieStorage& s) {
  for (int64_t e = 0; e < 60; ++e) ASSERT_EQ(AddOne(s, 1, e), v1::OK);
  for (int64_t e = 0; e < 60; ++e) {
    ASSERT_EQ(AddOne(s, 2, e), v1::OK);
    for (int k = 0; k < 4; ++k) ASSERT_EQ(AddOne(s, 3, e * 4 + k), v1::OK);
  }
  for (int64_t e = 0; e < 10; ++e) ASSERT_EQ(AddOne(s, 4, e), v1::OK);  // moves the checkpoint on
  const std::vector<uint64_t> dead = {1, 3};
  ASSERT_TRUE(s.DeleteLedgers(dead).ok());
}

// A bookie with a large journal must not hold every live entry of it in
// memory at once: compaction runs in batches of at most max_copy_bytes
// (at least one file each), and still finishes every qualifying file in
// the round, so it keeps up with a busy bookie. Dead files go first.
TEST_F(StorageGcTest, CompactionRunsInBoundedBatchesAndFinishesTheRound) {
  auto s = Open();
  ASSERT_NO_FATAL_FAILURE(WriteDeadAndSparseFiles(*s));
  auto r = s->CompactJournal(0.5, /*max_copy_bytes=*/1);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_GT(r->files_compacted, 1);
  EXPECT_EQ(r->batches, r->files_compacted) << "one file per batch with a 1-byte bound";
  EXPECT_EQ(r->files_deferred, 0);
  EXPECT_GT(r->files_deleted, r->files_compacted) << "the dead files went too";
  r = s->CompactJournal(0.5, 1);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->files_compacted, 0) << "the first round left work behind";
  for (int64_t e = 0; e < 60; ++e) ASSERT_EQ(ReadBack(*s, 2, e), v1::OK) << e;
  s.reset();
  s = Open();
  for (int64_t e = 0; e < 60; ++e) ASSERT_EQ(ReadBack(*s, 2, e), v1::OK) << e;
  EXPECT_EQ(ReadBack(*s, 3, 0), v1::NO_SUCH_ENTRY);
}

// The index is keyed by ledger and entry, not by file, so finding a
// batch's live entries takes a walk of the whole index. One walk serves
// as many consecutive batches as max_walk_entries allows (at least one
// batch per walk): a round over a large journal in many batches reads the
// index a few times, not once per batch.
TEST_F(StorageGcTest, CompactionWalksTheIndexOncePerGroupOfBatchesNotOncePerBatch) {
  for (const uint64_t max_walk_entries : {BookieStorage::kDefaultMaxWalkEntries, uint64_t{1}}) {
    SCOPED_TRACE(max_walk_entries);
    dir_ = NewTempDir("gc-walks");
    auto s = Open();
    ASSERT_NO_FATAL_FAILURE(WriteDeadAndSparseFiles(*s));
    auto r = s->CompactJournal(0.5, /*max_copy_bytes=*/1, max_walk_entries);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_GT(r->batches, 2);
    EXPECT_EQ(r->files_compacted, r->batches);
    EXPECT_EQ(r->files_deferred, 0);
    if (max_walk_entries == 1) {
      EXPECT_EQ(r->index_walks, r->batches + 1) << "the bound allows one batch per walk";
    } else {
      EXPECT_EQ(r->index_walks, 2) << "one walk to sum live bytes, one for every batch";
    }
    for (int64_t e = 0; e < 60; ++e) ASSERT_EQ(ReadBack(*s, 2, e), v1::OK) << e;
    EXPECT_EQ(ReadBack(*s, 3, 0), v1::NO_SUCH_ENTRY);
    s.reset();
    s = Open();
    for (int64_t e = 0; e < 60; ++e) ASSERT_EQ(ReadBack(*s, 2, e), v1::OK) << e;
  }
}

// The journal file holding the record of (ledger, entry), and the record's
// offset in it.
std::pair<uint64_t, uint64_t> FindRecord(const std::string& dir, BookieStorage& s,
                                         uint64_t ledger, int64_t entry) {
  for (uint64_t n : s.JournalFiles()) {
    const std::string path = JournalPath(dir, n);
    auto file = Env::Default()->NewRandomAccessFile(path);
    if (!file.ok()) continue;
    JournalScanner scan(file->get(), n, testing::FileSize(path), 0);
    for (;;) {
      auto r = scan.Next();
      if (!r.ok() || *r != JournalScanner::Result::kRecord) break;
      const RecordHeader& h = scan.header();
      if (h.type == RecordType::kEntry && h.ledger_id == ledger && h.entry_id == entry) {
        return {n, scan.record_offset()};
      }
    }
  }
  ADD_FAILURE() << "no record for ledger " << ledger << " entry " << entry;
  return {0, 0};
}

// A live entry that fails verification keeps its file out of compaction
// (it must stay where reads find it and report it, L10), and that file's
// batch failing does not stop the round: the batches after it still run.
TEST_F(StorageGcTest, ACorruptLiveEntryKeepsItsFileAndTheLaterBatchesStillRun) {
  auto s = Open();
  ASSERT_NO_FATAL_FAILURE(WriteDeadAndSparseFiles(*s));
  // Entry 0 of ledger 2 is in the oldest half-dead file: the first batch.
  const auto [file, offset] = FindRecord(dir_, *s, 2, 0);
  ASSERT_NE(file, 0u);
  FlipByte(JournalPath(dir_, file), offset + kRecordHeaderSize + 1);
  ASSERT_EQ(ReadBack(*s, 2, 0), v1::CORRUPT);

  auto r = s->CompactJournal(0.5, /*max_copy_bytes=*/1);  // one file per batch
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_GT(r->files_compacted, 0) << "the batches after the corrupt file did not run";
  EXPECT_EQ(r->batches, r->files_compacted + 1) << "every batch but the corrupt file's compacts";
  EXPECT_EQ(r->files_deferred, 0);
  const std::vector<uint64_t> files = s->JournalFiles();
  EXPECT_NE(std::find(files.begin(), files.end(), file), files.end())
      << "the file with the corrupt live entry was deleted";
  auto check = [&] {
    EXPECT_EQ(ReadBack(*s, 2, 0), v1::CORRUPT) << "corruption must be reported, never absent";
    for (int64_t e = 1; e < 60; ++e) ASSERT_EQ(ReadBack(*s, 2, e), v1::OK) << e;
  };
  check();
  s.reset();
  s = Open();
  check();
  r = s->CompactJournal(0.5, 1);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->files_compacted, 0) << "only the corrupt file was left, and it stays";
}

// Compaction writes before it frees: on a nearly full disk its copies
// would fail with ENOSPC and turn the bookie read-only. It deletes the
// dead files, copies nothing while free space is short (less than twice
// the bytes to copy plus 64 MiB), and does the rest once space is back.
TEST_F(StorageGcTest, CompactionCopiesNothingWhileTheDiskIsNearlyFull) {
  const std::string mnt = NewTempDir("gcfull");
  SmallTmpfs fs;
  if (absl::Status m = fs.Mount(mnt, 96); !m.ok()) {
    GTEST_SKIP() << m << " (needs CAP_SYS_ADMIN, as root in CI)";
  }
  dir_ = mnt + "/bookie";
  auto s = Open();
  ASSERT_NE(s, nullptr);
  ASSERT_NO_FATAL_FAILURE(WriteDeadAndSparseFiles(*s));
  fs.WaitForQuiet();  // the journal filler is done
  if (absl::Status f = fs.FillLeaving(16 << 20); !f.ok()) FAIL() << f;

  auto r = s->CompactJournal(0.5);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_GT(r->files_deleted, 0) << "dead files need no space to go";
  EXPECT_EQ(r->files_compacted, 0);
  EXPECT_GT(r->files_deferred, 0);
  EXPECT_FALSE(s->GetStats().read_only);
  for (int64_t e = 0; e < 60; ++e) ASSERT_EQ(ReadBack(*s, 2, e), v1::OK) << e;

  ASSERT_TRUE(fs.Free().ok());
  r = s->CompactJournal(0.5);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_GT(r->files_compacted, 0);
  EXPECT_EQ(r->files_deferred, 0);
  for (int64_t e = 0; e < 60; ++e) ASSERT_EQ(ReadBack(*s, 2, e), v1::OK) << e;
}

// Compaction copies never resurrect an entry replaced or deleted meanwhile:
// the index moves only if it still points at the copied record.
// Entry (1,0) is rewritten (a recovery add) after compaction has read its
// old record and before the copy is published. The copy must not move the
// index back to the old bytes: compaction moves an entry's index only if it
// still points at the record it copied. Also after a restart.
TEST_F(StorageGcTest, AnEntryRewrittenWhileCompactionCopiesItKeepsItsLatestCopy) {
  ScopedFaultPoints faults;
  auto s = Open();
  for (int64_t e = 0; e < 40; ++e) {
    ASSERT_EQ(AddOne(*s, 1, e), v1::OK);
    for (int k = 0; k < 3; ++k) ASSERT_EQ(AddOne(*s, 9, e * 3 + k), v1::OK);
  }
  const std::vector<uint64_t> dead = {9};
  ASSERT_TRUE(s->DeleteLedgers(dead).ok());
  std::atomic<int> rewrites{0};
  BookieStorage* storage = s.get();
  FaultPoints::Get().Arm("bookie.gc.copies_read", [&](std::string_view) {
    if (rewrites.exchange(1) == 0) {
      testing::EntryBatch rewrite;
      rewrite.Add(1, 0, -1, "rewritten");
      EXPECT_EQ(testing::AddSync(*storage, rewrite, /*recovery=*/true),
                std::vector<Code>{v1::OK});
    }
    return false;
  });
  auto compacted = s->CompactJournal(0.5);
  FaultPoints::Get().DisarmAll();
  ASSERT_TRUE(compacted.ok()) << compacted.status();
  ASSERT_EQ(rewrites.load(), 1) << "compaction copied nothing";
  EXPECT_GT(compacted->entries_copied, 0);
  EXPECT_GT(compacted->files_compacted, 0);
  for (int pass = 0; pass < 2; ++pass) {
    std::string payload;
    ASSERT_EQ(ReadBack(*s, 1, 0, &payload), v1::OK);
    EXPECT_EQ(payload, "rewritten") << (pass == 0 ? "after compaction" : "after a restart");
    for (int64_t e = 1; e < 40; ++e) ASSERT_EQ(ReadBack(*s, 1, e), v1::OK);
    s.reset();
    s = Open();
  }
}

}  // namespace
}  // namespace ledgerkv::bookie
