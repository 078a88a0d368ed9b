// Scans over a whole table: the KV Range RPC (docs/kv-api.md, "Range").
// Clips [start, end) to each range in key order (or reverse), applies one
// global limit, sums counts, and hands out continuation tokens that resume
// exactly after the last returned key, across range boundaries.
//
// Continuation token (opaque to clients; format version 1):
//   byte 0  version = 1
//   byte 1  'F' (forward) or 'R' (reverse)
//   rest    forward: the next start key (inclusive) = last key + "\0"
//           reverse: the next end key (exclusive) = last key
// The request that carries a token must scan in the same direction; its
// start/end still bound the scan (the token only narrows them).
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "kv_server/range/limits.h"
#include "kv_server/range_host.h"
#include "proto/kv.pb.h"

namespace ledgerkv::kv {

struct Continuation {
  bool reverse = false;
  std::string key;  // forward: next start (inclusive); reverse: next end (exclusive)
};

std::string EncodeContinuation(const Continuation& c);
// INVALID_ARGUMENT "bad continuation token: ..." for anything else.
absl::StatusOr<Continuation> DecodeContinuation(const std::string& token);

// Serves one Range request from the ranges of its table. Reads only (no
// network); may be called from a gRPC reaction.
//  - count is the exact number of keys in [start, end) (narrowed by the
//    continuation), whatever the limit, up to where the page stopped (see
//    below); count_only returns only it.
//  - At most min(limit, limits.max_keys_per_request) keys (limit 0: the
//    cap), and no more than max_response_bytes of encoded key-values (their
//    protobuf encoding in the response; at least one key); continuation is
//    set when keys may remain. Ranges copy no more values than that budget
//    (ScanSpec::max_bytes).
//  - header: the first range read.
//  - A range after the first that another server owns (the locator's
//    UNAVAILABLE names an owner other than this server) ends the page
//    before it: the continuation then points at that range's boundary
//    (also for count_only), and count covers only the ranges read. Every
//    range is thus read by its owner, one server per page. Any other
//    refusal (recovering, no owner yet) fails the request.
// Errors: NOT_FOUND (table); INVALID_ARGUMENT (negative limit, start after
// end, bad token); UNAVAILABLE (retry-safe, naming the owner when known)
// if the first range to read is not served here; the Range's read errors.
absl::StatusOr<ledgerkv::v1::RangeResponse> ScanTable(RangeLocator& locator,
                                                      const ledgerkv::v1::RangeRequest& request,
                                                      const Limits& limits,
                                                      int64_t max_response_bytes);

}  // namespace ledgerkv::kv
