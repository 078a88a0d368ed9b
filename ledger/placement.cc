#include "ledger/placement.h"

#include <algorithm>
#include <utility>

#include "absl/random/random.h"
#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "proto/metadata.pb.h"

namespace ledgerkv::ledger {
namespace {
// Status payload marking a failed listing (Placement::IsStoreFailure).
constexpr char kStoreFailurePayload[] = "type.ledgerkv/placement.store_failure";
}  // namespace

Exclusions::Exclusions(const absl::flat_hash_set<std::string>& ids) : ids_(ids) {}

bool Exclusions::Excludes(const std::string& id, const std::string& registered_instance) const {
  if (ids_.contains(id)) return true;
  auto it = instances_.find(id);
  if (it == instances_.end()) return false;
  // Unknown on either side: it may be the instance that failed.
  return registered_instance.empty() || it->second.contains(registered_instance) ||
         it->second.contains("");
}

Placement::Placement(metadata::MetadataStore* store, metadata::Keys keys)
    : store_(store), keys_(std::move(keys)) {}

absl::StatusOr<std::vector<BookieInfo>> Placement::Choose(
    int count, const Exclusions& exclude) {
  if (count < 1) return absl::InvalidArgumentError(absl::StrCat("cannot place ", count, " bookies"));
  auto listed = store_->List(keys_.BookiesPrefix());
  if (!listed.ok()) {
    absl::Status error =
        absl::UnavailableError(absl::StrCat("cannot list bookies: ", listed.status().ToString()));
    error.SetPayload(kStoreFailurePayload, absl::Cord("1"));
    return error;
  }
  std::vector<BookieInfo> candidates;
  int read_only = 0, excluded = 0, unparsable = 0;
  for (const auto& kv : *listed) {
    meta::v1::BookieRegistration registration;
    if (!registration.ParseFromString(kv.value) || registration.address().empty()) {
      ++unparsable;
      continue;
    }
    std::string id = registration.bookie_id().empty()
                         ? kv.key.substr(keys_.BookiesPrefix().size())
                         : registration.bookie_id();
    if (exclude.Excludes(id, registration.instance_id())) {
      ++excluded;
      continue;
    }
    if (registration.read_only()) {
      ++read_only;
      continue;
    }
    candidates.push_back(BookieInfo{std::move(id), registration.address(),
                                    registration.instance_id()});
  }
  if (static_cast<int>(candidates.size()) < count) {
    return absl::UnavailableError(absl::StrCat(
        "not enough writable bookies: need ", count, ", have ", candidates.size(), " (",
        listed->size(), " registered, ", read_only, " read-only, ", excluded, " excluded",
        unparsable > 0 ? absl::StrCat(", ", unparsable, " unparsable") : "", ")"));
  }
  absl::BitGen gen;
  std::shuffle(candidates.begin(), candidates.end(), gen);
  candidates.resize(count);
  return candidates;
}

bool Placement::IsStoreFailure(const absl::Status& status) {
  return status.GetPayload(kStoreFailurePayload).has_value();
}

absl::StatusOr<BookieInfo> Placement::ChooseReplacement(const Exclusions& exclude) {
  auto chosen = Choose(1, exclude);
  if (!chosen.ok()) return chosen.status();
  return std::move(chosen->front());
}

}  // namespace ledgerkv::ledger
