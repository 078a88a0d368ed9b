#include "wal/log_reader.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "ledger/ledger_client.h"
#include "metadata/metadata_store.h"
#include "wal/batch_format.h"
#include "wal/log_metadata.h"

namespace ledgerkv::wal {
namespace {

// Entries asked for in one range read (the ledger splits it further into
// bookie requests).
constexpr int64_t kMaxEntriesPerRead = 1024;

absl::Status TruncatedError(const std::string& name, uint64_t position, uint64_t oldest) {
  return absl::OutOfRangeError(absl::StrCat("log ", name, ": records from seqno ", position,
                                            " were truncated (the oldest left is ", oldest, ")"));
}

}  // namespace

absl::StatusOr<std::unique_ptr<LogReader>> LogReader::Open(const LogOptions& options,
                                                           std::string name, uint64_t from_seqno) {
  RETURN_IF_ERROR(CheckLogOptions(options));
  RETURN_IF_ERROR(CheckLogName(name));
  if (options.read_bytes <= 0) return absl::InvalidArgumentError("LogOptions.read_bytes must be positive");
  const std::string key = metadata::Keys(options.cluster).Log(name);
  ASSIGN_OR_RETURN(VersionedLog log, LoadLog(*options.metadata, key, name));
  const uint64_t oldest =
      log.metadata.segments_size() > 0 ? log.metadata.segments(0).first_seqno() : 1;
  if (from_seqno == 0) from_seqno = oldest;
  if (from_seqno < oldest) return TruncatedError(name, from_seqno, oldest);
  return std::unique_ptr<LogReader>(new LogReader(options, std::move(name), from_seqno));
}

LogReader::LogReader(const LogOptions& options, std::string name, uint64_t position)
    : options_(options),
      name_(std::move(name)),
      key_(metadata::Keys(options.cluster).Log(name_)),
      position_(position) {}

uint64_t LogReader::position() const {
  absl::MutexLock l(&mu_);
  return position_;
}

absl::Status LogReader::Annotate(const absl::Status& status, uint64_t ledger_id, int64_t first,
                                 int64_t last) const {
  return absl::Status(status.code(), absl::StrCat("log ", name_, ", ledger ", ledger_id, ", entries ",
                                                  first, "..", last, ": ", status.message()));
}

absl::StatusOr<meta::v1::LogMetadata> LogReader::LoadLocked() {
  ASSIGN_OR_RETURN(VersionedLog log, LoadLog(*options_.metadata, key_, name_));
  return std::move(log.metadata);
}

absl::StatusOr<bool> LogReader::PositionLocked() {
  ASSIGN_OR_RETURN(meta::v1::LogMetadata log, LoadLocked());
  if (log.segments_size() == 0) return false;
  RETURN_IF_ERROR(TruncatedBelowLocked(log));
  const meta::v1::LogSegment* found = nullptr;
  for (const meta::v1::LogSegment& s : log.segments()) {
    if (s.first_seqno() <= position_ &&
        (s.state() == meta::v1::LogSegment::OPEN || position_ <= s.last_seqno())) {
      found = &s;
      break;
    }
  }
  if (found == nullptr) return false;  // beyond the end of the log

  auto cursor = std::make_unique<Cursor>();
  cursor->segment = *found;
  auto opened = options_.client->OpenLedger(found->ledger_id(), ledger::OpenMode::kNoRecovery);
  if (absl::IsNotFound(opened.status())) {
    RETURN_IF_ERROR(MissingLedgerLocked(found->ledger_id()));
    // Not named any more, yet the log still starts at or below position_:
    // the segment that held position_ is gone from the middle of the log.
    return absl::DataLossError(absl::StrCat("log ", name_, ": ledger ", found->ledger_id(),
                                            " holding seqno ", position_,
                                            " left the log, which still starts at or below it"));
  }
  if (!opened.ok()) return Annotate(opened.status(), found->ledger_id(), 0, 0);
  cursor->ledger = *std::move(opened);
  if (position_ == found->first_seqno()) {
    cursor->next_entry = 0;
    cursor->expected_seqno = found->first_seqno();
  } else {
    RETURN_IF_ERROR(SeekLocked(*cursor));
  }
  cursor_ = std::move(cursor);
  return true;
}

absl::Status LogReader::TruncatedBelowLocked(const meta::v1::LogMetadata& log) const {
  if (log.segments_size() > 0 && log.segments(0).first_seqno() > position_) {
    return TruncatedError(name_, position_, log.segments(0).first_seqno());
  }
  return absl::OkStatus();
}

absl::Status LogReader::TruncatedPastPositionLocked() {
  ASSIGN_OR_RETURN(meta::v1::LogMetadata now, LoadLocked());
  absl::Status truncated = TruncatedBelowLocked(now);
  if (!truncated.ok()) cursor_.reset();
  return truncated;
}

absl::Status LogReader::MissingLedgerLocked(uint64_t ledger_id) {
  cursor_.reset();
  // Either truncated just now, or lost: the log metadata tells which.
  ASSIGN_OR_RETURN(meta::v1::LogMetadata now, LoadLocked());
  RETURN_IF_ERROR(TruncatedBelowLocked(now));
  for (const meta::v1::LogSegment& s : now.segments()) {
    if (s.ledger_id() == ledger_id) {
      return absl::DataLossError(absl::StrCat("log ", name_, ": ledger ", ledger_id,
                                              " of segment from seqno ", s.first_seqno(),
                                              " is missing; the log still names it"));
    }
  }
  // Segments leave the log only from its start, and only whole ones below
  // the cut: this one ended below position_, so nothing in it is needed.
  return absl::OkStatus();
}

absl::Status LogReader::SeekLocked(Cursor& cursor) {
  const uint64_t ledger_id = cursor.segment.ledger_id();
  const int64_t bound = cursor.ledger->last_readable();
  cursor.next_entry = 0;
  cursor.expected_seqno = cursor.segment.first_seqno();
  if (bound <= 0) return absl::OkStatus();
  // Largest entry whose first seqno <= position_; entry 0's is the
  // segment's first seqno, which is <= position_.
  int64_t lo = 0;
  uint64_t lo_first = cursor.segment.first_seqno();
  int64_t hi = bound;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo + 1) / 2;
    auto entries = cursor.ledger->Read(mid, mid);
    if (!entries.ok()) return Annotate(entries.status(), ledger_id, mid, mid);
    auto header = DecodeBatchHeader((*entries)[0].payload);
    if (!header.ok()) return Annotate(header.status(), ledger_id, mid, mid);
    if (header->first_seqno <= position_) {
      lo = mid;
      lo_first = header->first_seqno;
    } else {
      hi = mid - 1;
    }
  }
  cursor.next_entry = lo;
  cursor.expected_seqno = lo_first;
  return absl::OkStatus();
}

