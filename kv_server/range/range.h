// One key range of a table, owned by this process: its log (wal/), its
// snapshots (snapshot/), its local RocksDB, the sequencer and the apply
// path. Design and formats: docs/range-server.md.
//
// Threading: every method is thread-safe. Write methods never block: they
// queue the request and call `done` later (on the log's delivering thread, or
// inline for a request refused before it reaches the log); `done` must not
// block. Read methods read local RocksDB only (no network), so a gRPC
// reaction may call them. Open and Close block (network, disk).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "kv_server/range/limits.h"
#include "proto/kv.pb.h"
#include "snapshot/snapshot_options.h"
#include "wal/log_options.h"

namespace ledgerkv::wal {
class LogWriter;
}

namespace ledgerkv::kv {

// What the range covers: keys in [start, end) of `table`; an empty `end` is
// the end of the key space.
struct RangeDescriptor {
  uint64_t range_id = 0;
  std::string table;
  std::string start;
  std::string end;

  bool Contains(std::string_view key) const {
    return key >= start && (end.empty() || key < end);
  }
};

struct RangeOptions {
  // Local state lives in <data_dir> (created if missing; a RocksDB with the
  // data and meta column families). One directory per range.
  std::string data_dir;
  // Log of the range: options.log.client/metadata/cluster must be set. The
  // log is named "range-<id>".
  wal::LogOptions log;
  // Snapshot store options (client, metadata, cluster, quorums, retain).
  snapshot::SnapshotOptions snapshot;
  // Snapshot policy: a snapshot is taken once this many log bytes were
  // appended since the last one, or `snapshot_interval` passed with at
  // least one write since the last one. After each snapshot the log is
  // truncated below the oldest retained snapshot.
  int64_t snapshot_log_bytes = int64_t{64} << 20;
  absl::Duration snapshot_interval = absl::Minutes(10);
  Limits limits;
  // Cluster mode: checked before a LINEARIZABLE read is served; an error is
  // returned to the caller as is (e.g. UNAVAILABLE: lease not certainly
  // valid). Empty: always allowed (standalone).
  std::function<absl::Status()> linearizable_read_check;
  // Called once, from an internal thread, when the range stops serving for
  // good because its log failed (fenced by a newer owner, or unwritable).
  // The owner of the Range then destroys it and may reopen it.
  std::function<void(const absl::Status& why)> on_failed;
};

// Counters for DescribeTable and tests.
struct RangeStats {
  int64_t revision = 0;         // last applied revision
  int64_t key_count = 0;        // exact
  int64_t bytes = 0;            // sum of live key + value sizes, exact
  uint64_t applied_seqno = 0;   // last log seqno applied
  uint64_t log_first_seqno = 0; // first seqno still in the log
  uint64_t snapshot_seqno = 0;  // newest published snapshot's seqno (0: none)
  uint64_t epoch = 0;           // log epoch of this owner
  int64_t snapshots_taken = 0;
  int64_t snapshot_failures = 0;
  int64_t replayed_records = 0; // records replayed by Open
  std::string recovered_from;   // "local", "snapshot <ledger>", "empty"
  bool serving = false;
  // While ServingReadsOnly: why writes are refused (the log's failure).
  std::string writes_refused;
};

struct ScanSpec {
  // Bounds clipped by the caller to this range: [start, end), end empty =
  // end of the range.
  std::string start;
  std::string end;
  int64_t limit = 0;  // 0 = no limit
  // Stop copying keys and values once they would take more than this many
  // bytes (at least one key; estimated as key, stored value and a fixed
  // overhead per key: the caller checks the exact size); 0 = no limit. The
  // count goes on (its pass still reads every key).
  int64_t max_bytes = 0;
  bool keys_only = false;
  bool count_only = false;
  bool reverse = false;
  ledgerkv::v1::ReadConsistency consistency = ledgerkv::v1::LINEARIZABLE;
};

struct ScanResult {
  std::vector<ledgerkv::v1::KeyValue> kvs;  // empty when count_only
  int64_t count = 0;  // keys in [start, end), ignoring limit
  bool more = false;  // stopped at `limit` or `max_bytes` with keys left in [start, end)
  int64_t revision = 0;
};

class Range {
 public:
  template <typename T>
  using Callback = std::function<void(absl::StatusOr<T>)>;

