// The bookie journal's record format (docs/bookie-format.md is the prose
// specification; keep the two in step).
//
// A journal file is a sequence of records, each a fixed 48-byte header and
// `payload_size` payload bytes, with no padding between records. Integers
// are little-endian.
//
//   offset size field
//    0     4   header_crc: masked CRC32C of (fixed64 file_number,
//              fixed64 record offset, header bytes [4, 48))
//    4     1   type: 1 entry, 2 fence, 3 sync mark
//    5     1   flags: bit 0 recovery add, bit 1 compaction copy
//    6     2   reserved, zero
//    8     4   payload_size (0 for fences and sync marks)
//   12     4   entry_checksum (proto Entry.checksum; 0 for fences)
//   16     8   ledger_id
//   24     8   entry_id (-1 for fences)
//   32     8   lac (-1 for fences)
//   40     8   batch_offset: offset of the first record of the write(2)
//              batch this record was written in (<= record offset)
//
// The header CRC covers the entry checksum, and the entry checksum covers
// the ledger id, entry id, LAC and payload: every byte of a record is
// protected while the payload is checksummed once. Seeding the CRC with the
// record's own position makes a copy of a header found anywhere else (say,
// inside a payload that stores journal bytes) fail verification.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "base/add_protocol.h"

namespace ledgerkv::bookie {

inline constexpr size_t kRecordHeaderSize = 48;
// Larger payloads are rejected on add (INVALID) and make a header invalid.
inline constexpr uint32_t kMaxPayloadSize = 64u << 20;
static_assert(kMaxPayloadSize == add_protocol::kMaxEntryPayloadBytes,
              "clients size their messages by add_protocol::kMaxEntryPayloadBytes");

// kSyncMark: written (without a sync of its own) just past the end of the
// journal after a batch's fdatasync returned, when no other batch follows at
// once; the next batch overwrites it. Found on replay, it proves the batch
// before it was synced, so a bad record in that batch is corruption, not a
// torn tail (docs/bookie-format.md, "Sync marks"). It is a batch of its own
// (batch_offset = its offset) and indexes nothing.
enum class RecordType : uint8_t { kEntry = 1, kFence = 2, kSyncMark = 3 };

inline constexpr uint8_t kFlagRecovery = 1;
inline constexpr uint8_t kFlagCopy = 2;

struct RecordHeader {
  RecordType type = RecordType::kEntry;
  uint8_t flags = 0;
  uint32_t payload_size = 0;
  uint32_t entry_checksum = 0;
  uint64_t ledger_id = 0;
  int64_t entry_id = -1;
  int64_t lac = -1;
  uint64_t batch_offset = 0;
};

// A record's place in the journal. `size` includes the header.
struct Location {
  uint64_t file = 0;
  uint64_t offset = 0;
  uint32_t size = 0;
  bool operator==(const Location&) const = default;
};

// A point in the journal: everything before (file, offset) is covered.
struct JournalPosition {
  uint64_t file = 0;
  uint64_t offset = 0;
  auto operator<=>(const JournalPosition&) const = default;
};

// Writes the kRecordHeaderSize-byte header of a record placed at
// (file_number, offset) into dst.
void EncodeRecordHeader(const RecordHeader& h, uint64_t file_number, uint64_t offset, char* dst);

// Returns true and fills *h if src[0, kRecordHeaderSize) is a well-formed
// header of a record placed at (file_number, offset): CRC matches, known
// type, reserved bits zero, payload_size <= kMaxPayloadSize, batch_offset
// <= offset, fences carry no payload.
bool DecodeRecordHeader(const char* src, uint64_t file_number, uint64_t offset, RecordHeader* h);

// Returns whether `payload` matches the entry checksum in `h`.
bool VerifyEntryPayload(const RecordHeader& h, std::string_view payload);

// "journal-000042.log".
std::string JournalFileName(uint64_t number);
// Parses a name made by JournalFileName; false for anything else.
bool ParseJournalFileName(std::string_view name, uint64_t* number);

}  // namespace ledgerkv::bookie
