#include "ledger/bookie/bookie_storage.h"

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <limits>
#include <optional>
#include <thread>
#include <string>
#include <vector>

#include "absl/synchronization/notification.h"
#include "base/data_dir_lock.h"
#include "base/fault_env.h"
#include "base/fault_point.h"
#include "base/file.h"
#include "gtest/gtest.h"
#include "ledger/bookie/test_util.h"

namespace ledgerkv::bookie {
namespace {

using testing::AddOne;
using testing::AddSync;
using testing::EntryBatch;
using testing::FenceSync;
using testing::NewTempDir;
using testing::ReadBack;

class StorageTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = NewTempDir("storage"); }

  // Close() behaves like a killed process (no final checkpoint), so every
  // reopen replays the journal into the index.
  StorageOptions Options() {
    StorageOptions o;
    o.dir = dir_;
    o.checkpoint_on_close = false;
    return o;
  }

  std::unique_ptr<BookieStorage> Open(StorageOptions o) {
    auto s = BookieStorage::Open(std::move(o));
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? std::move(*s) : nullptr;
  }
  std::unique_ptr<BookieStorage> Open() { return Open(Options()); }

  std::string dir_;
};

TEST_F(StorageTest, AddThenReadBack) {
  auto s = Open();
  EntryBatch b;
  b.Add(1, 0, -1).Add(1, 1, 0).Add(2, 0, -1).Add(1, 2, 1);
  EXPECT_EQ(AddSync(*s, b), std::vector<Code>(4, v1::OK));
  std::string payload;
  EXPECT_EQ(ReadBack(*s, 1, 1, &payload), v1::OK);
  EXPECT_EQ(payload, testing::Payload(1, 1));
  EXPECT_EQ(ReadBack(*s, 2, 0), v1::OK);
  v1::Entry e;
  ASSERT_EQ(s->ReadEntry(1, 2, &e), v1::OK);
  EXPECT_EQ(e.lac(), 1);
  // Absent entries of a held ledger are a positive "no such entry".
  EXPECT_EQ(ReadBack(*s, 1, 3), v1::NO_SUCH_ENTRY);
  EXPECT_EQ(s->GetLedger(1), (LedgerState{false, 1, 2}));
  EXPECT_EQ(s->GetLedger(2), (LedgerState{false, -1, 0}));
  EXPECT_FALSE(s->GetLedger(3).has_value());
  EXPECT_EQ(s->GetStats().entries_added, 4u);
}

// A batch's small records are copied into one buffer and written as one
// piece, larger payloads are written from where they are, and an entry
// refused (a bad checksum) is in neither: every mix of the three must land
// in the journal so that each stored entry reads back byte for byte, and
// replays the same.
TEST_F(StorageTest, ABatchOfSmallAndLargeEntriesReadsBackByteForByteAndAfterRestart) {
  const std::vector<size_t> sizes = {0, 1, 100, 4095, 4096, 4097, 70000, 7, 0, 65536, 3, 50};
  // Refused: one between two buffered ones, one after a large one.
  const std::vector<size_t> refused = {2, 7};
  std::vector<std::string> payloads;
  EntryBatch b;
  for (size_t i = 0; i < sizes.size(); ++i) {
    std::string p(sizes[i], '\0');
    for (size_t k = 0; k < p.size(); ++k) p[k] = static_cast<char>('a' + (k * 7 + i) % 26);
    payloads.push_back(p);
    b.Add(9, static_cast<int64_t>(i), static_cast<int64_t>(i) - 1, p);
  }
  std::vector<Code> want(sizes.size(), v1::OK);
  for (size_t i : refused) {
    b.views()[i].checksum ^= 1;
    want[i] = v1::INVALID;
  }
  auto check = [&](BookieStorage& s) {
    for (size_t i = 0; i < sizes.size(); ++i) {
      std::string got;
      const bool stored = want[i] == v1::OK;
      ASSERT_EQ(ReadBack(s, 9, static_cast<int64_t>(i), &got),
                stored ? v1::OK : v1::NO_SUCH_ENTRY)
          << i;
      if (stored) {
        EXPECT_EQ(got, payloads[i]) << "entry " << i << " of " << sizes[i] << " bytes";
      }
    }
  };
  {
    auto s = Open();
    ASSERT_EQ(AddSync(*s, b), want);
    check(*s);
  }
  auto s = Open();
  check(*s);
  EXPECT_EQ(s->GetLedger(9), (LedgerState{false, static_cast<int64_t>(sizes.size()) - 2,
                                           static_cast<int64_t>(sizes.size()) - 1}));
}

