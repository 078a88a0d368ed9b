// Crash, corruption and disk-failure behaviour of BookieStorage.
#include <atomic>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/entry_checksum.h"
#include "base/file.h"
#include "base/fault_env.h"
#include "base/fault_point.h"
#include "base/small_tmpfs.h"
#include "gtest/gtest.h"
#include "ledger/bookie/bookie_storage.h"
#include "ledger/bookie/journal_reader.h"
#include "ledger/bookie/test_util.h"

namespace ledgerkv::bookie {
namespace {

using testing::AddOne;
using testing::AddSync;
using testing::EntryBatch;
using testing::FenceSync;
using testing::FileSize;
using testing::FlipByte;
using testing::JournalPath;
using testing::NewTempDir;
using testing::ReadBack;

// The offset of the record of (ledger, entry) in journal file 1.
uint64_t RecordOffset(const std::string& dir, uint64_t ledger, int64_t entry) {
  const std::string path = JournalPath(dir, 1);
  auto file = Env::Default()->NewRandomAccessFile(path);
  EXPECT_TRUE(file.ok());
  JournalScanner s(file->get(), 1, FileSize(path), 0);
  while (true) {
    auto r = s.Next();
    EXPECT_TRUE(r.ok());
    if (!r.ok() || *r != JournalScanner::Result::kRecord) break;
    if (s.header().type == RecordType::kEntry && s.header().ledger_id == ledger &&
        s.header().entry_id == entry) {
      return s.record_offset();
    }
  }
  ADD_FAILURE() << "no record for ledger " << ledger << " entry " << entry;
  return 0;
}

class StorageFaultTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = NewTempDir("fault"); }

  StorageOptions Options(Env* env = nullptr) {
    StorageOptions o;
    o.dir = dir_;
    o.env = env;
    o.checkpoint_on_close = false;  // Close is a crash
    return o;
  }

  std::unique_ptr<BookieStorage> Open(StorageOptions o) {
    auto s = BookieStorage::Open(std::move(o));
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? std::move(*s) : nullptr;
  }

  std::string dir_;
};

TEST_F(StorageFaultTest, TornTailIsTruncatedAndEarlierEntriesSurvive) {
  // A partial header, a header whose payload was cut, a batch of garbage.
  char header[kRecordHeaderSize];
  const std::vector<std::string> tails = {std::string(20, '\0'), "", std::string(300, 'z')};
  for (size_t t = 0; t < tails.size(); ++t) {
    SCOPED_TRACE(t);
    dir_ = NewTempDir("torn");
    auto s = Open(Options());
    for (int64_t e = 0; e < 10; ++e) ASSERT_EQ(AddOne(*s, 1, e, e - 1), v1::OK);
    s.reset();
    const std::string path = JournalPath(dir_, 1);
    const uint64_t good_size = FileSize(path);
    std::string tail = tails[t];
    if (tail.empty()) {
      RecordHeader h;
      h.ledger_id = 1;
      h.entry_id = 10;
      h.payload_size = 100;
      h.batch_offset = good_size;
      EncodeRecordHeader(h, 1, good_size, header);
      tail = std::string(header, kRecordHeaderSize) + std::string(10, 'p');
    }
    testing::AppendBytes(path, tail);

    s = Open(Options());
    EXPECT_EQ(FileSize(path), good_size);
    for (int64_t e = 0; e < 10; ++e) ASSERT_EQ(ReadBack(*s, 1, e), v1::OK) << e;
    EXPECT_EQ(ReadBack(*s, 1, 10), v1::NO_SUCH_ENTRY);
    // New appends go where the torn record was, and replay finds them.
    ASSERT_EQ(AddOne(*s, 1, 10, 9), v1::OK);
    s.reset();
    s = Open(Options());
    EXPECT_EQ(ReadBack(*s, 1, 10), v1::OK);
  }
}

