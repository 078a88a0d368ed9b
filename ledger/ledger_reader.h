// LedgerReader: reads entries of a ledger, closed or still being written.
//
// A reader never returns an entry above the bound it knows (L6): the
// ledger's last_entry_id once CLOSED, otherwise the LAC (every entry <= the
// LAC was acknowledged to the writer, so it exists on Qa bookies and will
// survive recovery). The LAC is learned from the bookies (it rides on every
// add) and refreshed by ReadLac / WaitForLac.
//
// Every entry is verified against its checksum; a corrupt replica is skipped
// in favour of another, and an entry with no intact replica is DATA_LOSS,
// never "absent" (L10).
//
// Thread-safe; all methods block (they must not be called from a gRPC
// callback or a LedgerWriter callback).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/metadata.pb.h"

namespace ledgerkv::ledger {

struct ClientCore;

struct LedgerEntry {
  int64_t entry_id = 0;
  std::string payload;
};

class LedgerReader {
 public:
  LedgerReader(const LedgerReader&) = delete;
  LedgerReader& operator=(const LedgerReader&) = delete;

  uint64_t id() const { return id_; }

  // The metadata as last read.
  meta::v1::LedgerMetadata metadata() const;

  // Whether the ledger was CLOSED when the metadata was last read.
  bool closed() const;

  // The highest entry id Read may return now: last_entry_id when closed,
  // else the LAC last learned. -1 when nothing is readable.
  int64_t last_readable() const;

  // Returns entries first..last in order.
  // INVALID_ARGUMENT if first < 0 or last < first. OUT_OF_RANGE if last is
  // beyond last_readable() (for an unclosed ledger after one refresh of the
  // LAC): entries above the LAC may still be lost or rewritten by recovery.
  // DATA_LOSS if an entry has no intact replica (or every replica lacks it);
  // UNAVAILABLE if it could not be read from any replica (retry later).
  absl::StatusOr<std::vector<LedgerEntry>> Read(int64_t first, int64_t last);

  // Refreshes metadata and LAC and returns last_readable().
  // NOT_FOUND if the ledger was deleted; UNAVAILABLE if no bookie of the
  // last segment answered.
  absl::StatusOr<int64_t> ReadLac();

  // For tailing readers: returns last_readable() as soon as it is > `above`,
  // long-polling the bookies (the LAC advances when the writer's next add
  // carries it). DEADLINE_EXCEEDED if it did not advance within `timeout`;
  // OUT_OF_RANGE if the ledger is closed with last_entry_id <= above (it
  // will never advance: move on to the next ledger); NOT_FOUND if deleted.
  absl::StatusOr<int64_t> WaitForLac(int64_t above, absl::Duration timeout);

 private:
  friend class LedgerClient;
  // `version`: the metadata store's version of `metadata`.
  LedgerReader(std::shared_ptr<ClientCore> core, meta::v1::LedgerMetadata metadata,
               int64_t version);

  // Re-reads the metadata; if still unclosed, reads the LAC from the
  // bookies, long-polling up to `wait` for it to pass `above` (-2: no wait).
  absl::Status Refresh(int64_t above, absl::Duration wait);
  int64_t LastReadableLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Takes `metadata` unless what the reader holds is at least as new: two
  // concurrent refreshes may finish in either order, and an older load
  // must not turn a CLOSED ledger back into an OPEN one.
  void AdoptLocked(const meta::v1::LedgerMetadata& metadata, int64_t version)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::shared_ptr<ClientCore> core_;
  const uint64_t id_;

  mutable absl::Mutex mu_;
  meta::v1::LedgerMetadata metadata_ ABSL_GUARDED_BY(mu_);
  int64_t version_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t lac_ ABSL_GUARDED_BY(mu_) = -1;
};

}  // namespace ledgerkv::ledger
