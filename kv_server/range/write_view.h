// WriteView: evaluates one write request (Put, Delete, Increment, or a
// Txn's compares and ops) against the range's pending view - applied
// RocksDB state overlaid with the effects appended to the log but not yet
// applied - and resolves it into a range.v1.Effect (docs/range-server.md,
// "Write path"). Ops of a txn see the changes of the ops before them.
//
// Threading: not thread-safe. The sequencer uses one per request, under
// its lock, so the pending overlay cannot change meanwhile; the apply path
// may write RocksDB concurrently, but only states the overlay still holds.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kv_server/range/limits.h"
#include "kv_server/range/local_store.h"
#include "kv_server/range/stored_value.h"
#include "proto/kv.pb.h"
#include "proto/range.pb.h"

namespace ledgerkv::kv {

// One key's newest unapplied state, and the write that set it.
struct PendingState {
  std::optional<StoredValue> state;  // nullopt: deleted
  uint64_t write_id = 0;
};
using PendingOverlay = std::map<std::string, PendingState, std::less<>>;

class WriteView {
 public:
  // `revision` is the revision this request gets if it changes anything.
  WriteView(LocalStore& store, const PendingOverlay& pending, int64_t revision,
            const Limits& limits)
      : store_(store), pending_(pending), revision_(revision), limits_(limits) {}

  // Each op evaluates against the view and, when it changes something,
  // records the change in the view. Errors change nothing in the view:
  //   Put: FAILED_PRECONDITION when expected_version / expected_mod_revision
  //     does not match (naming expected and actual);
  //   Delete: RESOURCE_EXHAUSTED if a range holds more than
  //     max_keys_per_request keys;
  //   Increment: FAILED_PRECONDITION for a value that is not a decimal
  //     int64, OUT_OF_RANGE on overflow;
  //   local read errors (INTERNAL, DATA_LOSS).
  // Requests must be validated first. Response headers are left unset.
  absl::Status Put(const ledgerkv::v1::PutRequest& request, ledgerkv::v1::PutResponse* response);
  absl::Status Delete(const ledgerkv::v1::DeleteRequest& request,
                      ledgerkv::v1::DeleteResponse* response);
  absl::Status Increment(const ledgerkv::v1::IncrementRequest& request,
                         ledgerkv::v1::IncrementResponse* response);
  absl::Status Get(const ledgerkv::v1::GetRequest& request, ledgerkv::v1::GetResponse* response);
  // Whether the compare holds, as etcd decides it: a missing key fails
  // every VALUE compare and has version/create/mod revision 0.
  absl::StatusOr<bool> Compare(const ledgerkv::v1::Compare& compare);

  bool changed() const { return !order_.empty(); }
  int64_t revision() const { return revision_; }
  // The resolved effect: one mutation per changed key (its final state),
  // in the order the keys were first changed. REQUIRES: changed().
  range::v1::Effect BuildEffect() const;
  // What this request changes in the range's key_count and bytes (stats of
  // LocalStore::Apply): final states of the changed keys against their
  // states in the pending view before the request. Exact because the view
  // is the log prefix the effect is applied on (see range_impl.cc).
  StatsDelta stats_delta() const { return delta_; }
  // The changed keys and their final states (nullopt: deleted).
  const std::map<std::string, std::optional<StoredValue>, std::less<>>& changes() const {
    return changes_;
  }

 private:
  absl::StatusOr<std::optional<StoredValue>> Lookup(std::string_view key);
  // Present keys of [start, end) in order, at most `max` + 1 of them.
  absl::StatusOr<std::vector<std::pair<std::string, StoredValue>>> Collect(std::string_view start,
                                                                           std::string_view end,
                                                                           int64_t max);
  // Records `state` as the key's new state; `before` is its state in the
  // view before the change (what Lookup or Collect returned).
  void Set(const std::string& key, std::optional<StoredValue> state,
           const std::optional<StoredValue>& before);

  LocalStore& store_;
  const PendingOverlay& pending_;
  const int64_t revision_;
  const Limits limits_;
  std::map<std::string, std::optional<StoredValue>, std::less<>> changes_;
  std::vector<std::string> order_;
  StatsDelta delta_;
};

// Fills a KeyValue from a stored state.
void ToKeyValue(std::string_view key, const StoredValue& v, ledgerkv::v1::KeyValue* kv);

}  // namespace ledgerkv::kv
