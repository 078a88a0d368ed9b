#include "snapshot/manifest.h"

#include <algorithm>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "snapshot/snapshot_format.h"

namespace ledgerkv::snapshot {
namespace {

bool Before(const meta::v1::SnapshotRecord& a, const meta::v1::SnapshotRecord& b) {
  return std::make_tuple(a.seqno(), a.ledger_id()) < std::make_tuple(b.seqno(), b.ledger_id());
}

}  // namespace

std::string ManifestKey(const std::string& cluster, uint64_t range_id) {
  // Zero-padded like Keys::Range so that listing order is id order.
  return absl::StrFormat("%ssnapshots/%020d", metadata::Keys(cluster).Root(), range_id);
}

absl::StatusOr<VersionedManifest> LoadManifest(metadata::MetadataStore& store,
                                               const std::string& key, uint64_t range_id) {
  VersionedManifest out;
  auto got = store.Get(key);
  if (absl::IsNotFound(got.status())) {
    out.manifest.set_range_id(range_id);
    return out;
  }
  if (!got.ok()) return got.status();
  out.version = got->version;
  if (!out.manifest.ParseFromString(got->value)) {
    return absl::DataLossError(absl::StrCat("snapshot manifest of range ", range_id, " is unparsable"));
  }
  if (out.manifest.range_id() != range_id) {
    return absl::DataLossError(absl::StrCat("snapshot manifest at ", key, " names range ",
                                            out.manifest.range_id(), ", not ", range_id));
  }
  const auto& s = out.manifest.snapshots();
  for (int i = 0; i < s.size(); ++i) {
    if (s[i].range_id() != range_id || (i > 0 && !Before(s[i - 1], s[i]))) {
      return absl::DataLossError(
          absl::StrCat("snapshot manifest of range ", range_id, " is inconsistent at ledger ",
                       s[i].ledger_id()));
    }
  }
  return out;
}

absl::StatusOr<metadata::Version> StoreManifest(metadata::MetadataStore& store,
                                                const std::string& key,
                                                const meta::v1::SnapshotManifest& manifest,
                                                metadata::Version expected) {
  return store.Put(key, manifest.SerializeAsString(), expected);
}

meta::v1::SnapshotRecord ToRecord(const SnapshotInfo& info) {
  meta::v1::SnapshotRecord r;
  r.set_ledger_id(info.ledger_id);
  r.set_range_id(info.range_id);
  r.set_revision(info.revision);
  r.set_seqno(info.seqno);
  r.set_record_count(info.record_count);
  r.set_bytes(info.bytes);
  r.set_ctime_unix_ms(absl::ToUnixMillis(absl::Now()));
  r.set_format_version(kFormatVersion);
  return r;
}

SnapshotInfo FromRecord(const meta::v1::SnapshotRecord& record) {
  SnapshotInfo info;
  info.ledger_id = record.ledger_id();
  info.range_id = record.range_id();
  info.revision = record.revision();
  info.seqno = record.seqno();
  info.record_count = record.record_count();
  info.bytes = record.bytes();
  return info;
}

absl::StatusOr<bool> AddToManifest(meta::v1::SnapshotManifest* manifest,
                                   const meta::v1::SnapshotRecord& record, int retain) {
  std::vector<meta::v1::SnapshotRecord> all(manifest->snapshots().begin(),
                                            manifest->snapshots().end());
  for (const auto& r : all) {
    if (r.ledger_id() == record.ledger_id()) return false;
  }
  if (!all.empty() && record.seqno() < all.front().seqno()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "snapshot in ledger ", record.ledger_id(), " of range ", record.range_id(), " at seqno ",
        record.seqno(), " is older than the oldest retained one (seqno ", all.front().seqno(),
        ", ledger ", all.front().ledger_id(), ")"));
  }
  all.insert(std::upper_bound(all.begin(), all.end(), record, Before), record);
  const size_t drop = all.size() > static_cast<size_t>(retain) ? all.size() - retain : 0;
  for (size_t i = 0; i < drop; ++i) {
    if (all[i].ledger_id() == record.ledger_id()) {
      return absl::FailedPreconditionError(
          absl::StrCat("snapshot in ledger ", record.ledger_id(), " at seqno ", record.seqno(),
                       " is older than the ", retain, " retained ones of range ",
                       record.range_id()));
    }
  }
  manifest->clear_snapshots();
  for (size_t i = 0; i < all.size(); ++i) {
    if (i < drop) {
      manifest->add_ledgers_to_delete(all[i].ledger_id());
    } else {
      *manifest->add_snapshots() = all[i];
    }
  }
  return true;
}

}  // namespace ledgerkv::snapshot
