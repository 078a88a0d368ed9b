// LedgerWriter: the single writer of an open ledger (ARCHITECTURE.md 4,
// write path; docs/ledger-protocol.md).
//
// Appends are pipelined: many are in flight at once. Entry e goes to the Qw
// bookies of its segment's ensemble starting at index e mod E and completes
// once Qa of them acknowledged it durably. Completions are delivered strictly
// in entry-id order (L4), one at a time; the LAC is the last
// delivered id and rides on later adds. Entries queued for the same bookie
// leave together in one batched Add RPC, with a cap on RPCs in flight per
// bookie. A failing bookie is replaced (ensemble change, a metadata CAS)
// and the pending adds are resent; no add is delivered while that CAS is in
// flight. Once fenced (a FENCED reply, or metadata found IN_RECOVERY/CLOSED)
// the writer fails every pending and later add and never acknowledges
// again (L5).
//
// Threading: every method is thread-safe. Callbacks run one at a time and
// in order, on the thread of the bookie connection whose reply made them
// ready or on the writer's own thread (only the latter with
// ClientOptions::callbacks_on_reply_thread off). They must not block for
// long (on a connection's thread that delays every writer of the client
// sending to that bookie), must not call the blocking Append or Close, and
// must not destroy a writer or its client (they may call AppendAsync).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/metadata.pb.h"

namespace ledgerkv::ledger {

struct ClientCore;
class WriterState;

// Counters of one writer (batching and ensemble changes are visible here).
struct WriterStats {
  int64_t add_rpcs = 0;          // Add RPCs sent (each may carry many entries)
  int64_t entries_sent = 0;      // entry copies sent, resends included
  int64_t ensemble_changes = 0;  // metadata CASes that replaced bookies
  int64_t lac_writes = 0;        // explicit WriteLac RPCs sent (idle writer)
};

class LedgerWriter {
 public:
  using AddCallback = std::function<void(absl::StatusOr<int64_t> entry_id)>;

  // Stops the writer without closing the ledger (a later open with recovery
  // closes it): pending adds fail with CANCELLED. Blocks until the writer's
  // thread has delivered every callback and every Add RPC still in flight
  // was cancelled and has completed (no gRPC callback outlives the writer,
  // so the client's channels are never released on a gRPC thread).
  // REQUIRES: not called from an AddCallback.
  ~LedgerWriter();

  LedgerWriter(const LedgerWriter&) = delete;
  LedgerWriter& operator=(const LedgerWriter&) = delete;

  uint64_t id() const { return id_; }

  // The last add confirmed: every entry <= lac() was acknowledged (delivered
  // OK) and nothing above it was. -1 before the first.
  int64_t lac() const;

  // A copy of the ledger metadata as this writer last wrote or read it.
  meta::v1::LedgerMetadata metadata() const;

  WriterStats stats() const;

  // Appends `payload` as the next entry (copied before AppendAsync
  // returns: the caller may reuse its buffer). `done` receives the entry id once
  // Qa bookies of its write set hold it durably, or an error:
  //   FAILED_PRECONDITION "ledger N fenced ..." after the writer was fenced
  //     (the ledger was recovered by someone else), or "ledger N is closed"
  //     once Close was called;
  //   UNAVAILABLE when a failed bookie could not be replaced (not enough
  //     writable bookies, metadata store unreachable); the writer has then
  //     failed for good and every later append fails the same way;
  //   CANCELLED when the writer is destroyed first;
  //   INVALID_ARGUMENT if the payload exceeds ClientOptions.max_entry_bytes
  //     (no id is assigned; this callback may run before those of earlier
  //     appends, and the writer stays usable).
  // An error means the add was not acknowledged; its outcome is unknown (a
  // later recovery may keep the entry or drop it). Callbacks are called in
  // entry-id order, each exactly once.
  void AppendAsync(std::string_view payload, AddCallback done);

  // From an AddCallback: sends now the appends that callbacks of the current
  // batch made so far. They are otherwise held until every callback of the
  // batch has run (so that they leave together in one RPC per bookie); a
  // callback that is about to do slow work (the log applying records to
  // RocksDB) releases them first. Does nothing outside a callback.
  void SendHeldAppends();

  // Blocking AppendAsync. REQUIRES: not called from an AddCallback.
  absl::StatusOr<int64_t> Append(std::string_view payload);

  // Waits for every pending add to complete, then seals the ledger by CAS
  // OPEN -> CLOSED with last_entry_id = lac() and the total payload length.
  // Later appends fail with FAILED_PRECONDITION. Idempotent.
  // Errors: FAILED_PRECONDITION if the writer was fenced (someone else
  // recovered the ledger; its metadata says what was kept); UNAVAILABLE if
  // the metadata store could not be written.
  // REQUIRES: not called from an AddCallback.
  absl::Status Close();

 private:
  friend class LedgerClient;
  LedgerWriter(uint64_t id, std::shared_ptr<WriterState> state);

  const uint64_t id_;
  std::shared_ptr<WriterState> state_;
};

}  // namespace ledgerkv::ledger