// An entry carries its writer's LAC before it (-1 <= lac < entry_id), and
// a read names first + count: entries outside these bounds are refused and
// change nothing. A LAC ahead of the entry, stored, would make readers and
// recoveries look for entries nobody wrote (a recovery then stays stuck).
TEST_F(StorageTest, AddWithImpossibleLacOrIdIsInvalidAndChangesNothing) {
  auto s = Open();
  ASSERT_EQ(AddOne(*s, 1, 0, -1), v1::OK);
  ASSERT_EQ(AddOne(*s, 1, 1, 0), v1::OK);
  const std::optional<LedgerState> before = s->GetLedger(1);
  ASSERT_TRUE(before.has_value());
  EntryBatch bad;
  bad.Add(1, 2, 2);    // its own id
  bad.Add(1, 3, 50);   // ahead of it
  bad.Add(1, 4, -2);   // below "none"
  bad.Add(1, std::numeric_limits<int64_t>::max(), 5);
  bad.Add(1, 5, 4);    // fine, in the same batch
  EXPECT_EQ(AddSync(*s, bad), (std::vector<Code>{v1::INVALID, v1::INVALID, v1::INVALID,
                                                 v1::INVALID, v1::OK}));
  EXPECT_EQ(AddOne(*s, 2, 7, 7), v1::INVALID);
  for (int64_t e : {2, 3}) EXPECT_EQ(ReadBack(*s, 1, e), v1::NO_SUCH_ENTRY) << e;
  const std::optional<LedgerState> after = s->GetLedger(1);
  ASSERT_TRUE(after.has_value());
  EXPECT_EQ(after->lac, 4) << "the LAC comes from the valid entry only";
  EXPECT_EQ(after->last_entry_id, 5);
  EXPECT_FALSE(s->GetLedger(2).has_value()) << "a refused add must not create its ledger";

  // A recovery add copies an entry as some bookie stored it (one from
  // before this check may carry any LAC): it is kept, byte for byte, but
  // raises the ledger's LAC only to the entry before it, also on replay.
  EXPECT_EQ(AddOne(*s, 3, 7, 50, /*recovery=*/true), v1::OK);
  EXPECT_EQ(AddOne(*s, 3, 8, -9, /*recovery=*/true), v1::OK);
  EXPECT_EQ(AddOne(*s, 3, std::numeric_limits<int64_t>::max(), 5, /*recovery=*/true),
            v1::INVALID);
  for (int restart = 0; restart < 2; ++restart) {
    ASSERT_TRUE(s->GetLedger(3).has_value());
    EXPECT_EQ(s->GetLedger(3)->lac, 6) << "restart " << restart;
    EXPECT_EQ(s->GetLedger(3)->last_entry_id, 8);
    EXPECT_EQ(ReadBack(*s, 3, 7), v1::OK);
    s.reset();
    s = Open();
  }
}

TEST_F(StorageTest, AddWithBadChecksumIsInvalidAndNotStored) {
  auto s = Open();
  EntryBatch b;
  b.Add(1, 0);
  b.Add(1, 1);
  b.views()[1].checksum ^= 1;
  EntryBatch neg;
  neg.Add(1, -5, -1, "negative id");
  EXPECT_EQ(AddSync(*s, b), (std::vector<Code>{v1::OK, v1::INVALID}));
  EXPECT_EQ(AddSync(*s, neg), std::vector<Code>{v1::INVALID});
  EXPECT_EQ(ReadBack(*s, 1, 1), v1::NO_SUCH_ENTRY);
}

// L7 at the storage level: acknowledged entries and fence marks survive a
// clean restart and a crash (replay from the checkpoint).
TEST_F(StorageTest, RestartKeepsAckedEntriesAndFences) {
  for (bool crash : {false, true}) {
    SCOPED_TRACE(crash ? "crash" : "clean");
    dir_ = NewTempDir("restart");
    StorageOptions o = Options();
    o.checkpoint_on_close = !crash;
    auto s = Open(o);
    for (int64_t e = 0; e < 50; ++e) ASSERT_EQ(AddOne(*s, 7, e, e - 1), v1::OK);
    ASSERT_EQ(FenceSync(*s, 7), v1::OK);
    ASSERT_EQ(FenceSync(*s, 8), v1::OK);
    const std::string instance = s->instance_id();
    s.reset();
    s = Open(o);
    EXPECT_EQ(s->instance_id(), instance);
    for (int64_t e = 0; e < 50; ++e) ASSERT_EQ(ReadBack(*s, 7, e), v1::OK) << e;
    EXPECT_EQ(s->GetLedger(7), (LedgerState{true, 48, 49}));
    EXPECT_EQ(s->GetLedger(8), (LedgerState{true, -1, -1}));
    EXPECT_EQ(AddOne(*s, 7, 50), v1::FENCED);
    EXPECT_EQ(AddOne(*s, 8, 0), v1::FENCED);
  }
}

