// The payload of one log entry: a batch of records with contiguous seqnos
// (docs/wal-format.md, "Entry format"). The ledger layer already frames and
// checksums the payload; this layer only needs to find the records in it.
//
//   byte     format version (1)
//   fixed64  first_seqno, little-endian
//   fixed32  count (>= 1), little-endian
//   count x  { varint32 length; length bytes }
//
// Record i of the batch has seqno first_seqno + i. The count is a fixed
// field so a builder can append records as they arrive and patch it when
// the batch is cut; the first seqno is at a fixed offset so a reader can
// binary-search a ledger by entry header.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace ledgerkv::wal {

inline constexpr uint8_t kBatchFormatVersion = 1;
inline constexpr size_t kBatchHeaderBytes = 1 + 8 + 4;
// Largest encoded length prefix of one record.
inline constexpr size_t kMaxRecordOverhead = 5;

// Builds one batch payload. Not thread-safe.
class BatchBuilder {
 public:
  explicit BatchBuilder(uint64_t first_seqno);

  void Add(std::string_view record);
  uint32_t count() const { return count_; }
  uint64_t first_seqno() const { return first_seqno_; }
  // Seqno of the last record added. REQUIRES: count() > 0.
  uint64_t last_seqno() const { return first_seqno_ + count_ - 1; }
  // Encoded size so far.
  size_t bytes() const { return payload_.size(); }
  // Returns the payload and leaves the builder empty (count 0), ready for
  // the next batch, which starts at last_seqno() + 1.
  std::string Finish();

 private:
  uint64_t first_seqno_;
  uint32_t count_ = 0;
  std::string payload_;
};

struct BatchHeader {
  uint64_t first_seqno = 0;
  uint32_t count = 0;
  uint64_t last_seqno() const { return first_seqno + count - 1; }
};

struct DecodedBatch {
  BatchHeader header;
  // Views into the decoded payload; records[i] has seqno first_seqno + i.
  std::vector<std::string_view> records;
};

// Parses only the header. DATA_LOSS if the payload is too short, of an
// unknown version, or has a zero count or a zero first seqno.
absl::StatusOr<BatchHeader> DecodeBatchHeader(std::string_view payload);

// Parses the whole batch. DATA_LOSS as DecodeBatchHeader, or if a length
// runs past the end, or bytes are left after the last record.
absl::StatusOr<DecodedBatch> DecodeBatch(std::string_view payload);

}  // namespace ledgerkv::wal
