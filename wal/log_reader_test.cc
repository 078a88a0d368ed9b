// LogReader: tailing an active log, bounded replay, and corrupt data
// reported as DATA_LOSS (never skipped). Real bookies with fsync.
#include <filesystem>
#include <fstream>
#include <iterator>

#include "wal/wal_test_util.h"

namespace ledgerkv::wal {
namespace {

using testing::ExpectContiguous;
using ledger::testing::CorruptJournal;
using testing::RecordFor;

class LogReaderTest : public testing::WalTest {};

TEST_F(LogReaderTest, MissingLogIsNotFound) {
  EXPECT_EQ(LogReader::Open(options_, "nothing", 0).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(LogReaderTest, TailingReaderSeesCommittedRecordsAsTheWriterGoesAndAcrossARoll) {
  options_.roll_bytes = 6 << 10;
  options_.max_batch_bytes = 2 << 10;
  LKV_ASSIGN_OR_FAIL(auto writer, LogWriter::Open(options_, "log-tail"));
  LKV_ASSIGN_OR_FAIL(auto reader, LogReader::Open(options_, "log-tail", 1));
  LKV_ASSIGN_OR_FAIL(auto none, reader->Next());
  EXPECT_TRUE(none.empty());

  std::vector<LogRecord> seen;
  uint64_t appended = 0;
  for (int round = 0; round < 6; ++round) {
    const uint64_t before_round = appended;
    for (auto& r : AppendAll(*writer, "t", 20, 500)) {
      LKV_ASSERT_OK(r);
      appended = *r;
    }
    // The LAC rides on later adds: the entries in flight when this round's
    // last one left may not be visible yet, but this round's first entry
    // left after the previous round was acknowledged and carried its LAC.
    for (;;) {
      LKV_ASSIGN_OR_FAIL(auto got, reader->Next());
      if (got.empty()) break;
      seen.insert(seen.end(), got.begin(), got.end());
    }
    ExpectContiguous(seen, 1);
    EXPECT_GE(seen.size(), before_round) << "round " << round;
    EXPECT_EQ(reader->position(), seen.size() + 1);
  }
  ASSERT_GE(writer->metadata().segments_size(), 3);
  LKV_ASSERT_OK(writer->Close());
  for (;;) {
    LKV_ASSIGN_OR_FAIL(auto got, reader->Next());
    if (got.empty()) break;
    seen.insert(seen.end(), got.begin(), got.end());
  }
  ASSERT_EQ(seen.size(), appended);
  ExpectContiguous(seen, 1);
  for (const LogRecord& r : seen) EXPECT_EQ(r.data, RecordFor("t", (r.seqno - 1) % 20, 500));
}

// When the writer goes quiet, its ledger writes the LAC explicitly, so a
// tailing reader gets every acknowledged record without another append or
// a close (docs/ledger-protocol.md, "Explicit LAC writes").
TEST_F(LogReaderTest, TailingReaderGetsAnIdleWritersLastRecords) {
  LKV_ASSIGN_OR_FAIL(auto writer, LogWriter::Open(options_, "log-idle"));
  LKV_ASSIGN_OR_FAIL(auto reader, LogReader::Open(options_, "log-idle", 1));
  uint64_t appended = 0;
  for (auto& r : AppendAll(*writer, "i", 30, 200)) {
    LKV_ASSERT_OK(r);
    appended = *r;
  }
  std::vector<LogRecord> seen;
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  while (seen.size() < appended && absl::Now() < give_up) {
    LKV_ASSIGN_OR_FAIL(auto got, reader->Next());
    if (got.empty()) absl::SleepFor(absl::Milliseconds(20));
    seen.insert(seen.end(), got.begin(), got.end());
  }
  ASSERT_EQ(seen.size(), appended) << "the idle writer's last records stayed invisible";
  ExpectContiguous(seen, 1);
  EXPECT_EQ(seen.back().data, RecordFor("i", 29, 200));
  LKV_ASSERT_OK(writer->Close());
}

// A ledger the log still names must never read as a truncation: a reader
// told "truncated" would skip to the oldest record and carry on without
// the lost ones (invariant: corrupt or lost data is reported, never treated
// as absent).
TEST_F(LogReaderTest, ALedgerTheLogStillNamesThatGoesMissingIsDataLossNotTruncation) {
  LKV_ASSIGN_OR_FAIL(auto writer, LogWriter::Open(options_, "log-lost"));
  LKV_ASSIGN_OR_FAIL(auto reader, LogReader::Open(options_, "log-lost", 1));
  for (auto& r : AppendAll(*writer, "l", 20, 200)) LKV_ASSERT_OK(r);
  std::vector<LogRecord> seen;
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  while (seen.size() < 20 && absl::Now() < give_up) {
    LKV_ASSIGN_OR_FAIL(auto got, reader->Next());
    if (got.empty()) absl::SleepFor(absl::Milliseconds(20));
    seen.insert(seen.end(), got.begin(), got.end());
  }
  ASSERT_EQ(seen.size(), 20u);
  const meta::v1::LogMetadata log = writer->metadata();
  ASSERT_EQ(log.segments_size(), 1);
  // Lost behind the log's back (an operator's delete, a bug elsewhere):
  // the log still names the ledger of its open segment.
  LKV_ASSERT_OK(client_->DeleteLedger(log.segments(0).ledger_id()));

  for (int call = 0; call < 2; ++call) {
    auto next = reader->Next();
    EXPECT_EQ(next.status().code(), absl::StatusCode::kDataLoss) << "call " << call << ": "
                                                                 << next.status();
  }
  EXPECT_EQ(reader->position(), 21u);
  EXPECT_EQ(ReadAll("log-lost", 1).status().code(), absl::StatusCode::kDataLoss);
}

// The other side of the same check: a truncation that drops only segments
// the reader has finished is no error at all, and the reader goes on into
// the next segment.
TEST_F(LogReaderTest, ATruncationBelowTheReadersPositionDoesNotStopIt) {
  options_.roll_bytes = 8 << 10;
  options_.max_batch_bytes = 2 << 10;
  LKV_ASSIGN_OR_FAIL(auto writer, LogWriter::Open(options_, "log-cut"));
  const int64_t n = AppendUntilSegments(*writer, 25, 500, 3);
  const meta::v1::LogMetadata before = writer->metadata();
  ASSERT_GE(before.segments_size(), 3);
  const uint64_t first_end = before.segments(0).last_seqno();

  LKV_ASSIGN_OR_FAIL(auto reader, LogReader::Open(options_, "log-cut", 1));
  std::vector<LogRecord> seen;
  while (reader->position() <= first_end) {
    LKV_ASSIGN_OR_FAIL(auto got, reader->Next(first_end));
    ASSERT_FALSE(got.empty());
    seen.insert(seen.end(), got.begin(), got.end());
  }
  ASSERT_EQ(reader->position(), first_end + 1);
  // Drops segment 0 (and deletes its ledger), which the reader finished.
  LKV_ASSERT_OK(writer->Truncate(before.segments(1).first_seqno()));
  ASSERT_EQ(client_->GetLedgerMetadata(before.segments(0).ledger_id()).status().code(),
            absl::StatusCode::kNotFound);

  LKV_ASSERT_OK(writer->Close());
  for (;;) {
    LKV_ASSIGN_OR_FAIL(auto got, reader->Next());
    if (got.empty()) break;
    seen.insert(seen.end(), got.begin(), got.end());
  }
  ASSERT_EQ(seen.size(), static_cast<size_t>(n));
  ExpectContiguous(seen, 1);
  EXPECT_EQ(seen.back().data, testing::WaveRecordFor(n, 25, 500));
}

TEST_F(LogReaderTest, ReadThroughStopsExactlyAtTheRequestedSeqnoEvenInsideAnEntry) {
  LKV_ASSIGN_OR_FAIL(auto writer, LogWriter::Open(options_, "log-rt"));
  for (auto& r : AppendAll(*writer, "r", 200)) LKV_ASSERT_OK(r);
  ASSERT_LT(writer->stats().entries, 200);
  LKV_ASSERT_OK(writer->Close());

  LKV_ASSIGN_OR_FAIL(auto reader, LogReader::Open(options_, "log-rt", 0));
  for (uint64_t stop : {1u, 37u, 38u, 150u}) {
    const uint64_t from = reader->position();
    std::vector<uint64_t> visited;
    LKV_ASSERT_OK(reader->ReadThrough(stop, [&](const LogRecord& r) {
      visited.push_back(r.seqno);
      return absl::OkStatus();
    }));
    ASSERT_EQ(visited.size(), stop - from + 1) << "through " << stop;
    EXPECT_EQ(visited.front(), from);
    EXPECT_EQ(visited.back(), stop);
    EXPECT_EQ(reader->position(), stop + 1);
  }
  LKV_ASSIGN_OR_FAIL(auto rest, reader->Next());
  ASSERT_FALSE(rest.empty());
  EXPECT_EQ(rest.front().seqno, 151u);

  auto beyond = reader->ReadThrough(500, [](const LogRecord&) { return absl::OkStatus(); });
  EXPECT_EQ(beyond.code(), absl::StatusCode::kOutOfRange) << beyond;
  auto stopped = LogReader::Open(options_, "log-rt", 1);
  ASSERT_TRUE(stopped.ok());
  auto visit_error = (*stopped)->ReadThrough(10, [](const LogRecord& r) {
    return r.seqno == 5 ? absl::AbortedError("stop") : absl::OkStatus();
  });
  EXPECT_EQ(visit_error.code(), absl::StatusCode::kAborted);
}

TEST_F(LogReaderTest, CorruptEntryOnEveryReplicaIsDataLossAndNotSkipped) {
  {
    LKV_ASSIGN_OR_FAIL(auto writer, LogWriter::Open(options_, "log-bad"));
    for (int i = 0; i < 30; ++i) LKV_ASSERT_OK(writer->AppendAndWait(RecordFor("r", i)));
    LKV_ASSERT_OK(writer->Close());
  }
  for (int i = 0; i < cluster_->size(); ++i) cluster_->StopBookie(i);
  int hits = 0;
  for (int i = 0; i < cluster_->size(); ++i) hits += CorruptJournal(cluster_->data_dir(i), "r-17-");
  ASSERT_EQ(hits, options_.write_quorum);  // every replica of record 18's entry
  for (int i = 0; i < cluster_->size(); ++i) LKV_ASSERT_OK(cluster_->RestartBookie(i));

  LKV_ASSIGN_OR_FAIL(auto reader, LogReader::Open(options_, "log-bad", 1));
  std::vector<LogRecord> seen;
  absl::Status status;
  for (;;) {
    auto got = reader->Next();
    if (!got.ok()) {
      status = got.status();
      break;
    }
    ASSERT_FALSE(got->empty()) << "the reader reached the end past a corrupt record";
    seen.insert(seen.end(), got->begin(), got->end());
  }
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
  ASSERT_LT(seen.size(), 18u);
  ExpectContiguous(seen, 1);
  EXPECT_LT(reader->position(), 19u);
  // Asking again does not skip it either.
  EXPECT_EQ(reader->Next().status().code(), absl::StatusCode::kDataLoss);
  // Past the corrupt entry everything is readable.
  LKV_ASSIGN_OR_FAIL(auto after, ReadAll("log-bad", 19));
  EXPECT_EQ(after.size(), 12u);
}

TEST_F(LogReaderTest, UndecodableEntryIsDataLoss) {
  LKV_ASSIGN_OR_FAIL(auto ledger, client_->CreateLedger(ledger::CreateOptions{}));
  LKV_ASSERT_OK(ledger->Append("not a batch"));
  LKV_ASSERT_OK(ledger->Close());
  meta::v1::LogMetadata log;
  log.set_epoch(1);
  meta::v1::LogSegment* s = log.add_segments();
  s->set_ledger_id(ledger->id());
  s->set_first_seqno(1);
  s->set_state(meta::v1::LogSegment::CLOSED);
  s->set_last_seqno(1);
  LKV_ASSERT_OK(StoreLog(*cluster_->store(), metadata::Keys(options_.cluster).Log("log-junk"), log,
                         metadata::kMustNotExist));
  auto read = ReadAll("log-junk", 1);
  EXPECT_EQ(read.status().code(), absl::StatusCode::kDataLoss) << read.status();
}

}  // namespace
}  // namespace ledgerkv::wal