TEST_F(StorageTest, FencedLedgerRejectsNormalAddsAcceptsRecoveryAdds) {
  auto s = Open();
  ASSERT_EQ(AddOne(*s, 1, 0), v1::OK);
  ASSERT_EQ(FenceSync(*s, 1), v1::OK);
  EXPECT_EQ(FenceSync(*s, 1), v1::OK);  // idempotent
  EXPECT_EQ(AddOne(*s, 1, 1), v1::FENCED);
  EXPECT_EQ(ReadBack(*s, 1, 1), v1::NO_SUCH_ENTRY);
  EXPECT_EQ(AddOne(*s, 1, 1, 0, /*recovery=*/true), v1::OK);
  EXPECT_EQ(ReadBack(*s, 1, 1), v1::OK);
  // Other ledgers are unaffected.
  EXPECT_EQ(AddOne(*s, 2, 0), v1::OK);
}

// Recoverers re-send fences (a fenced read per window, retries): a ledger
// already durably fenced answers at once, without another record or sync.
TEST_F(StorageTest, RepeatedFenceOfAFencedLedgerWritesNothing) {
  auto s = Open();
  ASSERT_EQ(AddOne(*s, 1, 0), v1::OK);
  ASSERT_EQ(FenceSync(*s, 1), v1::OK);
  const StorageStats before = s->GetStats();
  for (int i = 0; i < 5; ++i) EXPECT_EQ(FenceSync(*s, 1), v1::OK);
  const StorageStats after = s->GetStats();
  EXPECT_EQ(after.syncs, before.syncs);
  EXPECT_EQ(after.journal_bytes, before.journal_bytes);
  EXPECT_EQ(AddOne(*s, 1, 1), v1::FENCED);
  // Survives a restart (the first record was durable).
  s.reset();
  s = Open();
  EXPECT_EQ(s->GetLedger(1), (LedgerState{true, -1, 0}));
  EXPECT_EQ(FenceSync(*s, 1), v1::OK);
  EXPECT_EQ(AddOne(*s, 1, 1), v1::FENCED);
}

TEST_F(StorageTest, FenceAppliesToNeverSeenLedger) {
  auto s = Open();
  EXPECT_FALSE(s->GetLedger(99).has_value());
  ASSERT_EQ(FenceSync(*s, 99), v1::OK);
  EXPECT_EQ(s->GetLedger(99), (LedgerState{true, -1, -1}));
  EXPECT_EQ(AddOne(*s, 99, 0), v1::FENCED);
  EXPECT_EQ(ReadBack(*s, 99, 0), v1::NO_SUCH_ENTRY);
}

// A fence and an add queued behind it in the same group commit: the add is
// FENCED (queue order decides, not batch boundaries).
TEST_F(StorageTest, AddQueuedAfterFenceIsFenced) {
  auto s = Open();
  absl::Notification fenced;
  absl::Notification added;
  Code add_code = v1::CODE_UNSPECIFIED;
  EntryBatch b;
  b.Add(5, 0);
  s->Fence(5, [&](Code) { fenced.Notify(); });
  s->Add(b.views(), false, [&](std::vector<Code> c) {
    add_code = c[0];
    added.Notify();
  });
  fenced.WaitForNotification();
  added.WaitForNotification();
  EXPECT_EQ(add_code, v1::FENCED);
}

TEST_F(StorageTest, SameEntryAddedTwiceLatestWins) {
  auto s = Open();
  EntryBatch first;
  first.Add(1, 0, -1, "first");
  EntryBatch second;
  second.Add(1, 0, -1, "second");
  ASSERT_EQ(AddSync(*s, first), std::vector<Code>{v1::OK});
  ASSERT_EQ(AddSync(*s, first), std::vector<Code>{v1::OK});
  ASSERT_EQ(AddSync(*s, second, /*recovery=*/true), std::vector<Code>{v1::OK});
  std::string payload;
  ASSERT_EQ(ReadBack(*s, 1, 0, &payload), v1::OK);
  EXPECT_EQ(payload, "second");
  s.reset();
  s = Open();  // replay order keeps the latest too
  ASSERT_EQ(ReadBack(*s, 1, 0, &payload), v1::OK);
  EXPECT_EQ(payload, "second");
}

