// The stored value of one user key in a range's data column family
// (docs/range-server.md, "Local state of a range"):
//
//   [format byte 1][varint create_revision][varint mod_revision]
//   [varint version][value bytes]
//
// Snapshots copy these bytes as they are, so the format is part of the
// snapshot format too: a new layout needs a new format byte.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace ledgerkv::kv {

struct StoredValue {
  int64_t create_revision = 0;
  int64_t mod_revision = 0;
  int64_t version = 0;
  std::string value;

  bool operator==(const StoredValue&) const = default;
};

inline constexpr uint8_t kStoredValueFormat = 1;

// Appends the encoding of `v` to `out`. REQUIRES: revisions and version >= 0.
void EncodeStoredValue(const StoredValue& v, std::string* out);
std::string EncodeStoredValue(const StoredValue& v);

// DATA_LOSS (naming the problem) for an unknown format byte, a truncated or
// overlong varint, or a negative number.
absl::StatusOr<StoredValue> DecodeStoredValue(std::string_view bytes);

}  // namespace ledgerkv::kv
