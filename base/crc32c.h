#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace ledgerkv::crc32c {

// Extends `crc` (a previous Value/Extend result, or 0 to start) with
// data[0, n). CRC-32C (Castagnoli), as used by iSCSI, ext4, RocksDB.
// Uses SSE4.2 when the CPU has it.
uint32_t Extend(uint32_t crc, const char* data, size_t n);

inline uint32_t Value(const char* data, size_t n) { return Extend(0, data, n); }
inline uint32_t Value(std::string_view s) { return Extend(0, s.data(), s.size()); }

}  // namespace ledgerkv::crc32c