// BookKeeper's lesson: many ledgers share one journal, no file per ledger.
TEST_F(StorageTest, ThousandsOfLedgersShareOneJournal) {
  auto s = Open();
  constexpr int kLedgers = 5000;
  for (int round = 0; round < 2; ++round) {
    EntryBatch b;
    for (uint64_t l = 1; l <= kLedgers; ++l) b.Add(l, round, round - 1);
    std::vector<Code> codes = AddSync(*s, b);
    ASSERT_EQ(codes, std::vector<Code>(kLedgers, v1::OK));
  }
  EXPECT_EQ(s->GetStats().ledger_count, static_cast<uint64_t>(kLedgers));
  EXPECT_EQ(s->JournalFiles().size(), 1u);
  auto children = Env::Default()->GetChildren(dir_);
  ASSERT_TRUE(children.ok());
  EXPECT_LT(children->size(), 10u);
  s.reset();
  s = Open();
  for (uint64_t l = 1; l <= kLedgers; l += 97) {
    ASSERT_EQ(ReadBack(*s, l, 0), v1::OK);
    ASSERT_EQ(ReadBack(*s, l, 1), v1::OK);
  }
  EXPECT_EQ(s->GetLedger(kLedgers), (LedgerState{false, 0, 1}));
}

// Group commit: concurrent adds share fdatasyncs.
TEST_F(StorageTest, ConcurrentAddsShareSyncs) {
  auto s = Open();
  constexpr int kAdds = 64;
  std::vector<EntryBatch> batches(kAdds);
  std::atomic<int> ok{0};
  std::atomic<int> left{kAdds};
  absl::Notification all;
  const uint64_t syncs_before = s->GetStats().syncs;
  for (int i = 0; i < kAdds; ++i) {
    batches[i].Add(1 + i % 8, i / 8);
    s->Add(batches[i].views(), false, [&](std::vector<Code> c) {
      if (c[0] == v1::OK) ok.fetch_add(1);
      if (left.fetch_sub(1) == 1) all.Notify();
    });
  }
  all.WaitForNotification();
  EXPECT_EQ(ok.load(), kAdds);
  const uint64_t syncs = s->GetStats().syncs - syncs_before;
  EXPECT_GE(syncs, 1u);
  EXPECT_LE(syncs, static_cast<uint64_t>(kAdds / 4)) << "adds are not sharing syncs";
}

// Group commit wait (docs/bookie-format.md, "Write batches"). After batches
// of 64 items a batch of 1 waits for more; the 40 items that come while it
// waits join it, it stops waiting at once, and all 41 share one fdatasync
// instead of taking one each. The first sync takes 12 s, so the recent sync
// time (which bounds the wait; a moving average, 0.9 old + 0.1 new) stays
// above 4.5 s for the test: a wait that ignored its group would show, with
// room for a real fdatasync slowed by other tests' I/O.
TEST_F(StorageTest, ASmallBatchAfterLargerOnesWaitsForTheRestOfItsGroup) {
  FaultInjectionEnv env(Env::Default());
  StorageOptions o = Options();
  o.env = &env;
  o.group_commit_wait_max = absl::Seconds(60);  // bounded by the sync time
  o.group_commit_forget_after_idle = absl::Seconds(60);  // a slow test thread resets nothing
  auto s = Open(o);
  for (int b = 0; b < 10; ++b) {
    env.SetSyncDelay(b == 0 ? absl::Seconds(12) : absl::Milliseconds(10));
    EntryBatch batch;
    for (int e = 0; e < 64; ++e) batch.Add(1, b * 64 + e);
    ASSERT_EQ(AddSync(*s, batch), std::vector<Code>(64, v1::OK));
  }
  const StorageStats before = s->GetStats();
  EntryBatch one, forty;
  one.Add(2, 0);
  for (int e = 0; e < 40; ++e) forty.Add(3, e);
  absl::Notification one_done, forty_done;
  std::vector<Code> one_codes, forty_codes;
  s->Add(one.views(), false, [&](std::vector<Code> c) {
    one_codes = std::move(c);
    one_done.Notify();
  });
  const absl::Time until = absl::Now() + absl::Seconds(10);
  while (s->GetStats().group_commit_waits == before.group_commit_waits && absl::Now() < until) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  ASSERT_EQ(s->GetStats().group_commit_waits, before.group_commit_waits + 1)
      << "the small batch did not wait for its group";
  const absl::Time start = absl::Now();
  s->Add(forty.views(), false, [&](std::vector<Code> c) {
    forty_codes = std::move(c);
    forty_done.Notify();
  });
  one_done.WaitForNotification();
  forty_done.WaitForNotification();
  EXPECT_LT(absl::Now() - start, absl::Milliseconds(2500))
      << "the wait did not end when its group arrived";
  EXPECT_EQ(one_codes, std::vector<Code>(1, v1::OK));
  EXPECT_EQ(forty_codes, std::vector<Code>(40, v1::OK));
  const StorageStats after = s->GetStats();
  EXPECT_EQ(after.syncs - before.syncs, 1u) << "the group took more than one sync";
  EXPECT_EQ(after.group_commit_waits - before.group_commit_waits, 1u);
}