// Power loss after acknowledgements: everything acknowledged is still there
// (including fence marks and entries in rolled-over files).
TEST_F(StorageFaultTest, PowerLossLosesNothingAcknowledged) {
  FaultInjectionEnv env(Env::Default());
  StorageOptions o = Options(&env);
  o.journal_roll_bytes = 2048;
  auto s = Open(o);
  constexpr int kAdds = 200;
  std::vector<testing::EntryBatch> batches(kAdds);
  std::atomic<int> left{kAdds};
  std::atomic<int> ok{0};
  absl::Notification all;
  for (int i = 0; i < kAdds; ++i) {
    batches[i].Add(1 + i % 5, i / 5, i / 5 - 1);
    s->Add(batches[i].views(), false, [&](std::vector<Code> c) {
      ok.fetch_add(c[0] == v1::OK);
      if (left.fetch_sub(1) == 1) all.Notify();
    });
  }
  all.WaitForNotification();
  ASSERT_EQ(ok.load(), kAdds);
  ASSERT_EQ(FenceSync(*s, 2), v1::OK);
  ASSERT_EQ(FenceSync(*s, 42), v1::OK);
  ASSERT_GE(s->JournalFiles().size(), 2u);
  s.reset();
  ASSERT_TRUE(env.DropUnsyncedData().ok());

  s = Open(o);
  for (int i = 0; i < kAdds; ++i) ASSERT_EQ(ReadBack(*s, 1 + i % 5, i / 5), v1::OK) << i;
  EXPECT_TRUE(s->GetLedger(2)->fenced);
  EXPECT_TRUE(s->GetLedger(42)->fenced);
  EXPECT_FALSE(s->GetLedger(1)->fenced);
}

// The relaxed mode acknowledges before fdatasync; the same power loss then
// takes acknowledged entries. (Also shows the simulated power loss is real,
// so the test above could fail.)
TEST_F(StorageFaultTest, RelaxedModeCanLoseAcknowledgedEntriesOnPowerLoss) {
  FaultInjectionEnv env(Env::Default());
  StorageOptions o = Options(&env);
  o.sync = false;
  auto s = Open(o);
  for (int64_t e = 0; e < 20; ++e) ASSERT_EQ(AddOne(*s, 1, e), v1::OK);
  EXPECT_EQ(s->GetStats().syncs, 0u);
  s.reset();
  ASSERT_TRUE(env.DropUnsyncedData().ok());
  s = Open(o);
  EXPECT_EQ(ReadBack(*s, 1, 0), v1::NO_SUCH_ENTRY);
}

// Relaxed mode: batches written (not synced) after a checkpoint's barrier
// may already be in the index when the checkpoint reads how far the index
// goes. CHECKPOINT must not name a position the journal has not synced: a
// power loss would leave it beyond the journal's end and the bookie would
// refuse to start. The checkpoint syncs up to it first, so the entries it
// covers survive the power loss too.
TEST_F(StorageFaultTest, RelaxedModeCheckpointNeverNamesAnUnsyncedPosition) {
  ScopedFaultPoints faults;
  FaultInjectionEnv env(Env::Default());
  StorageOptions o = Options(&env);
  o.sync = false;
  auto s = Open(o);
  for (int64_t e = 0; e < 5; ++e) ASSERT_EQ(AddOne(*s, 1, e), v1::OK);
  BookieStorage* storage = s.get();
  std::atomic<bool> applied_more{false};
  FaultPoints::Get().Arm("bookie.checkpoint.barrier_passed", [&](std::string_view) {
    const JournalPosition before = storage->AppliedPositionForTest();
    for (int64_t e = 5; e < 10; ++e) EXPECT_EQ(AddOne(*storage, 1, e), v1::OK);
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (storage->AppliedPositionForTest() <= before && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(1));
    }
    applied_more = storage->AppliedPositionForTest() > before;
    return false;
  });
  ASSERT_TRUE(s->Checkpoint().ok());
  FaultPoints::Get().DisarmAll();
  ASSERT_TRUE(applied_more.load()) << "the index did not move past the barrier: proves nothing";
  s.reset();  // crash, then power loss
  ASSERT_TRUE(env.DropUnsyncedData().ok());
  auto reopened = BookieStorage::Open(o);
  ASSERT_TRUE(reopened.ok()) << "the bookie cannot start after a power loss: "
                             << reopened.status();
  for (int64_t e = 0; e < 10; ++e) EXPECT_EQ(ReadBack(**reopened, 1, e), v1::OK) << e;
}

