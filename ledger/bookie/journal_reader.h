// Sequential reading of one journal file (startup replay) and the check
// that tells a torn tail from corruption in the middle of the journal.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "base/file.h"
#include "ledger/bookie/journal_format.h"

namespace ledgerkv::bookie {

class JournalScanner {
 public:
  enum class Result {
    kRecord,      // a valid record; header()/payload() describe it
    kEnd,         // offset() == file size: no more records
    kBadHeader,   // the bytes at offset() are not a valid header
    kTruncated,   // fewer bytes than a header, or than the record, remain
    kBadPayload,  // valid header, payload fails the entry checksum
  };

  // Scans `file` (file_size bytes, number file_number) from `start`.
  // `file` must outlive the scanner.
  JournalScanner(const RandomAccessFile* file, uint64_t file_number, uint64_t file_size,
                 uint64_t start);

  // Examines the record at offset(). On kRecord and kBadPayload the scanner
  // then stands at the next record; otherwise it stays at the bad spot.
  // Errors: the file could not be read.
  absl::StatusOr<Result> Next();

  // The header and payload of the record Next() just returned (kRecord or
  // kBadPayload); the payload is valid until the next call.
  const RecordHeader& header() const { return header_; }
  std::string_view payload() const { return payload_; }
  // The offset of the record Next() just examined.
  uint64_t record_offset() const { return record_offset_; }
  // Where the next record starts (or the bad spot).
  uint64_t offset() const { return offset_; }

 private:
  // Makes file bytes [pos, pos+n) available at buf_; false if past EOF.
  absl::StatusOr<bool> Fill(uint64_t pos, uint64_t n);
  const char* At(uint64_t pos) const { return buf_.data() + (pos - buf_start_); }

  const RandomAccessFile* const file_;
  const uint64_t file_number_;
  const uint64_t file_size_;
  uint64_t offset_;
  uint64_t record_offset_;
  std::string buf_;
  uint64_t buf_start_ = 0;
  uint64_t buf_len_ = 0;
  RecordHeader header_;
  std::string_view payload_;
};

// Returns whether some valid record written by a LATER write batch than the
// one holding `offset` lies after `offset` in the file. Batches are written
// one at a time, each synced before the next is written, so a crash can
// only tear the last batch: a bad record followed by a later batch is
// corruption in the middle of the journal, not a torn tail.
absl::StatusOr<bool> LaterBatchExists(const RandomAccessFile* file, uint64_t file_number,
                                      uint64_t file_size, uint64_t offset);

// Reads the record at `loc` and verifies it: the header, that it is an
// entry of (ledger_id, entry_id), the payload checksum. Returns the payload.
// DATA_LOSS when verification fails (callers report CORRUPT), other errors
// for I/O failures.
absl::StatusOr<std::string> ReadEntryRecord(const RandomAccessFile* file, const Location& loc,
                                            uint64_t ledger_id, int64_t entry_id,
                                            RecordHeader* header);

}  // namespace ledgerkv::bookie
