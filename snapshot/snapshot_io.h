// The two halves of the snapshot library that move data: writing a snapshot
// ledger from a RocksDB snapshot, and restoring one into a column family.
// SnapshotStore (snapshot_store.h) adds the manifest around them. Internal
// to snapshot/; formats in docs/snapshot-format.md.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "rocksdb/status.h"
#include "snapshot/snapshot_options.h"

namespace ledgerkv::snapshot {

// Writes the state of `source` into a new ledger (header, data, footer) and
// seals it. The ledger is not in any manifest yet. On failure the new
// ledger is deleted (a failed deletion is logged: the ledger leaks until a
// sweep) and the error names the range and the ledger.
// REQUIRES: options checked by SnapshotStore::Create.
absl::StatusOr<SnapshotInfo> WriteSnapshotLedger(const SnapshotOptions& options,
                                                 uint64_t range_id, const SnapshotSource& source);

// FAILED_PRECONDITION unless the target column family holds no key;
// INVALID_ARGUMENT if target.db is null.
absl::Status CheckTargetEmpty(const RestoreTarget& target);

// Reads the snapshot in ledger `expected.ledger_id`, checks it against
// `expected` (range, revision, seqno, and record count and bytes from the
// manifest) and against its own footer (record count, bytes, CRC32C, entry
// count), and only then ingests it into the target, which must be empty.
// Returns what the ledger's header and footer say.
// Errors name the ledger. `*snapshot_fault` tells whether the snapshot
// itself is to blame (DATA_LOSS: corrupt, truncated, missing, inconsistent;
// UNAVAILABLE: bookies unreachable), in which case an older snapshot may
// serve, or the target/caller (local I/O, non-empty target, comparator
// mismatch), in which case no other snapshot would do better.
absl::StatusOr<SnapshotInfo> RestoreSnapshotLedger(const SnapshotOptions& options,
                                                   const SnapshotInfo& expected,
                                                   const RestoreTarget& target,
                                                   bool* snapshot_fault);

// Maps a RocksDB status to an absl one, with `context` in front.
absl::Status FromRocks(const rocksdb::Status& s, const std::string& context);

}  // namespace ledgerkv::snapshot