// Relaxed mode, clean close: the close syncs the journal and checkpoints,
// so a restart replays nothing and a power loss after it loses nothing.
// (The checkpoint used to wait for a second sync through the writer thread,
// which had already stopped, and failed: every restart replayed the whole
// journal since the last periodic checkpoint.)
TEST_F(StorageFaultTest, RelaxedModeCleanCloseCheckpointsTheWholeJournal) {
  FaultInjectionEnv env(Env::Default());
  StorageOptions o = Options(&env);
  o.sync = false;
  o.checkpoint_on_close = true;
  auto s = Open(o);
  for (int64_t e = 0; e < 20; ++e) ASSERT_EQ(AddOne(*s, 1, e), v1::OK);
  s.reset();  // clean close
  auto size = env.GetFileSize(dir_ + "/" + JournalFileName(1));
  ASSERT_TRUE(size.ok()) << size.status();
  ASSERT_GT(*size, 0u);
  auto checkpoint = ReadFileToString(&env, dir_ + "/CHECKPOINT");
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  EXPECT_EQ(*checkpoint, absl::StrCat("v1 1 ", *size, "\n"));
  ASSERT_TRUE(env.DropUnsyncedData().ok());
  s = Open(o);
  for (int64_t e = 0; e < 20; ++e) EXPECT_EQ(ReadBack(*s, 1, e), v1::OK) << e;
}

// L10: a flipped byte inside a stored entry is CORRUPT on read, whether the
// index already had it (clean restart, or no restart) or replay found it.
TEST_F(StorageFaultTest, FlippedEntryByteReadsCorrupt) {
  for (bool crash : {false, true}) {
    SCOPED_TRACE(crash ? "replayed" : "indexed");
    dir_ = NewTempDir("flip");
    StorageOptions o = Options();
    o.checkpoint_on_close = !crash;
    auto s = Open(o);
    for (int64_t e = 0; e < 5; ++e) ASSERT_EQ(AddOne(*s, 1, e, e - 1), v1::OK);
    FlipByte(JournalPath(dir_, 1), RecordOffset(dir_, 1, 2) + kRecordHeaderSize + 3);
    EXPECT_EQ(ReadBack(*s, 1, 2), v1::CORRUPT);  // read later, while running
    s.reset();
    s = Open(o);
    EXPECT_EQ(ReadBack(*s, 1, 2), v1::CORRUPT);
    EXPECT_EQ(ReadBack(*s, 1, 1), v1::OK);
    EXPECT_EQ(ReadBack(*s, 1, 3), v1::OK);
    EXPECT_EQ(s->GetStats().corrupt_records_at_startup, crash ? 1u : 0u);
  }
}

// The last batch of the journal, synced and acknowledged, then a byte of it
// rots and the bookie crashes. Without proof that the batch was synced it
// would look like a torn write and be cut (the entry answering "no such
// entry"); the sync mark written after it is that proof, so replay keeps
// the record and reads answer CORRUPT (L10).
TEST_F(StorageFaultTest, FlippedByteInTheLastSyncedBatchReadsCorruptNotAbsent) {
  auto s = Open(Options());  // Close is a crash: replay starts before the batch
  for (int64_t e = 0; e < 5; ++e) ASSERT_EQ(AddOne(*s, 1, e, e - 1), v1::OK);
  s.reset();
  const std::string path = JournalPath(dir_, 1);
  const uint64_t size = FileSize(path);
  FlipByte(path, RecordOffset(dir_, 1, 4) + kRecordHeaderSize + 3);
  s = Open(Options());
  EXPECT_EQ(ReadBack(*s, 1, 4), v1::CORRUPT);
  for (int64_t e = 0; e < 4; ++e) EXPECT_EQ(ReadBack(*s, 1, e), v1::OK) << e;
  EXPECT_EQ(s->GetStats().corrupt_records_at_startup, 1u);
  EXPECT_EQ(FileSize(path), size) << "the journal was cut";
}

