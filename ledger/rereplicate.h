// Re-replication: moving a closed ledger's copies off one bookie (one that
// died for good, or is being retired) onto replacements, so that every
// entry has Qw copies again (docs/ledger-protocol.md, "Re-replication").
//
// Blocking; call from a caller's thread, never from a gRPC callback.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace ledgerkv::ledger {

struct ClientCore;

// Corrupt copies met while copying (a replica answered CORRUPT, or a copy
// failed its checksum, for an entry another replica served intact).
struct CorruptRepairs {
  // Copies re-added to their bookie from an intact copy, and copies whose
  // re-add failed (the bookie down or refusing it).
  int64_t repaired = 0;
  int64_t unrepaired = 0;
  // One line per segment, bookie and outcome, naming the entries (a copy
  // on the bookie being replaced is named and left). A copy met again (its
  // window read again after a replacement was passed over or a CAS lost)
  // counts once, with its last outcome.
  std::vector<std::string> lines;
};

struct ReplicationResult {
  // Segments whose ensemble named the bookie, now naming a replacement (a
  // refill: segments that recorded an earlier instance, now its current one).
  int segments_changed = 0;
  // Entry copies written to replacements.
  int64_t entries_copied = 0;
  // The replacement of each changed segment, in segment order (a refill:
  // the refilled bookie).
  std::vector<std::string> replacements;
  CorruptRepairs corrupt;
};

// Replaces bookie `bookie_id` in every segment of CLOSED ledger `id`: for
// each such segment, a writable bookie outside the segment's ensemble gets
// every entry of the replaced index's write sets (read, verified, from the
// other replicas, and added byte for byte with the recovery flag), and only
// then does one metadata CAS name it in place of `bookie_id`. Readers find
// the copies through the new metadata; until the CAS nothing names them
// (a failed run leaves at most unnamed copies, which the replacement's
// garbage collection reclaims when the ledger is deleted).
// NOT_FOUND: no such ledger, or it does not name `bookie_id` (also when a
// concurrent run replaced it first). FAILED_PRECONDITION: the ledger is
// not CLOSED (a live writer replaces failed bookies itself; recover it
// first). UNAVAILABLE: no writable bookie to replace it with, or an entry
// could not be read or written now; nothing was named, unless the message
// says whether the metadata names the copies is unknown (run again: a run
// that finds the bookie no longer named is NOT_FOUND). An entry whose other copies are
// all corrupt is UNAVAILABLE too while `bookie_id` cannot be read (its copy
// may be the only intact one; the message counts the corrupt copies), and
// DATA_LOSS when it can be read and has none either.
// A corrupt copy met on the way on another bookie of the segment is
// re-added there from the intact copy (with the recovery flag; the bookie
// keeps the latest write of an entry), whether or not the run then
// succeeds. A successful run reports them in `corrupt`; a failed one
// appends the same lines to its error's message ("(before that: ...)").
// `keep_going` (optional) is asked before each window of entries is read:
// false stops the run with CANCELLED, having named nothing (a caller that is
// shutting down need not wait for a whole ledger's copy).
absl::StatusOr<ReplicationResult> ReplaceBookieInLedger(
    ClientCore& core, uint64_t id, const std::string& bookie_id,
    const std::function<bool()>& keep_going = nullptr);

// Refills bookie `bookie_id` in CLOSED ledger `id`: the bookie is registered
// as another instance than the one some of the ledger's segments recorded
// for it (its data directory was re-provisioned under the same id, after
// its cookie was deleted), so the copies those segments name are gone. For
// each such segment, every entry of the write sets holding the bookie's
// ensemble index is read, verified, from the other replicas and added to
// the bookie's current instance byte for byte with the recovery flag; then
// one metadata CAS records the current instance id in those segments.
// Nothing moves to another bookie: ensembles stay as they are, so this
// needs no spare. Segments that recorded no instance ("") are left.
// Errors and corrupt copies met on the way: as ReplaceBookieInLedger's,
// except that NOT_FOUND means no such ledger, or no segment records another
// instance of the bookie (also when a concurrent run refilled it first),
// and UNAVAILABLE also means the bookie is not registered (one that is
// gone is replaced, not refilled) or its registration names no instance.
absl::StatusOr<ReplicationResult> RefillBookieInLedger(
    ClientCore& core, uint64_t id, const std::string& bookie_id,
    const std::function<bool()>& keep_going = nullptr);

}  // namespace ledgerkv::ledger
