// Recovery, snapshots, truncation and fencing of a Range over real bookies
// (docs/range-server.md, "Recovery", "Snapshots and truncation").
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "kv_server/range/local_store.h"
#include "kv_server/range/range_test_util.h"
#include "rocksdb/db.h"
#include "snapshot/snapshot_store.h"
#include "snapshot/snapshot_test_util.h"

namespace ledgerkv::kv::testing {
namespace {

using ::absl::StatusCode;

// Issues `count` increments of `key` without waiting and collects every
// answer (values of the acknowledged ones, statuses of the others).
struct Increments {
  absl::Mutex mu;
  std::vector<int64_t> values ABSL_GUARDED_BY(mu);
  std::vector<absl::Status> errors ABSL_GUARDED_BY(mu);
  int answered ABSL_GUARDED_BY(mu) = 0;

  void Issue(Range& range, const std::string& key, int count) {
    for (int i = 0; i < count; ++i) {
      range.Increment(IncReq(key, 1), [this](absl::StatusOr<v1::IncrementResponse> r) {
        absl::MutexLock l(&mu);
        ++answered;
        if (r.ok()) {
          values.push_back(r->value());
        } else {
          errors.push_back(r.status());
        }
      });
    }
  }
  void WaitFor(int count) {
    absl::MutexLock l(&mu);
    auto done = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu) { return answered >= count; };
    mu.Await(absl::Condition(&done));
  }
  int64_t MaxValue() {
    absl::MutexLock l(&mu);
    return values.empty() ? 0 : *std::max_element(values.begin(), values.end());
  }
};

// Overwrites `keys` keys `rounds` times with ~`size`-byte values, many
// writes in flight at once. Returns the value last written to each key.
std::vector<std::string> Overwrite(Range& range, int keys, int rounds, size_t size) {
  std::vector<std::string> last(keys);
  for (int round = 0; round < rounds; ++round) {
    absl::Mutex mu;
    int answered = 0;
    for (int k = 0; k < keys; ++k) {
      std::string value = absl::StrCat("r", round, "-k", k, "-");
      value.resize(size, 'a' + (round + k) % 26);
      last[k] = value;
      range.Put(PutReq(absl::StrCat("key", k), value), [&](absl::StatusOr<v1::PutResponse> r) {
        EXPECT_TRUE(r.ok()) << r.status();
        absl::MutexLock l(&mu);
        ++answered;
      });
    }
    absl::MutexLock l(&mu);
    auto done = [&]() { return answered == keys; };
    mu.Await(absl::Condition(&done));
  }
  return last;
}

void ExpectValues(Range& range, const std::vector<std::string>& last) {
  for (size_t k = 0; k < last.size(); ++k) {
    EXPECT_EQ(GetValue(range, absl::StrCat("key", k)), last[k]) << "key" << k;
  }
}

TEST_F(RangeTest, CloseAndReopenKeepsEverythingFromLocalState) {
  RangeOptions options = Options();
  LKV_ASSIGN_OR_FAIL(auto range, Open(options));
  const auto last = Overwrite(*range, 10, 5, 50);
  LKV_ASSERT_OK(Delete(*range, DelReq("key3")));
  const RangeStats before = range->stats();
  LKV_ASSERT_OK(range->Close());
  range.reset();

  LKV_ASSIGN_OR_FAIL(range, Open(options));
  const RangeStats after = range->stats();
  EXPECT_EQ(after.recovered_from, "local");
  EXPECT_EQ(after.replayed_records, 0);
  EXPECT_EQ(after.revision, before.revision);
  EXPECT_EQ(after.key_count, 9);
  EXPECT_EQ(after.bytes, before.bytes);
  EXPECT_GT(after.epoch, before.epoch);
  for (int k = 0; k < 10; ++k) {
    if (k == 3) continue;
    EXPECT_EQ(GetValue(*range, absl::StrCat("key", k)), last[k]);
  }
  EXPECT_EQ(GetValue(*range, "key3"), std::nullopt);
  // Revisions continue where they stopped.
  LKV_ASSIGN_OR_FAIL(auto put, Put(*range, "key3", "back"));
  EXPECT_EQ(put.header().revision(), before.revision + 1);
  EXPECT_EQ(GetKv(*range, "key3")->version(), 1);
}

TEST_F(RangeTest, LocalStateBehindTheLogIsCaughtUpByReplay) {
  RangeOptions options = Options();
  LKV_ASSIGN_OR_FAIL(auto range, Open(options));
  Overwrite(*range, 10, 3, 40);
  LKV_ASSERT_OK(range->Close());
  range.reset();
  // An older copy of the local state, as a crash that lost the memtable
  // would leave it.
  const std::string copy = dir_.path() + "/older";
  std::filesystem::copy(options.data_dir, copy, std::filesystem::copy_options::recursive);

  LKV_ASSIGN_OR_FAIL(range, Open(options));
  const auto last = Overwrite(*range, 10, 4, 40);
  const RangeStats newer = range->stats();
  LKV_ASSERT_OK(range->Close());
  range.reset();
  std::filesystem::remove_all(options.data_dir);
  std::filesystem::rename(copy, options.data_dir);

  LKV_ASSIGN_OR_FAIL(range, Open(options));
  const RangeStats stats = range->stats();
  EXPECT_EQ(stats.recovered_from, "local");
  EXPECT_EQ(stats.replayed_records, 40);
  EXPECT_EQ(stats.revision, newer.revision);
  EXPECT_EQ(stats.key_count, newer.key_count);
  EXPECT_EQ(stats.bytes, newer.bytes);
  ExpectValues(*range, last);
  EXPECT_EQ(GetKv(*range, "key0")->version(), 7);
}

TEST_F(RangeTest, CrashWithWritesInFlightKeepsEveryAcknowledgedWrite) {
  RangeOptions options = Options();
  LKV_ASSIGN_OR_FAIL(auto range, Open(options));
  Increments inc;
  inc.Issue(*range, "counter", 300);
  inc.WaitFor(100);
  range.reset();  // a crash: no Close
  inc.WaitFor(300);
  const int64_t acked = inc.MaxValue();
  {
    absl::MutexLock l(&inc.mu);
    for (const absl::Status& e : inc.errors) EXPECT_EQ(e.code(), StatusCode::kUnavailable) << e;
    std::set<int64_t> distinct(inc.values.begin(), inc.values.end());
    EXPECT_EQ(distinct.size(), inc.values.size());
  }

  LKV_ASSIGN_OR_FAIL(range, Open(options));
  const auto value = GetValue(*range, "counter");
  int64_t n = 0;  // absent: no increment reached the log
  if (value.has_value()) {
    ASSERT_TRUE(absl::SimpleAtoi(*value, &n));
  }
  // Every acknowledged increment survived; unacknowledged ones may have.
  EXPECT_GE(n, acked);
  EXPECT_LE(n, 300);
  // One revision per increment, none applied twice.
  EXPECT_EQ(range->stats().revision, n);
  EXPECT_EQ(GetKv(*range, "counter")->version(), n);
  LKV_ASSIGN_OR_FAIL(auto next, Increment(*range, "counter", 1));
  EXPECT_EQ(next.value(), n + 1);
  EXPECT_EQ(next.header().revision(), n + 1);
}

// What the two restore tests below write: 20 keys twice, a snapshot (at
// seqno 40), the keys once more, key5 deleted; then the range is closed.
struct History {
  std::vector<std::string> last;  // each key's last value
  RangeStats before;              // stats before the close
};

void WriteHistoryAndClose(std::unique_ptr<Range>& range, History* history) {
  Overwrite(*range, 20, 2, 60);
  LKV_ASSERT_OK(range->SnapshotNow());
  EXPECT_EQ(range->stats().snapshot_seqno, 40u);
  history->last = Overwrite(*range, 20, 1, 60);
  LKV_ASSERT_OK(Delete(*range, DelReq("key5")));
  history->before = range->stats();
  LKV_ASSERT_OK(range->Close());
  range.reset();
}

// The range was recovered from the snapshot (plus replay) and holds the
// history's last state, with exact revision, key count and bytes.
void ExpectHistoryRestoredFromSnapshot(Range& range, const History& history) {
  const RangeStats stats = range.stats();
  EXPECT_TRUE(absl::StartsWith(stats.recovered_from, "snapshot ")) << stats.recovered_from;
  EXPECT_EQ(stats.revision, history.before.revision);
  EXPECT_EQ(stats.key_count, 19);
  EXPECT_EQ(stats.bytes, history.before.bytes);
  for (int k = 0; k < 20; ++k) {
    if (k == 5) continue;
    EXPECT_EQ(GetValue(range, absl::StrCat("key", k)), history.last[k]);
  }
  EXPECT_EQ(GetValue(range, "key5"), std::nullopt);
}

TEST_F(RangeTest, WipedLocalStateIsRestoredFromSnapshotPlusReplay) {
  RangeOptions options = Options();
  LKV_ASSIGN_OR_FAIL(auto range, Open(options));
  History history;
  ASSERT_NO_FATAL_FAILURE(WriteHistoryAndClose(range, &history));
  std::filesystem::remove_all(options.data_dir);

  LKV_ASSIGN_OR_FAIL(range, Open(options));
  EXPECT_EQ(range->stats().replayed_records, 21);
  ExpectHistoryRestoredFromSnapshot(*range, history);
  EXPECT_EQ(GetKv(*range, "key0")->version(), 3);
}

TEST_F(RangeTest, ARestoreCutShortBeforeItsMetaIsRestoredAgainNotReplayedOnTop) {
  RangeOptions options = Options();
  LKV_ASSIGN_OR_FAIL(auto range, Open(options));
  History history;
  ASSERT_NO_FATAL_FAILURE(WriteHistoryAndClose(range, &history));
  ASSERT_EQ(history.before.log_first_seqno, 1u);  // replay from 1 would be possible

  // What a crash in the middle of a restore leaves: the snapshot's files
  // ingested (durable at once), the meta never written.
  std::filesystem::remove_all(options.data_dir);
  {
    LKV_ASSIGN_OR_FAIL(auto local, LocalStore::Open(options.data_dir));
    LKV_ASSIGN_OR_FAIL(auto snapshots, snapshot::SnapshotStore::Create(options.snapshot));
    snapshot::RestoreTarget target;
    target.db = local->db();
    target.column_family = local->data_cf();
    LKV_ASSERT_OK(snapshots->RestoreNewestValid(descriptor_.range_id, target).status());
    LKV_ASSERT_OK(local->Close());
  }

  LKV_ASSIGN_OR_FAIL(range, Open(options));
  ExpectHistoryRestoredFromSnapshot(*range, history);
}

TEST_F(RangeTest, AKeyCountThatDriftedDoesNotStopSnapshotsAndARestoreRecountsIt) {
  RangeOptions options = Options();
  LKV_ASSIGN_OR_FAIL(auto range, Open(options));
  Overwrite(*range, 20, 1, 60);
  LKV_ASSERT_OK(range->Close());
  range.reset();
  {
    // A meta whose key count is off (as a crash before atomic flushes, or
    // a replay over restored data, could leave it).
    LKV_ASSIGN_OR_FAIL(auto local, LocalStore::Open(options.data_dir));
    std::string count(8, '\0');
    count[0] = 25;  // fixed64, little-endian
    ASSERT_TRUE(local->db()->Put(rocksdb::WriteOptions(), local->meta_cf(), "key_count", count).ok());
    LKV_ASSERT_OK(local->Close());
  }
  LKV_ASSIGN_OR_FAIL(range, Open(options));
  ASSERT_EQ(range->stats().key_count, 25);
  // A header with that count would not restore: the snapshot goes out
  // without one rather than not at all.
  LKV_ASSERT_OK(range->SnapshotNow());
  EXPECT_EQ(range->stats().snapshots_taken, 1);
  LKV_ASSERT_OK(range->Close());
  range.reset();

  std::filesystem::remove_all(options.data_dir);
  LKV_ASSIGN_OR_FAIL(range, Open(options));
  EXPECT_TRUE(absl::StartsWith(range->stats().recovered_from, "snapshot "))
      << range->stats().recovered_from;
  EXPECT_EQ(range->stats().key_count, 20);
}

TEST_F(RangeTest, SnapshotTruncatesTheLogAndBoundsReplay) {
  RangeOptions options = Options();
  options.log.roll_bytes = 8 << 10;  // many small segments
  LKV_ASSIGN_OR_FAIL(auto range, Open(options));
  auto last = Overwrite(*range, 20, 30, 200);  // ~130 KiB of records
  LKV_ASSIGN_OR_FAIL(auto before, LogMetadata());
  ASSERT_GT(before.segments_size(), 3);
  const uint64_t first_ledger = before.segments(0).ledger_id();
  EXPECT_TRUE(LedgerExists(first_ledger));

  LKV_ASSERT_OK(range->SnapshotNow());
  const RangeStats stats = range->stats();
  EXPECT_EQ(stats.snapshots_taken, 1);
  EXPECT_EQ(stats.snapshot_seqno, 600u);
  LKV_ASSIGN_OR_FAIL(auto after, LogMetadata());
  EXPECT_LT(after.segments_size(), before.segments_size());
  EXPECT_GT(after.segments(0).first_seqno(), 1u);
  EXPECT_LE(after.segments(0).first_seqno(), 601u);
  EXPECT_EQ(stats.log_first_seqno, after.segments(0).first_seqno());
  EXPECT_FALSE(LedgerExists(first_ledger));

  last = Overwrite(*range, 20, 1, 200);
  LKV_ASSERT_OK(range->Close());
  range.reset();
  std::filesystem::remove_all(options.data_dir);

  LKV_ASSIGN_OR_FAIL(range, Open(options));
  EXPECT_TRUE(absl::StartsWith(range->stats().recovered_from, "snapshot "));
  EXPECT_EQ(range->stats().replayed_records, 20);
  EXPECT_EQ(range->stats().revision, 620);
  ExpectValues(*range, last);
}

TEST_F(RangeTest, ByteThresholdTakesSnapshotsInTheBackground) {
  RangeOptions options = Options();
  options.snapshot_log_bytes = 16 << 10;
  LKV_ASSIGN_OR_FAIL(auto range, Open(options));
  const auto last = Overwrite(*range, 10, 20, 200);  // ~45 KiB
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (range->stats().snapshots_taken < 1 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_GE(range->stats().snapshots_taken, 1);
  EXPECT_GT(range->stats().snapshot_seqno, 0u);
  EXPECT_EQ(range->stats().snapshot_failures, 0);
  ExpectValues(*range, last);
}

TEST_F(RangeTest, IntervalTakesASnapshotOnlyAfterWrites) {
  RangeOptions options = Options();
  options.snapshot_interval = absl::Milliseconds(200);
  LKV_ASSIGN_OR_FAIL(auto range, Open(options));
  absl::SleepFor(absl::Milliseconds(500));
  EXPECT_EQ(range->stats().snapshots_taken, 0);  // nothing written yet
  LKV_ASSERT_OK(Put(*range, "k", "v"));
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (range->stats().snapshots_taken < 1 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_EQ(range->stats().snapshots_taken, 1);
  EXPECT_EQ(range->stats().snapshot_seqno, 1u);
  absl::SleepFor(absl::Milliseconds(500));
  EXPECT_EQ(range->stats().snapshots_taken, 1);  // no new writes, no new snapshot
}

// CPU time (user + system) of this whole process so far.
absl::Duration ProcessCpu() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return absl::DurationFromTimeval(usage.ru_utime) + absl::DurationFromTimeval(usage.ru_stime);
}

TEST_F(RangeTest, AnIdleRangeWaitsForWritesInsteadOfSpinning) {
  RangeOptions options = Options();
  options.snapshot_interval = absl::Milliseconds(50);
  LKV_ASSIGN_OR_FAIL(auto range, Open(options));
  LKV_ASSERT_OK(Put(*range, "k", "v"));
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (range->stats().snapshots_taken < 1 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  ASSERT_EQ(range->stats().snapshots_taken, 1);
  // The interval is long past and nothing new was written: the policy
  // thread has nothing to do. A thread that polled a past deadline instead
  // would burn a whole core here (about 1 s of CPU); the bookies and gRPC
  // of this idle process use a few milliseconds. (The snapshot's own
  // tail - flush, log cleanup - settles first.)
  absl::SleepFor(absl::Milliseconds(300));
  const absl::Duration before = ProcessCpu();
  absl::SleepFor(absl::Seconds(1));
  const absl::Duration used = ProcessCpu() - before;
  EXPECT_LT(used, absl::Milliseconds(300)) << "CPU used by an idle process in 1 s";
  EXPECT_EQ(range->stats().snapshots_taken, 1);
  // A write wakes it: the next snapshot follows.
  LKV_ASSERT_OK(Put(*range, "k", "w"));
  while (range->stats().snapshots_taken < 2 && absl::Now() < deadline + absl::Seconds(10)) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_EQ(range->stats().snapshots_taken, 2);
  EXPECT_EQ(range->stats().snapshot_seqno, 2u);
}

TEST_F(RangeTest, CorruptNewestSnapshotFallsBackToTheOlderOne) {
  RangeOptions options = Options();
  LKV_ASSIGN_OR_FAIL(auto range, Open(options));
  Overwrite(*range, 10, 2, 40);
  LKV_ASSERT_OK(range->SnapshotNow());  // the older one, at seqno 20
  LKV_ASSIGN_OR_FAIL(auto marked, Put(*range, "marked", "NEWEST-SNAPSHOT-MARKER-value"));
  const int64_t r = marked.header().revision();
  ASSERT_LT(r, 128);
  const auto last = Overwrite(*range, 10, 1, 40);
  LKV_ASSERT_OK(range->SnapshotNow());  // the newest, at seqno 31
  const RangeStats before = range->stats();
  LKV_ASSERT_OK(range->Close());
  range.reset();

  // The stored value in the snapshot is [1][create][mod][version][value]:
  // that prefix never occurs in the log's records, only in the snapshot.
  std::string marker = "\x01";
  marker += static_cast<char>(r);
  marker += static_cast<char>(r);
  marker += "\x01NEWEST-SNAPSHOT-MARKER-";
  client_.reset();
  for (int i = 0; i < cluster_->size(); ++i) cluster_->StopBookie(i);
  int hits = 0;
  for (int i = 0; i < cluster_->size(); ++i) {
    hits += snapshot::testing::CorruptJournal(cluster_->data_dir(i), marker);
  }
  EXPECT_EQ(hits, 2);  // the write quorum
  for (int i = 0; i < cluster_->size(); ++i) LKV_ASSERT_OK(cluster_->RestartBookie(i));
  NewClient();
  options = Options();
  std::filesystem::remove_all(options.data_dir);

  ::testing::internal::CaptureStderr();
  auto reopened = Open(options);
  const std::string log = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(reopened.ok()) << reopened.status();
  range = *std::move(reopened);
  const RangeStats stats = range->stats();
  EXPECT_TRUE(absl::StartsWith(stats.recovered_from, "snapshot ")) << stats.recovered_from;
  EXPECT_EQ(stats.replayed_records, 11);  // from the older snapshot's seqno 20
  EXPECT_EQ(stats.snapshot_failures, 1);
  EXPECT_EQ(stats.revision, before.revision);
  EXPECT_TRUE(absl::StrContains(log, "snapshot ledger")) << log;
  EXPECT_EQ(GetValue(*range, "marked"), "NEWEST-SNAPSHOT-MARKER-value");
  ExpectValues(*range, last);
}

TEST_F(RangeTest, NewOwnerFencesTheOldOneWhoseWritesFailAndNothingIsAppliedTwice) {
  RangeOptions first_options = Options("first");
  absl::Mutex mu;
  int failures_seen = 0;
  absl::Status failure;
  first_options.on_failed = [&](const absl::Status& why) {
    absl::MutexLock l(&mu);
    ++failures_seen;
    failure = why;
  };
  LKV_ASSIGN_OR_FAIL(auto first, Open(first_options));
  LKV_ASSERT_OK(Increment(*first, "counter", 1));

  // Keep the first owner busy while the second one opens the range.
  Increments inc;
  std::atomic<bool> stop{false};
  std::atomic<int> issued{0};
  std::thread feeder([&] {
    while (!stop.load()) {
      inc.Issue(*first, "counter", 10);
      issued += 10;
      absl::SleepFor(absl::Microseconds(200));
    }
  });
  inc.WaitFor(50);
  LKV_ASSIGN_OR_FAIL(auto second, Open(Options("second")));
  absl::SleepFor(absl::Milliseconds(100));
  stop = true;
  feeder.join();
  inc.WaitFor(issued.load());

  // The old owner: pending and later writes fail UNAVAILABLE, on_failed once.
  auto later = Increment(*first, "counter", 1);
  EXPECT_EQ(later.status().code(), StatusCode::kUnavailable) << later.status();
  EXPECT_TRUE(absl::StrContains(later.status().message(), "range 7: log fenced by a newer owner"))
      << later.status();
  {
    absl::MutexLock l(&mu);
    auto notified = [&]() { return failures_seen > 0; };
    mu.AwaitWithTimeout(absl::Condition(&notified), absl::Seconds(5));
    EXPECT_EQ(failures_seen, 1);
    EXPECT_EQ(failure.code(), StatusCode::kUnavailable) << failure;
  }
  EXPECT_FALSE(first->stats().serving);
  v1::GetRequest get;
  get.set_key("counter");
  EXPECT_EQ(first->Get(get).status().code(), StatusCode::kUnavailable);
  {
    absl::MutexLock l(&inc.mu);
    EXPECT_FALSE(inc.errors.empty());
    for (const absl::Status& e : inc.errors) {
      EXPECT_EQ(e.code(), StatusCode::kUnavailable) << e;
    }
  }

  // The new owner: every write the old one got acknowledged, each once.
  const int64_t acked = std::max<int64_t>(1, inc.MaxValue());
  int64_t n = 0;
  ASSERT_TRUE(absl::SimpleAtoi(GetValue(*second, "counter").value_or("x"), &n));
  EXPECT_GE(n, acked);
  EXPECT_EQ(second->stats().revision, n);
  LKV_ASSIGN_OR_FAIL(auto next, Increment(*second, "counter", 1));
  EXPECT_EQ(next.value(), n + 1);
  EXPECT_EQ(next.header().revision(), n + 1);
  EXPECT_EQ(first->Close().code(), StatusCode::kUnavailable);
  first.reset();
  LKV_ASSERT_OK(second->Close());
  second.reset();

  // The old owner's local state is behind: reopening it replays the rest.
  LKV_ASSIGN_OR_FAIL(auto again, Open(Options("first")));
  EXPECT_EQ(again->stats().recovered_from, "local");
  EXPECT_EQ(GetValue(*again, "counter"), absl::StrCat(n + 1));
  EXPECT_EQ(again->stats().revision, n + 1);
}

// A log that can no longer be written (here: two of the three bookies of
// its ensemble gone, no spare) stops the range's writes but not its reads:
// its local state holds every acknowledged write and no other owner can
// write without fencing the log first. The fence case (reads refused) is
// NewOwnerFencesTheOldOneWhoseWritesFailAndNothingIsAppliedTwice above.
TEST_F(RangeTest, ALogThatCannotBeWrittenStopsWritesButReadsGoOn) {
  RangeOptions options = Options();
  std::atomic<int> failures{0};
  options.on_failed = [&](const absl::Status&) { ++failures; };
  std::atomic<bool> lease_valid{true};
  options.linearizable_read_check = [&]() -> absl::Status {
    if (lease_valid.load()) return absl::OkStatus();
    return absl::UnavailableError("lease not certainly valid");
  };
  LKV_ASSIGN_OR_FAIL(auto range, Open(options));
  for (int i = 0; i < 20; ++i) LKV_ASSERT_OK(Put(*range, absl::StrCat("k", i), absl::StrCat(i)));
  LKV_ASSERT_OK(Increment(*range, "counter", 5));
  const int64_t revision = range->stats().revision;
  EXPECT_FALSE(range->ServingReadsOnly());

  // Puts in flight while two bookies stop: some are acknowledged, the rest
  // fail when the log does (an add reaches one bookie, Qa is 2).
  constexpr int kPuts = 300;
  absl::Mutex mu;
  std::vector<int> acked;
  std::vector<absl::Status> errors;
  int answered = 0;
  for (int i = 0; i < kPuts; ++i) {
    range->Put(PutReq(absl::StrCat("p", i), absl::StrCat("v", i)),
               [&, i](absl::StatusOr<v1::PutResponse> r) {
                 absl::MutexLock l(&mu);
                 ++answered;
                 if (r.ok()) {
                   acked.push_back(i);
                 } else {
                   errors.push_back(r.status());
                 }
               });
    if (i == kPuts / 2) {
      cluster_->StopBookie(1);
      cluster_->StopBookie(2);
    }
    absl::SleepFor(absl::Microseconds(100));  // spread over many log batches
  }
  {
    absl::MutexLock l(&mu);
    auto all = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu) { return answered == kPuts; };
    mu.Await(absl::Condition(&all));
  }
  ASSERT_FALSE(errors.empty()) << "every put was acknowledged with one bookie of Qa 2 left";
  for (const absl::Status& e : errors) {
    EXPECT_EQ(e.code(), StatusCode::kUnavailable) << e;
  }
  std::cerr << acked.size() << " of " << kPuts << " puts acknowledged\n";

  ASSERT_TRUE(range->ServingReadsOnly());
  EXPECT_FALSE(range->stats().serving);
  EXPECT_FALSE(range->stats().writes_refused.empty());
  // Reads: exactly the acknowledged writes, at a revision that counts them.
  for (int i = 0; i < 20; ++i) {
    EXPECT_EQ(GetValue(*range, absl::StrCat("k", i)), absl::StrCat(i)) << i;
  }
  EXPECT_EQ(GetValue(*range, "counter"), "5");
  const std::set<int> acked_set(acked.begin(), acked.end());
  for (int i = 0; i < kPuts; ++i) {
    if (acked_set.contains(i)) {
      EXPECT_EQ(GetValue(*range, absl::StrCat("p", i)), absl::StrCat("v", i)) << i;
    } else {
      EXPECT_EQ(GetValue(*range, absl::StrCat("p", i)), std::nullopt)
          << "put " << i << " failed but is visible";
    }
  }
  LKV_ASSIGN_OR_FAIL(ScanResult all, range->Scan(ScanSpec{}));
  EXPECT_EQ(all.count, 21 + static_cast<int64_t>(acked.size()));
  EXPECT_EQ(all.revision, revision + static_cast<int64_t>(acked.size()));
  v1::GetRequest get;
  get.set_key("k1");
  get.set_consistency(v1::SERIALIZABLE);
  LKV_ASSIGN_OR_FAIL(auto serializable, range->Get(get));
  EXPECT_EQ(serializable.kv().value(), "1");
  // The lease check still guards linearizable reads.
  lease_valid = false;
  get.set_consistency(v1::LINEARIZABLE);
  EXPECT_EQ(range->Get(get).status().code(), StatusCode::kUnavailable);
  lease_valid = true;

  // Writes are refused before they reach the log: retry-safe.
  auto refused = Increment(*range, "counter", 1);
  EXPECT_EQ(refused.status().code(), StatusCode::kUnavailable) << refused.status();
  EXPECT_TRUE(refused.status().GetPayload("ledgerkv-retry-safe").has_value()) << refused.status();
  EXPECT_EQ(GetValue(*range, "counter"), "5");
  // A request that would change nothing is a read, and is answered as one:
  // a Txn of gets, at the revision of the state it read (not one that
  // counts the puts that failed with the log), and a condition that fails.
  v1::Compare counter_is_5;
  counter_is_5.set_key("counter");
  counter_is_5.set_target(v1::Compare::VALUE);
  counter_is_5.set_value("5");
  v1::TxnRequest reads;
  *reads.add_compares() = counter_is_5;
  reads.add_success()->mutable_get()->set_key("k3");
  reads.add_success()->mutable_get()->set_key("counter");
  LKV_ASSIGN_OR_FAIL(auto read_txn, Txn(*range, reads));
  EXPECT_TRUE(read_txn.succeeded());
  ASSERT_EQ(read_txn.results_size(), 2);
  EXPECT_EQ(read_txn.results(0).get().kv().value(), "3");
  EXPECT_EQ(read_txn.results(1).get().kv().value(), "5");
  EXPECT_EQ(read_txn.header().revision(), all.revision);
  v1::TxnRequest not_taken;  // the write is in the branch the compare does not take
  *not_taken.add_compares() = counter_is_5;
  not_taken.mutable_compares(0)->set_value("6");
  *not_taken.add_success()->mutable_put() = PutReq("counter", "6");
  not_taken.add_failure()->mutable_get()->set_key("counter");
  LKV_ASSIGN_OR_FAIL(auto else_txn, Txn(*range, not_taken));
  EXPECT_FALSE(else_txn.succeeded());
  ASSERT_EQ(else_txn.results_size(), 1);
  EXPECT_EQ(else_txn.results(0).get().kv().value(), "5");
  v1::PutRequest stale = PutReq("k3", "stale");
  stale.set_expected_version(7);
  EXPECT_EQ(Put(*range, stale).status().code(), StatusCode::kFailedPrecondition);
  // One that would change something is refused, retry-safe, and leaves
  // nothing behind: the next request reads the state as it was.
  v1::TxnRequest writes = reads;
  *writes.add_success()->mutable_put() = PutReq("k3", "changed");
  auto refused_txn = Txn(*range, writes);
  EXPECT_EQ(refused_txn.status().code(), StatusCode::kUnavailable) << refused_txn.status();
  EXPECT_TRUE(refused_txn.status().GetPayload("ledgerkv-retry-safe").has_value());
  LKV_ASSIGN_OR_FAIL(auto after, Txn(*range, reads));
  EXPECT_EQ(after.results(0).get().kv().value(), "3");
  EXPECT_EQ(after.header().revision(), all.revision);
  EXPECT_EQ(GetValue(*range, "k3"), "3");
  lease_valid = false;  // a read in a Txn is gated as a linearizable get is
  EXPECT_EQ(Txn(*range, reads).status().code(), StatusCode::kUnavailable);
  lease_valid = true;
  for (int i = 0; i < 100 && failures.load() == 0; ++i) absl::SleepFor(absl::Milliseconds(20));
  EXPECT_EQ(failures.load(), 1);

  // Closed: no more reads.
  EXPECT_EQ(range->Close().code(), StatusCode::kUnavailable);
  EXPECT_FALSE(range->ServingReadsOnly());
  EXPECT_EQ(range->Get(get).status().code(), StatusCode::kUnavailable);
  range.reset();

  // The bookies back: the next owner has every acknowledged write.
  LKV_ASSERT_OK(cluster_->RestartBookie(1));
  LKV_ASSERT_OK(cluster_->RestartBookie(2));
  NewClient();  // not one whose channels to them are still backing off
  LKV_ASSIGN_OR_FAIL(auto again, Open(Options()));
  for (int i = 0; i < 20; ++i) {
    EXPECT_EQ(GetValue(*again, absl::StrCat("k", i)), absl::StrCat(i)) << i;
  }
  for (int i : acked) EXPECT_EQ(GetValue(*again, absl::StrCat("p", i)), absl::StrCat("v", i)) << i;
  LKV_ASSIGN_OR_FAIL(auto next, Increment(*again, "counter", 1));
  EXPECT_EQ(next.value(), 6);
}

// A restart while no log writer can be opened (every bookie full: still
// there for fences, recovery and reads, not for new ledgers) fails Open;
// OpenForReads fences and recovers the log, including the ledger a crash
// left OPEN, without creating one, and answers reads of the whole state,
// here rebuilt from the log alone (the local DB wiped); writes are refused
// retry-safe.
TEST_F(RangeTest, OpenForReadsServesTheWholeLogWhenNoWriterCanBeOpened) {
  {
    LKV_ASSIGN_OR_FAIL(auto range, Open(Options()));
    for (int i = 0; i < 20; ++i) {
      LKV_ASSERT_OK(Put(*range, absl::StrCat("k", i), absl::StrCat(i)));
    }
    LKV_ASSERT_OK(Increment(*range, "counter", 5));
    // Destroyed as a crash would: the log's ledger stays OPEN.
  }
  std::filesystem::remove_all(Options().data_dir);
  for (int i = 0; i < 3; ++i) LKV_ASSERT_OK(cluster_->SetRegisteredReadOnly(i, true));
  auto open = Open(Options());
  ASSERT_FALSE(open.ok()) << "opened a writer with every bookie read-only";
  ASSERT_EQ(open.status().code(), StatusCode::kUnavailable) << open.status();

  LKV_ASSIGN_OR_FAIL(auto reads, Range::OpenForReads(Options(), descriptor_, open.status()));
  EXPECT_TRUE(reads->ServingReadsOnly());
  for (int i = 0; i < 20; ++i) {
    EXPECT_EQ(GetValue(*reads, absl::StrCat("k", i)), absl::StrCat(i)) << i;
  }
  EXPECT_EQ(GetValue(*reads, "counter"), "5");
  const RangeStats stats = reads->stats();
  EXPECT_FALSE(stats.serving);
  EXPECT_EQ(stats.revision, 21);
  EXPECT_EQ(stats.replayed_records, 21) << "the state did not come from the log";
  EXPECT_TRUE(absl::StrContains(stats.writes_refused, "cannot be opened")) << stats.writes_refused;
  auto refused = Increment(*reads, "counter", 1);
  EXPECT_EQ(refused.status().code(), StatusCode::kUnavailable) << refused.status();
  EXPECT_TRUE(refused.status().GetPayload("ledgerkv-retry-safe").has_value()) << refused.status();
  EXPECT_EQ(reads->Close().code(), StatusCode::kUnavailable);
  EXPECT_FALSE(reads->ServingReadsOnly());
  reads.reset();

  // Space again: a writer opens, over the same state.
  for (int i = 0; i < 3; ++i) LKV_ASSERT_OK(cluster_->SetRegisteredReadOnly(i, false));
  LKV_ASSIGN_OR_FAIL(auto again, Open(Options()));
  EXPECT_EQ(GetValue(*again, "k7"), "7");
  LKV_ASSIGN_OR_FAIL(auto next, Increment(*again, "counter", 1));
  EXPECT_EQ(next.value(), 6);
  EXPECT_EQ(next.header().revision(), 22);
}

TEST_F(RangeTest, SecondOpenOfTheSameLocalDirFailsWithoutFencingTheFirst) {
  RangeOptions options = Options();
  LKV_ASSIGN_OR_FAIL(auto range, Open(options));
  LKV_ASSERT_OK(Put(*range, "k", "1"));
  auto twice = Open(options);
  EXPECT_FALSE(twice.ok());
  LKV_ASSIGN_OR_FAIL(auto put, Put(*range, "k", "2"));
  EXPECT_EQ(put.header().revision(), 2);
  EXPECT_TRUE(range->stats().serving);
}

TEST_F(RangeTest, LocalStateAheadOfTheLogIsDataLoss) {
  RangeOptions options = Options();
  LKV_ASSIGN_OR_FAIL(auto range, Open(options));
  Overwrite(*range, 5, 2, 10);
  LKV_ASSERT_OK(range->Close());
  range.reset();
  // Another range id whose log is empty, over this local state.
  descriptor_.range_id = 8;
  auto open = Open(options);
  EXPECT_EQ(open.status().code(), StatusCode::kDataLoss) << open.status();
  EXPECT_TRUE(absl::StrContains(open.status().message(), "ahead")) << open.status();
}

}  // namespace
}  // namespace ledgerkv::kv::testing
