#include "ledger/bookie/journal_reader.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace ledgerkv::bookie {
namespace {

constexpr uint64_t kReadChunk = 1 << 20;

}  // namespace

JournalScanner::JournalScanner(const RandomAccessFile* file, uint64_t file_number,
                               uint64_t file_size, uint64_t start)
    : file_(file),
      file_number_(file_number),
      file_size_(file_size),
      offset_(start),
      record_offset_(start) {}

absl::StatusOr<bool> JournalScanner::Fill(uint64_t pos, uint64_t n) {
  if (pos + n > file_size_) return false;
  if (pos >= buf_start_ && pos + n <= buf_start_ + buf_len_) return true;
  const uint64_t want = std::min(std::max(n, kReadChunk), file_size_ - pos);
  if (buf_.size() < want) buf_.resize(want);
  ASSIGN_OR_RETURN(size_t got, file_->Read(pos, want, buf_.data()));
  buf_start_ = pos;
  buf_len_ = got;
  // The file may have been truncated underneath us; treat it as its end.
  return got >= n;
}

absl::StatusOr<JournalScanner::Result> JournalScanner::Next() {
  record_offset_ = offset_;
  payload_ = {};
  if (offset_ == file_size_) return Result::kEnd;
  ASSIGN_OR_RETURN(bool have_header, Fill(offset_, kRecordHeaderSize));
  if (!have_header) return Result::kTruncated;
  if (!DecodeRecordHeader(At(offset_), file_number_, offset_, &header_)) return Result::kBadHeader;
  const uint64_t size = kRecordHeaderSize + header_.payload_size;
  ASSIGN_OR_RETURN(bool have_record, Fill(offset_, size));
  if (!have_record) return Result::kTruncated;
  payload_ = std::string_view(At(offset_) + kRecordHeaderSize, header_.payload_size);
  offset_ += size;
  if (header_.type == RecordType::kEntry && !VerifyEntryPayload(header_, payload_)) {
    return Result::kBadPayload;
  }
  return Result::kRecord;
}

absl::StatusOr<bool> LaterBatchExists(const RandomAccessFile* file, uint64_t file_number,
                                      uint64_t file_size, uint64_t offset) {
  std::string buf;
  std::string payload;
  for (uint64_t chunk = offset + 1; chunk + kRecordHeaderSize <= file_size; chunk += kReadChunk) {
    const uint64_t n = std::min<uint64_t>(kReadChunk + kRecordHeaderSize, file_size - chunk);
    buf.resize(n);
    ASSIGN_OR_RETURN(size_t got, file->Read(chunk, n, buf.data()));
    for (uint64_t i = 0; i + kRecordHeaderSize <= got && i < kReadChunk; ++i) {
      const char* p = buf.data() + i;
      // Cheap filter before the CRC: a plausible type and zero reserved bytes.
      if (p[4] < 1 || p[4] > 3 || p[6] != 0 || p[7] != 0) continue;
      RecordHeader h;
      const uint64_t at = chunk + i;
      if (!DecodeRecordHeader(p, file_number, at, &h)) continue;
      if (h.batch_offset <= offset) continue;  // same (torn) batch or earlier
      if (at + kRecordHeaderSize + h.payload_size > file_size) continue;
      if (h.type == RecordType::kEntry) {
        payload.resize(h.payload_size);
        ASSIGN_OR_RETURN(size_t pn, file->Read(at + kRecordHeaderSize, h.payload_size,
                                               payload.data()));
        if (pn != h.payload_size || !VerifyEntryPayload(h, payload)) continue;
      }
      return true;
    }
  }
  return false;
}

absl::StatusOr<std::string> ReadEntryRecord(const RandomAccessFile* file, const Location& loc,
                                            uint64_t ledger_id, int64_t entry_id,
                                            RecordHeader* header) {
  if (loc.size < kRecordHeaderSize) {
    return absl::DataLossError(absl::StrCat("index location of ledger ", ledger_id, " entry ",
                                            entry_id, " is shorter than a record header"));
  }
  std::string buf(loc.size, '\0');
  ASSIGN_OR_RETURN(size_t got, file->Read(loc.offset, loc.size, buf.data()));
  auto where = [&] {
    return absl::StrCat(JournalFileName(loc.file), " offset ", loc.offset, " (ledger ",
                        ledger_id, " entry ", entry_id, ")");
  };
  if (got != loc.size) {
    return absl::DataLossError(absl::StrCat("record cut short at ", where()));
  }
  if (!DecodeRecordHeader(buf.data(), loc.file, loc.offset, header)) {
    return absl::DataLossError(absl::StrCat("bad record header at ", where()));
  }
  if (header->type != RecordType::kEntry || header->ledger_id != ledger_id ||
      header->entry_id != entry_id || kRecordHeaderSize + header->payload_size != loc.size) {
    return absl::DataLossError(absl::StrCat("record at ", where(), " holds another entry"));
  }
  std::string_view payload(buf.data() + kRecordHeaderSize, header->payload_size);
  if (!VerifyEntryPayload(*header, payload)) {
    return absl::DataLossError(absl::StrCat("entry checksum mismatch at ", where()));
  }
  buf.erase(0, kRecordHeaderSize);
  return buf;
}

}  // namespace ledgerkv::bookie
