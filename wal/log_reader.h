// LogReader: reads a log's records in seqno order, from any seqno to the end
// of what is committed (docs/wal-format.md, "Reading").
//
//   auto reader = LogReader::Open(options, "range-7", snapshot_seqno + 1);
//   (*reader)->ReadThrough(writer->first_seqno() - 1, apply);   // replay
//
// Committed means: every record of a CLOSED segment, and the records of the
// OPEN segment up to its ledger's LAC. A writer's last entry becomes visible
// only with its next entry (or its close); after LogWriter::Open recovered
// the log, everything below the new writer's first_seqno() is readable.
//
// Entries are read in ranges (many entries per bookie request), records
// below the starting seqno inside the first entry are skipped, and the
// starting entry is found by binary search over entry headers.
//
// Corrupt or missing data (DATA_LOSS from the ledger layer, an undecodable
// entry, a gap in seqnos) is returned as DATA_LOSS, never skipped.
//
// Thread-safe (calls are serialised); every method blocks, so none may be
// called from a gRPC callback or a ledger writer callback.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "ledger/ledger_reader.h"
#include "proto/metadata.pb.h"
#include "wal/log_options.h"

namespace ledgerkv::wal {

struct LogRecord {
  uint64_t seqno = 0;
  std::string data;
};

class LogReader {
 public:
  // Opens a reader of log `name` positioned at `from_seqno`; 0 means the
  // oldest record the log still holds.
  // INVALID_ARGUMENT (options, name); NOT_FOUND if the log does not exist;
  // OUT_OF_RANGE if records at from_seqno were truncated away; the store's
  // error otherwise.
  static absl::StatusOr<std::unique_ptr<LogReader>> Open(const LogOptions& options,
                                                         std::string name, uint64_t from_seqno);

  LogReader(const LogReader&) = delete;
  LogReader& operator=(const LogReader&) = delete;

  // The seqno of the next record Next() returns.
  uint64_t position() const;

  // Returns the next committed records, in seqno order starting at
  // position() (about options.read_bytes of them, at most up to
  // `max_seqno`), and advances position() past them. An empty vector means
  // nothing is committed at position() yet: call again later to tail.
  // Errors leave position() unchanged:
  //   DATA_LOSS: a record that must exist cannot be read intact (no intact
  //     replica, undecodable entry, seqnos not contiguous, ledger missing);
  //   UNAVAILABLE: bookies or store unreachable (retry);
  //   OUT_OF_RANGE: the records at position() were truncated meanwhile;
  //   NOT_FOUND: the log was deleted.
  absl::StatusOr<std::vector<LogRecord>> Next(uint64_t max_seqno = UINT64_MAX);

  // Reads every record from position() through `last_seqno` and hands each
  // to `visit` in order (for replay). An error of `visit` stops the read and
  // is returned. OUT_OF_RANGE if the committed log ends before last_seqno;
  // Next()'s errors otherwise. REQUIRES: `visit` does not use this reader.
  absl::Status ReadThrough(uint64_t last_seqno,
                           const std::function<absl::Status(const LogRecord&)>& visit);

 private:
  // Where the reader is inside one segment's ledger.
  struct Cursor {
    meta::v1::LogSegment segment;
    std::unique_ptr<ledger::LedgerReader> ledger;
    int64_t next_entry = 0;
    // First seqno the next entry must have; 0 while unknown.
    uint64_t expected_seqno = 0;
  };

  LogReader(const LogOptions& options, std::string name, uint64_t position);

  // Loads the log metadata, finds the segment holding position_, opens its
  // ledger and the entry holding position_. False if no segment holds it
  // (nothing committed there yet).
  absl::StatusOr<bool> PositionLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Binary search for the last entry whose first seqno <= position_.
  absl::Status SeekLocked(Cursor& cursor) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The cursor's ledger is exhausted: true if it moved on to the next
  // segment, false if nothing more is committed now.
  absl::StatusOr<bool> AdvanceLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<meta::v1::LogMetadata> LoadLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The cursor's ledger is gone (NOT_FOUND) or no longer named by the log.
  // Drops the cursor and asks the log: OUT_OF_RANGE if a truncation moved
  // its start past position_; DATA_LOSS if the log still names the ledger
  // (records the log names are never reported as merely truncated); OK if
  // a truncation took the segment wholly below position_ (position again).
  absl::Status MissingLedgerLocked(uint64_t ledger_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // OUT_OF_RANGE if `log` starts above position_ (truncated), else OK.
  absl::Status TruncatedBelowLocked(const meta::v1::LogMetadata& log) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // OUT_OF_RANGE (and no cursor) if a truncation moved the log's start past
  // position_; OK otherwise, or the error reading the log.
  absl::Status TruncatedPastPositionLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status Annotate(const absl::Status& status, uint64_t ledger_id, int64_t first,
                        int64_t last) const;

  // Constant after construction.
  const LogOptions options_;
  const std::string name_;
  const std::string key_;

  mutable absl::Mutex mu_;
  uint64_t position_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<Cursor> cursor_ ABSL_GUARDED_BY(mu_);
  // Running estimate of an entry's size, to size range reads.
  int64_t entry_bytes_estimate_ ABSL_GUARDED_BY(mu_) = 64 << 10;
};

}  // namespace ledgerkv::wal
