#include "snapshot/snapshot_format.h"

#include <algorithm>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace ledgerkv::snapshot {
namespace {

// "LKVS": tells a snapshot ledger from any other ledger a manifest might
// wrongly name.
constexpr char kMagic[4] = {'L', 'K', 'V', 'S'};
constexpr size_t kFooterBytes = 1 + 8 + 8 + 8 + 4;

void PutFixed32(std::string* out, uint32_t v) {
  char buf[4];
  for (int i = 0; i < 4; ++i) buf[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  out->append(buf, 4);
}

void PutFixed64(std::string* out, uint64_t v) {
  char buf[8];
  for (int i = 0; i < 8; ++i) buf[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  out->append(buf, 8);
}

void PutVarint32(std::string* out, uint32_t v) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>(v | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

size_t VarintLength(uint64_t v) {
  size_t n = 1;
  while (v >= 0x80) {
    v >>= 7;
    ++n;
  }
  return n;
}

// A cursor over a payload; every Get fails (returns false) rather than read
// past the end.
class Reader {
 public:
  explicit Reader(std::string_view in) : in_(in) {}

  bool GetByte(uint8_t* v) {
    if (in_.empty()) return false;
    *v = static_cast<uint8_t>(in_[0]);
    in_.remove_prefix(1);
    return true;
  }
  bool GetFixed32(uint32_t* v) {
    if (in_.size() < 4) return false;
    uint32_t r = 0;
    for (int i = 0; i < 4; ++i) r |= uint32_t{static_cast<uint8_t>(in_[i])} << (8 * i);
    *v = r;
    in_.remove_prefix(4);
    return true;
  }
  bool GetFixed64(uint64_t* v) {
    if (in_.size() < 8) return false;
    uint64_t r = 0;
    for (int i = 0; i < 8; ++i) r |= uint64_t{static_cast<uint8_t>(in_[i])} << (8 * i);
    *v = r;
    in_.remove_prefix(8);
    return true;
  }
  bool GetVarint32(uint32_t* v) {
    uint32_t r = 0;
    for (int shift = 0; shift <= 28; shift += 7) {
      if (in_.empty()) return false;
      const uint8_t b = static_cast<uint8_t>(in_[0]);
      in_.remove_prefix(1);
      if (shift == 28 && b > 0x0f) return false;  // more than 32 bits
      r |= uint32_t{b & 0x7fu} << shift;
      if ((b & 0x80) == 0) {
        *v = r;
        return true;
      }
    }
    return false;
  }
  bool GetBytes(size_t n, std::string_view* v) {
    if (in_.size() < n) return false;
    *v = in_.substr(0, n);
    in_.remove_prefix(n);
    return true;
  }
  bool GetLengthPrefixed(std::string_view* v) {
    uint32_t n = 0;
    return GetVarint32(&n) && GetBytes(n, v);
  }
  bool empty() const { return in_.empty(); }

 private:
  std::string_view in_;
};

absl::Status Corrupt(const char* what, const std::string& why) {
  return absl::DataLossError(absl::StrCat("snapshot ", what, " entry ", why));
}

}  // namespace

std::string EncodeHeader(const SnapshotHeader& header) {
  std::string out;
  out.push_back(static_cast<char>(EntryKind::kHeader));
  out.append(kMagic, sizeof(kMagic));
  PutFixed32(&out, header.format_version);
  PutFixed64(&out, header.range_id);
  PutFixed64(&out, header.revision);
  PutFixed64(&out, header.seqno);
  PutFixed64(&out, static_cast<uint64_t>(header.key_count));
  PutFixed64(&out, static_cast<uint64_t>(header.ctime_unix_ms));
  PutVarint32(&out, static_cast<uint32_t>(header.comparator.size()));
  out.append(header.comparator);
  return out;
}

absl::StatusOr<SnapshotHeader> DecodeHeader(std::string_view payload) {
  Reader r(payload);
  uint8_t kind = 0;
  std::string_view magic;
  if (!r.GetByte(&kind) || kind != static_cast<uint8_t>(EntryKind::kHeader) ||
      !r.GetBytes(sizeof(kMagic), &magic) ||
      std::memcmp(magic.data(), kMagic, sizeof(kMagic)) != 0) {
    return Corrupt("header", "has the wrong kind or magic (not a snapshot ledger?)");
  }
  SnapshotHeader h;
  if (!r.GetFixed32(&h.format_version)) return Corrupt("header", "is truncated");
  if (h.format_version != kFormatVersion) {
    return Corrupt("header", absl::StrCat("has unknown format version ", h.format_version));
  }
  uint64_t key_count = 0;
  uint64_t ctime = 0;
  std::string_view comparator;
  if (!r.GetFixed64(&h.range_id) || !r.GetFixed64(&h.revision) || !r.GetFixed64(&h.seqno) ||
      !r.GetFixed64(&key_count) || !r.GetFixed64(&ctime) || !r.GetLengthPrefixed(&comparator)) {
    return Corrupt("header", "is truncated");
  }
  if (!r.empty()) return Corrupt("header", "has trailing bytes");
  h.key_count = static_cast<int64_t>(key_count);
  h.ctime_unix_ms = static_cast<int64_t>(ctime);
  h.comparator = std::string(comparator);
  if (h.key_count < -1) return Corrupt("header", absl::StrCat("has key count ", h.key_count));
  return h;
}

std::string EncodeFooter(const SnapshotFooter& footer) {
  std::string out;
  out.push_back(static_cast<char>(EntryKind::kFooter));
  PutFixed64(&out, footer.record_count);
  PutFixed64(&out, footer.bytes);
  PutFixed64(&out, footer.data_entries);
  PutFixed32(&out, footer.crc32c);
  return out;
}

absl::StatusOr<SnapshotFooter> DecodeFooter(std::string_view payload) {
  Reader r(payload);
  uint8_t kind = 0;
  if (!r.GetByte(&kind) || kind != static_cast<uint8_t>(EntryKind::kFooter)) {
    return Corrupt("footer", "has the wrong kind (truncated snapshot?)");
  }
  if (payload.size() != kFooterBytes) {
    return Corrupt("footer", absl::StrCat("is ", payload.size(), " bytes, not ", kFooterBytes));
  }
  SnapshotFooter f;
  r.GetFixed64(&f.record_count);
  r.GetFixed64(&f.bytes);
  r.GetFixed64(&f.data_entries);
  r.GetFixed32(&f.crc32c);
  return f;
}

size_t EncodedRecordSize(std::string_view key, std::string_view value) {
  return VarintLength(key.size()) + key.size() + VarintLength(value.size()) + value.size();
}

DataEntryBuilder::DataEntryBuilder() {
  payload_.push_back(static_cast<char>(EntryKind::kData));
  PutFixed32(&payload_, 0);
}

void DataEntryBuilder::Add(std::string_view key, std::string_view value) {
  PutVarint32(&payload_, static_cast<uint32_t>(key.size()));
  payload_.append(key);
  PutVarint32(&payload_, static_cast<uint32_t>(value.size()));
  payload_.append(value);
  ++count_;
}

std::string DataEntryBuilder::Finish() {
  // The count is patched in at the end so records can be appended as the
  // iterator yields them.
  for (int i = 0; i < 4; ++i) payload_[1 + i] = static_cast<char>((count_ >> (8 * i)) & 0xff);
  std::string out = std::move(payload_);
  payload_.clear();
  payload_.push_back(static_cast<char>(EntryKind::kData));
  PutFixed32(&payload_, 0);
  count_ = 0;
  return out;
}

std::string_view RecordBytes(std::string_view payload) {
  return payload.size() < kDataHeaderBytes ? std::string_view() : payload.substr(kDataHeaderBytes);
}

absl::StatusOr<DecodedData> DecodeData(std::string_view payload) {
  Reader r(payload);
  uint8_t kind = 0;
  uint32_t count = 0;
  if (!r.GetByte(&kind) || kind != static_cast<uint8_t>(EntryKind::kData)) {
    return Corrupt("data", "has the wrong kind");
  }
  if (!r.GetFixed32(&count)) return Corrupt("data", "is truncated");
  if (count == 0) return Corrupt("data", "has no records");
  DecodedData out;
  out.record_bytes = RecordBytes(payload);
  // Each record takes at least 2 bytes; do not trust a huge count for the
  // reservation.
  out.records.reserve(std::min<size_t>(count, payload.size() / 2));
  for (uint32_t i = 0; i < count; ++i) {
    RecordView rec;
    if (!r.GetLengthPrefixed(&rec.key) || !r.GetLengthPrefixed(&rec.value)) {
      return Corrupt("data", absl::StrCat("is truncated at record ", i, " of ", count));
    }
    out.records.push_back(rec);
  }
  if (!r.empty()) return Corrupt("data", absl::StrCat("has bytes after its ", count, " records"));
  return out;
}

}  // namespace ledgerkv::snapshot
