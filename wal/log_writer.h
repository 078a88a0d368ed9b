// LogWriter: the single writer of a write-ahead log made of a chain of
// ledgers (ARCHITECTURE.md section 5; docs/wal-format.md).
//
//   auto writer = LogWriter::Open(options, "range-7");   // fences the old writer
//   (*writer)->Append(effect, [](absl::StatusOr<uint64_t> seqno) { ... });
//   (*writer)->Truncate(snapshot_seqno);
//   (*writer)->Close();
//
// Records get seqnos 1, 2, 3, ... over the whole life of the log, assigned
// here in Append call order, contiguous across writers (a new writer
// continues after the last record the old one got into the log). Records
// are group-committed: many go into one ledger entry, and many entries are
// in flight at once. A record is acknowledged only when its entry is.
//
// Threading: every method is thread-safe. Callbacks run one at a time, in
// seqno order, never under a lock of the writer: acknowledgements on the
// thread that delivers the ledger writer's callbacks (a bookie connection's
// or the ledger writer's own; ledger/ledger_writer.h) right after the
// entry's ack (no thread hand-off on the write path), errors on the
// writer's delivery thread (and any run that
// arrives while another is being delivered, after it). They may call
// Append, but not Close, Truncate or the destructor, and must not block for
// long (they hold up the ledger's next acknowledgements).
// Blocking methods (Open, AppendAndWait, Truncate, Close, the destructor)
// must not be called from gRPC callbacks or ledger writer callbacks.
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
#include "ledger/ledger_writer.h"
#include "metadata/metadata_store.h"
#include "proto/metadata.pb.h"
#include "wal/batch_format.h"
#include "wal/log_options.h"

namespace ledgerkv::wal {

struct LogWriterStats {
  int64_t records = 0;  // records acknowledged
  int64_t entries = 0;  // ledger entries (batches) acknowledged
  int64_t rolls = 0;    // ledgers started by rolling (not counting the first)
};

class LogWriter {
 public:
  using AppendCallback = std::function<void(absl::StatusOr<uint64_t> seqno)>;

  // Opens log `name` for writing, creating it if it does not exist:
  //  1. raises the epoch by CAS;
  //  2. recovers (fences and closes) the previous writer's OPEN ledger and
  //     records its last seqno, read from its last entry;
  //  3. creates a new ledger and CAS-appends it as the OPEN segment.
  // From then on the previous writer cannot get another record
  // acknowledged. Its records that were acknowledged are all in the log;
  // records whose outcome it never learned may or may not be.
  // Errors: INVALID_ARGUMENT (options, name); ABORTED "log <name> ...
  // opened concurrently" if another writer raised the epoch during this
  // open (it won; this one must not write); UNAVAILABLE (bookies or store
  // unreachable: retry, the epoch stays raised); DATA_LOSS if the metadata
  // or the recovered ledger's last entry is corrupt.
  static absl::StatusOr<std::unique_ptr<LogWriter>> Open(const LogOptions& options,
                                                         std::string name);

  // The payload (absl::Status::GetPayload) Open sets on its error when the
  // log was recovered but no new ledger could be created (no writable
  // bookie): the case RecoverForReading is for.
  static constexpr char kNoNewLedgerPayload[] = "ledgerkv-log-no-new-ledger";

  // What RecoverForReading found.
  struct Recovered {
    uint64_t first_seqno = 1;  // the first segment's first seqno (1 without one)
    uint64_t last_seqno = 0;   // its last record (0: none)
    uint64_t epoch = 0;        // the epoch this recovery raised the log to
  };
  // Steps 1 and 2 of Open without step 3: raises the epoch (fencing the
  // current writer) and recovers the ledgers of OPEN segments, but creates
  // no ledger, so it needs no writable bookie. Records 1..last_seqno are
  // then final until the next Open: a reader may serve the log's whole
  // state while no writer can be opened (a full disk). The metadata keeps
  // the recovered segments OPEN; the next Open recovers them again (their
  // ledgers are closed by then). Errors as Open's.
  static absl::StatusOr<Recovered> RecoverForReading(const LogOptions& options,
                                                     const std::string& name);

  // Stops without closing the log, as a crash would: records not yet
  // acknowledged fail with CANCELLED (they may still be in the log), every
  // callback runs before this returns. The next Open recovers the ledger.
  ~LogWriter();

  LogWriter(const LogWriter&) = delete;
  LogWriter& operator=(const LogWriter&) = delete;

  const std::string& name() const { return name_; }
  // The epoch this writer raised the log to.
  uint64_t epoch() const { return epoch_; }
  // The seqno of this writer's first record: the log's last seqno at Open
  // plus one. Replay after recovery reads up to first_seqno() - 1.
  uint64_t first_seqno() const { return first_seqno_; }

