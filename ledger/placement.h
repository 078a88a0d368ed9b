// Placement: chooses the bookies of a new ensemble, or a replacement for a
// failed one, among the bookies registered under Keys(cluster).BookiesPrefix()
// that are writable. Choice is uniformly random, which spreads ledgers (and
// so load and recovery traffic) over all bookies.
//
// Thread-safe. Every call lists the registrations (a metadata store read):
// never call from a gRPC callback.
#pragma once

#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "metadata/metadata_store.h"

namespace ledgerkv::ledger {

struct BookieInfo {
  std::string bookie_id;
  std::string address;
  std::string instance_id;
};

// The bookies a choice must not return. By id: a bookie the ensemble names
// at another index (a bookie holds one place in a segment). By instance: a
// bookie that failed, or that the segment named, as instance I is not
// chosen again as I, nor when its instance is unknown (""); but the same
// id registered now as another known instance qualifies. That is the bookie
// re-provisioned under its id (disk wiped, cookie deleted): a new, empty
// replica that every RPC reaches only as that instance, so a spare like
// any other (docs/ledger-protocol.md, "Ensemble change").
class Exclusions {
 public:
  Exclusions() = default;
  // Excludes these ids, whatever instance they run as.
  Exclusions(const absl::flat_hash_set<std::string>& ids);  // NOLINT: implicit on purpose

  void ExcludeId(const std::string& id) { ids_.insert(id); }
  void ExcludeInstance(const std::string& id, const std::string& instance) {
    instances_[id].insert(instance);
  }
  bool Excludes(const std::string& id, const std::string& registered_instance) const;

 private:
  absl::flat_hash_set<std::string> ids_;
  absl::flat_hash_map<std::string, absl::flat_hash_set<std::string>> instances_;
};

class Placement {
 public:
  // REQUIRES: store outlives the placement.
  Placement(metadata::MetadataStore* store, metadata::Keys keys);

  // Returns `count` distinct writable bookies that `exclude` lets through,
  // in random order.
  // UNAVAILABLE naming the counts (needed, registered, read-only, excluded)
  // if there are not enough; UNAVAILABLE "cannot list bookies" if the store
  // fails (IsStoreFailure tells the two apart); INVALID_ARGUMENT if count < 1.
  absl::StatusOr<std::vector<BookieInfo>> Choose(int count, const Exclusions& exclude);

  // Returns one writable bookie that `exclude` lets through. Callers that
  // replace a failed bookie exclude the rest of the ensemble by id and the
  // failed bookie by instance. Errors as Choose.
  absl::StatusOr<BookieInfo> ChooseReplacement(const Exclusions& exclude);

  // Whether an error of Choose/ChooseReplacement came from the metadata
  // store (worth retrying) rather than from a shortage of bookies.
  static bool IsStoreFailure(const absl::Status& status);

 private:
  metadata::MetadataStore* const store_;
  const metadata::Keys keys_;
};

}  // namespace ledgerkv::ledger