// A power loss while a batch was being written over a sync mark can leave
// the mark's sector as it was and a later sector of the batch on disk: a
// valid record that continues a batch whose start is missing. The mark must
// not vouch for it: replay cuts there, and the unsynced entry is absent.
TEST_F(StorageFaultTest, RecordContinuingATornBatchAfterASyncMarkIsCut) {
  auto s = Open(Options());
  for (int64_t e = 0; e < 5; ++e) ASSERT_EQ(AddOne(*s, 1, e, e - 1), v1::OK);
  s.reset();  // a crash: the mark stays after the last batch
  const std::string path = JournalPath(dir_, 1);
  uint64_t mark = 0;
  {
    auto file = Env::Default()->NewRandomAccessFile(path);
    ASSERT_TRUE(file.ok());
    JournalScanner scanner(file->get(), 1, FileSize(path), 0);
    for (;;) {
      auto r = scanner.Next();
      ASSERT_TRUE(r.ok());
      if (*r != JournalScanner::Result::kRecord) break;
      if (scanner.header().type == RecordType::kSyncMark) mark = scanner.record_offset();
    }
  }
  ASSERT_GT(mark, 0u) << "no sync mark after the last batch";
  // The torn batch started at the mark (its first record is lost); its
  // second record, entry 6, reached the disk right after the mark.
  const std::string payload = "unsynced";
  RecordHeader h;
  h.ledger_id = 1;
  h.entry_id = 6;
  h.lac = 5;
  h.payload_size = static_cast<uint32_t>(payload.size());
  h.entry_checksum = EntryChecksum(1, 6, 5, payload);
  h.batch_offset = mark;
  char header[kRecordHeaderSize];
  EncodeRecordHeader(h, 1, mark + kRecordHeaderSize, header);
  testing::WriteBytesAt(path, mark + kRecordHeaderSize, std::string(header, sizeof(header)) + payload);

  s = Open(Options());
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(ReadBack(*s, 1, 6), v1::NO_SUCH_ENTRY);
  for (int64_t e = 0; e < 5; ++e) EXPECT_EQ(ReadBack(*s, 1, e), v1::OK) << e;
  EXPECT_EQ(FileSize(path), mark + kRecordHeaderSize) << "cut right after the mark";
}

// A corrupt header in the middle of the journal (later batches follow) is
// not a torn tail: replay must not skip it or cut the journal there.
TEST_F(StorageFaultTest, CorruptHeaderInJournalMiddleIsReported) {
  for (bool crash : {false, true}) {
    SCOPED_TRACE(crash ? "replayed" : "indexed");
    dir_ = NewTempDir("mid");
    StorageOptions o = Options();
    o.checkpoint_on_close = !crash;
    auto s = Open(o);
    for (int64_t e = 0; e < 5; ++e) ASSERT_EQ(AddOne(*s, 1, e, e - 1), v1::OK);
    s.reset();
    const uint64_t size = FileSize(JournalPath(dir_, 1));
    const uint64_t at = RecordOffset(dir_, 1, 2);
    FlipByte(JournalPath(dir_, 1), at + 17);  // inside the ledger id
    auto reopened = BookieStorage::Open(o);
    if (crash) {
      ASSERT_FALSE(reopened.ok());
      EXPECT_TRUE(absl::IsDataLoss(reopened.status())) << reopened.status();
      EXPECT_NE(reopened.status().message().find(absl::StrCat("offset ", at)), std::string::npos)
          << reopened.status();
      EXPECT_EQ(FileSize(JournalPath(dir_, 1)), size) << "journal was cut";
    } else {
      ASSERT_TRUE(reopened.ok()) << reopened.status();
      EXPECT_EQ(ReadBack(**reopened, 1, 2), v1::CORRUPT);
      EXPECT_EQ(ReadBack(**reopened, 1, 4), v1::OK);
    }
  }
}

TEST_F(StorageFaultTest, FailedSyncIsNeverAcknowledgedAndTurnsReadOnly) {
  FaultInjectionEnv env(Env::Default());
  auto s = Open(Options(&env));
  std::atomic<int> listener_calls{0};
  s->SetReadOnlyListener([&] { listener_calls.fetch_add(1); });
  ASSERT_EQ(AddOne(*s, 1, 0), v1::OK);
  env.FailNextSync();
  EXPECT_EQ(AddOne(*s, 1, 1), v1::READ_ONLY);
  EXPECT_TRUE(s->read_only());
  StorageStats stats = s->GetStats();
  EXPECT_TRUE(stats.read_only);
  EXPECT_NE(stats.read_only_reason.find("fdatasync"), std::string::npos) << stats.read_only_reason;
  EXPECT_EQ(listener_calls.load(), 1);
  // Permanently: the next sync would succeed, but nothing is acked again,
  // and a disk with plenty of room (what the watermark check sees) does not
  // make it writable either.
  s->CheckDiskUsage();
  stats = s->GetStats();
  EXPECT_GE(stats.disk_usage, 0) << "the check did not run";
  EXPECT_TRUE(stats.failed);
  EXPECT_TRUE(s->read_only());
  EXPECT_EQ(listener_calls.load(), 1);
  EXPECT_EQ(AddOne(*s, 1, 2), v1::READ_ONLY);
  EXPECT_EQ(FenceSync(*s, 1), v1::READ_ONLY);
  EXPECT_EQ(ReadBack(*s, 1, 0), v1::OK);
  EXPECT_EQ(ReadBack(*s, 1, 2), v1::NO_SUCH_ENTRY);
  s.reset();
  ASSERT_TRUE(env.DropUnsyncedData().ok());
  s = Open(Options(&env));
  EXPECT_FALSE(s->read_only());
  EXPECT_EQ(ReadBack(*s, 1, 0), v1::OK);
  EXPECT_EQ(ReadBack(*s, 1, 1), v1::NO_SUCH_ENTRY);
}

