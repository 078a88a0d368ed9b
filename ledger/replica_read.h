// Reading from the bookies of a ledger, shared by LedgerReader and recovery:
// batched range reads with fallback to the other replicas, and LAC reads
// (optionally long-polling).
//
// Blocking; call from a caller's thread, never from a gRPC callback.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "ledger/client_core.h"
#include "proto/bookie.pb.h"
#include "proto/metadata.pb.h"

namespace ledgerkv::ledger {

// A copy of an entry that a replica answered corrupt (ReadReplicas).
struct CorruptCopy {
  int64_t entry_id = 0;
  int segment = 0;  // index into metadata.segments()
  int index = 0;    // ensemble index in that segment
};

// Returns the verified entries first..last (in order) of the ledger
// described by `metadata`, reading each range from as few bookies as cover
// it (one when E == Qw) and falling back to the other replicas of an entry's
// write set on any error or corrupt copy.
// Every entry in the range is expected to exist (it is <= the LAC or
// last_entry_id). Errors: DATA_LOSS only when every replica of some entry's
// write set answered and none had an intact copy (some corrupt (L10), or all
// saying they do not hold it); UNAVAILABLE if some replica of that entry
// could not be read (it may hold the copy the others lack: retry later).
// With `wanted`, only the entries of the range it returns true for are read
// and must be intact; the others are left empty (default) in the result.
// With `corrupt`, the copies a replica answered corrupt (CORRUPT for that
// entry, or failing the checksum here) before another replica served the
// entry intact are appended to it. Only the copies met on the way: an
// entry is read from as few replicas as give an intact copy, so this is no
// scrub.
// REQUIRES: 0 <= first <= last.
absl::StatusOr<std::vector<bookie::v1::Entry>> ReadReplicas(
    ClientCore& core, const meta::v1::LedgerMetadata& metadata, int64_t first, int64_t last,
    const std::function<bool(int64_t)>& wanted = nullptr,
    std::vector<CorruptCopy>* corrupt = nullptr);

// Returns the verified entry `entry_id`, which must exist (it is confirmed),
// asking every replica of its write set at once and taking the first intact
// copy: one slow or hung replica does not hold the caller up (recovery
// reads the confirmed entry it starts from this way). Errors as
// ReadReplicas.
absl::StatusOr<bookie::v1::Entry> ReadEntryFromAnyReplica(
    ClientCore& core, const meta::v1::LedgerMetadata& metadata, int64_t entry_id);

// Returns the LAC of an unclosed ledger as the bookies of its last segment
// know it: the highest LAC piggybacked on any entry they hold, and at least
// last segment's first entry - 1 (a segment begins after the LAC of the
// ensemble change that created it).
// With wait_if_lac_at_most >= -1, each bookie holds the call up to `wait`
// for its LAC to exceed that value, and the first answer above it is
// returned without waiting for the others.
// UNAVAILABLE if no bookie of the segment answered.
absl::StatusOr<int64_t> ReadLacFromBookies(ClientCore& core,
                                           const meta::v1::LedgerMetadata& metadata,
                                           int64_t wait_if_lac_at_most, absl::Duration wait);

}  // namespace ledgerkv::ledger
