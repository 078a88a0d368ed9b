// Opening a log that another writer had: crash recovery, fencing of a live
// writer, and a writer whose ledger fails. Real bookies with fsync.
#include <algorithm>
#include <atomic>
#include <set>
#include <thread>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/synchronization/notification.h"
#include "wal/orphan_ledgers.h"
#include "wal/wal_test_util.h"

namespace ledgerkv::wal {
namespace {

using testing::ExpectContiguous;
using testing::RecordFor;

class LogRecoveryTest : public testing::WalTest {};

TEST_F(LogRecoveryTest, ReopenAfterCrashKeepsEveryAckedRecordAndContinuesSeqnos) {
  uint64_t max_acked = 0;
  {
    LKV_ASSIGN_OR_FAIL(auto writer, LogWriter::Open(options_, "log-crash"));
    for (auto& r : AppendAll(*writer, "a", 100)) {
      LKV_ASSERT_OK(r);
      max_acked = std::max(max_acked, *r);
    }
    // More records in flight when the writer dies without Close.
    absl::Mutex mu;
    for (int i = 100; i < 150; ++i) {
      writer->Append(RecordFor("a", i), [&](absl::StatusOr<uint64_t> r) {
        absl::MutexLock l(&mu);
        if (r.ok()) max_acked = std::max(max_acked, *r);
      });
    }
  }  // the destructor runs every callback (acked or CANCELLED)
  ASSERT_GE(max_acked, 100u);

  LKV_ASSIGN_OR_FAIL(auto writer, LogWriter::Open(options_, "log-crash"));
  EXPECT_EQ(writer->epoch(), 2u);
  const uint64_t last = writer->first_seqno() - 1;
  EXPECT_GE(last, max_acked) << "an acknowledged record was lost";
  EXPECT_LE(last, 150u);
  const meta::v1::LogMetadata log = writer->metadata();
  ASSERT_EQ(log.segments_size(), 2);
  EXPECT_EQ(log.segments(0).state(), meta::v1::LogSegment::CLOSED);
  EXPECT_EQ(log.segments(0).last_seqno(), last);
  EXPECT_EQ(log.segments(1).state(), meta::v1::LogSegment::OPEN);

  // Replay: everything below the new writer's first seqno is readable now.
  LKV_ASSIGN_OR_FAIL(auto reader, LogReader::Open(options_, "log-crash", 1));
  std::vector<LogRecord> replayed;
  LKV_ASSERT_OK(reader->ReadThrough(last, [&](const LogRecord& r) {
    replayed.push_back(r);
    return absl::OkStatus();
  }));
  ASSERT_EQ(replayed.size(), last);
  ExpectContiguous(replayed, 1);
  for (const LogRecord& r : replayed) EXPECT_EQ(r.data, RecordFor("a", r.seqno - 1));

  for (int i = 0; i < 20; ++i) {
    LKV_ASSIGN_OR_FAIL(uint64_t seqno, writer->AppendAndWait(RecordFor("b", i)));
    EXPECT_EQ(seqno, last + 1 + i);
  }
  LKV_ASSERT_OK(writer->Close());
  LKV_ASSIGN_OR_FAIL(auto all, ReadAll("log-crash", 0));
  ASSERT_EQ(all.size(), last + 20);
  ExpectContiguous(all, 1);
  EXPECT_EQ(all.back().data, RecordFor("b", 19));
}

TEST_F(LogRecoveryTest, SecondWriterFencesTheFirstWhoseNextAppendFails) {
  LKV_ASSIGN_OR_FAIL(auto a, LogWriter::Open(options_, "log-f"));
  for (auto& r : AppendAll(*a, "a", 50)) LKV_ASSERT_OK(r);

  LKV_ASSIGN_OR_FAIL(auto b, LogWriter::Open(options_, "log-f"));
  EXPECT_EQ(b->epoch(), 2u);
  EXPECT_EQ(b->first_seqno(), 51u);

  auto late = a->AppendAndWait("late");
  EXPECT_EQ(late.status().code(), absl::StatusCode::kFailedPrecondition) << late.status();
  EXPECT_EQ(late.status().message(), "log log-f fenced: another writer opened it (epoch 2)");
  // Permanent: later appends fail the same way, and so does Close.
  EXPECT_EQ(a->AppendAndWait("later").status(), late.status());
  EXPECT_EQ(a->Close(), late.status());

  for (auto& r : AppendAll(*b, "b", 20)) LKV_ASSERT_OK(r);
  LKV_ASSERT_OK(b->Close());
  LKV_ASSIGN_OR_FAIL(auto all, ReadAll("log-f", 0));
  ASSERT_EQ(all.size(), 70u);
  ExpectContiguous(all, 1);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(all[i].data, RecordFor("a", i));
  for (int i = 0; i < 20; ++i) EXPECT_EQ(all[50 + i].data, RecordFor("b", i));
}

// Recovering for reading (no writable bookie for a new ledger: a full
// disk) fences the writer like Open, finds the end of everything it had
// acknowledged, and creates nothing; a later Open continues after it.
TEST_F(LogRecoveryTest, RecoverForReadingFencesTheWriterFindsTheEndAndCreatesNoLedger) {
  LKV_ASSIGN_OR_FAIL(auto a, LogWriter::Open(options_, "log-r"));
  for (auto& r : AppendAll(*a, "a", 40)) LKV_ASSERT_OK(r);
  // Every bookie full: still there for fences and recovery, not for new
  // ledgers. Open fails and says why; RecoverForReading does not need one.
  for (int i = 0; i < cluster_->size(); ++i) LKV_ASSERT_OK(cluster_->SetRegisteredReadOnly(i, true));
  auto no_writer = LogWriter::Open(options_, "log-r");
  ASSERT_FALSE(no_writer.ok());
  EXPECT_EQ(no_writer.status().code(), absl::StatusCode::kUnavailable) << no_writer.status();
  EXPECT_TRUE(no_writer.status().GetPayload(LogWriter::kNoNewLedgerPayload).has_value())
      << no_writer.status();

  LKV_ASSIGN_OR_FAIL(LogWriter::Recovered rec, LogWriter::RecoverForReading(options_, "log-r"));
  EXPECT_EQ(rec.epoch, 3u);  // the failed Open raised it to 2
  EXPECT_EQ(rec.first_seqno, 1u);
  EXPECT_EQ(rec.last_seqno, 40u);
  auto late = a->AppendAndWait("late");
  EXPECT_EQ(late.status().code(), absl::StatusCode::kFailedPrecondition) << late.status();
  a.reset();
  // Nothing written back: one segment, still OPEN in the metadata (its
  // ledger is closed; the next Open recovers it again).
  LKV_ASSIGN_OR_FAIL(meta::v1::LogMetadata log, GetLogMetadata(options_, "log-r"));
  ASSERT_EQ(log.segments_size(), 1);
  EXPECT_EQ(log.segments(0).state(), meta::v1::LogSegment::OPEN);
  LKV_ASSIGN_OR_FAIL(auto all, ReadAll("log-r", 0));
  ASSERT_EQ(all.size(), 40u);
  ExpectContiguous(all, 1);

  for (int i = 0; i < cluster_->size(); ++i) LKV_ASSERT_OK(cluster_->SetRegisteredReadOnly(i, false));
  LKV_ASSIGN_OR_FAIL(auto b, LogWriter::Open(options_, "log-r"));
  EXPECT_EQ(b->epoch(), 4u);
  EXPECT_EQ(b->first_seqno(), 41u);
  for (auto& r : AppendAll(*b, "b", 5)) LKV_ASSERT_OK(r);
  LKV_ASSERT_OK(b->Close());
  LKV_ASSIGN_OR_FAIL(auto after, ReadAll("log-r", 0));
  ASSERT_EQ(after.size(), 45u);
  ExpectContiguous(after, 1);
}

// Dropping a range deletes its log while its owner (in cluster mode
// possibly another server that has not seen the drop yet) may still be
// writing: the owner must not get another record acknowledged into a log
// that is gone (a re-created table's new range would never see it).
TEST_F(LogRecoveryTest, DeletingALogFencesItsWriterBeforeAnythingIsDeleted) {
  LKV_ASSIGN_OR_FAIL(auto a, LogWriter::Open(options_, "log-drop"));
  for (auto& r : AppendAll(*a, "a", 30)) LKV_ASSERT_OK(r);
  const meta::v1::LogMetadata before = a->metadata();
  ASSERT_EQ(before.segments_size(), 1);

  LKV_ASSERT_OK(DeleteLog(options_, "log-drop"));
  auto late = a->AppendAndWait("late");
  EXPECT_FALSE(late.ok()) << "acknowledged as seqno " << *late << " after its log was deleted";
  // It learns it was fenced, as by a new owner.
  EXPECT_EQ(late.status().code(), absl::StatusCode::kFailedPrecondition) << late.status();
  EXPECT_FALSE(a->AppendAndWait("later").ok());
  EXPECT_EQ(GetLogMetadata(options_, "log-drop").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(client_->GetLedgerMetadata(before.segments(0).ledger_id()).status().code(),
            absl::StatusCode::kNotFound);
  a.reset();
  // Deleting again, or a log that never existed, is fine.
  LKV_ASSERT_OK(DeleteLog(options_, "log-drop"));
  LKV_ASSERT_OK(DeleteLog(options_, "log-never"));
}

// A delete cut short (here: no bookie answers, so the writer cannot be
// fenced) leaves the log marked deleting: nobody can open it again (a
// stale owner reopening it would otherwise recreate it, or race the
// delete), readers find it absent, and a retry finishes the delete.
TEST_F(LogRecoveryTest, AnInterruptedDeleteLeavesALogNobodyCanReopenAndARetryFinishesIt) {
  {
    LKV_ASSIGN_OR_FAIL(auto a, LogWriter::Open(options_, "log-cut"));
    for (auto& r : AppendAll(*a, "a", 10)) LKV_ASSERT_OK(r);
    // Dropped without a close: its segment stays OPEN.
  }
  for (int i = 0; i < cluster_->size(); ++i) cluster_->StopBookie(i);
  EXPECT_FALSE(DeleteLog(options_, "log-cut").ok());
  EXPECT_EQ(LogWriter::Open(options_, "log-cut").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(LogReader::Open(options_, "log-cut", 1).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(GetLogMetadata(options_, "log-cut").status().code(), absl::StatusCode::kNotFound);

  for (int i = 0; i < cluster_->size(); ++i) LKV_ASSERT_OK(cluster_->RestartBookie(i));
  // (Connections to the restarted bookies come back after gRPC's backoff.)
  absl::Status retried;
  for (const absl::Time give_up = absl::Now() + absl::Seconds(20); absl::Now() < give_up;) {
    retried = DeleteLog(options_, "log-cut");
    if (retried.ok()) break;
    absl::SleepFor(absl::Milliseconds(200));
  }
  LKV_ASSERT_OK(retried);
  EXPECT_TRUE(absl::IsNotFound(
      cluster_->store()->Get(metadata::Keys(options_.cluster).Log("log-cut")).status()));
  // Deleted for good, the name is free again.
  LKV_ASSIGN_OR_FAIL(auto fresh, LogWriter::Open(options_, "log-cut"));
  EXPECT_EQ(fresh->first_seqno(), 1u);
  LKV_ASSERT_OK(fresh->Close());
}

// docs/wal-format.md, "Orphan ledgers": a ledger an open or roll created
// and never got into its log (a crash before the segment CAS) is deleted
// once no CAS can add it any more (the log's epoch moved past it, or the
// log is gone), and not before; named ledgers, ledgers of other kinds and
// truncated ledgers awaiting deletion are never touched.
TEST_F(LogRecoveryTest, OrphanLedgersAreDeletedOnceTheirLogCanNoLongerNameThem) {
  auto crashed_roll = [&](const std::string& log, uint64_t epoch) -> uint64_t {
    ledger::CreateOptions create;
    create.ensemble_size = 3;
    create.write_quorum = 2;
    create.ack_quorum = 2;
    create.custom = {{"log", log}, {"log_epoch", absl::StrCat(epoch)}};
    auto w = options_.client->CreateLedger(create);
    EXPECT_TRUE(w.ok()) << w.status();
    return w.ok() ? (*w)->id() : 0;
  };
  auto exists = [&](uint64_t id) { return options_.client->GetLedgerMetadata(id).ok(); };

  LKV_ASSIGN_OR_FAIL(auto a, LogWriter::Open(options_, "log-orphans"));  // epoch 1
  for (auto& r : AppendAll(*a, "a", 5)) LKV_ASSERT_OK(r);
  const uint64_t orphan = crashed_roll("log-orphans", 1);
  const uint64_t of_deleted_log = crashed_roll("log-never-kept", 1);
  ledger::CreateOptions plain;
  plain.ensemble_size = 3;
  plain.write_quorum = 2;
  plain.ack_quorum = 2;
  plain.custom = {{"purpose", "snapshot"}};
  LKV_ASSIGN_OR_FAIL(auto other_kind, options_.client->CreateLedger(plain));

  // The writer at epoch 1 may still be rolling into `orphan`: kept. The
  // ledger of a log that does not exist goes.
  LKV_ASSIGN_OR_FAIL(OrphanLedgerSweep first, DeleteOrphanLedgers(options_));
  EXPECT_EQ(first.deleted, 1);
  EXPECT_EQ(first.waiting, 1);
  EXPECT_TRUE(exists(orphan));
  EXPECT_FALSE(exists(of_deleted_log));

  // A new owner (epoch 2): the epoch-1 writer can never add `orphan` now.
  a.reset();
  LKV_ASSIGN_OR_FAIL(auto b, LogWriter::Open(options_, "log-orphans"));
  for (auto& r : AppendAll(*b, "b", 5)) LKV_ASSERT_OK(r);
  LKV_ASSIGN_OR_FAIL(OrphanLedgerSweep second, DeleteOrphanLedgers(options_));
  EXPECT_EQ(second.deleted, 1);
  EXPECT_FALSE(exists(orphan));
  EXPECT_TRUE(exists(other_kind->id()));
  LKV_ASSIGN_OR_FAIL(meta::v1::LogMetadata log, GetLogMetadata(options_, "log-orphans"));
  ASSERT_EQ(log.segments_size(), 2);
  for (const auto& segment : log.segments()) EXPECT_TRUE(exists(segment.ledger_id()));
  // Every record is still readable.
  LKV_ASSERT_OK(b->Close());
  LKV_ASSIGN_OR_FAIL(auto reader, LogReader::Open(options_, "log-orphans", 1));
  int read = 0;
  LKV_ASSERT_OK(reader->ReadThrough(10, [&](const LogRecord&) {
    ++read;
    return absl::OkStatus();
  }));
  EXPECT_EQ(read, 10);
  EXPECT_EQ(second.waiting, 0);

  // An orphan at the log's current epoch waits; once the log is deleted
  // (DeleteLog: its named ledgers first, then the record) it goes too.
  const uint64_t late = crashed_roll("log-orphans", log.epoch());
  LKV_ASSIGN_OR_FAIL(OrphanLedgerSweep third, DeleteOrphanLedgers(options_));
  EXPECT_EQ(third.deleted, 0);
  EXPECT_EQ(third.waiting, 1);
  LKV_ASSERT_OK(DeleteLog(options_, "log-orphans"));
  LKV_ASSIGN_OR_FAIL(OrphanLedgerSweep fourth, DeleteOrphanLedgers(options_));
  EXPECT_EQ(fourth.deleted, 1);
  EXPECT_FALSE(exists(late));
  EXPECT_TRUE(exists(other_kind->id()));
}

// An open whose log record is deleted and created again (DeleteLog, then
// another open) between its epoch raise and its segment CAS gives up: the
// record it would CAS into is not the log it raised the epoch of, and its
// new ledger, tagged for the deleted log, is one the orphan sweep deletes.
TEST_F(LogRecoveryTest, AnOpenWhoseLogIsDeletedAndCreatedAgainMidwayGivesUp) {
  ledger::testing::FlakyStore store(cluster_->store());
  LogOptions o = options_;
  o.metadata = &store;
  const std::string key = metadata::Keys(o.cluster).Log("log-again");
  std::atomic<bool> armed{true};
  store.after_put = [&](std::string_view k) {
    // After the open's epoch raise created the record: the same content,
    // deleted and written again.
    if (k != key || !armed.exchange(false)) return;
    auto got = cluster_->store()->Get(key);
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_TRUE(cluster_->store()->Delete(key, got->version).ok());
    ASSERT_TRUE(cluster_->store()->Put(key, got->value, metadata::kMustNotExist).ok());
  };
  auto opened = LogWriter::Open(o, "log-again");
  EXPECT_FALSE(armed.load()) << "the hook never ran: the test proves nothing";
  EXPECT_TRUE(absl::IsAborted(opened.status())) << opened.status();
  LKV_ASSIGN_OR_FAIL(auto log, GetLogMetadata(options_, "log-again"));
  EXPECT_EQ(log.segments_size(), 0);
  // A fresh open works.
  store.after_put = nullptr;
  LKV_ASSIGN_OR_FAIL(auto again, LogWriter::Open(options_, "log-again"));
  LKV_ASSERT_OK(again->AppendAndWait("x"));
  LKV_ASSERT_OK(again->Close());
}

// A writer whose log record was deleted and created again at its epoch
// (DeleteLog, then another open: both start from epoch 1) is fenced at its
// next metadata change, even when the new record has the very content it
// had: it never closes, rolls or truncates a log it does not own.
TEST_F(LogRecoveryTest, AWriterWhoseLogWasDeletedAndCreatedAgainIsFenced) {
  LKV_ASSIGN_OR_FAIL(auto a, LogWriter::Open(options_, "log-reborn"));
  LKV_ASSERT_OK(a->AppendAndWait("a").status());
  const std::string key = metadata::Keys(options_.cluster).Log("log-reborn");
  auto got = cluster_->store()->Get(key);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_TRUE(cluster_->store()->Delete(key, got->version).ok());
  auto reborn = cluster_->store()->Put(key, got->value, metadata::kMustNotExist);
  ASSERT_TRUE(reborn.ok()) << reborn.status();
  absl::Status closed = a->Close();
  EXPECT_TRUE(absl::IsFailedPrecondition(closed)) << closed;
  auto after = cluster_->store()->Get(key);
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(after->version, *reborn) << "the stale writer changed the new record";
}

// A truncation that gave up on UNAVAILABLE while its write was still on
// its way, and landed later: the record at the writer's epoch then differs
// from what the writer knows, but it is the writer's own. Its next metadata
// change recognises it and goes on (it must not take itself for fenced).
TEST_F(LogRecoveryTest, AMetadataWriteThatLandedAfterItsCallGaveUpIsRecognisedAsOurs) {
  ledger::testing::FlakyStore store(cluster_->store());
  LogOptions o = options_;
  o.metadata = &store;
  o.metadata_retries = 3;
  // Two closed segments and an open one, without any roll in the
  // background (a roll's CAS would meet the held-back truncation).
  for (int i = 0; i < 2; ++i) {
    LKV_ASSIGN_OR_FAIL(auto earlier, LogWriter::Open(o, "log-late"));
    for (auto& r : AppendAll(*earlier, absl::StrCat("e", i), 5)) LKV_ASSERT_OK(r);
    LKV_ASSERT_OK(earlier->Close());
  }
  LKV_ASSIGN_OR_FAIL(auto w, LogWriter::Open(o, "log-late"));
  for (auto& r : AppendAll(*w, "w", 5)) LKV_ASSERT_OK(r);
  LKV_ASSIGN_OR_FAIL(auto before, GetLogMetadata(options_, "log-late"));
  ASSERT_EQ(before.segments_size(), 3);
  // Every attempt of the truncation's CAS is held back, UNAVAILABLE.
  store.defer_puts = o.metadata_retries;
  absl::Status truncated = w->Truncate(before.segments(1).first_seqno());
  EXPECT_TRUE(absl::IsUnavailable(truncated)) << truncated;
  store.defer_puts = 0;
  // ...then the first lands (the others expected the same version: refused).
  std::vector<absl::Status> late = store.ApplyDeferredPuts();
  ASSERT_EQ(late.size(), static_cast<size_t>(o.metadata_retries));
  LKV_ASSERT_OK(late[0]);
  LKV_ASSIGN_OR_FAIL(auto landed, GetLogMetadata(options_, "log-late"));
  ASSERT_EQ(landed.segments_size(), before.segments_size() - 1) << "the late write did not land";
  // The writer still works, and its close keeps what the late write did.
  LKV_ASSERT_OK(w->AppendAndWait("after").status());
  LKV_ASSERT_OK(w->Close());
  LKV_ASSIGN_OR_FAIL(auto closed, GetLogMetadata(options_, "log-late"));
  EXPECT_EQ(closed.segments(0).first_seqno(), before.segments(1).first_seqno());
  EXPECT_EQ(closed.segments(closed.segments_size() - 1).state(), meta::v1::LogSegment::CLOSED);
}

TEST_F(LogRecoveryTest, WriterFencedMidStreamNeverAcksAgainAndLeavesNoDuplicateSeqnos) {
  LKV_ASSIGN_OR_FAIL(auto a, LogWriter::Open(options_, "log-busy"));
  absl::Mutex mu;
  std::vector<absl::StatusOr<uint64_t>> a_results;  // in callback order
  std::atomic<bool> stop{false};
  std::thread appender([&] {
    for (int i = 0; !stop.load(); ++i) {
      a->Append(RecordFor("a", i), [&](absl::StatusOr<uint64_t> r) {
        absl::MutexLock l(&mu);
        a_results.push_back(std::move(r));
      });
      if (i % 16 == 15) absl::SleepFor(absl::Microseconds(500));
    }
  });
  {
    absl::MutexLock l(&mu);
    auto some = [&]() { return a_results.size() >= 200; };
    mu.Await(absl::Condition(&some));
  }
  LKV_ASSIGN_OR_FAIL(auto b, LogWriter::Open(options_, "log-busy"));
  // A finds out at its next entry.
  {
    absl::MutexLock l(&mu);
    auto failed = [&]() { return !a_results.back().ok(); };
    mu.Await(absl::Condition(&failed));
  }
  stop = true;
  appender.join();
  a.reset();  // runs every remaining callback

  uint64_t a_acked = 0;
  bool seen_error = false;
  for (const auto& r : a_results) {
    if (r.ok()) {
      ASSERT_FALSE(seen_error) << "seqno " << *r << " acknowledged after a failure";
      ASSERT_EQ(*r, a_acked + 1);
      a_acked = *r;
    } else {
      if (!seen_error) {
        EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition) << r.status();
        EXPECT_EQ(r.status().message(), "log log-busy fenced: another writer opened it (epoch 2)");
      }
      seen_error = true;
    }
  }
  ASSERT_GE(a_acked, 200u);
  EXPECT_GT(b->first_seqno(), a_acked);

  for (auto& r : AppendAll(*b, "b", 30)) LKV_ASSERT_OK(r);
  LKV_ASSERT_OK(b->Close());
  LKV_ASSIGN_OR_FAIL(auto all, ReadAll("log-busy", 0));
  ExpectContiguous(all, 1);  // unique, strictly increasing seqnos
  ASSERT_EQ(all.size(), b->first_seqno() - 1 + 30);
  for (const LogRecord& r : all) {
    if (r.seqno < b->first_seqno()) {
      EXPECT_EQ(r.data, RecordFor("a", r.seqno - 1)) << "seqno " << r.seqno;
    } else {
      EXPECT_EQ(r.data, RecordFor("b", r.seqno - b->first_seqno())) << "seqno " << r.seqno;
    }
  }
}

TEST_F(LogRecoveryTest, LedgerWriteFailureFailsPendingAndLaterAppendsAndAcksNothingMore) {
  options_.ensemble_size = 3;
  options_.write_quorum = 3;
  options_.ack_quorum = 3;
  LKV_ASSIGN_OR_FAIL(auto writer, LogWriter::Open(options_, "log-down"));
  for (auto& r : AppendAll(*writer, "a", 10)) LKV_ASSERT_OK(r);
  // No spare bookie: the ledger writer cannot replace the stopped one.
  cluster_->StopBookie(0);
  auto results = AppendAll(*writer, "lost", 20);
  for (const auto& r : results) {
    EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable) << r.status();
  }
  auto later = writer->AppendAndWait("later");
  EXPECT_EQ(later.status().code(), absl::StatusCode::kUnavailable) << later.status();
  EXPECT_EQ(writer->stats().records, 10);
  writer.reset();

  LKV_ASSERT_OK(cluster_->RestartBookie(0));
  // The client reconnects to the restarted bookie after a short backoff;
  // until then recovery (which must write to it) fails and is retried, as a
  // range owner would.
  absl::StatusOr<std::unique_ptr<LogWriter>> reopened;
  for (int attempt = 0; attempt < 50; ++attempt) {
    reopened = LogWriter::Open(options_, "log-down");
    if (!absl::IsUnavailable(reopened.status())) break;
    absl::SleepFor(absl::Milliseconds(100));
  }
  LKV_ASSIGN_OR_FAIL(auto next, std::move(reopened));
  EXPECT_GE(next->first_seqno(), 11u);
  LKV_ASSIGN_OR_FAIL(auto all, ReadAll("log-down", 0));
  ASSERT_EQ(all.size(), next->first_seqno() - 1);
  ExpectContiguous(all, 1);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(all[i].data, RecordFor("a", i));
}

TEST_F(LogRecoveryTest, FailedOpenWithBadQuorumsDoesNotFenceTheCurrentWriter) {
  LKV_ASSIGN_OR_FAIL(auto writer, LogWriter::Open(options_, "log-q"));
  LogOptions bad = options_;
  bad.write_quorum = 4;
  EXPECT_EQ(LogWriter::Open(bad, "log-q").status().code(), absl::StatusCode::kInvalidArgument);
  // Quorums that hold but an ensemble no ledger may have: refused before
  // the epoch is raised too, not after the current writer was fenced.
  bad = options_;
  bad.ensemble_size = 65;
  EXPECT_EQ(LogWriter::Open(bad, "log-q").status().code(), absl::StatusCode::kInvalidArgument);
  // Records the ledger could not take as one entry.
  bad = options_;
  bad.max_record_bytes = client_->max_entry_bytes();
  const absl::Status too_big = LogWriter::Open(bad, "log-q").status();
  EXPECT_EQ(too_big.code(), absl::StatusCode::kInvalidArgument) << too_big;
  EXPECT_TRUE(absl::StrContains(too_big.message(), "max_entry_bytes")) << too_big;
  LKV_ASSIGN_OR_FAIL(auto log, GetLogMetadata(options_, "log-q"));
  EXPECT_EQ(log.epoch(), 1u);
  LKV_ASSERT_OK(writer->AppendAndWait("still the owner"));
}

TEST_F(LogRecoveryTest, ARollWhoseReplyWasLostLeavesItsLedgerToTheNextOwner) {
  // Writer A rolls; its segment switch lands in the store but the reply is
  // lost. Before A learns anything, B opens the log: B raises the epoch and
  // will recover the ledger the switch named. A's reread finds itself
  // fenced. A must not delete that ledger: B's recovery would fail with
  // DATA_LOSS, and so would every later open of the log.
  ledger::testing::FlakyStore a_store(cluster_->store());
  ledger::testing::FlakyStore b_store(cluster_->store());
  LogOptions a_options = options_;
  a_options.metadata = &a_store;
  a_options.roll_bytes = 4096;
  LogOptions b_options = options_;
  b_options.metadata = &b_store;
  LKV_ASSIGN_OR_FAIL(auto a, LogWriter::Open(a_options, "log-r"));

  absl::Notification b_raised;
  absl::Notification a_failed;
  absl::StatusOr<std::unique_ptr<LogWriter>> b = absl::UnknownError("not opened");
  std::thread b_thread;
  b_store.after_put = [&](std::string_view) {
    if (b_raised.HasBeenNotified()) return;
    b_raised.Notify();  // B's epoch is raised; it recovers once A is done
    a_failed.WaitForNotificationWithTimeout(absl::Seconds(30));
  };
  std::atomic<bool> armed{true};
  a_store.lose_put_replies = 1;  // A's next Put is its roll's switch
  a_store.after_put = [&](std::string_view) {
    if (!armed.exchange(false)) return;
    b_thread = std::thread([&] { b = LogWriter::Open(b_options, "log-r"); });
    b_raised.WaitForNotification();
  };

  absl::Cleanup join_b = [&] {
    if (!a_failed.HasBeenNotified()) a_failed.Notify();
    if (b_thread.joinable()) b_thread.join();
  };

  // Waves of records until A rolls and fails: every record before the
  // failure is acknowledged, none after it.
  constexpr int64_t kPerWave = 20;
  uint64_t acked = 0;
  bool failed = false;
  for (int wave = 0; wave < 200 && !failed; ++wave) {
    for (const auto& r : AppendAll(*a, absl::StrCat("w", wave), kPerWave)) {
      if (!r.ok()) {
        failed = true;
      } else {
        EXPECT_FALSE(failed) << "an ack after a failure";
        EXPECT_EQ(*r, acked + 1);
        acked = *r;
      }
    }
  }
  ASSERT_TRUE(failed) << "A never rolled";
  ASSERT_GT(acked, 0u);
  // The ledger the landed switch named (B has loaded it as OPEN).
  LKV_ASSIGN_OR_FAIL(auto log, GetLogMetadata(options_, "log-r"));
  ASSERT_GE(log.segments_size(), 2);
  const uint64_t named = log.segments(log.segments_size() - 1).ledger_id();
  // A deleted it within moments, when it did.
  const absl::Time until = absl::Now() + absl::Seconds(2);
  while (absl::Now() < until && !absl::IsNotFound(client_->GetLedgerMetadata(named).status())) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  a_failed.Notify();
  b_thread.join();
  ASSERT_TRUE(b.ok()) << b.status();
  LKV_ASSERT_OK((*b)->AppendAndWait("b"));
  LKV_ASSERT_OK((*b)->Close());  // its last record becomes readable

  // Every record A had acknowledged is in the log, in order, then B's.
  LKV_ASSIGN_OR_FAIL(auto all, ReadAll("log-r", 1));
  ASSERT_EQ(all.size(), acked + 1);
  ExpectContiguous(all, 1);
  for (uint64_t s = 1; s <= acked; ++s) {
    EXPECT_EQ(all[s - 1].data, testing::WaveRecordFor(s, kPerWave, 64));
  }
  EXPECT_EQ(all.back().data, "b");
}

}  // namespace
}  // namespace ledgerkv::wal
