// SnapshotStore: range snapshots in sealed ledgers, the per-range manifest
// of retained snapshots, retention, and restore with fallback
// (ARCHITECTURE.md section 6; formats in docs/snapshot-format.md).
//
//   auto store = SnapshotStore::Create({.client = client, .metadata = meta});
//   // Snapshotter: copy the range's RocksDB as of a rocksdb snapshot while
//   // writes go on, seal it, publish it; then truncate the log.
//   auto info = (*store)->TakeSnapshot(range_id, {.db = db, .read_point = ...});
//   auto oldest = (*store)->OldestRetainedSeqno(range_id);
//   log_writer->Truncate(*oldest + 1);  // records <= S are in every snapshot
//   // Recovery: load the newest snapshot that verifies into an empty DB,
//   // then replay the log from info->seqno + 1.
//   auto used = (*store)->RestoreNewestValid(range_id, {.db = fresh_db});
//
// Threading: every method is thread-safe and blocking (ledger and metadata
// I/O): never call one from a gRPC callback or a ledger writer callback.
// Concurrent publishers of one range (an old and a new owner) are
// serialised by the manifest CAS.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "metadata/metadata_store.h"
#include "snapshot/snapshot_options.h"

namespace ledgerkv::snapshot {

class SnapshotStore {
 public:
  // INVALID_ARGUMENT if client or metadata is null, the cluster is empty,
  // not E >= Qw >= Qa >= 1, retain < 1, or a size is not positive (or
  // entry_target_bytes > max_entry_bytes).
  static absl::StatusOr<std::unique_ptr<SnapshotStore>> Create(SnapshotOptions options);

  SnapshotStore(const SnapshotStore&) = delete;
  SnapshotStore& operator=(const SnapshotStore&) = delete;

  // WriteSnapshot, then Publish. Returns the published snapshot.
  // Errors: those of WriteSnapshot; those of Publish, after which the new
  // ledger is deleted if the manifest does not name it (when the outcome of
  // the publish is unknown, the ledger is kept and the error says so).
  absl::StatusOr<SnapshotInfo> TakeSnapshot(uint64_t range_id, const SnapshotSource& source);

  // Writes the state of `source` (one column family as of one rocksdb
  // snapshot; writes to the DB are not paused) into a new ledger: header
  // (format version, range id, V, S, key count), sorted records packed into
  // ~entry_target_bytes entries with many appends in flight, footer
  // (record count, bytes, CRC32C); then seals the ledger. The ledger is in
  // no manifest yet (Publish adds it).
  // Errors (each names the range, and the ledger once it exists; a
  // half-written ledger is deleted): INVALID_ARGUMENT without a db; the
  // read_point callback's error; UNAVAILABLE / FAILED_PRECONDITION from the
  // ledger layer (no bookies, fenced, store down); RESOURCE_EXHAUSTED if a
  // record exceeds max_entry_bytes; RocksDB iteration errors.
  absl::StatusOr<SnapshotInfo> WriteSnapshot(uint64_t range_id, const SnapshotSource& source);

  // Adds a sealed snapshot to its range's manifest by CAS, keeping the
  // newest `retain` (by seqno); the ones dropped are moved to the
  // manifest's ledgers_to_delete in the same CAS, then their ledgers are
  // deleted and the list is cleared (a failed deletion is logged, counted
  // in stats().delete_failures and retried by the next Publish).
  // Idempotent: publishing a listed ledger again is OK and changes nothing.
  // FAILED_PRECONDITION (manifest unchanged) if the snapshot is older than
  // the oldest retained one (the log may be truncated below that); DATA_LOSS
  // if the manifest is unreadable; the store's error otherwise.
  // `*last_expected`: the manifest version the last CAS attempt expected
  // (unset if none was sent).
  absl::Status Publish(const SnapshotInfo& info,
                       std::optional<metadata::Version>* last_expected = nullptr);

  // The retained snapshots of `range_id`, oldest first (empty if none).
  // DATA_LOSS if the manifest is unreadable; the store's error otherwise.
  absl::StatusOr<std::vector<SnapshotInfo>> ListSnapshots(uint64_t range_id);

  // The seqno S of the oldest retained snapshot. Every log record <= S is in
  // every retained snapshot, so the log may drop records below S + 1; the
  // caller does the truncation (LogWriter::Truncate).
  // NOT_FOUND if the range has no snapshot (nothing may be truncated).
  absl::StatusOr<uint64_t> OldestRetainedSeqno(uint64_t range_id);

  // Loads `snapshot` (as listed by ListSnapshots) into the target column
  // family, which must be empty: reads the header and footer, then every
  // data entry, verifies range id, V, S, record count, bytes, order and
  // CRC32C, and only then ingests the records as SST files built with
  // SstFileWriter (bulk load; no key-by-key writes). On error the target
  // is unchanged. Returns what the ledger's header and footer say.
  // Errors name the ledger: DATA_LOSS for a corrupt, truncated, missing or
  // inconsistent snapshot; UNAVAILABLE if bookies could not be read;
  // FAILED_PRECONDITION if the target is not empty or orders keys with
  // another comparator; local RocksDB and file errors.
  absl::StatusOr<SnapshotInfo> Restore(const SnapshotInfo& snapshot, const RestoreTarget& target);

  // Restores the newest retained snapshot of `range_id` that verifies,
  // trying older ones after a failure of the snapshot itself; each failure
  // is logged to stderr with its ledger and counted in
  // stats().restore_failures. Returns the snapshot used (replay the log from
  // its seqno + 1).
  // NOT_FOUND if the range has no snapshot (a fresh range: start empty).
  // When every snapshot failed: DATA_LOSS if each was corrupt or missing,
  // UNAVAILABLE if some could not be read (retry later); the message names
  // every ledger. Never "empty" when snapshots exist. Target errors (not
  // empty, comparator, local I/O) are returned at once: another snapshot
  // would not help.
  absl::StatusOr<SnapshotInfo> RestoreNewestValid(uint64_t range_id, const RestoreTarget& target);

  // Drops every snapshot of `range_id` (for a dropped table): moves them to
  // the manifest's ledgers_to_delete by CAS, deletes their ledgers, then
  // deletes the manifest. OK if there was none. UNAVAILABLE naming the
  // ledgers that could not be deleted (the manifest stays, listing them,
  // and a later call retries); FAILED_PRECONDITION if a snapshot was
  // published meanwhile.
  absl::Status RemoveRange(uint64_t range_id);

  SnapshotStats stats() const;

  // Metadata key of the manifest of `range_id`:
  // /ledgerkv/<cluster>/snapshots/<range id, 20 digits>.
  std::string ManifestKey(uint64_t range_id) const;

 private:
  explicit SnapshotStore(SnapshotOptions options) : options_(std::move(options)) {}

  // Deletes the ledgers in the manifest's ledgers_to_delete, then removes
  // the deleted ones from the list by CAS. Failures are logged and counted;
  // returns the first.
  absl::Status DeleteDropped(uint64_t range_id);

  // Counts and logs a restore failure of the snapshot itself.
  void NoteRestoreFailure(const absl::Status& error);

  const SnapshotOptions options_;
  std::atomic<int64_t> snapshots_written_{0};
  std::atomic<int64_t> restores_{0};
  std::atomic<int64_t> restore_failures_{0};
  std::atomic<int64_t> delete_failures_{0};
};

}  // namespace ledgerkv::snapshot
