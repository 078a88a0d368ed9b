// The manifest record (proto SnapshotManifest at snapshots/<range id:020>):
// load, CAS, and the insertion rule with retention. Layout and rules:
// docs/snapshot-format.md, "Manifest". Internal to snapshot/.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "metadata/metadata_store.h"
#include "proto/metadata.pb.h"
#include "snapshot/snapshot_options.h"

namespace ledgerkv::snapshot {

// "/ledgerkv/<cluster>/snapshots/<range id, 20 digits>".
std::string ManifestKey(const std::string& cluster, uint64_t range_id);

struct VersionedManifest {
  meta::v1::SnapshotManifest manifest;
  // metadata::kMustNotExist when the range has no manifest yet.
  metadata::Version version = metadata::kMustNotExist;
};

// Reads the manifest of `range_id`; an absent key is an empty manifest with
// version kMustNotExist. DATA_LOSS if it does not parse, names another range
// or is out of order; the store's error otherwise.
absl::StatusOr<VersionedManifest> LoadManifest(metadata::MetadataStore& store,
                                               const std::string& key, uint64_t range_id);

// Writes `manifest` if the key's version is still `expected`. ABORTED when
// it moved.
absl::StatusOr<metadata::Version> StoreManifest(metadata::MetadataStore& store,
                                                const std::string& key,
                                                const meta::v1::SnapshotManifest& manifest,
                                                metadata::Version expected);

meta::v1::SnapshotRecord ToRecord(const SnapshotInfo& info);
SnapshotInfo FromRecord(const meta::v1::SnapshotRecord& record);

// Inserts `record` in (seqno, ledger id) order, then moves the oldest
// snapshots beyond `retain` to ledgers_to_delete. Returns false (and changes
// nothing) if the ledger is already listed.
// FAILED_PRECONDITION (nothing changed) if the record is older than every
// retained snapshot: the log may already be truncated below the oldest one,
// so an older snapshot could never be replayed forward. Also if the record
// itself would be dropped by retention.
absl::StatusOr<bool> AddToManifest(meta::v1::SnapshotManifest* manifest,
                                   const meta::v1::SnapshotRecord& record, int retain);

}  // namespace ledgerkv::snapshot
