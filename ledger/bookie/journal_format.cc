#include "ledger/bookie/journal_format.h"

#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "base/crc32c.h"
#include "base/entry_checksum.h"

namespace ledgerkv::bookie {
namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "little-endian host assumed");

constexpr uint32_t kMaskDelta = 0xa282ead8u;

// leveldb's CRC masking: a CRC computed over bytes that contain CRCs is
// weak, so stored CRCs are rotated and offset.
uint32_t Mask(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + kMaskDelta; }

template <typename T>
void Put(char* dst, T v) {
  std::memcpy(dst, &v, sizeof(T));
}

template <typename T>
T Get(const char* src) {
  T v;
  std::memcpy(&v, src, sizeof(T));
  return v;
}

uint32_t HeaderCrc(const char* header, uint64_t file_number, uint64_t offset) {
  char seed[16];
  Put<uint64_t>(seed, file_number);
  Put<uint64_t>(seed + 8, offset);
  uint32_t crc = crc32c::Value(seed, sizeof(seed));
  return crc32c::Extend(crc, header + 4, kRecordHeaderSize - 4);
}

constexpr std::string_view kPrefix = "journal-";
constexpr std::string_view kSuffix = ".log";

}  // namespace

void EncodeRecordHeader(const RecordHeader& h, uint64_t file_number, uint64_t offset, char* dst) {
  dst[4] = static_cast<char>(h.type);
  dst[5] = static_cast<char>(h.flags);
  Put<uint16_t>(dst + 6, 0);
  Put<uint32_t>(dst + 8, h.payload_size);
  Put<uint32_t>(dst + 12, h.entry_checksum);
  Put<uint64_t>(dst + 16, h.ledger_id);
  Put<int64_t>(dst + 24, h.entry_id);
  Put<int64_t>(dst + 32, h.lac);
  Put<uint64_t>(dst + 40, h.batch_offset);
  Put<uint32_t>(dst, Mask(HeaderCrc(dst, file_number, offset)));
}

bool DecodeRecordHeader(const char* src, uint64_t file_number, uint64_t offset, RecordHeader* h) {
  if (Get<uint32_t>(src) != Mask(HeaderCrc(src, file_number, offset))) return false;
  const uint8_t type = static_cast<uint8_t>(src[4]);
  if (type != static_cast<uint8_t>(RecordType::kEntry) &&
      type != static_cast<uint8_t>(RecordType::kFence) &&
      type != static_cast<uint8_t>(RecordType::kSyncMark)) {
    return false;
  }
  if (Get<uint16_t>(src + 6) != 0) return false;
  RecordHeader out;
  out.type = static_cast<RecordType>(type);
  out.flags = static_cast<uint8_t>(src[5]);
  out.payload_size = Get<uint32_t>(src + 8);
  out.entry_checksum = Get<uint32_t>(src + 12);
  out.ledger_id = Get<uint64_t>(src + 16);
  out.entry_id = Get<int64_t>(src + 24);
  out.lac = Get<int64_t>(src + 32);
  out.batch_offset = Get<uint64_t>(src + 40);
  if (out.payload_size > kMaxPayloadSize || out.batch_offset > offset) return false;
  if (out.type != RecordType::kEntry && out.payload_size != 0) return false;
  // A sync mark is a batch of its own and names nothing.
  if (out.type == RecordType::kSyncMark &&
      (out.batch_offset != offset || out.ledger_id != 0 || out.flags != 0)) {
    return false;
  }
  if (out.type == RecordType::kEntry && out.entry_id < 0) return false;
  *h = out;
  return true;
}

bool VerifyEntryPayload(const RecordHeader& h, std::string_view payload) {
  return payload.size() == h.payload_size &&
         EntryChecksum(h.ledger_id, h.entry_id, h.lac, payload) == h.entry_checksum;
}

std::string JournalFileName(uint64_t number) {
  return absl::StrFormat("%s%06u%s", kPrefix, number, kSuffix);
}

bool ParseJournalFileName(std::string_view name, uint64_t* number) {
  if (name.size() <= kPrefix.size() + kSuffix.size()) return false;
  if (name.substr(0, kPrefix.size()) != kPrefix) return false;
  if (name.substr(name.size() - kSuffix.size()) != kSuffix) return false;
  std::string_view digits = name.substr(kPrefix.size(), name.size() - kPrefix.size() - kSuffix.size());
  if (digits.size() < 6) return false;
  for (char c : digits) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return false;
  }
  return absl::SimpleAtoi(absl::string_view(digits.data(), digits.size()), number) && *number > 0;
}

}  // namespace ledgerkv::bookie