  // Recovers and starts serving the range (ARCHITECTURE.md section 7):
  // opens the log for writing (fencing any previous owner), keeps the local
  // state if the log still covers its applied seqno, else restores the
  // newest valid snapshot (falling back to older ones), replays the log to
  // its end, then serves. Errors: UNAVAILABLE (bookies/store), DATA_LOSS
  // (no valid snapshot and the log does not reach back far enough, or
  // corrupt log records), INVALID_ARGUMENT (options).
  static absl::StatusOr<std::unique_ptr<Range>> Open(const RangeOptions& options,
                                                     const RangeDescriptor& descriptor);
  // The same with the range's log already opened for writing by the
  // caller (wal::LogWriter::Open of "range-<id>" with options.log): used to
  // reopen a range whose previous instance, still answering reads
  // (ServingReadsOnly), must stay open until a new log is certain. The
  // caller must have closed that instance first (its local DB).
  static absl::StatusOr<std::unique_ptr<Range>> Open(const RangeOptions& options,
                                                     const RangeDescriptor& descriptor,
                                                     std::unique_ptr<wal::LogWriter> log);
  // For when Open failed because no ledger could be created for a log
  // writer (`why`: its error, with wal::LogWriter::kNoNewLedgerPayload; say
  // no writable bookie on a full disk): fences any
  // previous owner and recovers the log without creating a ledger
  // (wal::LogWriter::RecoverForReading), recovers the local state as Open
  // does, and answers reads of that whole state, refusing every write
  // (ServingReadsOnly from the start). Errors as Open's.
  static absl::StatusOr<std::unique_ptr<Range>> OpenForReads(const RangeOptions& options,
                                                             const RangeDescriptor& descriptor,
                                                             const absl::Status& why);

  // Stops as a crash would (pending writes fail with UNAVAILABLE; they may
  // be in the log). Prefer Close.
  virtual ~Range() = default;

  // Writes. The table field of requests is ignored (the caller routed it);
  // every key must be inside the range, else INVALID_ARGUMENT. Answered
  // after the resolved effect is durable in the log and applied. Errors:
  // INVALID_ARGUMENT (limits, keys outside), FAILED_PRECONDITION (Put
  // condition failed; Increment of a non-number), OUT_OF_RANGE (increment
  // overflow), UNAVAILABLE (the range stopped serving: fenced or log
  // failure; the write may or may not be in the log).
  virtual void Put(const ledgerkv::v1::PutRequest& request,
                   Callback<ledgerkv::v1::PutResponse> done) = 0;
  virtual void Delete(const ledgerkv::v1::DeleteRequest& request,
                      Callback<ledgerkv::v1::DeleteResponse> done) = 0;
  virtual void Txn(const ledgerkv::v1::TxnRequest& request,
                   Callback<ledgerkv::v1::TxnResponse> done) = 0;
  virtual void Increment(const ledgerkv::v1::IncrementRequest& request,
                         Callback<ledgerkv::v1::IncrementResponse> done) = 0;

  // Reads of applied state (every acknowledged write is visible). Still
  // answered after the log failed for a reason other than a fence
  // (ServingReadsOnly); refused (UNAVAILABLE) once the range is fenced,
  // closing or closed.
  virtual absl::StatusOr<ledgerkv::v1::GetResponse> Get(
      const ledgerkv::v1::GetRequest& request) = 0;
  virtual absl::StatusOr<ScanResult> Scan(const ScanSpec& spec) = 0;

  // Stops taking writes, waits for pending ones, takes no snapshot, closes
  // the log (seals its ledger) and the local DB. Idempotent. Returns the
  // range's UNAVAILABLE error if it had failed (fenced).
  // REQUIRES: not called from a write's `done` callback.
  virtual absl::Status Close() = 0;

  // Takes a snapshot now and truncates the log below the oldest retained
  // one (tests, admin). Blocks.
  virtual absl::Status SnapshotNow() = 0;

  // True once the range stopped taking writes because its log failed for a
  // reason other than a fence (bookies full, unreachable or read-only; the
  // metadata store failing), while it still answers reads: its local state
  // holds every acknowledged write, and no other owner can have written,
  // since a new owner fences the log first (and in cluster mode reads stay
  // behind the lease check). docs/range-server.md, "Reads while the log
  // cannot be written".
  virtual bool ServingReadsOnly() const = 0;

  virtual const RangeDescriptor& descriptor() const = 0;
  virtual RangeStats stats() const = 0;
};

}  // namespace ledgerkv::kv