  // Assigns `record` the next seqno and queues it. `done` receives the
  // seqno once the entry holding it is durable on Qa bookies, or an error:
  //   FAILED_PRECONDITION "log <name> fenced: another writer opened it
  //     (epoch N)": a newer writer took the log over. The KV server maps
  //     this to UNAVAILABLE and gives the range up;
  //   FAILED_PRECONDITION "log <name> is closed": appended after Close
  //     began (no seqno is assigned; as for INVALID_ARGUMENT below, this
  //     callback may run before those of earlier records, which Close
  //     still completes);
  //   UNAVAILABLE: the ledger could not be written (bookies lost and not
  //     replaceable, metadata store unreachable);
  //   CANCELLED: the writer was destroyed first;
  //   INVALID_ARGUMENT: record larger than options.max_record_bytes (no
  //     seqno is assigned; this callback may run before those of earlier
  //     records, and the writer stays usable).
  // Every error but INVALID_ARGUMENT and "is closed" is permanent: this and
  // every pending and later record fail with it, and nothing is
  // acknowledged again. A
  // failed record's outcome is unknown: a later Open may find it in the log.
  // Callbacks run in seqno order, each exactly once.
  void Append(std::string record, AppendCallback done);

  // Blocking Append. REQUIRES: not called from a callback.
  absl::StatusOr<uint64_t> AppendAndWait(std::string record);

  // `hook` runs on the delivering thread after each run of callbacks (a run
  // is every callback queued when the thread woke: typically the records
  // of one or more acknowledged entries), before Close or the destructor
  // can see the run as delivered. A caller that defers work in its
  // callbacks does it there once per run; the KV range applies the run's
  // records to RocksDB in one write. Same rules as a callback.
  // REQUIRES: called before the first Append.
  void SetRunEndHook(std::function<void()> hook);

  // Removes from the log every whole segment whose records are all below
  // `seqno` (metadata CAS first), then deletes their ledgers. The last
  // segment is never removed, so records >= seqno, and some below it, stay
  // readable. Returns OK when the metadata changed and the ledgers are gone.
  // Errors: the fenced error above if another writer opened the log;
  // UNAVAILABLE if the store or a ledger deletion failed (the segments
  // already removed stay removed; the next Truncate retries the
  // deletions).
  absl::Status Truncate(uint64_t seqno);

  // Flushes and waits for every pending record, closes the ledger and marks
  // its segment CLOSED by CAS. Later appends fail with FAILED_PRECONDITION.
  // Returns the writer's error if it failed before (fenced: the next writer
  // owns the log; UNAVAILABLE: the next Open recovers the ledger).
  // Idempotent. REQUIRES: not called from a callback.
  absl::Status Close();

  LogWriterStats stats() const;
  // The log metadata as this writer last wrote or read it.
  meta::v1::LogMetadata metadata() const;

 private:
  // A cut batch: one ledger entry.
  struct Batch {
    uint64_t first_seqno = 0;
    uint64_t last_seqno = 0;
    std::string payload;  // moved out when sent
    std::vector<AppendCallback> callbacks;
  };
  struct Delivery {
    AppendCallback done;
    absl::StatusOr<uint64_t> result;
  };

  LogWriter(const LogOptions& options, std::string name, uint64_t epoch,
            meta::v1::LogMetadata metadata, metadata::Version version,
            std::unique_ptr<ledger::LedgerWriter> ledger);