// The wait never costs a writer whose batches are all alike (a lone writer
// with one add in flight): its batches are never below half the usual size.
// And a small batch that nothing follows is written after about one sync
// time, not after group_commit_wait_max.
TEST_F(StorageTest, BatchesOfTheUsualSizeNeverWaitAndAWaitEndsByItself) {
  FaultInjectionEnv env(Env::Default());
  env.SetSyncDelay(absl::Milliseconds(20));
  StorageOptions o = Options();
  o.env = &env;
  o.group_commit_wait_max = absl::Seconds(60);
  o.group_commit_forget_after_idle = absl::Seconds(60);  // a slow test thread resets nothing
  auto s = Open(o);
  for (int e = 0; e < 20; ++e) ASSERT_EQ(AddOne(*s, 1, e), v1::OK);
  EXPECT_EQ(s->GetStats().group_commit_waits, 0u);

  for (int b = 0; b < 10; ++b) {
    EntryBatch batch;
    for (int e = 0; e < 64; ++e) batch.Add(2, b * 64 + e);
    ASSERT_EQ(AddSync(*s, batch), std::vector<Code>(64, v1::OK));
  }
  const absl::Time start = absl::Now();
  ASSERT_EQ(AddOne(*s, 3, 0), v1::OK);
  EXPECT_LT(absl::Now() - start, absl::Seconds(5)) << "waited for group_commit_wait_max";
  EXPECT_EQ(s->GetStats().group_commit_waits, 1u);
}

// A bookie shutting down does not sit out a group commit wait, nor refuse
// the add that was waiting: Close ends the wait at once, and the add is
// written, synced and acknowledged, and is there after a restart.
TEST_F(StorageTest, CloseEndsAGroupCommitWaitAndTheWaitingAddIsStillStored) {
  FaultInjectionEnv env(Env::Default());
  StorageOptions o = Options();
  o.env = &env;
  o.group_commit_wait_max = absl::Seconds(60);  // bounded by the sync time
  o.group_commit_forget_after_idle = absl::Seconds(60);  // a slow test thread resets nothing
  auto s = Open(o);
  // Batches of 64, and a recent sync time of about 7.3 s (10 s, then three
  // of 10 ms): a lone add now waits about 7.3 s for the rest of its group.
  for (int b = 0; b < 4; ++b) {
    env.SetSyncDelay(b == 0 ? absl::Seconds(10) : absl::Milliseconds(10));
    EntryBatch batch;
    for (int e = 0; e < 64; ++e) batch.Add(1, b * 64 + e);
    ASSERT_EQ(AddSync(*s, batch), std::vector<Code>(64, v1::OK));
  }
  const uint64_t waits_before = s->GetStats().group_commit_waits;
  EntryBatch one;
  one.Add(2, 0);
  absl::Notification done;
  std::vector<Code> codes;
  s->Add(one.views(), false, [&](std::vector<Code> c) {
    codes = std::move(c);
    done.Notify();
  });
  const absl::Time until = absl::Now() + absl::Seconds(10);
  while (s->GetStats().group_commit_waits == waits_before && absl::Now() < until) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  ASSERT_EQ(s->GetStats().group_commit_waits, waits_before + 1) << "the add did not wait";
  ASSERT_FALSE(done.HasBeenNotified());
  const absl::Time start = absl::Now();
  s->Close();
  // Close's own work (a checkpoint: index flush and syncs) fits well within.
  EXPECT_LT(absl::Now() - start, absl::Seconds(4)) << "Close sat out the wait";
  ASSERT_TRUE(done.HasBeenNotified()) << "Close returned before answering the add";
  EXPECT_EQ(codes, std::vector<Code>(1, v1::OK));
  s.reset();
  auto reopened = Open();
  ASSERT_NE(reopened, nullptr);
  std::string payload;
  EXPECT_EQ(ReadBack(*reopened, 2, 0, &payload), v1::OK);
  EXPECT_EQ(payload, testing::Payload(2, 0));
}

