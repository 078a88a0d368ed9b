// Options and value types of the snapshot library (snapshot_store.h).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/statusor.h"

namespace rocksdb {
class DB;
class ColumnFamilyHandle;
class Snapshot;
struct ReadOptions;
}  // namespace rocksdb

namespace ledgerkv::ledger {
class LedgerClient;
}
namespace ledgerkv::metadata {
class MetadataStore;
}

namespace ledgerkv::snapshot {

struct SnapshotOptions {
  // Not owned; must outlive the SnapshotStore.
  ledger::LedgerClient* client = nullptr;
  metadata::MetadataStore* metadata = nullptr;
  // Key prefix /ledgerkv/<cluster>/ (the same cluster as the client's).
  std::string cluster = "default";
  // Quorums of every snapshot ledger: E >= Qw >= Qa >= 1.
  int ensemble_size = 3;
  int write_quorum = 2;
  int ack_quorum = 2;
  // Snapshots kept per range (K >= 1). Publishing a new one drops the
  // oldest beyond K from the manifest and deletes their ledgers.
  int retain = 2;
  // Data entries are cut once they reach this size; a record larger than
  // this travels alone in its entry.
  int64_t entry_target_bytes = int64_t{1} << 20;
  // Largest data entry (one record larger than this is refused). Must not
  // exceed the ledger client's max_entry_bytes.
  int64_t max_entry_bytes = int64_t{16} << 20;
  // Payload bytes the writer keeps in flight (appended, not yet acked).
  int64_t max_bytes_in_flight = int64_t{32} << 20;
  // Restore reads this many entries per ledger read, and the next window
  // is fetched while the current one is being written out.
  int restore_read_window = 16;
  // Restore cuts a new SST file once the current one reaches this size.
  int64_t max_sst_bytes = int64_t{256} << 20;
};

// One snapshot: what the manifest records and what Restore returns.
struct SnapshotInfo {
  uint64_t ledger_id = 0;
  uint64_t range_id = 0;
  // The range's revision V and log seqno S of the state the snapshot holds:
  // every log record <= seqno is in it, so replay starts at seqno + 1.
  uint64_t revision = 0;
  uint64_t seqno = 0;
  uint64_t record_count = 0;
  // Sum of key and value sizes.
  uint64_t bytes = 0;
};

// The (revision, seqno) of the state a snapshot copies, and its number of
// records when known (-1: unknown; goes into the header, and restore
// checks it).
struct SnapshotPoint {
  uint64_t revision = 0;
  uint64_t seqno = 0;
  int64_t key_count = -1;
};

// What to copy: one column family of a RocksDB, as of one rocksdb snapshot.
struct SnapshotSource {
  // Not owned; must stay open during the write.
  rocksdb::DB* db = nullptr;
  // nullptr: the default column family.
  rocksdb::ColumnFamilyHandle* column_family = nullptr;
  // The consistent point to copy. nullptr: the writer takes one with
  // db->GetSnapshot() and releases it when done. Writes to the DB go on
  // while the snapshot is written either way.
  const rocksdb::Snapshot* snapshot = nullptr;
  // Reads V and S at the point being copied (e.g. the range's applied-seqno
  // key, written in the same batch as the data). Called once, before any
  // data is read, with ReadOptions pinned to that point. When empty,
  // `point` is used: then the caller must have read it at `snapshot`.
  // Its key_count must be read at that point too (or be -1): a count read
  // at any other moment may not match the records copied.
  std::function<absl::StatusOr<SnapshotPoint>(const rocksdb::ReadOptions& at)> read_point;
  SnapshotPoint point;
};

// Where a restore loads: one column family, which must be empty.
struct RestoreTarget {
  // Not owned.
  rocksdb::DB* db = nullptr;
  // nullptr: the default column family.
  rocksdb::ColumnFamilyHandle* column_family = nullptr;
  // Directory for the temporary SST files (created if missing; the files
  // are removed afterwards). Empty: "<db dir>.restore" next to the DB, on
  // the same file system, so ingestion links the files instead of copying.
  std::string scratch_dir;
};

// Counters of one SnapshotStore, for export.
struct SnapshotStats {
  int64_t snapshots_written = 0;
  int64_t restores = 0;
  // Snapshots that failed to restore (corrupt, unreadable, missing); each
  // was logged to stderr with its ledger id.
  int64_t restore_failures = 0;
  // Ledgers of dropped snapshots that could not be deleted yet (they stay
  // in the manifest's ledgers_to_delete and are retried).
  int64_t delete_failures = 0;
};

}  // namespace ledgerkv::snapshot
