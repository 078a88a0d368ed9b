#include "snapshot/snapshot_store.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "ledger/ledger_client.h"
#include "metadata/metadata_store.h"
#include "snapshot/manifest.h"
#include "snapshot/snapshot_io.h"

namespace ledgerkv::snapshot {
namespace {

// Manifest CAS attempts before giving up: only publishers, retention and
// RemoveRange of one range race on it, so a few suffice.
constexpr int kCasAttempts = 20;

absl::Status WithContext(const absl::Status& s, const std::string& context) {
  return absl::Status(s.code(), absl::StrCat(context, ": ", s.message()));
}

bool Lists(const meta::v1::SnapshotManifest& m, uint64_t ledger_id) {
  return std::any_of(m.snapshots().begin(), m.snapshots().end(),
                     [&](const auto& r) { return r.ledger_id() == ledger_id; });
}

}  // namespace

absl::StatusOr<std::unique_ptr<SnapshotStore>> SnapshotStore::Create(SnapshotOptions options) {
  if (options.client == nullptr || options.metadata == nullptr || options.cluster.empty()) {
    return absl::InvalidArgumentError(
        "SnapshotOptions need a ledger client, a metadata store and a cluster");
  }
  if (!(options.ensemble_size >= options.write_quorum &&
        options.write_quorum >= options.ack_quorum && options.ack_quorum >= 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "snapshot quorums need E >= Qw >= Qa >= 1, got E=", options.ensemble_size,
        " Qw=", options.write_quorum, " Qa=", options.ack_quorum));
  }
  if (options.retain < 1 || options.entry_target_bytes < 1 || options.max_bytes_in_flight < 1 ||
      options.restore_read_window < 1 || options.max_sst_bytes < 1 ||
      options.entry_target_bytes > options.max_entry_bytes) {
    return absl::InvalidArgumentError(
        "SnapshotOptions: retain, sizes and windows must be positive, and entry_target_bytes "
        "<= max_entry_bytes");
  }
  return std::unique_ptr<SnapshotStore>(new SnapshotStore(std::move(options)));
}

std::string SnapshotStore::ManifestKey(uint64_t range_id) const {
  return snapshot::ManifestKey(options_.cluster, range_id);
}

absl::StatusOr<SnapshotInfo> SnapshotStore::WriteSnapshot(uint64_t range_id,
                                                          const SnapshotSource& source) {
  ASSIGN_OR_RETURN(SnapshotInfo info, WriteSnapshotLedger(options_, range_id, source));
  snapshots_written_.fetch_add(1, std::memory_order_relaxed);
  return info;
}

absl::StatusOr<SnapshotInfo> SnapshotStore::TakeSnapshot(uint64_t range_id,
                                                         const SnapshotSource& source) {
  ASSIGN_OR_RETURN(SnapshotInfo info, WriteSnapshot(range_id, source));
  std::optional<metadata::Version> expected;
  absl::Status published = Publish(info, &expected);
  if (published.ok()) return info;

  // Delete the ledger only if the manifest certainly does not name it and
  // never will: a publish whose reply was lost may have succeeded, or (an
  // etcd request past its client deadline) may still land while the
  // manifest is at the version it expected.
  const std::string context =
      absl::StrCat("snapshot in ledger ", info.ledger_id, " of range ", range_id, " not published");
  auto listed = LoadManifest(*options_.metadata, ManifestKey(range_id), range_id);
  if (!listed.ok()) {
    return WithContext(published, absl::StrCat(context, " (outcome unknown, ledger kept)"));
  }
  if (Lists(listed->manifest, info.ledger_id)) return info;
  if (expected.has_value() && listed->version == *expected) {
    return WithContext(published, absl::StrCat(context, " (outcome unknown, ledger kept)"));
  }
  absl::Status deleted = options_.client->DeleteLedger(info.ledger_id);
  if (!deleted.ok() && !absl::IsNotFound(deleted)) {
    absl::FPrintF(stderr, "snapshot: range %d: could not delete unpublished ledger %d: %s\n",
                  range_id, info.ledger_id, deleted.ToString());
  }
  return WithContext(published, context);
}