absl::StatusOr<bool> LogReader::AdvanceLocked() {
  Cursor& c = *cursor_;
  const uint64_t ledger_id = c.segment.ledger_id();
  ASSIGN_OR_RETURN(meta::v1::LogMetadata log, LoadLocked());
  const meta::v1::LogSegment* segment = nullptr;
  for (const meta::v1::LogSegment& s : log.segments()) {
    if (s.ledger_id() == ledger_id) segment = &s;
  }
  if (segment == nullptr) {
    RETURN_IF_ERROR(MissingLedgerLocked(ledger_id));
    return true;  // truncated below position_: position again
  }
  c.segment = *segment;
  // Still OPEN: the writer's next entries (or its roll) are not committed yet.
  if (segment->state() == meta::v1::LogSegment::OPEN) return false;
  if (!c.ledger->closed()) {
    // Closed before its segment was (roll, recovery): see its final end.
    auto bound = c.ledger->ReadLac();
    if (absl::IsNotFound(bound.status())) {
      RETURN_IF_ERROR(MissingLedgerLocked(ledger_id));
      return true;
    }
    if (!bound.ok()) return Annotate(bound.status(), ledger_id, c.next_entry, c.next_entry);
    if (c.next_entry <= *bound) return true;
  }
  // Every entry was read: the records must end exactly at the segment's end.
  const uint64_t ledger_last =
      c.next_entry == 0 ? segment->first_seqno() - 1 : c.expected_seqno - 1;
  if (ledger_last != segment->last_seqno()) {
    return absl::DataLossError(absl::StrCat("log ", name_, ": ledger ", ledger_id,
                                            " ends at seqno ", ledger_last, " but its segment at ",
                                            segment->last_seqno()));
  }
  cursor_.reset();
  return true;
}

