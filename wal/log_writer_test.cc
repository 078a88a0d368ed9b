// LogWriter: seqnos, group commit, callback order, rolling, truncation,
// close. Real bookies with fsync (wal_test_util.h).
#include <map>
#include <set>
#include <thread>

#include "wal/wal_test_util.h"

namespace ledgerkv::wal {
namespace {

using testing::ExpectContiguous;
using testing::RecordFor;

class LogWriterTest : public testing::WalTest {};

TEST_F(LogWriterTest, AppendedRecordsReadBackFromTheStartAndFromAnyMiddleSeqno) {
  LKV_ASSIGN_OR_FAIL(auto writer, LogWriter::Open(options_, "log-a"));
  EXPECT_EQ(writer->first_seqno(), 1u);
  EXPECT_EQ(writer->epoch(), 1u);
  auto results = AppendAll(*writer, "r", 300);
  for (size_t i = 0; i < results.size(); ++i) {
    ASSERT_TRUE(results[i].ok()) << results[i].status();
    EXPECT_EQ(*results[i], i + 1) << "callbacks run in seqno order";
  }
  // Several records share an entry, so some starting seqnos fall inside one.
  EXPECT_LT(writer->stats().entries, 300);
  LKV_ASSERT_OK(writer->Close());

  LKV_ASSIGN_OR_FAIL(auto all, ReadAll("log-a", 0));
  ASSERT_EQ(all.size(), 300u);
  ExpectContiguous(all, 1);
  for (size_t i = 0; i < all.size(); ++i) EXPECT_EQ(all[i].data, RecordFor("r", i));

  for (uint64_t from = 130; from <= 150; ++from) {
    LKV_ASSIGN_OR_FAIL(auto tail, ReadAll("log-a", from));
    ASSERT_EQ(tail.size(), 301 - from) << "from " << from;
    ExpectContiguous(tail, from);
    EXPECT_EQ(tail.front().data, RecordFor("r", from - 1));
  }
  LKV_ASSIGN_OR_FAIL(auto beyond, ReadAll("log-a", 301));
  EXPECT_TRUE(beyond.empty());
}

TEST_F(LogWriterTest, ConcurrentAppendersGetContiguousSeqnosInCallbackOrderAndShareEntries) {
  LKV_ASSIGN_OR_FAIL(auto writer, LogWriter::Open(options_, "log-c"));
  constexpr int kThreads = 4;
  constexpr int kPerThread = 250;
  absl::Mutex mu;
  std::vector<uint64_t> callback_order;
  std::map<uint64_t, std::string> data_at;
  std::vector<std::vector<uint64_t>> per_thread(kThreads);
  int failures = 0;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        std::string record = RecordFor(absl::StrCat("t", t), i);
        writer->Append(record, [&, t, record](absl::StatusOr<uint64_t> seqno) {
          absl::MutexLock l(&mu);
          if (!seqno.ok()) {
            ++failures;
            return;
          }
          callback_order.push_back(*seqno);
          data_at[*seqno] = record;
          per_thread[t].push_back(*seqno);
        });
      }
    });
  }
  for (auto& t : threads) t.join();
  {
    absl::MutexLock l(&mu);
    auto all = [&]() { return callback_order.size() + failures == kThreads * kPerThread; };
    mu.Await(absl::Condition(&all));
    ASSERT_EQ(failures, 0);
    for (size_t i = 0; i < callback_order.size(); ++i) {
      ASSERT_EQ(callback_order[i], i + 1) << "callbacks out of seqno order or seqnos not contiguous";
    }
    // Each thread's records got seqnos in its own call order.
    for (const auto& seqnos : per_thread) {
      EXPECT_TRUE(std::is_sorted(seqnos.begin(), seqnos.end()));
    }
  }
  const LogWriterStats stats = writer->stats();
  EXPECT_EQ(stats.records, kThreads * kPerThread);
  EXPECT_LT(stats.entries, stats.records) << "group commit should put many records in one entry";
  LKV_ASSERT_OK(writer->Close());

  LKV_ASSIGN_OR_FAIL(auto all, ReadAll("log-c", 1));
  ASSERT_EQ(all.size(), static_cast<size_t>(kThreads * kPerThread));
  ExpectContiguous(all, 1);
  for (const LogRecord& r : all) EXPECT_EQ(r.data, data_at[r.seqno]) << "seqno " << r.seqno;
}

