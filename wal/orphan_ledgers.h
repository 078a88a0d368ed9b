// Collecting the ledgers a log's open or roll created and that the log does
// not, and never will, name (docs/wal-format.md, "Orphan ledgers").
#pragma once

#include "absl/status/statusor.h"
#include "wal/log_options.h"

namespace ledgerkv::wal {

struct OrphanLedgerSweep {
  int deleted = 0;  // ledgers deleted
  int waiting = 0;  // unnamed ledgers of a log still at their epoch (a roll may be in flight)
};

// Lists the cluster's ledgers and deletes (metadata first; bookies reclaim
// the space) each one whose custom metadata names a log (`log`,
// `log_epoch`, as Open and a roll write them) when that log no longer
// exists, or when its epoch is above the ledger's and no segment names it.
// Such a ledger can never be named: only a CAS of the writer at the
// ledger's epoch could add it, and raising the epoch changed the version
// that CAS expects. Ledgers without a `log` (snapshots, tools) and logs that
// do not load (DATA_LOSS, store errors) are left alone. Returns the counts;
// the first error otherwise (the store's listing, or a delete; others are
// still attempted).
absl::StatusOr<OrphanLedgerSweep> DeleteOrphanLedgers(const LogOptions& options);

}  // namespace ledgerkv::wal