// L2, L5, L10: after a checkpoint the index alone holds where the entries
// before it are and which ledgers are fenced (the journal before it may be
// gone). A bookie whose index was deleted must not start with an empty one
// and answer "no such entry" for acknowledged entries or take a deposed
// writer's adds: it refuses to start, and leaves the directory as it was.
TEST_F(StorageTest, AnIndexLostAfterACheckpointIsRefusedNotServedAsEmpty) {
  {
    auto s = Open();
    for (int64_t e = 0; e < 5; ++e) ASSERT_EQ(AddOne(*s, 1, e), v1::OK);
    ASSERT_EQ(FenceSync(*s, 1), v1::OK);
    ASSERT_TRUE(s->Checkpoint().ok());
  }
  std::filesystem::remove_all(dir_ + "/index");
  for (int attempt = 0; attempt < 2; ++attempt) {
    auto reopened = BookieStorage::Open(Options());
    ASSERT_FALSE(reopened.ok()) << "opened with an empty index";
    EXPECT_TRUE(absl::IsDataLoss(reopened.status())) << reopened.status();
    EXPECT_NE(reopened.status().message().find("index"), absl::string_view::npos)
        << reopened.status();
    EXPECT_FALSE(std::filesystem::exists(dir_ + "/index")) << "an empty index was created";
  }
}

TEST_F(StorageTest, InstanceIdIsCreatedOnceAndKept) {
  auto s = Open();
  const std::string id = s->instance_id();
  EXPECT_EQ(id.size(), 32u);
  s.reset();
  EXPECT_EQ(Open()->instance_id(), id);
  // A different (fresh) directory is a different instance.
  StorageOptions other;
  other.dir = NewTempDir("other");
  EXPECT_NE(Open(other)->instance_id(), id);
}

TEST_F(StorageTest, DataWithoutInstanceFileIsRefused) {
  auto s = Open();
  ASSERT_EQ(AddOne(*s, 1, 0), v1::OK);
  s.reset();
  ASSERT_TRUE(Env::Default()->DeleteFile(dir_ + "/INSTANCE").ok());
  auto reopened = BookieStorage::Open(Options());
  EXPECT_TRUE(absl::IsFailedPrecondition(reopened.status())) << reopened.status();
}

// A directory whose state was removed but whose INSTANCE was kept (by
// hand: "delete everything but the id", or CHECKPOINT and the index only)
// must not serve under its old id: it would answer NO_SUCH_ENTRY for
// entries it acknowledged (L2) and forget its fence marks (L5). Refused
// with DATA_LOSS, changing nothing.
TEST_F(StorageTest, APartlyWipedDirectoryIsRefusedNotServedUnderItsOldId) {
  auto fill = [&](const std::string& dir) {
    StorageOptions o = Options();
    o.dir = dir;
    auto s = Open(o);
    EXPECT_EQ(AddOne(*s, 1, 0), v1::OK);
    EXPECT_EQ(FenceSync(*s, 1), v1::OK);
    return s->instance_id();
  };
  auto read_instance = [](const std::string& dir) {
    absl::StatusOr<std::string> c = ReadFileToString(Env::Default(), dir + "/INSTANCE");
    return c.ok() ? *c : c.status().ToString();
  };
  {
    // Everything but INSTANCE (and the lock file) removed.
    const std::string id = fill(dir_);
    ASSERT_EQ(read_instance(dir_), id + "\n") << "a started directory's INSTANCE has no mark";
    for (const auto& child : std::filesystem::directory_iterator(dir_)) {
      const std::string name = child.path().filename().string();
      if (name != "INSTANCE" && name != "LOCK") std::filesystem::remove_all(child.path());
    }
    auto refused = BookieStorage::Open(Options());
    EXPECT_TRUE(absl::IsDataLoss(refused.status())) << refused.status();
    EXPECT_NE(refused.status().message().find("no CHECKPOINT"), std::string::npos)
        << refused.status();
    EXPECT_EQ(read_instance(dir_), id + "\n");
    EXPECT_FALSE(std::filesystem::exists(dir_ + "/index")) << "nothing may be created";
    EXPECT_FALSE(std::filesystem::exists(dir_ + "/CHECKPOINT"));
  }
  {
    // CHECKPOINT and the index removed, the journal kept.
    const std::string dir = NewTempDir("partly-wiped");
    fill(dir);
    std::filesystem::remove(dir + "/CHECKPOINT");
    std::filesystem::remove_all(dir + "/index");
    StorageOptions o = Options();
    o.dir = dir;
    auto refused = BookieStorage::Open(o);
    EXPECT_TRUE(absl::IsDataLoss(refused.status())) << refused.status();
  }
}

