// Automatic re-replication (docs/ledger-protocol.md, "Re-replication"):
// finds bookies that ledgers name but that have not been registered for a
// grace period (lost for good, as far as the cluster can tell), and moves
// the copies of every CLOSED ledger off them (LedgerClient::ReplaceBookie);
// and registered bookies running as another instance than ledgers recorded
// (re-provisioned), onto which it copies those ledgers' copies back
// (LedgerClient::RefillBookie).
// BookKeeper's auditor and its lostBookieRecoveryDelay, in one pass that
// the cluster's controller runs periodically.
//
// Blocking; one caller at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace ledgerkv::metadata {
class MetadataStore;
}

namespace ledgerkv::ledger {

class LedgerClient;

struct AuditorOptions {
  LedgerClient* client = nullptr;            // not owned
  metadata::MetadataStore* store = nullptr;  // not owned; the client's store
  std::string cluster = "default";
  // How long a named bookie must have been seen unregistered (by this
  // auditor's passes) before its ledgers are moved off it. A bookie that
  // restarts, or loses its session for a while, registers again well
  // within it; a re-replication it would have made unnecessary costs a
  // copy of everything the bookie held.
  absl::Duration grace = absl::Minutes(5);
  // No copying while more than this fraction of the bookies the pass knows
  // of (registered, or named by a ledger) is missing and named by a closed
  // ledger, lost or still within its grace: the controller's view is then
  // more likely wrong (etcd cut off from most of the cluster, a
  // registration prefix wiped) than most bookies gone, and copying
  // everything onto the few left would fill their disks. The clocks go on;
  // copying starts at the first pass back under the limit, or an operator
  // runs `ledgerkv ledger rereplicate`. In [0, 1] (else Pass fails
  // INVALID_ARGUMENT); 1 never holds off.
  double max_lost_fraction = 0.5;
};

struct AuditResult {
  // Bookies named by some ledger and not registered, sorted, and those of
  // them past the grace period.
  std::vector<std::string> missing;
  std::vector<std::string> lost;
  // CLOSED ledgers naming a lost bookie that now name a replacement
  // instead, and how many entry copies that took.
  int ledgers_replaced = 0;
  int64_t entries_copied = 0;
  // Corrupt copies on other bookies met while copying those ledgers, re-added
  // from an intact copy or not (ReplicationResult::corrupt; a line each).
  int64_t corrupt_copies_repaired = 0;
  int64_t corrupt_copies_unrepaired = 0;
  // Registered bookies, sorted, that some ledger's segments recorded as an
  // earlier instance (re-provisioned under their id, after their cookie
  // was deleted: those copies are gone; all of them, even in a pass asked
  // to stop), and the CLOSED ledgers whose copies there were copied back
  // onto the current instance, and how many entry copies that took
  // (LedgerClient::RefillBookie; no grace: the registration shows the old
  // copies gone, and the bookie is up to take them).
  std::vector<std::string> reprovisioned;
  int ledgers_refilled = 0;
  int64_t entries_refilled = 0;
  // Ledgers naming a lost (or re-provisioned) bookie that this pass left,
  // each counted once: OPEN or IN_RECOVERY
  // ones (a writer's ensemble change covers only the entries it adds from
  // then on; those already added stay a copy short until the ledger is
  // closed, by its writer or by recovery, and a later pass takes it; a KV
  // range's log closes a ledger with entries within its roll_age), and
  // those whose replacement failed (retried at the next pass).
  int ledgers_not_closed = 0;
  int ledgers_failed = 0;
  // Set when the pass copied nothing because too many bookies are lost
  // (AuditorOptions::max_lost_fraction): why, for the log.
  std::string held_off;
  // One line per replaced ledger (and per bookie it found corrupt copies
  // on), and per failed one whose failure is new
  // or has a new reason (an unreplaceable ledger is not logged again at
  // every pass; ledgers_failed still counts it), for the log.
  std::vector<std::string> lines;
};

class Auditor {
 public:
  // REQUIRES: options name a client and a store.
  explicit Auditor(AuditorOptions options);

  // One pass at time `now` (the caller's clock, which should not jump: a
  // steady clock; tests pass their own).
  // Lists the registered bookies and every ledger's metadata; a bookie
  // named by a ledger and not registered is missing from the first pass
  // that sees it so, and lost once `grace` has passed since (a pass that
  // finds it registered again, or named by no ledger, forgets it). Then
  // replaces every lost bookie in every CLOSED ledger naming it (unless
  // held off), and refills every re-provisioned bookie in every CLOSED
  // ledger that recorded an earlier instance of it, asking
  // `keep_going` before each ledger and during each copy (false: stop, e.g.
  // no longer the controller, or shutting down; the ledger being copied is
  // left as it was). Errors: a listing failed (nothing was changed, and no
  // bookie's clock started or stopped); INVALID_ARGUMENT for options out
  // of range.
  absl::StatusOr<AuditResult> Pass(absl::Time now, const std::function<bool()>& keep_going);

 private:
  // Replaces (or refills) `bookie` in ledger `id`, counting the outcome in
  // *result and a failure in *failures. False: asked to stop.
  // A ledger left because it is not CLOSED goes into *not_closed.
  bool CopyOne(uint64_t id, const std::string& bookie, bool refill,
               const std::function<bool()>& keep_going, AuditResult* result,
               absl::flat_hash_map<std::string, std::string>* failures,
               absl::flat_hash_set<uint64_t>* not_closed);

  AuditorOptions options_;
  absl::flat_hash_map<std::string, absl::Time> missing_since_;
  // The failures the last complete pass reported, "<ledger> <bookie>"
  // (" refill" appended for a refill) -> the error: a failure found again
  // with the same error is not a new line.
  absl::flat_hash_map<std::string, std::string> failures_reported_;
};

}  // namespace ledgerkv::ledger
