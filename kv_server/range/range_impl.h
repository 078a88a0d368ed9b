// RangeImpl: the Range behind Range::Open (docs/range-server.md). The
// sequencer (Execute), the apply path (OnLogDone), log failure (Fail), the
// snapshot policy thread and Close live in range_impl.cc; recovery in
// range_open.cc.
//
// Threads:
//  - callers of the write methods run the sequencer under mu_ and append to
//    the log under mu_ (so revision order is seqno order);
//  - the log writer's delivering thread (for acknowledgements, the thread
//    that delivers the ledger writer's callbacks, wal/log_writer.h; one at a
//    time) runs OnLogDone for each acknowledged record (it only notes the
//    write as acknowledged) and ApplyAcknowledged after each run of them:
//    applies the run's effects in one RocksDB write (outside mu_; only the
//    delivering thread writes RocksDB once serving), then drops the
//    overlay entries under mu_, then answers, with no lock;
//  - the policy thread takes snapshots and truncates the log;
//  - the notifier thread calls options.on_failed once, with no lock held.
// Lock order: close_mu_, then snapshot_mu_, then mu_. The log writer's and
// the local store's own locks come after mu_.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "kv_server/range/local_store.h"
#include "kv_server/range/range.h"
#include "kv_server/range/validate.h"
#include "kv_server/range/write_view.h"
#include "proto/range.pb.h"
#include "snapshot/snapshot_store.h"
#include "wal/log_writer.h"

namespace ledgerkv::kv {

// What Open found and did, for stats().
struct RecoveryInfo {
  std::string recovered_from;
  int64_t replayed_records = 0;
  uint64_t snapshot_seqno = 0;
  // Snapshots that failed to restore (corrupt newest, fell back).
  int64_t restore_failures = 0;
  // Range::OpenForReads (no writer): the log as recovered, and why no
  // writer could be opened.
  uint64_t log_last_seqno = 0;
  uint64_t log_first_seqno = 0;
  uint64_t epoch = 0;
  absl::Status why_reads_only;
};

class RangeImpl final : public Range {
 public:
  // Starts serving over recovered parts (range_open.cc builds them).
  // Without a writer (recovery.reads_only, Range::OpenForReads) it answers
  // reads only, from the start: ServingReadsOnly.
  RangeImpl(const RangeOptions& options, const RangeDescriptor& descriptor,
            std::unique_ptr<wal::LogWriter> writer, std::unique_ptr<LocalStore> local,
            std::unique_ptr<snapshot::SnapshotStore> snapshots, RecoveryInfo recovery);
  ~RangeImpl() override;

  void Put(const ledgerkv::v1::PutRequest& request,
           Callback<ledgerkv::v1::PutResponse> done) override;
  void Delete(const ledgerkv::v1::DeleteRequest& request,
              Callback<ledgerkv::v1::DeleteResponse> done) override;
  void Txn(const ledgerkv::v1::TxnRequest& request,
           Callback<ledgerkv::v1::TxnResponse> done) override;
  void Increment(const ledgerkv::v1::IncrementRequest& request,
                 Callback<ledgerkv::v1::IncrementResponse> done) override;
  absl::StatusOr<ledgerkv::v1::GetResponse> Get(const ledgerkv::v1::GetRequest& request) override;
  absl::StatusOr<ScanResult> Scan(const ScanSpec& spec) override;
  absl::Status Close() override;
  absl::Status SnapshotNow() override;
  bool ServingReadsOnly() const override;
  const RangeDescriptor& descriptor() const override { return descriptor_; }
  RangeStats stats() const override;

 private:
  // Answers one request: OK sends its prepared response, an error is sent
  // as is.
  using Answer = std::function<void(const absl::Status&)>;

  // A write appended to the log and not yet applied.
  struct PendingWrite {
    uint64_t id = 0;  // the id-th append of this owner: seqno first_seqno + id - 1
    range::v1::Effect effect;
    // The effect's change of key_count and bytes, known from evaluation:
    // saves the apply path a read of every changed key.
    StatsDelta delta;
    int64_t record_bytes = 0;
    Answer answer;
    // Requests that changed nothing, answered right after this write.
    std::vector<Answer> followers;
  };

  // The sequencer: runs `evaluate` against the pending view under mu_.
  // A change is appended to the log; no change (or an error of
  // `evaluate`) is answered once every earlier pending write is applied.
  // `set_header` stamps the revision into the response.
  template <typename Response>
  void Execute(Callback<Response> done,
               const std::function<absl::Status(WriteView&, Response*)>& evaluate);