// A first start that stopped after writing INSTANCE ("<id> new") and
// before its CHECKPOINT served nothing: the next start goes on under that
// id, and only then drops the mark.
TEST_F(StorageTest, AFirstStartStoppedBeforeItsCheckpointStartsAgainUnderItsId) {
  const std::string id = "0123456789abcdef0123456789abcdef";
  ASSERT_TRUE(WriteFileAtomically(Env::Default(), dir_ + "/INSTANCE", id + " new\n").ok());
  {
    auto s = Open();
    EXPECT_EQ(s->instance_id(), id);
    EXPECT_TRUE(std::filesystem::exists(dir_ + "/CHECKPOINT"));
    EXPECT_EQ(*ReadFileToString(Env::Default(), dir_ + "/INSTANCE"), id + "\n");
    EXPECT_EQ(AddOne(*s, 3, 0), v1::OK);
  }
  auto s = Open();
  EXPECT_EQ(s->instance_id(), id);
  EXPECT_EQ(ReadBack(*s, 3, 0), v1::OK);
  // A crash after CHECKPOINT and before INSTANCE lost its mark: the next
  // start accepts the directory as it is (nothing was served under it).
  s.reset();
  ASSERT_TRUE(WriteFileAtomically(Env::Default(), dir_ + "/INSTANCE", id + " new\n").ok());
  s = Open();
  EXPECT_EQ(s->instance_id(), id);
  EXPECT_EQ(ReadBack(*s, 3, 0), v1::OK);
  EXPECT_EQ(*ReadFileToString(Env::Default(), dir_ + "/INSTANCE"), id + "\n");
  // Anything else in INSTANCE is no id at all.
  s.reset();
  ASSERT_TRUE(WriteFileAtomically(Env::Default(), dir_ + "/INSTANCE", id + " old\n").ok());
  auto bad = BookieStorage::Open(Options());
  EXPECT_TRUE(absl::IsFailedPrecondition(bad.status())) << bad.status();
}

TEST_F(StorageTest, DirectoryInUseIsRefused) {
  auto s = Open();
  const std::string id = s->instance_id();
  auto second = BookieStorage::Open(Options());
  EXPECT_TRUE(absl::IsFailedPrecondition(second.status())) << second.status();
  EXPECT_NE(second.status().message().find("in use"), std::string::npos) << second.status();
  s.reset();
  EXPECT_EQ(Open()->instance_id(), id);
}

// Another bookie process took a new directory and has not written its
// INSTANCE yet (two started at once on a first start). This one must write
// nothing there: both would create INSTANCE, and the one left serving could
// find the other's id at its next start (refused as a wiped directory).
TEST_F(StorageTest, ANewDirectoryHeldByAnotherBookieGetsNoInstanceFromThisOne) {
  absl::StatusOr<int> held = LockDataDir(dir_);
  ASSERT_TRUE(held.ok()) << held.status();
  auto refused = BookieStorage::Open(Options());
  EXPECT_TRUE(absl::IsFailedPrecondition(refused.status())) << refused.status();
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/INSTANCE"));
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/index"));
  ::close(*held);
  EXPECT_EQ(Open()->instance_id().size(), 32u);
}