TEST_F(StorageFaultTest, L7_ReadOnlyBookieConfirmsAFenceItAlreadyMadeDurable) {
  FaultInjectionEnv env(Env::Default());
  auto s = Open(Options(&env));
  ASSERT_EQ(AddOne(*s, 2, 0), v1::OK);
  ASSERT_EQ(FenceSync(*s, 2), v1::OK);
  env.FailNextSync();
  EXPECT_EQ(AddOne(*s, 1, 0), v1::READ_ONLY);
  ASSERT_TRUE(s->read_only());
  // The durable fence still counts; a new fence cannot be made durable.
  EXPECT_EQ(FenceSync(*s, 2), v1::OK);
  EXPECT_EQ(FenceSync(*s, 3), v1::READ_ONLY);
  EXPECT_NE(AddOne(*s, 2, 1), v1::OK);
}

TEST_F(StorageFaultTest, EveryPendingAddFailsWithTheSync) {
  FaultInjectionEnv env(Env::Default());
  auto s = Open(Options(&env));
  env.FailAllSyncs(true);
  constexpr int kAdds = 32;
  std::vector<testing::EntryBatch> batches(kAdds);
  std::atomic<int> read_only{0};
  std::atomic<int> left{kAdds};
  absl::Notification all;
  for (int i = 0; i < kAdds; ++i) {
    batches[i].Add(1, i);
    s->Add(batches[i].views(), false, [&](std::vector<Code> c) {
      read_only.fetch_add(c[0] == v1::READ_ONLY);
      if (left.fetch_sub(1) == 1) all.Notify();
    });
  }
  all.WaitForNotification();
  EXPECT_EQ(read_only.load(), kAdds);
  for (int i = 0; i < kAdds; ++i) EXPECT_EQ(ReadBack(*s, 1, i), v1::NO_SUCH_ENTRY);
}

TEST_F(StorageFaultTest, FullDiskTurnsReadOnlyAndRestartRepairsTheTail) {
  FaultInjectionEnv env(Env::Default());
  auto s = Open(Options(&env));
  for (int64_t e = 0; e < 3; ++e) ASSERT_EQ(AddOne(*s, 1, e), v1::OK);
  env.FailAppendsWithNoSpace(true);
  EXPECT_EQ(AddOne(*s, 1, 3), v1::READ_ONLY);
  env.FailAppendsWithNoSpace(false);
  EXPECT_EQ(AddOne(*s, 1, 4), v1::READ_ONLY);
  StorageStats stats = s->GetStats();
  EXPECT_TRUE(stats.read_only);
  EXPECT_NE(stats.read_only_reason.find("No space"), std::string::npos) << stats.read_only_reason;
  EXPECT_EQ(ReadBack(*s, 1, 2), v1::OK);
  s.reset();
  // The half-written record is a torn tail: cut on restart.
  s = Open(Options(&env));
  EXPECT_FALSE(s->read_only());
  for (int64_t e = 0; e < 3; ++e) EXPECT_EQ(ReadBack(*s, 1, e), v1::OK);
  EXPECT_EQ(ReadBack(*s, 1, 3), v1::NO_SUCH_ENTRY);
  EXPECT_EQ(AddOne(*s, 1, 3), v1::OK);
}