absl::StatusOr<std::vector<LogRecord>> LogReader::Next(uint64_t max_seqno) {
  absl::MutexLock l(&mu_);
  std::vector<LogRecord> out;
  for (;;) {
    if (position_ > max_seqno) return out;
    if (cursor_ == nullptr) {
      ASSIGN_OR_RETURN(bool found, PositionLocked());
      if (!found) return out;
      if (position_ > max_seqno) return out;
    }
    Cursor& c = *cursor_;
    const uint64_t ledger_id = c.segment.ledger_id();
    int64_t bound = c.ledger->last_readable();
    if (c.next_entry > bound) {
      auto lac = c.ledger->ReadLac();
      if (absl::IsNotFound(lac.status())) {
        RETURN_IF_ERROR(MissingLedgerLocked(ledger_id));
        continue;  // truncated below position_: position again
      }
      if (!lac.ok()) return Annotate(lac.status(), ledger_id, c.next_entry, c.next_entry);
      bound = *lac;
      if (c.next_entry > bound) {
        ASSIGN_OR_RETURN(bool moved, AdvanceLocked());
        if (!moved) return out;
        continue;
      }
    }

    const int64_t want =
        std::clamp<int64_t>(options_.read_bytes / std::max<int64_t>(1, entry_bytes_estimate_), 1,
                            kMaxEntriesPerRead);
    const int64_t last = std::min(bound, c.next_entry + want - 1);
    auto entries = c.ledger->Read(c.next_entry, last);
    if (absl::IsNotFound(entries.status())) {
      RETURN_IF_ERROR(MissingLedgerLocked(ledger_id));
      continue;
    }
    if (absl::IsDataLoss(entries.status())) {
      // Every replica absent is also what a ledger deleted by a truncation
      // looks like to a reader holding its old metadata: only the log
      // tells loss from truncation.
      absl::Status truncated = TruncatedPastPositionLocked();
      if (!truncated.ok()) return truncated;
    }
    if (!entries.ok()) return Annotate(entries.status(), ledger_id, c.next_entry, last);

    // Decode everything before changing any state, so an error leaves the
    // reader where it was.
    std::vector<LogRecord> got;
    uint64_t position = position_;
    uint64_t expected = c.expected_seqno;
    int64_t next_entry = c.next_entry;
    int64_t bytes = 0;
    bool limit_reached = false;
    const bool closed_segment = c.segment.state() == meta::v1::LogSegment::CLOSED;
    for (const ledger::LedgerEntry& entry : *entries) {
      bytes += static_cast<int64_t>(entry.payload.size());
      auto batch = DecodeBatch(entry.payload);
      if (!batch.ok()) return Annotate(batch.status(), ledger_id, entry.entry_id, entry.entry_id);
      const BatchHeader& h = batch->header;
      if (h.first_seqno != expected || h.first_seqno > position) {
        return absl::DataLossError(absl::StrCat("log ", name_, ": ledger ", ledger_id, " entry ",
                                                entry.entry_id, " starts at seqno ", h.first_seqno,
                                                ", expected ", expected));
      }
      if (closed_segment && h.last_seqno() > c.segment.last_seqno()) {
        return absl::DataLossError(absl::StrCat("log ", name_, ": ledger ", ledger_id, " entry ",
                                                entry.entry_id, " holds seqno ", h.last_seqno(),
                                                " beyond its segment's last ", c.segment.last_seqno()));
      }
      const uint64_t take_to = std::min(h.last_seqno(), max_seqno);
      for (uint64_t seqno = std::max(position, h.first_seqno); seqno <= take_to; ++seqno) {
        got.push_back(LogRecord{seqno, std::string(batch->records[seqno - h.first_seqno])});
      }
      if (h.last_seqno() > max_seqno) {
        // Stop inside this entry; it is read again (and skipped up to
        // position) by the next call.
        position = std::max(position, max_seqno + 1);
        limit_reached = true;
        break;
      }
      position = std::max(position, h.last_seqno() + 1);
      expected = h.last_seqno() + 1;
      next_entry = entry.entry_id + 1;
    }
    entry_bytes_estimate_ =
        std::max<int64_t>(1, bytes / std::max<int64_t>(1, static_cast<int64_t>(entries->size())));
    position_ = position;
    c.next_entry = next_entry;
    c.expected_seqno = expected;
    for (LogRecord& r : got) out.push_back(std::move(r));
    if (!out.empty() || limit_reached) return out;
  }
}

absl::Status LogReader::ReadThrough(uint64_t last_seqno,
                                    const std::function<absl::Status(const LogRecord&)>& visit) {
  for (;;) {
    if (position() > last_seqno) return absl::OkStatus();
    ASSIGN_OR_RETURN(std::vector<LogRecord> records, Next(last_seqno));
    if (records.empty()) {
      if (position() > last_seqno) return absl::OkStatus();
      return absl::OutOfRangeError(absl::StrCat("log ", name_, ": committed records end before seqno ",
                                                position(), "; asked to read through ", last_seqno));
    }
    for (const LogRecord& record : records) RETURN_IF_ERROR(visit(record));
  }
}

}  // namespace ledgerkv::wal
