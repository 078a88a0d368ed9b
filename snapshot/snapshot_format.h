// The payloads of a snapshot ledger's entries (docs/snapshot-format.md):
//
//   entry 0        header: range id, revision V, log seqno S, key count, ...
//   entries 1..n   data: sorted records (key, value), packed up to ~1 MiB
//   entry n+1      footer: record count, bytes, data entry count, CRC32C
//
// The ledger layer already frames and checksums every entry; these formats
// only need to be unambiguous and strict. The footer's CRC covers the record
// bytes of all data entries in order, so a dropped, repeated or reordered
// entry (or a writer bug that the per-entry checksum cannot see) is caught.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace ledgerkv::snapshot {

inline constexpr uint32_t kFormatVersion = 1;

// First byte of every entry payload.
enum class EntryKind : uint8_t { kHeader = 1, kData = 2, kFooter = 3 };

struct SnapshotHeader {
  uint32_t format_version = kFormatVersion;
  uint64_t range_id = 0;
  uint64_t revision = 0;
  uint64_t seqno = 0;
  // Number of records if the writer knew it up front, else -1. The footer
  // always has the exact count.
  int64_t key_count = -1;
  int64_t ctime_unix_ms = 0;
  // Name of the RocksDB comparator that ordered the records: a restore into
  // a column family with another order would build an unusable table.
  std::string comparator;
};

struct SnapshotFooter {
  uint64_t record_count = 0;
  // Sum of key and value sizes.
  uint64_t bytes = 0;
  // Number of data entries (entries 1..data_entries).
  uint64_t data_entries = 0;
  // CRC32C over the record bytes (RecordBytes) of every data entry, in order.
  uint32_t crc32c = 0;
};

std::string EncodeHeader(const SnapshotHeader& header);
// DATA_LOSS if the payload is not a header of a known format version (wrong
// kind, wrong magic, truncated, trailing bytes).
absl::StatusOr<SnapshotHeader> DecodeHeader(std::string_view payload);

std::string EncodeFooter(const SnapshotFooter& footer);
// DATA_LOSS if the payload is not a footer (wrong kind, wrong size).
absl::StatusOr<SnapshotFooter> DecodeFooter(std::string_view payload);

// Bytes of a data entry before its records (kind, count).
inline constexpr size_t kDataHeaderBytes = 1 + 4;

// Encoded size of one record in a data entry.
size_t EncodedRecordSize(std::string_view key, std::string_view value);

// Builds one data entry. Not thread-safe.
class DataEntryBuilder {
 public:
  DataEntryBuilder();

  void Add(std::string_view key, std::string_view value);
  uint32_t count() const { return count_; }
  // Encoded size so far, header included.
  size_t bytes() const { return payload_.size(); }
  // Returns the payload and leaves the builder empty.
  std::string Finish();

 private:
  uint32_t count_ = 0;
  std::string payload_;
};

struct RecordView {
  std::string_view key;
  std::string_view value;
};

struct DecodedData {
  // The bytes the footer's CRC covers: every record of the entry, encoded.
  std::string_view record_bytes;
  // Views into the payload.
  std::vector<RecordView> records;
};

// The record bytes of a data entry payload (everything after its header).
// REQUIRES: the payload decoded with DecodeData.
std::string_view RecordBytes(std::string_view payload);

// Parses a data entry. DATA_LOSS if the kind is wrong, the count is zero or
// does not match the records, or a length runs past the end.
absl::StatusOr<DecodedData> DecodeData(std::string_view payload);

}  // namespace ledgerkv::snapshot