// The test above fails appends through a fault Env, which bypasses the
// preallocated journal file that every real bookie writes. This one fills a
// real (tmpfs) file system under the default file layer: the zero filler
// runs out of space first, then the writer's own appends do.
TEST_F(StorageFaultTest, FullFileSystemUnderThePreallocatedJournalLosesNoAcknowledgedEntry) {
  const std::string mnt = NewTempDir("fullfs");
  SmallTmpfs fs;
  if (absl::Status m = fs.Mount(mnt, 32); !m.ok()) {
    GTEST_SKIP() << m << " (needs CAP_SYS_ADMIN, as root in CI)";
  }
  dir_ = mnt + "/bookie";
  // The disk watermark would stop adds before the disk is full (tests
  // below): off, to reach ENOSPC itself, where the watermark is overrun.
  auto options = [this] {
    StorageOptions o = Options();
    o.disk_high_watermark = 1.0;
    return o;
  };
  auto s = Open(options());
  ASSERT_NE(s, nullptr);

  // 2 KiB entries, one per batch: small batches, so the journal is kept
  // filled ahead with zeros (journal_file.h).
  const std::string payload(2048, 'p');
  std::vector<int64_t> acked;
  auto add = [&](int64_t e) {
    EntryBatch b;
    b.Add(1, e, e - 1, payload);
    std::vector<Code> codes = AddSync(*s, b);
    return codes.size() == 1 ? codes[0] : v1::CODE_UNSPECIFIED;
  };
  int64_t e = 0;
  for (; e < 200; ++e) {
    ASSERT_EQ(add(e), v1::OK);
    acked.push_back(e);
  }
  // The filler runs in the background: wait for its first fill.
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (FileSize(JournalPath(dir_, 1)) <= s->GetStats().journal_bytes && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  ASSERT_GT(FileSize(JournalPath(dir_, 1)), s->GetStats().journal_bytes)
      << "the journal is not preallocated: this test would not exercise it";

  // Leave about 6 MiB free: less than the 8 MiB the filler keeps ahead, so
  // its zero fills (1 MiB steps) run out of space before the adds do.
  fs.WaitForQuiet();  // the journal filler is done
  if (absl::Status f = fs.FillLeaving(6 << 20); !f.ok()) FAIL() << f;

  Code failed = v1::OK;
  for (; e < 20000 && failed == v1::OK; ++e) {
    failed = add(e);
    if (failed == v1::OK) acked.push_back(e);
  }
  ASSERT_EQ(failed, v1::READ_ONLY) << "after " << acked.size() << " acknowledged adds";
  EXPECT_EQ(add(e++), v1::READ_ONLY);
  StorageStats stats = s->GetStats();
  EXPECT_TRUE(stats.read_only);
  EXPECT_NE(stats.read_only_reason.find("No space"), std::string::npos) << stats.read_only_reason;
  // Reads keep working, and every acknowledged entry is there.
  for (int64_t a : acked) ASSERT_EQ(ReadBack(*s, 1, a), v1::OK) << "entry " << a;
  s.reset();

  // Restarting on the still-full file system may fail, but never loses an
  // acknowledged entry; after space is freed every one of them is back and
  // the bookie takes adds again.
  if (auto full = BookieStorage::Open(options()); full.ok()) {
    for (int64_t a : acked) ASSERT_EQ(ReadBack(**full, 1, a), v1::OK) << "entry " << a;
  }
  ASSERT_TRUE(fs.Free().ok());
  s = Open(options());
  ASSERT_NE(s, nullptr);
  EXPECT_FALSE(s->read_only());
  std::string read;
  for (int64_t a : acked) {
    ASSERT_EQ(ReadBack(*s, 1, a, &read), v1::OK) << "entry " << a;
    ASSERT_EQ(read, payload) << "entry " << a;
  }
  EXPECT_EQ(add(acked.back() + 1), v1::OK);
}

Code AddWith(BookieStorage& s, uint64_t ledger, int64_t entry, const std::string& payload,
             bool recovery = false) {
  EntryBatch b;
  b.Add(ledger, entry, entry - 1, payload);
  std::vector<Code> codes = AddSync(s, b, recovery);
  return codes.size() == 1 ? codes[0] : v1::CODE_UNSPECIFIED;
}

// Waits (at most 10 s) until `count` reaches `want` (the listener runs
// just after the state changed); false if it never did, or went past it.
bool AwaitCount(const std::atomic<int>& count, int want) {
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (count.load() < want && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(5));
  return count.load() == want;
}

// Waits (at most 10 s) until `done(stats)` holds; false if it never did.
template <typename Pred>
bool AwaitStats(BookieStorage& s, Pred done) {
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (!done(s.GetStats())) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(5));
  }
  return true;
}

