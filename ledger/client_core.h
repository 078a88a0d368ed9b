// ClientCore: what a LedgerClient shares with the writers, readers and
// recoverers it creates (options, metadata store, key layout, bookie
// channels, placement), held by shared_ptr so that any of them may outlive
// the client object. Plus the ledger-metadata load/CAS helpers all of them use.
//
// Internal to ledger/.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "ledger/bookie_pool.h"
#include "ledger/options.h"
#include "ledger/placement.h"
#include "metadata/metadata_store.h"
#include "proto/metadata.pb.h"

namespace ledgerkv::ledger {

// Bookies whose last read (or recovery call) did not answer in time or
// could not be reached: range reads plan around them for `hold`
// (ClientOptions.slow_bookie_hold), so that a bookie that accepts
// connections and never answers costs a long read one RPC deadline, not
// one per round of reads (each round waits for all of its calls). A slow
// bookie is still asked when no other replica is left to try. Thread-safe.
class SlowBookies {
 public:
  explicit SlowBookies(absl::Duration hold) : hold_(hold) {}
  // Slow from now until now + hold.
  void Mark(const std::string& bookie_id) ABSL_LOCKS_EXCLUDED(mu_);
  // It answered a call sent at `sent_at`: no longer slow, unless it was
  // marked after that call was sent (a failure seen later than what this
  // answer shows; the answer may be noted long after it arrived).
  void Clear(const std::string& bookie_id, absl::Time sent_at) ABSL_LOCKS_EXCLUDED(mu_);
  bool IsSlow(const std::string& bookie_id) const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Hold {
    absl::Time marked;
    absl::Time until;
  };
  const absl::Duration hold_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, Hold> holds_ ABSL_GUARDED_BY(mu_);
};

struct ClientCore {
  explicit ClientCore(ClientOptions opts)
      : options(std::move(opts)),
        store(options.metadata),
        keys(options.cluster),
        pool(options.metadata, keys, options.local_channel, options.local_add,
             options.use_add_port, std::min(options.rpc_timeout, absl::Seconds(2)),
             options.idle_connection_close),
        placement(options.metadata, keys),
        slow_bookies(options.slow_bookie_hold) {}

  const ClientOptions options;
  metadata::MetadataStore* const store;
  const metadata::Keys keys;
  BookiePool pool;
  Placement placement;
  SlowBookies slow_bookies;
};

// What a finished call to a bookie (a Gather call: done, status, bookie_id,
// sent_at) says about it, for the reads that follow: an answer clears its
// slow mark (SlowBookies::Clear); a bookie that could not be reached may
// have moved (re-registered at a new address after a restart), so its
// cached address is dropped and the next attempt resolves it again, and it
// and a bookie past its deadline are marked slow. A call still running says
// nothing yet.
// REQUIRES: the call's Gather mu() held, or the call is done.
template <typename Call>
void NoteCallOutcome(ClientCore& core, const Call& call) {
  if (!call.done) return;
  if (call.status.ok()) {
    core.slow_bookies.Clear(call.bookie_id, call.sent_at);
    return;
  }
  const grpc::StatusCode code = call.status.error_code();
  if (code == grpc::StatusCode::UNAVAILABLE) core.pool.Forget(call.bookie_id);
  if (code == grpc::StatusCode::UNAVAILABLE || code == grpc::StatusCode::DEADLINE_EXCEEDED) {
    core.slow_bookies.Mark(call.bookie_id);
  }
}

struct VersionedLedger {
  meta::v1::LedgerMetadata metadata;
  metadata::Version version = 0;
};

// Reads and parses the metadata of ledger `id`.
// NOT_FOUND "ledger N not found"; DATA_LOSS if it does not parse or has no
// segment; the store's error otherwise.
absl::StatusOr<VersionedLedger> LoadLedger(const ClientCore& core, uint64_t id);

// Pause before retry number `attempt` (1, 2, ...) of a metadata operation
// that failed with a transient error: 50 ms doubling up to 1 s, so that the
// default options.metadata_retries ride out a few seconds of store outage.
absl::Duration MetadataBackoff(int attempt);

// Writes `metadata` if the stored version is still `expected` (CAS),
// retrying transient store errors (UNAVAILABLE) for up to
// options.metadata_retries attempts (MetadataBackoff between them). Returns
// the new version; ABORTED when the version moved (nothing written, or a
// write whose reply was lost: callers re-read).
absl::StatusOr<metadata::Version> StoreLedger(const ClientCore& core,
                                              const meta::v1::LedgerMetadata& metadata,
                                              metadata::Version expected);

// Whether two metadata records are equal (whole record / segment lists).
// Used after a CAS reported ABORTED to recognise our own write whose reply
// was lost, and to tell a harmless concurrent update from a takeover.
bool SameLedger(const meta::v1::LedgerMetadata& a, const meta::v1::LedgerMetadata& b);
bool SameSegments(const meta::v1::LedgerMetadata& a, const meta::v1::LedgerMetadata& b);

// Error returned to writers that lost their ledger to recovery or a close (L5).
absl::Status FencedError(uint64_t ledger_id);

// Short description for messages: "ledger 7 (E=3 Qw=2 Qa=2, OPEN, 2 segments)".
std::string Describe(const meta::v1::LedgerMetadata& metadata);

}  // namespace ledgerkv::ledger
