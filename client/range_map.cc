#include "client/range_map.h"

namespace ledgerkv::client {

RangeRoute* RangeMap::Find(std::vector<RangeRoute>& routes, absl::string_view key) {
  for (auto& r : routes) {
    if (key >= r.start && (r.end.empty() || key < r.end)) return &r;
  }
  return nullptr;
}

void RangeMap::Update(const std::string& table,
                      const google::protobuf::RepeatedPtrField<v1::RangeInfo>& ranges) {
  std::vector<RangeRoute> routes;
  routes.reserve(ranges.size());
  for (const auto& info : ranges) {
    routes.push_back(RangeRoute{info.range_id(), info.start(), info.end(), info.owner()});
  }
  absl::MutexLock l(&mu_);
  tables_[table] = std::move(routes);
}

std::optional<std::string> RangeMap::OwnerOf(absl::string_view table, absl::string_view key) const {
  absl::MutexLock l(&mu_);
  auto it = tables_.find(table);
  if (it == tables_.end()) return std::nullopt;
  for (const auto& r : it->second) {
    if (key >= r.start && (r.end.empty() || key < r.end)) {
      if (r.owner.empty()) return std::nullopt;
      return r.owner;
    }
  }
  return std::nullopt;
}

std::optional<std::string> RangeMap::StartOfRangeBelow(absl::string_view table,
                                                       absl::string_view end) const {
  absl::MutexLock l(&mu_);
  auto it = tables_.find(table);
  if (it == tables_.end() || it->second.empty() || it->second.front().range_id == 0) {
    return std::nullopt;
  }
  // Routes are in key order: the last one starting below `end`.
  const RangeRoute* below = &it->second.front();
  for (const auto& r : it->second) {
    if (end.empty() || r.start < end) below = &r;
  }
  return below->start;
}

bool RangeMap::HasLayout(absl::string_view table) const {
  absl::MutexLock l(&mu_);
  auto it = tables_.find(table);
  return it != tables_.end() && !it->second.empty() && it->second.front().range_id != 0;
}

void RangeMap::LearnOwner(const std::string& table, absl::string_view key,
                          const std::string& owner) {
  absl::MutexLock l(&mu_);
  auto& routes = tables_[table];
  if (RangeRoute* r = Find(routes, key); r != nullptr) {
    r->owner = owner;
    return;
  }
  // Unknown layout: the hint stands for the whole table. Ranges are only
  // ever learned whole from Update, so this never overlaps a real range.
  if (routes.empty()) routes.push_back(RangeRoute{0, "", "", owner});
}

void RangeMap::ForgetOwner(absl::string_view table, absl::string_view key,
                           absl::string_view only_if) {
  absl::MutexLock l(&mu_);
  auto it = tables_.find(table);
  if (it == tables_.end()) return;
  RangeRoute* r = Find(it->second, key);
  if (r == nullptr) return;
  if (only_if.empty() || r->owner == only_if) r->owner.clear();
}

void RangeMap::ForgetTable(absl::string_view table) {
  absl::MutexLock l(&mu_);
  tables_.erase(table);
}

std::vector<RangeRoute> RangeMap::Routes(absl::string_view table) const {
  absl::MutexLock l(&mu_);
  auto it = tables_.find(table);
  if (it == tables_.end()) return {};
  return it->second;
}

}  // namespace ledgerkv::client