  // The log's verdict on write `id` (one thread at a time, seqno order). An
  // acknowledged write joins acknowledged_; an error applies those first,
  // then fails the range.
  void OnLogDone(uint64_t id, absl::StatusOr<uint64_t> seqno);
  // Applies acknowledged_ in one LocalStore::Apply, drops their overlay
  // entries, answers them and their followers (after each run of log
  // callbacks, on the thread that ran them).
  void ApplyAcknowledged();
  // The log (or the local DB) failed for good: every pending and later
  // write fails with UNAVAILABLE; on_failed is called once.
  // `log_failure`: the log failed (not the local DB, not an internal
  // check); unless it was fenced, reads are still answered afterwards.
  void Fail(const absl::Status& cause, bool log_failure = false) ABSL_LOCKS_EXCLUDED(mu_);

  // Non-OK when the range takes no more requests (closing, or failed).
  absl::Status RefusalLocked() const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Failed, still answering reads (ServingReadsOnly), not closing.
  bool ServingReadsOnlyLocked() const ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return failed_ && reads_after_failure_ && !closing_;
  }
  absl::Status CheckReadable(ledgerkv::v1::ReadConsistency consistency) const;

  void PolicyLoop();
  bool PolicyWakeLocked() const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // PolicyWakeLocked, or a write not yet in a snapshot.
  bool PolicyWakeOrWriteLocked() const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Takes a snapshot and truncates the log; a failure is logged to stderr
  // and counted, and the policy waits for the next threshold.
  absl::Status TakeSnapshotLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(snapshot_mu_);
  absl::Status SnapshotAndTruncateLocked(int64_t bytes_mark)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(snapshot_mu_);
  void NotifierLoop();
  void StopThreads() ABSL_LOCKS_EXCLUDED(mu_);

  // Constant after construction.
  const RangeOptions options_;
  const RangeDescriptor descriptor_;
  const RequestValidator validator_;
  // Set until the destructor, which resets it first (its callbacks use the
  // local store). Null for a range opened for reads only.
  std::unique_ptr<wal::LogWriter> writer_;
  const std::unique_ptr<LocalStore> local_;
  const std::unique_ptr<snapshot::SnapshotStore> snapshots_;
  const RecoveryInfo recovery_;
  const uint64_t first_seqno_;

  // Serialises Close.
  absl::Mutex close_mu_ ABSL_ACQUIRED_BEFORE(snapshot_mu_);
  bool closed_ ABSL_GUARDED_BY(close_mu_) = false;
  absl::Status close_status_ ABSL_GUARDED_BY(close_mu_);

  // Serialises snapshots (policy thread, SnapshotNow) with each other and
  // with the end of Close.
  absl::Mutex snapshot_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  bool db_closed_ ABSL_GUARDED_BY(snapshot_mu_) = false;
  // False once a snapshot was refused because the meta's key count differs
  // from the data: later snapshots leave the count out of their header.
  bool key_count_trusted_ ABSL_GUARDED_BY(snapshot_mu_) = true;

  mutable absl::Mutex mu_;
  // The pending view: newest unapplied state of every key a pending write
  // changed. An entry leaves once the write that set it is applied.
  PendingOverlay overlay_ ABSL_GUARDED_BY(mu_);
  std::deque<std::shared_ptr<PendingWrite>> pending_ ABSL_GUARDED_BY(mu_);
  // Log callbacks only (one at a time): the writes the log acknowledged in the current
  // run of callbacks, not yet applied; always the front of pending_ (until
  // a failure empties pending_), with their seqnos.
  std::vector<std::pair<std::shared_ptr<PendingWrite>, uint64_t>> acknowledged_;
  // Requests answered from the pending view while nothing was pending are
  // answered inline; these counters are for revisions and appends.
  int64_t last_revision_ ABSL_GUARDED_BY(mu_);
  uint64_t next_write_id_ ABSL_GUARDED_BY(mu_) = 1;
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
  bool failed_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status failure_ ABSL_GUARDED_BY(mu_);
  // Failed, but reads are still answered (ServingReadsOnly).
  bool reads_after_failure_ ABSL_GUARDED_BY(mu_) = false;
  bool destroying_ ABSL_GUARDED_BY(mu_) = false;
  bool notify_failed_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_threads_ ABSL_GUARDED_BY(mu_) = false;
  // Snapshot policy.
  int64_t applied_bytes_ ABSL_GUARDED_BY(mu_) = 0;  // record bytes applied by this owner
  int64_t bytes_at_snapshot_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t applied_seqno_ ABSL_GUARDED_BY(mu_);
  uint64_t snapshot_seqno_ ABSL_GUARDED_BY(mu_);
  absl::Time last_snapshot_time_ ABSL_GUARDED_BY(mu_);
  int64_t snapshots_taken_ ABSL_GUARDED_BY(mu_) = 0;
  // The log's first seqno, refreshed after each truncation (stats() must
  // not wait for a truncation in progress).
  uint64_t log_first_seqno_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t snapshot_failures_ ABSL_GUARDED_BY(mu_) = 0;

  std::thread policy_thread_;
  std::thread notifier_thread_;
};

}  // namespace ledgerkv::kv