absl::Status SnapshotStore::Publish(const SnapshotInfo& info,
                                    std::optional<metadata::Version>* last_expected) {
  const std::string key = ManifestKey(info.range_id);
  const meta::v1::SnapshotRecord record = ToRecord(info);
  for (int attempt = 1;; ++attempt) {
    ASSIGN_OR_RETURN(VersionedManifest loaded,
                     LoadManifest(*options_.metadata, key, info.range_id));
    ASSIGN_OR_RETURN(bool added, AddToManifest(&loaded.manifest, record, options_.retain));
    if (!added) break;
    if (last_expected != nullptr) *last_expected = loaded.version;
    auto stored = StoreManifest(*options_.metadata, key, loaded.manifest, loaded.version);
    if (stored.ok()) break;
    if (!absl::IsAborted(stored.status()) || attempt == kCasAttempts) {
      return WithContext(stored.status(),
                         absl::StrCat("publishing snapshot ledger ", info.ledger_id,
                                      " of range ", info.range_id));
    }
  }
  // The snapshot is published; deletion failures are retried next time.
  IgnoreError(DeleteDropped(info.range_id));
  return absl::OkStatus();
}

absl::Status SnapshotStore::DeleteDropped(uint64_t range_id) {
  const std::string key = ManifestKey(range_id);
  auto loaded = LoadManifest(*options_.metadata, key, range_id);
  if (!loaded.ok()) return loaded.status();
  std::vector<uint64_t> deleted;
  absl::Status first_error;
  for (uint64_t id : loaded->manifest.ledgers_to_delete()) {
    absl::Status s = options_.client->DeleteLedger(id);
    if (s.ok() || absl::IsNotFound(s)) {
      deleted.push_back(id);
      continue;
    }
    delete_failures_.fetch_add(1, std::memory_order_relaxed);
    absl::FPrintF(stderr, "snapshot: range %d: deleting dropped snapshot ledger %d: %s\n",
                  range_id, id, s.ToString());
    if (first_error.ok()) first_error = s;
  }
  if (deleted.empty()) return first_error;

  for (int attempt = 1;; ++attempt) {
    if (attempt > 1) {
      loaded = LoadManifest(*options_.metadata, key, range_id);
      if (!loaded.ok()) return loaded.status();
    }
    meta::v1::SnapshotManifest& m = loaded->manifest;
    auto* list = m.mutable_ledgers_to_delete();
    list->erase(std::remove_if(list->begin(), list->end(),
                               [&](uint64_t id) {
                                 return std::find(deleted.begin(), deleted.end(), id) !=
                                        deleted.end();
                               }),
                list->end());
    auto stored = StoreManifest(*options_.metadata, key, m, loaded->version);
    if (stored.ok()) break;
    if (!absl::IsAborted(stored.status()) || attempt == kCasAttempts) {
      // Harmless: the next Publish finds the ledgers gone (NOT_FOUND).
      absl::FPrintF(stderr, "snapshot: range %d: clearing ledgers_to_delete: %s\n", range_id,
                    stored.status().ToString());
      return stored.status();
    }
  }
  return first_error;
}

absl::StatusOr<std::vector<SnapshotInfo>> SnapshotStore::ListSnapshots(uint64_t range_id) {
  ASSIGN_OR_RETURN(VersionedManifest loaded,
                   LoadManifest(*options_.metadata, ManifestKey(range_id), range_id));
  std::vector<SnapshotInfo> out;
  for (const auto& r : loaded.manifest.snapshots()) out.push_back(FromRecord(r));
  return out;
}

absl::StatusOr<uint64_t> SnapshotStore::OldestRetainedSeqno(uint64_t range_id) {
  ASSIGN_OR_RETURN(std::vector<SnapshotInfo> list, ListSnapshots(range_id));
  if (list.empty()) return absl::NotFoundError(absl::StrCat("range ", range_id, " has no snapshot"));
  return list.front().seqno;
}

void SnapshotStore::NoteRestoreFailure(const absl::Status& error) {
  restore_failures_.fetch_add(1, std::memory_order_relaxed);
  absl::FPrintF(stderr, "snapshot: restore failed: %s\n", error.ToString());
}

