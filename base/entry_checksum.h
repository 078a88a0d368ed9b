// The ledger entry checksum (proto/bookie.proto, docs/bookie-format.md):
// CRC32C over little-endian fixed64 ledger_id, entry_id, lac, then payload.
// Computed by the writer, verified by bookies and every reader.
#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>

#include "base/crc32c.h"

namespace ledgerkv {

inline uint32_t EntryChecksum(uint64_t ledger_id, int64_t entry_id, int64_t lac,
                              std::string_view payload) {
  char header[24];
  const uint64_t fields[3] = {ledger_id, static_cast<uint64_t>(entry_id),
                              static_cast<uint64_t>(lac)};
  static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "little-endian host assumed");
  std::memcpy(header, fields, sizeof(header));
  return crc32c::Extend(crc32c::Value(header, sizeof(header)), payload.data(), payload.size());
}

}  // namespace ledgerkv
