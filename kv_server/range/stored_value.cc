#include "kv_server/range/stored_value.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace ledgerkv::kv {
namespace {

void PutVarint(uint64_t v, std::string* out) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

// Reads a varint of at most 10 bytes whose value fits an int64.
bool GetVarint(std::string_view& in, int64_t* v) {
  uint64_t result = 0;
  for (int shift = 0; shift <= 63 && !in.empty(); shift += 7) {
    const uint8_t byte = static_cast<uint8_t>(in.front());
    in.remove_prefix(1);
    if (shift == 63 && byte > 1) return false;  // more than 64 bits
    result |= static_cast<uint64_t>(byte & 0x7f) << shift;
    if ((byte & 0x80) == 0) {
      if (result > static_cast<uint64_t>(INT64_MAX)) return false;
      *v = static_cast<int64_t>(result);
      return true;
    }
  }
  return false;
}

}  // namespace

void EncodeStoredValue(const StoredValue& v, std::string* out) {
  out->reserve(out->size() + 1 + 3 * 10 + v.value.size());
  out->push_back(static_cast<char>(kStoredValueFormat));
  PutVarint(static_cast<uint64_t>(v.create_revision), out);
  PutVarint(static_cast<uint64_t>(v.mod_revision), out);
  PutVarint(static_cast<uint64_t>(v.version), out);
  out->append(v.value);
}

std::string EncodeStoredValue(const StoredValue& v) {
  std::string out;
  EncodeStoredValue(v, &out);
  return out;
}

absl::StatusOr<StoredValue> DecodeStoredValue(std::string_view bytes) {
  if (bytes.empty()) return absl::DataLossError("stored value is empty");
  const uint8_t format = static_cast<uint8_t>(bytes.front());
  if (format != kStoredValueFormat) {
    return absl::DataLossError(
        absl::StrCat("stored value has unknown format byte ", static_cast<int>(format)));
  }
  bytes.remove_prefix(1);
  StoredValue v;
  if (!GetVarint(bytes, &v.create_revision) || !GetVarint(bytes, &v.mod_revision) ||
      !GetVarint(bytes, &v.version)) {
    return absl::DataLossError("stored value has a truncated or overlong varint");
  }
  v.value.assign(bytes.data(), bytes.size());
  return v;
}

}  // namespace ledgerkv::kv