// Disk usage watermarks (docs/bookie-format.md): on a real tmpfs filled to
// 97% the bookie refuses adds before ENOSPC, still takes fences and
// recovery adds and serves reads; at 92% (between the watermarks) it stays so; below 90% it takes
// adds again, without a restart. The listener hears both changes.
TEST_F(StorageFaultTest, DiskOverTheHighWatermarkRefusesAddsTakesFencesAndHealsBelowTheLow) {
  const std::string mnt = NewTempDir("watermark");
  SmallTmpfs fs;
  if (absl::Status m = fs.Mount(mnt, 64); !m.ok()) {
    GTEST_SKIP() << m << " (needs CAP_SYS_ADMIN, as root in CI)";
  }
  dir_ = mnt + "/bookie";
  StorageOptions o = Options();
  o.disk_check_interval = absl::Milliseconds(10);
  auto s = Open(o);
  ASSERT_NE(s, nullptr);
  std::atomic<int> changes{0};
  s->SetReadOnlyListener([&] { changes.fetch_add(1); });
  const std::string payload(2048, 'p');
  for (int64_t e = 0; e < 10; ++e) ASSERT_EQ(AddWith(*s, 1, e, payload), v1::OK);
  ASSERT_FALSE(s->read_only());

  fs.WaitForQuiet();  // the journal filler is done
  ASSERT_TRUE(fs.FillLeaving(1 << 20).ok());  // 1-2 MiB of 64 free: 97-98% in use
  ASSERT_TRUE(AwaitStats(*s, [](const StorageStats& st) { return st.read_only; }))
      << "usage " << s->GetStats().disk_usage;
  StorageStats stats = s->GetStats();
  EXPECT_TRUE(stats.disk_full);
  EXPECT_FALSE(stats.failed);
  EXPECT_NE(stats.read_only_reason.find("high watermark 95%"), std::string::npos)
      << stats.read_only_reason;
  EXPECT_TRUE(AwaitCount(changes, 1)) << changes.load();
  EXPECT_EQ(AddWith(*s, 1, 10, payload), v1::READ_ONLY);
  EXPECT_EQ(ReadBack(*s, 1, 10), v1::NO_SUCH_ENTRY) << "a refused add was stored";
  // Fences and recovery adds are taken, durably, so that recoveries (and
  // the failovers waiting for them) finish: a fence is a header, and a
  // recovery rewrites the few entries past the last LAC.
  EXPECT_EQ(FenceSync(*s, 7), v1::OK);
  ASSERT_TRUE(s->GetLedger(7).has_value());
  EXPECT_TRUE(s->GetLedger(7)->fenced);
  EXPECT_EQ(AddWith(*s, 2, 0, payload, /*recovery=*/true), v1::OK);
  for (int64_t e = 0; e < 10; ++e) ASSERT_EQ(ReadBack(*s, 1, e), v1::OK) << e;
  ASSERT_EQ(ReadBack(*s, 2, 0), v1::OK);

  // Between the watermarks: a check sees it, and the bookie stays read-only.
  ASSERT_TRUE(fs.ShrinkBallastLeaving(5 << 20).ok());  // 59 of 64 MiB: 92%
  const uint64_t checks = s->GetStats().disk_checks;
  ASSERT_TRUE(AwaitStats(*s, [&](const StorageStats& st) {
    return st.disk_checks > checks + 1 && st.disk_usage < 0.95;
  })) << "usage " << s->GetStats().disk_usage;
  EXPECT_GT(s->GetStats().disk_usage, 0.90);
  EXPECT_TRUE(s->read_only());
  EXPECT_EQ(AddWith(*s, 1, 10, payload), v1::READ_ONLY);

  ASSERT_TRUE(fs.Free().ok());
  ASSERT_TRUE(AwaitStats(*s, [](const StorageStats& st) { return !st.read_only; }))
      << "usage " << s->GetStats().disk_usage;
  EXPECT_TRUE(s->GetStats().read_only_reason.empty());
  EXPECT_TRUE(AwaitCount(changes, 2)) << changes.load();
  EXPECT_EQ(AddWith(*s, 1, 10, payload), v1::OK);
  std::string read;
  ASSERT_EQ(ReadBack(*s, 1, 10, &read), v1::OK);
  EXPECT_EQ(read, payload);
}

