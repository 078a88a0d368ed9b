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

#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "metadata/metadata_store.h"

namespace ledgerkv::ledger {

struct BookieInfo {
  std::string bookie_id;
  std::string address;
  std::string instance_id;
};

class Placement {
 public:
  // REQUIRES: store outlives the placement.
  Placement(metadata::MetadataStore* store, metadata::Keys keys);

  // Returns `count` distinct writable bookies, none of them in `exclude`
  // (bookie ids), in random order.
  // UNAVAILABLE naming the counts (needed, registered, read-only, excluded)
  // if there are not enough; UNAVAILABLE "cannot list bookies" if the store
  // fails (IsStoreFailure tells the two apart); INVALID_ARGUMENT if count < 1.
  absl::StatusOr<std::vector<BookieInfo>> Choose(int count,
                                                 const absl::flat_hash_set<std::string>& exclude);

  // Returns one writable bookie not in `exclude` (callers exclude the whole
  // current ensemble and the failed bookie). Errors as Choose.
  absl::StatusOr<BookieInfo> ChooseReplacement(const absl::flat_hash_set<std::string>& exclude);

  // Whether an error of Choose/ChooseReplacement came from the metadata
  // store (worth retrying) rather than from a shortage of bookies.
  static bool IsStoreFailure(const absl::Status& status);

 private:
  metadata::MetadataStore* const store_;
  const metadata::Keys keys_;
};

}  // namespace ledgerkv::ledger
