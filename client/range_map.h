// RangeMap: the client's cache of "which server owns the range holding this
// key", per table. The routing seam for cluster mode: filled from
// DescribeTable/CreateTable answers (RangeInfo.owner) and from the
// `ledgerkv-owner` hint of an UNAVAILABLE answer. A miss, or an owner that
// is not known, means "ask the current seed". Thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include "absl/strings/string_view.h"
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "google/protobuf/repeated_field.h"
#include "proto/kv.pb.h"

namespace ledgerkv::client {

struct RangeRoute {
  uint64_t range_id = 0;  // 0 when learned from an owner hint only
  std::string start;
  std::string end;    // exclusive; empty = end of the table
  std::string owner;  // host:port; empty = unknown (use the seed)
};

class RangeMap {
 public:
  // Replaces everything known about `table` with `ranges` (in key order, as
  // DescribeTable returns them).
  void Update(const std::string& table,
              const google::protobuf::RepeatedPtrField<v1::RangeInfo>& ranges)
      ABSL_LOCKS_EXCLUDED(mu_);

  // The known owner of the range of `table` holding `key`, or nullopt.
  std::optional<std::string> OwnerOf(absl::string_view table, absl::string_view key) const
      ABSL_LOCKS_EXCLUDED(mu_);

  // The start key of the known range holding the keys just below `end`
  // (an empty `end`: the table's last range), which a reverse scan reads
  // first. nullopt while the table's layout is not known.
  std::optional<std::string> StartOfRangeBelow(absl::string_view table,
                                               absl::string_view end) const
      ABSL_LOCKS_EXCLUDED(mu_);

  // True once the table's ranges are known (from Update), not just an
  // owner hint standing for the whole table.
  bool HasLayout(absl::string_view table) const ABSL_LOCKS_EXCLUDED(mu_);

  // Records a redirect: `owner` serves `key` of `table`. If no range of the
  // table is known, the hint covers the whole table until the next Update.
  void LearnOwner(const std::string& table, absl::string_view key, const std::string& owner)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Drops the owner of the range holding `key` (it did not answer), so that
  // the next request goes to a seed. With a non-empty `only_if`, drops it
  // only while it is still `only_if`: a failure at an old owner must not
  // erase a newer owner that another call learned meanwhile.
  void ForgetOwner(absl::string_view table, absl::string_view key,
                   absl::string_view only_if = {}) ABSL_LOCKS_EXCLUDED(mu_);

  // Drops the table (dropped, or unknown to the server).
  void ForgetTable(absl::string_view table) ABSL_LOCKS_EXCLUDED(mu_);

  // A copy of the routes known for `table` (empty if none).
  std::vector<RangeRoute> Routes(absl::string_view table) const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  static RangeRoute* Find(std::vector<RangeRoute>& routes, absl::string_view key);

  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::vector<RangeRoute>> tables_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ledgerkv::client
