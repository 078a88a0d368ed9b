// Open with recovery: the fencing protocol of ARCHITECTURE.md section 4,
// steps 1-5 (docs/ledger-protocol.md, "Recovery", gives the reasons).
//
//  1. CAS OPEN -> IN_RECOVERY (already CLOSED: nothing to do; already
//     IN_RECOVERY: proceed, an earlier recoverer may have died).
//  2. Fence + read LAC on every bookie of the last segment; proceed only once
//     every write quorum has (Qw-Qa)+1 fenced replies, so no ack quorum of
//     unfenced bookies can form any more. Missing replies make recovery
//     wait, then fail with UNAVAILABLE; never proceed without them (L8).
//  3. From max(highest LAC, first entry of last segment - 1), read forward
//     with the fence flag. An entry exists if any bookie of its write set
//     returns an intact copy; it is absent only after (Qw-Qa)+1 explicit
//     NO_SUCH_ENTRY / NO_SUCH_LEDGER replies; anything else (timeout,
//     CORRUPT, IO_ERROR, INSTANCE_MISMATCH) aborts with UNAVAILABLE and
//     never truncates.
//  4. Re-add every recovered entry, unchanged, to its write set with the
//     recovery flag, waiting (like BookKeeper) for Qa acks per entry. A
//     bookie that fails is replaced; the replacement receives the entries
//     BEFORE any metadata names it, so no later recoverer can read it as an
//     empty replica. One that failed its re-adds gives its place back to
//     the bookie it replaced when the others already bring every entry to
//     Qa.
//  5. One CAS IN_RECOVERY -> CLOSED with last_entry_id, length and (when a
//     bookie was replaced) the new last segment. If the CAS loses, re-read:
//     CLOSED by someone else -> adopt it (L9); still IN_RECOVERY but changed
//     -> start over.
//
// Blocking; never call from a gRPC callback.
//
// Fault point (base/fault_point.h), argument = the ledger id in decimal:
//   ledger.recovery.before_close  hit before the closing CAS of step 5; a
//                                 callback may block to hold the recoverer
//                                 there (its return value is ignored).
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"
#include "ledger/client_core.h"

namespace ledgerkv::ledger {

// Recovers ledger `id` and returns its CLOSED metadata.
// NOT_FOUND for an unknown ledger; UNAVAILABLE when recovery cannot be
// completed safely now (bookies unreachable, not fenced by enough bookies,
// unreadable entries, no replacement bookie); the ledger then stays
// IN_RECOVERY and a later attempt continues. DATA_LOSS if an entry known to
// be confirmed, or one that may have been (too few replicas say they lack
// it), has no intact replica while every replica answered: the ledger then
// stays IN_RECOVERY, and a retry closes it only if it learns a LAC at or
// past that entry (from a bookie slow to answer the first fence).
absl::StatusOr<VersionedLedger> RecoverLedger(ClientCore& core, uint64_t id);

}  // namespace ledgerkv::ledger