  // Batching and sending (all under mu_).
  void MaybeCutLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CutLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PumpLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void OnEntryDone(uint64_t generation, absl::StatusOr<int64_t> entry) ABSL_LOCKS_EXCLUDED(mu_);
  // Queues the entry's record deliveries and names the ledger writer that
  // acknowledged it; false if it delivered nothing.
  bool QueueAckedEntry(uint64_t generation, absl::StatusOr<int64_t> entry,
                       ledger::LedgerWriter** acked_by) ABSL_LOCKS_EXCLUDED(mu_);
  // Runs the queued deliveries on the calling thread unless a run is being
  // delivered already.
  void DeliverInline() ABSL_LOCKS_EXCLUDED(mu_);
  // Takes every queued delivery as the next run (and the hook to end it).
  void TakeRunLocked(std::deque<Delivery>* run, std::function<void()>* run_end)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RunDeliveries(std::deque<Delivery> run, const std::function<void()>& run_end)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Fails every record not yet acknowledged (in seqno order) and every
  // later one with `status`, for good.
  void FailLocked(absl::Status status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // The control thread: delayed cuts, rolls, turning a ledger failure into
  // the log's error.
  void ControlLoop();
  bool ControlWorkLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool RollDueLocked(absl::Time now) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Time NextTimerLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Roll() ABSL_LOCKS_EXCLUDED(mu_, meta_mu_);
  // The log error for a failed ledger write (reads the log epoch when the
  // ledger was fenced).
  absl::Status LogErrorFor(const absl::Status& ledger_error, uint64_t ledger_id)
      ABSL_LOCKS_EXCLUDED(mu_, meta_mu_);
  void DeliveryLoop();

  // Changes `log` in place; returns whether it changed anything.
  using MetadataMutation = std::function<absl::StatusOr<bool>(meta::v1::LogMetadata& log)>;
  // Applies `mutate` to the log metadata and writes it by CAS, re-reading
  // and re-applying after a lost race that kept the epoch; the fenced error
  // if the epoch moved. `*unknown_outcome` (if given) is set when a write
  // failed without saying whether it was applied (UNAVAILABLE).
  absl::Status UpdateMetadataLocked(const MetadataMutation& mutate,
                                    bool* unknown_outcome = nullptr)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(meta_mu_);

  // Constant after construction.
  const LogOptions options_;
  const std::string name_;
  const std::string key_;
  const uint64_t epoch_;
  const uint64_t first_seqno_;

  // Serialises log metadata changes (roll, truncate, close).
  // Lock order: meta_mu_, then mu_.
  mutable absl::Mutex meta_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  meta::v1::LogMetadata meta_ ABSL_GUARDED_BY(meta_mu_);
  metadata::Version meta_version_ ABSL_GUARDED_BY(meta_mu_);
  // Metadata this writer tried to store without learning whether it landed
  // (UpdateMetadataLocked gave up on UNAVAILABLE), since its last settled
  // write: the only records at its epoch that are its own without being
  // meta_ (docs/wal-format.md, "A CAS that lost at the writer's own epoch").
  std::vector<meta::v1::LogMetadata> unsettled_ ABSL_GUARDED_BY(meta_mu_);

  mutable absl::Mutex mu_;
  // The current ledger; replaced by Roll. Batches are sent to it only.
  std::shared_ptr<ledger::LedgerWriter> ledger_ ABSL_GUARDED_BY(mu_);
  uint64_t ledger_generation_ ABSL_GUARDED_BY(mu_) = 1;
  int64_t ledger_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t ledger_entries_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time ledger_started_ ABSL_GUARDED_BY(mu_);
  // The open batch: records are added until it is cut.
  BatchBuilder builder_ ABSL_GUARDED_BY(mu_);
  std::vector<AppendCallback> open_callbacks_ ABSL_GUARDED_BY(mu_);
  absl::Time open_since_ ABSL_GUARDED_BY(mu_);
  std::deque<Batch> waiting_ ABSL_GUARDED_BY(mu_);    // cut, not sent
  std::deque<Batch> in_flight_ ABSL_GUARDED_BY(mu_);  // sent, in seqno order
  uint64_t last_acked_seqno_ ABSL_GUARDED_BY(mu_);
  // A ledger write failed; the control thread turns it into error_.
  absl::Status ledger_error_ ABSL_GUARDED_BY(mu_);
  // Permanent: set once, every later Append fails with it.
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  bool rolling_ ABSL_GUARDED_BY(mu_) = false;
  // A roll is switching ledgers: nothing is sent until it is done.
  bool cutover_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time next_roll_attempt_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  // The deadline the control thread is sleeping until; a state change that
  // brings the next timer earlier (a first entry in a fresh ledger, a new
  // open batch) wakes it so the new deadline is taken.
  absl::Time control_deadline_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::deque<Delivery> deliveries_ ABSL_GUARDED_BY(mu_);
  bool delivering_ ABSL_GUARDED_BY(mu_) = false;  // callbacks running
  std::function<void()> run_end_hook_ ABSL_GUARDED_BY(mu_);
  bool delivery_stop_ ABSL_GUARDED_BY(mu_) = false;
  LogWriterStats stats_ ABSL_GUARDED_BY(mu_);

  std::thread control_thread_;
  std::thread delivery_thread_;
};

// Deletes log `name` and its ledgers for good (a dropped range), fencing
// its writer first, wherever it runs: raises the epoch and marks the log
// deleting in one CAS (the writer's next roll, close or truncate fails; no
// Open succeeds again; readers see NOT_FOUND), recovers the OPEN segment's
// ledger (its next add fails: no record is acknowledged after this
// returns), then deletes every ledger the log names or still lists for
// deletion, then the log itself at the version this call wrote. OK if the
// log does not exist. Errors leave the log marked deleting for the caller
// to retry: UNAVAILABLE (bookies or store), ABORTED if the log kept
// changing.
absl::Status DeleteLog(const LogOptions& options, const std::string& name);

}  // namespace ledgerkv::wal