TEST_F(StorageTest, LacLongPollWakesOnAddAndTimesOut) {
  auto s = Open();
  ASSERT_EQ(AddOne(*s, 1, 0, -1), v1::OK);
  // Already above: answered at once.
  absl::Notification at_once;
  s->WaitForLac(1, -2, absl::InfiniteFuture(), [&](LacWaiters::Wake w) {
    EXPECT_EQ(w, LacWaiters::Wake::kAdvanced);
    at_once.Notify();
  });
  EXPECT_TRUE(at_once.HasBeenNotified());

  absl::Notification woke;
  LacWaiters::Wake wake = LacWaiters::Wake::kShutdown;
  s->WaitForLac(1, 0, absl::Now() + absl::Seconds(30), [&](LacWaiters::Wake w) {
    wake = w;
    woke.Notify();
  });
  ASSERT_EQ(AddOne(*s, 1, 1, 0), v1::OK);  // LAC 0: not above 0 yet
  EXPECT_FALSE(woke.WaitForNotificationWithTimeout(absl::Milliseconds(100)));
  ASSERT_EQ(AddOne(*s, 1, 2, 1), v1::OK);
  ASSERT_TRUE(woke.WaitForNotificationWithTimeout(absl::Seconds(5)));
  EXPECT_EQ(wake, LacWaiters::Wake::kAdvanced);

  absl::Notification timed_out;
  const absl::Time start = absl::Now();
  s->WaitForLac(1, 5, start + absl::Milliseconds(150), [&](LacWaiters::Wake w) {
    EXPECT_EQ(w, LacWaiters::Wake::kTimeout);
    timed_out.Notify();
  });
  ASSERT_TRUE(timed_out.WaitForNotificationWithTimeout(absl::Seconds(5)));
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(150));

  // Close ends pending polls.
  absl::Notification ended;
  s->WaitForLac(1, 5, absl::InfiniteFuture(), [&](LacWaiters::Wake w) {
    EXPECT_EQ(w, LacWaiters::Wake::kShutdown);
    ended.Notify();
  });
  s->Close();
  EXPECT_TRUE(ended.HasBeenNotified());
}

TEST_F(StorageTest, JournalRollsIntoNewFilesAndReplaysAcrossThem) {
  StorageOptions o = Options();
  o.journal_roll_bytes = 4096;
  auto s = Open(o);
  for (int64_t e = 0; e < 200; ++e) ASSERT_EQ(AddOne(*s, 3, e, e - 1), v1::OK);
  EXPECT_GT(s->JournalFiles().size(), 3u);
  s.reset();
  s = Open(o);
  for (int64_t e = 0; e < 200; ++e) ASSERT_EQ(ReadBack(*s, 3, e), v1::OK) << e;
}

TEST_F(StorageTest, ClosedStorageAnswersReadOnly) {
  auto s = Open();
  ASSERT_EQ(AddOne(*s, 1, 0), v1::OK);
  s->Close();
  EXPECT_EQ(AddOne(*s, 1, 1), v1::READ_ONLY);
  EXPECT_EQ(FenceSync(*s, 1), v1::READ_ONLY);
  EXPECT_EQ(ReadBack(*s, 1, 0), v1::OK);
}

// A fence synced while a checkpoint is writing ledger states (the window in
// which the checkpoint does not hold mu_) must reach the next checkpoint:
// once CHECKPOINT moves past its journal record, the index is its only copy
// (L7).
TEST_F(StorageTest, L7_FenceDuringCheckpointSurvivesLaterCheckpointAndRestart) {
  ScopedFaultPoints faults;
  StorageOptions o = Options();
  o.checkpoint_on_close = true;
  auto s = Open(o);
  ASSERT_EQ(AddOne(*s, 5, 0, -1), v1::OK);
  std::atomic<bool> once{false};
  BookieStorage* storage = s.get();
  FaultPoints::Get().Arm("bookie.checkpoint.states_taken", [&](std::string_view) {
    if (once.exchange(true)) return false;
    Code code = v1::CODE_UNSPECIFIED;
    std::thread t([&] { code = FenceSync(*storage, 42); });
    t.join();
    EXPECT_EQ(code, v1::OK);
    return false;
  });
  ASSERT_TRUE(s->Checkpoint().ok());
  ASSERT_TRUE(once.load()) << "the hook must have run inside the checkpoint";
  FaultPoints::Get().DisarmAll();
  ASSERT_TRUE(s->Checkpoint().ok());
  s.reset();  // clean close: one more checkpoint
  s = Open(o);
  ASSERT_TRUE(s->GetLedger(42).has_value()) << "the fence of ledger 42 was lost";
  EXPECT_TRUE(s->GetLedger(42)->fenced);
  EXPECT_EQ(AddOne(*s, 42, 0), v1::FENCED);
}

}  // namespace
}  // namespace ledgerkv::bookie