// A disk over the watermark is not a failure: a clean Close still cuts
// the journal's zero-filled tail (a failed bookie skips that, and the
// final sync of relaxed mode), so the restart has nothing to cut.
TEST_F(StorageFaultTest, ACleanCloseOverTheWatermarkStillSealsTheJournal) {
  const std::string mnt = NewTempDir("watermark_close");
  SmallTmpfs fs;
  if (absl::Status m = fs.Mount(mnt, 64); !m.ok()) {
    GTEST_SKIP() << m << " (needs CAP_SYS_ADMIN, as root in CI)";
  }
  dir_ = mnt + "/bookie";
  StorageOptions o = Options();
  o.checkpoint_on_close = true;
  o.disk_check_interval = absl::Milliseconds(10);
  auto s = Open(o);
  ASSERT_NE(s, nullptr);
  const std::string payload(2048, 'p');
  for (int64_t e = 0; e < 10; ++e) ASSERT_EQ(AddWith(*s, 1, e, payload), v1::OK);
  fs.WaitForQuiet();
  ASSERT_GT(FileSize(JournalPath(dir_, 1)), s->GetStats().journal_bytes)
      << "the journal is not preallocated: this test would not exercise the seal";
  ASSERT_TRUE(fs.FillLeaving(1 << 20).ok());
  ASSERT_TRUE(AwaitStats(*s, [](const StorageStats& st) { return st.disk_full; }));
  const uint64_t journal_bytes = s->GetStats().journal_bytes;
  s->Close();
  EXPECT_EQ(FileSize(JournalPath(dir_, 1)), journal_bytes) << "the zero tail was left";
  s.reset();

  ASSERT_TRUE(fs.Free().ok());
  s = Open(o);
  ASSERT_NE(s, nullptr);
  for (int64_t e = 0; e < 10; ++e) ASSERT_EQ(ReadBack(*s, 1, e), v1::OK) << e;
}

// Between two clock ticks a fast writer could fill the disk: the writer
// checks every disk_check_bytes it writes. With the clock's check an hour
// away, 64 KiB adds on a tmpfs with 8 MiB left stop at the watermark
// (READ_ONLY, not failed), before ENOSPC, with every acknowledged entry
// readable.
TEST_F(StorageFaultTest, AFastWriterIsStoppedByTheBytesItWritesNotOnlyByTheClock) {
  const std::string mnt = NewTempDir("watermark_bytes");
  SmallTmpfs fs;
  if (absl::Status m = fs.Mount(mnt, 64); !m.ok()) {
    GTEST_SKIP() << m << " (needs CAP_SYS_ADMIN, as root in CI)";
  }
  dir_ = mnt + "/bookie";
  StorageOptions o = Options();
  o.disk_check_interval = absl::Hours(1);
  o.disk_check_bytes = 256 << 10;
  auto s = Open(o);
  ASSERT_NE(s, nullptr);
  const std::string payload(64 << 10, 'p');
  ASSERT_EQ(AddWith(*s, 1, 0, payload), v1::OK);
  fs.WaitForQuiet();
  ASSERT_TRUE(fs.FillLeaving(8 << 20).ok());  // 56 of 64 MiB: 88%

  int64_t e = 1;
  Code code = v1::OK;
  for (; e < 1000 && (code = AddWith(*s, 1, e, payload)) == v1::OK; ++e) {
  }
  ASSERT_EQ(code, v1::READ_ONLY) << "after " << e << " adds";
  const StorageStats stats = s->GetStats();
  EXPECT_TRUE(stats.disk_full) << stats.read_only_reason;
  EXPECT_FALSE(stats.failed) << "the disk filled up before the watermark stopped the writer: "
                             << stats.read_only_reason;
  for (int64_t a = 0; a < e; ++a) ASSERT_EQ(ReadBack(*s, 1, a), v1::OK) << a;
}

}  // namespace
}  // namespace ledgerkv::bookie