absl::StatusOr<SnapshotInfo> SnapshotStore::Restore(const SnapshotInfo& snapshot,
                                                    const RestoreTarget& target) {
  bool snapshot_fault = false;
  auto restored = RestoreSnapshotLedger(options_, snapshot, target, &snapshot_fault);
  if (restored.ok()) {
    restores_.fetch_add(1, std::memory_order_relaxed);
  } else if (snapshot_fault) {
    NoteRestoreFailure(restored.status());
  }
  return restored;
}

absl::StatusOr<SnapshotInfo> SnapshotStore::RestoreNewestValid(uint64_t range_id,
                                                               const RestoreTarget& target) {
  ASSIGN_OR_RETURN(std::vector<SnapshotInfo> list, ListSnapshots(range_id));
  if (list.empty()) return absl::NotFoundError(absl::StrCat("range ", range_id, " has no snapshot"));
  std::vector<std::string> failures;
  bool all_data_loss = true;
  for (auto it = list.rbegin(); it != list.rend(); ++it) {
    bool snapshot_fault = false;
    auto restored = RestoreSnapshotLedger(options_, *it, target, &snapshot_fault);
    if (restored.ok()) {
      restores_.fetch_add(1, std::memory_order_relaxed);
      return restored;
    }
    if (!snapshot_fault) return restored.status();
    NoteRestoreFailure(restored.status());
    failures.push_back(std::string(restored.status().message()));
    all_data_loss = all_data_loss && absl::IsDataLoss(restored.status());
  }
  const std::string message =
      absl::StrCat("all ", list.size(), " snapshots of range ", range_id,
                   " failed to restore: ", absl::StrJoin(failures, "; "));
  return all_data_loss ? absl::DataLossError(message) : absl::UnavailableError(message);
}

absl::Status SnapshotStore::RemoveRange(uint64_t range_id) {
  const std::string key = ManifestKey(range_id);
  // Metadata first: every ledger moves to ledgers_to_delete, so none leaks
  // if a deletion fails.
  for (int attempt = 1;; ++attempt) {
    ASSIGN_OR_RETURN(VersionedManifest loaded, LoadManifest(*options_.metadata, key, range_id));
    if (loaded.version == metadata::kMustNotExist) return absl::OkStatus();
    if (loaded.manifest.snapshots().empty()) break;
    for (const auto& r : loaded.manifest.snapshots()) {
      loaded.manifest.add_ledgers_to_delete(r.ledger_id());
    }
    loaded.manifest.clear_snapshots();
    auto stored = StoreManifest(*options_.metadata, key, loaded.manifest, loaded.version);
    if (stored.ok()) break;
    if (!absl::IsAborted(stored.status()) || attempt == kCasAttempts) {
      return WithContext(stored.status(), absl::StrCat("removing snapshots of range ", range_id));
    }
  }
  if (absl::Status s = DeleteDropped(range_id); !s.ok()) {
    return absl::UnavailableError(
        absl::StrCat("removing snapshots of range ", range_id, ": ", s.message()));
  }
  ASSIGN_OR_RETURN(VersionedManifest left, LoadManifest(*options_.metadata, key, range_id));
  if (left.version == metadata::kMustNotExist) return absl::OkStatus();
  if (!left.manifest.snapshots().empty() || !left.manifest.ledgers_to_delete().empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("snapshots of range ", range_id, " changed while being removed"));
  }
  absl::Status s = options_.metadata->Delete(key, left.version);
  if (absl::IsNotFound(s)) return absl::OkStatus();
  return s.ok() ? s : WithContext(s, absl::StrCat("removing snapshots of range ", range_id));
}

SnapshotStats SnapshotStore::stats() const {
  SnapshotStats s;
  s.snapshots_written = snapshots_written_.load(std::memory_order_relaxed);
  s.restores = restores_.load(std::memory_order_relaxed);
  s.restore_failures = restore_failures_.load(std::memory_order_relaxed);
  s.delete_failures = delete_failures_.load(std::memory_order_relaxed);
  return s;
}

}  // namespace ledgerkv::snapshot