// The KV range applies a run of acknowledged records in one write from
// this hook: it must follow every callback it covers, before Close returns.
TEST_F(LogWriterTest, RunEndHookFollowsEachRunOfCallbacksAndPrecedesCloseReturning) {
  LKV_ASSIGN_OR_FAIL(auto writer, LogWriter::Open(options_, "log-hook"));
  constexpr int kRecords = 500;
  absl::Mutex mu;
  int delivered = 0;          // callbacks run
  int covered = 0;            // callbacks some hook ran after
  int hooks = 0;
  int hooks_without_news = 0;  // a hook with no callback since the last one
  writer->SetRunEndHook([&] {
    absl::MutexLock l(&mu);
    ++hooks;
    if (delivered == covered) ++hooks_without_news;
    covered = delivered;
  });
  for (int i = 0; i < kRecords; ++i) {
    writer->Append(RecordFor("h", i), [&](absl::StatusOr<uint64_t> seqno) {
      ASSERT_TRUE(seqno.ok()) << seqno.status();
      absl::MutexLock l(&mu);
      ++delivered;
    });
  }
  LKV_ASSERT_OK(writer->Close());
  absl::MutexLock l(&mu);
  EXPECT_EQ(delivered, kRecords);
  EXPECT_EQ(covered, kRecords) << "Close returned before the hook of the last run";
  EXPECT_EQ(hooks_without_news, 0);
  EXPECT_GE(hooks, 1);
  EXPECT_LE(hooks, kRecords);
}

TEST_F(LogWriterTest, RollingBySizeMakesClosedSegmentsAndReadsCrossTheirBoundaries) {
  options_.roll_bytes = 16 << 10;
  options_.max_batch_bytes = 4 << 10;
  LKV_ASSIGN_OR_FAIL(auto writer, LogWriter::Open(options_, "log-r"));
  // Waves of concurrent appends: rolls happen while records are queued, and
  // every callback still comes in seqno order (checked by the helper).
  const int64_t n = AppendUntilSegments(*writer, 60, 1000, 4);
  ASSERT_GT(n, 0);

  // Before the close a reader sees a contiguous committed prefix.
  LKV_ASSIGN_OR_FAIL(auto prefix, ReadAll("log-r", 1));
  ExpectContiguous(prefix, 1);
  EXPECT_GT(prefix.size(), 0u);

  LKV_ASSERT_OK(writer->Close());
  const meta::v1::LogMetadata log = writer->metadata();
  ASSERT_GE(log.segments_size(), 4) << DescribeLog(log, "log-r");
  EXPECT_EQ(writer->stats().rolls, log.segments_size() - 1);
  LKV_ASSERT_OK(CheckSegments(log, "log-r"));
  for (const meta::v1::LogSegment& s : log.segments()) {
    EXPECT_EQ(s.state(), meta::v1::LogSegment::CLOSED);
    // Only a roll of a non-empty ledger starts a segment; the last one may
    // be empty if a roll finished after the last record.
    if (&s != &log.segments(log.segments_size() - 1)) {
      EXPECT_GE(s.last_seqno(), s.first_seqno()) << "an empty segment in the middle";
    }
    LKV_ASSIGN_OR_FAIL(auto ledger, client_->GetLedgerMetadata(s.ledger_id()));
    EXPECT_EQ(ledger.state(), meta::v1::CLOSED);
    EXPECT_EQ(ledger.custom().at("log"), "log-r");
  }
  EXPECT_EQ(log.segments(log.segments_size() - 1).last_seqno(), static_cast<uint64_t>(n));

  LKV_ASSIGN_OR_FAIL(auto all, ReadAll("log-r", 0));
  ASSERT_EQ(all.size(), static_cast<size_t>(n));
  ExpectContiguous(all, 1);
  for (const LogRecord& r : all) EXPECT_EQ(r.data, testing::WaveRecordFor(r.seqno, 60, 1000));
  // Starting on each side of every segment boundary.
  for (int i = 1; i < log.segments_size(); ++i) {
    const uint64_t boundary = log.segments(i).first_seqno();
    for (uint64_t from : {boundary - 1, boundary, boundary + 1}) {
      if (from > static_cast<uint64_t>(n)) continue;
      LKV_ASSIGN_OR_FAIL(auto tail, ReadAll("log-r", from));
      ASSERT_EQ(tail.size(), n + 1 - from) << "from " << from;
      ExpectContiguous(tail, from);
    }
  }
}

