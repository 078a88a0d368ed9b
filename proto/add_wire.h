// The add port's hot path without message objects (docs/add-transport.md,
// "Parsing without message objects"). A bookie parses each AddRequest body
// into views of its bytes, and encodes the AddResponse straight into the
// reply frame; a writer parses the AddResponse the same way. The bytes on
// the wire are those of the generated messages in proto/bookie.proto: a
// body either side writes parses with the generated code, and the other
// way round (add_wire_test.cc checks both directions, and random damage).
//
// Why: the generated parser allocates an Entry and a string per entry (two
// mallocs, and two frees later), and the reply one AddResult per entry, on
// the threads of the group commit cycle. With 64 small entries per request
// that was a visible part of the cycle (docs/performance.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "absl/types/span.h"

namespace ledgerkv::addwire {

// bookie.v1.Entry, viewed. Fields absent from the bytes read as proto3
// defaults (0 and empty), as the generated parser leaves them.
struct EntryRef {
  uint64_t ledger_id = 0;
  int64_t entry_id = 0;
  int64_t lac = 0;
  uint32_t checksum = 0;
  std::string_view payload;
};

// bookie.v1.AddRequest, viewed.
struct AddRequestRef {
  std::string_view expected_instance_id;
  bool recovery = false;
  std::vector<EntryRef> entries;
};

// bookie.v1.AddResult.
struct AddResultRef {
  uint64_t ledger_id = 0;
  int64_t entry_id = 0;
  int32_t code = 0;
};

// Parses `body` as a serialized AddRequest; the views point into `body`.
// Accepts what the generated parser accepts: unknown fields and fields of
// an unexpected wire type are skipped, the last of a repeated scalar wins,
// and an expected_instance_id that is not UTF-8 is refused (a proto3
// string). Returns false, with `out` unspecified, for what it refuses.
bool ParseAddRequest(std::string_view body, AddRequestRef* out);

// The serialized size of an AddResponse carrying `results`, in order.
size_t AddResponseSize(absl::Span<const AddResultRef> results);
// Writes exactly AddResponseSize(results) bytes to `out`: the bytes the
// generated SerializeToArray writes for the same message.
void EncodeAddResponse(absl::Span<const AddResultRef> results, char* out);

// Parses `body` as a serialized AddResponse, appending its results to
// `out` in order. Same acceptance as the generated parser. On false, `out`
// is as it was.
bool ParseAddResponse(std::string_view body, std::vector<AddResultRef>* out);

}  // namespace ledgerkv::addwire
