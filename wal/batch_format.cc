#include "wal/batch_format.h"

#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace ledgerkv::wal {
namespace {

void PutFixed(std::string* out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

uint64_t GetFixed(std::string_view in, int bytes) {
  uint64_t value = 0;
  for (int i = 0; i < bytes; ++i) value |= uint64_t{static_cast<uint8_t>(in[i])} << (8 * i);
  return value;
}

void PutVarint32(std::string* out, uint32_t value) {
  while (value >= 0x80) {
    out->push_back(static_cast<char>((value & 0x7f) | 0x80));
    value >>= 7;
  }
  out->push_back(static_cast<char>(value));
}

// Advances *in past the varint. False if it is truncated or too long.
bool GetVarint32(std::string_view* in, uint32_t* value) {
  uint32_t result = 0;
  for (int shift = 0; shift <= 28 && !in->empty(); shift += 7) {
    const uint8_t byte = static_cast<uint8_t>(in->front());
    in->remove_prefix(1);
    if (shift == 28 && byte > 0x0f) return false;
    result |= uint32_t{byte & 0x7fu} << shift;
    if ((byte & 0x80) == 0) {
      *value = result;
      return true;
    }
  }
  return false;
}

}  // namespace

BatchBuilder::BatchBuilder(uint64_t first_seqno) : first_seqno_(first_seqno) {
  payload_.reserve(kBatchHeaderBytes);
  payload_.push_back(static_cast<char>(kBatchFormatVersion));
  PutFixed(&payload_, first_seqno_, 8);
  PutFixed(&payload_, 0, 4);
}

void BatchBuilder::Add(std::string_view record) {
  PutVarint32(&payload_, static_cast<uint32_t>(record.size()));
  payload_.append(record);
  ++count_;
}

std::string BatchBuilder::Finish() {
  std::string count;
  PutFixed(&count, count_, 4);
  std::memcpy(payload_.data() + 9, count.data(), 4);
  std::string out = std::move(payload_);
  first_seqno_ += count_;
  count_ = 0;
  payload_.clear();
  payload_.push_back(static_cast<char>(kBatchFormatVersion));
  PutFixed(&payload_, first_seqno_, 8);
  PutFixed(&payload_, 0, 4);
  return out;
}

absl::StatusOr<BatchHeader> DecodeBatchHeader(std::string_view payload) {
  if (payload.size() < kBatchHeaderBytes) {
    return absl::DataLossError(
        absl::StrCat("log entry of ", payload.size(), " bytes is shorter than its header"));
  }
  if (static_cast<uint8_t>(payload[0]) != kBatchFormatVersion) {
    return absl::DataLossError(absl::StrCat("log entry has unknown format version ",
                                            static_cast<int>(static_cast<uint8_t>(payload[0]))));
  }
  BatchHeader header;
  header.first_seqno = GetFixed(payload.substr(1), 8);
  header.count = static_cast<uint32_t>(GetFixed(payload.substr(9), 4));
  if (header.count == 0 || header.first_seqno == 0) {
    return absl::DataLossError(absl::StrCat("log entry header is invalid (first seqno ",
                                            header.first_seqno, ", count ", header.count, ")"));
  }
  return header;
}

absl::StatusOr<DecodedBatch> DecodeBatch(std::string_view payload) {
  auto header = DecodeBatchHeader(payload);
  if (!header.ok()) return header.status();
  DecodedBatch batch;
  batch.header = *header;
  std::string_view rest = payload.substr(kBatchHeaderBytes);
  // Every record takes at least one byte: a count beyond that is corrupt and
  // must not drive a huge reservation.
  if (header->count > rest.size()) {
    return absl::DataLossError(absl::StrCat("log entry claims ", header->count,
                                            " records in ", rest.size(), " bytes"));
  }
  batch.records.reserve(header->count);
  for (uint32_t i = 0; i < header->count; ++i) {
    uint32_t length = 0;
    if (!GetVarint32(&rest, &length) || length > rest.size()) {
      return absl::DataLossError(absl::StrCat("log entry (first seqno ", header->first_seqno,
                                              ") is truncated in record ", i));
    }
    batch.records.push_back(rest.substr(0, length));
    rest.remove_prefix(length);
  }
  if (!rest.empty()) {
    return absl::DataLossError(absl::StrCat("log entry (first seqno ", header->first_seqno, ") has ",
                                            rest.size(), " bytes after its last record"));
  }
  return batch;
}

}  // namespace ledgerkv::wal