TEST_F(LogWriterTest, RollingByAgeStartsANewSegmentWithoutNewAppends) {
  options_.roll_age = absl::Milliseconds(100);
  LKV_ASSIGN_OR_FAIL(auto writer, LogWriter::Open(options_, "log-age"));
  LKV_ASSERT_OK(writer->AppendAndWait("one"));
  // The control thread's timer rolls the non-empty ledger; the new, empty
  // one is not rolled again however long it waits, and its age counts from
  // its first record, so "two" does not roll it at once either.
  for (int i = 0; i < 100 && writer->stats().rolls == 0; ++i) absl::SleepFor(absl::Milliseconds(20));
  EXPECT_EQ(writer->stats().rolls, 1);
  absl::SleepFor(absl::Milliseconds(300));
  EXPECT_EQ(writer->stats().rolls, 1);
  LKV_ASSIGN_OR_FAIL(uint64_t seqno, writer->AppendAndWait("two"));
  EXPECT_EQ(seqno, 2u);
  LKV_ASSERT_OK(writer->Close());
  const meta::v1::LogMetadata log = writer->metadata();
  // A slow machine may roll again between "two" and Close (the ledger then
  // ages past 100 ms): only the first two segments are certain.
  ASSERT_GE(log.segments_size(), 2) << DescribeLog(log, "log-age");
  EXPECT_EQ(log.segments(0).last_seqno(), 1u);
  EXPECT_EQ(log.segments(1).first_seqno(), 2u);
  LKV_ASSIGN_OR_FAIL(auto all, ReadAll("log-age", 0));
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[1].data, "two");
}

TEST_F(LogWriterTest, TruncateDropsWholeSegmentsBelowAndDeletesTheirLedgers) {
  options_.roll_bytes = 8 << 10;
  options_.max_batch_bytes = 2 << 10;
  LKV_ASSIGN_OR_FAIL(auto writer, LogWriter::Open(options_, "log-t"));
  const int64_t n = AppendUntilSegments(*writer, 25, 500, 4);
  const meta::v1::LogMetadata before = writer->metadata();
  ASSERT_GE(before.segments_size(), 4) << DescribeLog(before, "log-t");

  // Inside segment 2: segments 0 and 1 end below it and go; 2 stays.
  const uint64_t cut = before.segments(2).first_seqno() + 1;
  LKV_ASSERT_OK(writer->Truncate(cut));
  // (A roll may still add a segment at the end meanwhile.)
  const meta::v1::LogMetadata after = writer->metadata();
  ASSERT_GE(after.segments_size(), before.segments_size() - 2) << DescribeLog(after, "log-t");
  for (int i = 2; i < before.segments_size(); ++i) {
    EXPECT_EQ(after.segments(i - 2).ledger_id(), before.segments(i).ledger_id());
  }
  EXPECT_EQ(after.ledgers_to_delete_size(), 0);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(client_->GetLedgerMetadata(before.segments(i).ledger_id()).status().code(),
              absl::StatusCode::kNotFound);
  }
  for (int i = 2; i < before.segments_size(); ++i) {
    LKV_ASSERT_OK(client_->GetLedgerMetadata(before.segments(i).ledger_id()));
  }
  // The writer keeps going; reads from the truncation point still work.
  for (auto& r : AppendAll(*writer, "late", 10, 500)) LKV_ASSERT_OK(r);
  LKV_ASSERT_OK(writer->Close());
  LKV_ASSIGN_OR_FAIL(auto stored, GetLogMetadata(options_, "log-t"));
  EXPECT_EQ(stored.segments(0).ledger_id(), before.segments(2).ledger_id());
  LKV_ASSIGN_OR_FAIL(auto tail, ReadAll("log-t", cut));
  ASSERT_EQ(tail.size(), n + 11 - cut);
  ExpectContiguous(tail, cut);
  EXPECT_EQ(tail.front().data, testing::WaveRecordFor(cut, 25, 500));
  EXPECT_EQ(tail.back().data, RecordFor("late", 9, 500));
  LKV_ASSIGN_OR_FAIL(auto oldest, ReadAll("log-t", 0));
  ASSERT_FALSE(oldest.empty());
  EXPECT_EQ(oldest.front().seqno, before.segments(2).first_seqno());
  EXPECT_EQ(LogReader::Open(options_, "log-t", 1).status().code(), absl::StatusCode::kOutOfRange);
}

TEST_F(LogWriterTest, TruncateNeverDropsTheOpenSegment) {
  options_.roll_bytes = 4 << 10;
  options_.max_batch_bytes = 1 << 10;
  LKV_ASSIGN_OR_FAIL(auto writer, LogWriter::Open(options_, "log-o"));
  // One record at a time, stopping right after the first roll: the new
  // ledger is nearly empty, so no second roll can race the truncation.
  int64_t n = 0;
  while (writer->metadata().segments_size() < 2 && n < 200) {
    LKV_ASSIGN_OR_FAIL(uint64_t seqno, writer->AppendAndWait(RecordFor("x", n, 500)));
    ASSERT_EQ(seqno, static_cast<uint64_t>(++n));
  }
  const meta::v1::LogMetadata before = writer->metadata();
  ASSERT_EQ(before.segments_size(), 2);
  const meta::v1::LogSegment open = before.segments(before.segments_size() - 1);

  LKV_ASSERT_OK(writer->Truncate(UINT64_MAX));
  const meta::v1::LogMetadata after = writer->metadata();
  ASSERT_EQ(after.segments_size(), 1);
  EXPECT_EQ(after.segments(0).ledger_id(), open.ledger_id());
  EXPECT_EQ(after.segments(0).state(), meta::v1::LogSegment::OPEN);
  LKV_ASSIGN_OR_FAIL(uint64_t seqno, writer->AppendAndWait("after truncation"));
  EXPECT_EQ(seqno, static_cast<uint64_t>(n + 1));
  LKV_ASSERT_OK(writer->Close());
  LKV_ASSIGN_OR_FAIL(auto tail, ReadAll("log-o", 0));
  ASSERT_FALSE(tail.empty());
  EXPECT_EQ(tail.front().seqno, open.first_seqno());
  EXPECT_EQ(tail.back().data, "after truncation");
}

TEST_F(LogWriterTest, CloseSealsTheLogAndTheNextWriterContinuesAfterIt) {
  LKV_ASSIGN_OR_FAIL(auto writer, LogWriter::Open(options_, "log-x"));
  for (auto& r : AppendAll(*writer, "a", 20)) LKV_ASSERT_OK(r);
  LKV_ASSERT_OK(writer->Close());
  LKV_ASSERT_OK(writer->Close());  // idempotent
  auto refused = writer->AppendAndWait("after close");
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition) << refused.status();
  const meta::v1::LogMetadata log = writer->metadata();
  EXPECT_EQ(log.segments(0).state(), meta::v1::LogSegment::CLOSED);
  EXPECT_EQ(log.segments(0).last_seqno(), 20u);

  LKV_ASSIGN_OR_FAIL(auto next, LogWriter::Open(options_, "log-x"));
  EXPECT_EQ(next->epoch(), 2u);
  EXPECT_EQ(next->first_seqno(), 21u);
  LKV_ASSIGN_OR_FAIL(uint64_t seqno, next->AppendAndWait("b"));
  EXPECT_EQ(seqno, 21u);
}

TEST_F(LogWriterTest, OversizedRecordIsRefusedWithoutASeqnoAndTheWriterGoesOn) {
  options_.max_record_bytes = 1000;
  LKV_ASSIGN_OR_FAIL(auto writer, LogWriter::Open(options_, "log-big"));
  auto big = writer->AppendAndWait(std::string(1001, 'x'));
  EXPECT_EQ(big.status().code(), absl::StatusCode::kInvalidArgument);
  LKV_ASSIGN_OR_FAIL(uint64_t seqno, writer->AppendAndWait(std::string(1000, 'x')));
  EXPECT_EQ(seqno, 1u);
}

TEST_F(LogWriterTest, BadNamesAndOptionsAreRefused) {
  EXPECT_EQ(LogWriter::Open(options_, "").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(LogWriter::Open(options_, "a/b").status().code(), absl::StatusCode::kInvalidArgument);
  LogOptions bad = options_;
  bad.max_entries_in_flight = 0;
  EXPECT_EQ(LogWriter::Open(bad, "ok").status().code(), absl::StatusCode::kInvalidArgument);
  bad = options_;
  bad.client = nullptr;
  EXPECT_EQ(LogWriter::Open(bad, "ok").status().code(), absl::StatusCode::kInvalidArgument);
  bad = options_;
  bad.write_quorum = 4;  // > E: the ledger layer refuses it (L1)
  EXPECT_EQ(LogWriter::Open(bad, "ok").status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ledgerkv::wal
