// TableCatalog: the tables of a cluster and their ranges, stored in the
// metadata store (tables/<name> -> TableMetadata, ranges/<id> ->
// RangeMetadata; docs/range-server.md, "Metadata"), with an in-memory cache.
//
// Standalone mode: this process is the only writer of the table records, so
// the cache is exact once Load() ran. Cluster mode will refresh it from
// watches (the interface stays).
//
// Threading: every method is thread-safe. Get/List read the cache only and
// never block on I/O (gRPC reactions may call them). Load, CreateTable,
// DropTable and Sweep do metadata I/O: never call them from a reaction.
// Mutations are serialised among themselves.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/synchronization/mutex.h"
#include "kv_server/range/limits.h"
#include "metadata/metadata_store.h"
#include "proto/metadata.pb.h"

namespace ledgerkv::kv {

// At most this many ranges (split keys + 1) per table.
inline constexpr int kMaxRangesPerTable = 1000;

// INVALID_ARGUMENT unless `name` is 1..128 characters of [A-Za-z0-9_.-].
absl::Status CheckTableName(std::string_view name);

// INVALID_ARGUMENT unless the split keys are non-empty, within
// limits.max_key_bytes, strictly increasing, and at most
// kMaxRangesPerTable - 1 of them. Messages name the offending index.
absl::Status CheckSplitKeys(const std::vector<std::string>& split_keys, const Limits& limits);

// The range of `table` that holds `key` (ranges tile the key space, so
// there always is one). REQUIRES: table.ranges() is non-empty and sorted.
const meta::v1::RangeSpec& RangeForKey(const meta::v1::TableMetadata& table, std::string_view key);

// "3 [a, m)" / "4 [m, )" with non-printable bytes escaped, for messages.
std::string DescribeRange(const meta::v1::RangeSpec& range);

class TableCatalog {
 public:
  // Called by DropTable for each range of the dropped table, after the
  // table record is gone: must stop serving the range and delete its log,
  // snapshots and local files. The range record is deleted only after it
  // returns OK.
  using RangeCleanup = std::function<absl::Status(const meta::v1::RangeMetadata& range)>;

  // `store` must outlive the catalog.
  TableCatalog(metadata::MetadataStore* store, std::string cluster, Limits limits);

  TableCatalog(const TableCatalog&) = delete;
  TableCatalog& operator=(const TableCatalog&) = delete;

  // (Re)loads every table record into the cache.
  // DATA_LOSS if a record does not parse; the store's error otherwise.
  absl::Status Load();

  // Creates table `name` with ranges split at `split_keys`: allocates a
  // table id and one range id per range, writes the create's intent
  // (creating/<table id>) and the range records, then commits the table
  // record in one Txn that requires the table key absent and the intent
  // unchanged, deleting the intent (docs/cluster.md, "Leftovers"). Returns
  // the new table. INVALID_ARGUMENT (name, split keys); ALREADY_EXISTS
  // "table T already exists" (also when another server created it after
  // this cache was loaded: the records just written are then deleted
  // again, best effort); ABORTED when a sweep took this create, stalled
  // past its grace period, for a crashed one (nothing was created; retry);
  // the store's error otherwise (records written stay as unreferenced
  // garbage for Sweep).
  absl::StatusOr<meta::v1::TableMetadata> CreateTable(const std::string& name,
                                                      const std::vector<std::string>& split_keys);

  // Drops table `name` as the store has it (not as cached: the cache may
  // predate a drop and re-create through another server): deletes that
  // table record by CAS first (clients stop finding it at once), then, with
  // op_mu_ released, calls `cleanup` for each of its ranges and deletes the
  // range record. Returns the dropped table.
  // NOT_FOUND "table T not found" (also when the record is gone but this
  // cache still has the table - a retried drop whose reply was lost, or a
  // drop through another server: the ranges of the cached copy whose range
  // records remain are cleaned first); DATA_LOSS if the record does not parse;
  // the store's error when the table record could not be deleted (nothing
  // changed). A failed cleanup does not fail the drop (the table is gone):
  // it is logged to stderr, the range record stays, and Sweep retries it.
  absl::StatusOr<meta::v1::TableMetadata> DropTable(const std::string& name,
                                                    const RangeCleanup& cleanup);

  // Cleans up every range record that no table record in the store
  // references (left by a crash during CreateTable or DropTable, a failed
  // cleanup, or a create that stalled past `min_age`): claims it (marks it
  // `sweeping` in a Txn that requires the record, its table's key and its
  // create's intent to be as listed, and deletes the intent, so that create
  // can no longer commit), calls `cleanup`, then deletes it. Also deletes
  // the intents of creates older than `min_age` that never committed.
  // Records and intents younger than `min_age` are left alone, so that
  // creates in progress elsewhere are not failed needlessly; safety does not
  // depend on it (docs/cluster.md, "Leftovers"). Records of older builds
  // (no table id: no intent fences their create) are swept only without a
  // minimum age. Ranges of tables this catalog still has cached are left
  // too. Cleanups run with op_mu_ released;
  // `still_allowed`, if given, is asked before each claim and cleanup (the
  // cluster's controller stops when it loses the role). Returns the number
  // of ranges cleaned; the first error otherwise (others are still
  // attempted); DATA_LOSS without cleaning anything if a table record does
  // not parse.
  absl::StatusOr<int> Sweep(const RangeCleanup& cleanup,
                            absl::Duration min_age = absl::ZeroDuration(),
                            const std::function<bool()>& still_allowed = nullptr);

  // The cached table (immutable; shared, so that routing a request copies
  // nothing). NOT_FOUND "table T not found".
  absl::StatusOr<std::shared_ptr<const meta::v1::TableMetadata>> Get(std::string_view name) const;

  // Every cached table, in name order.
  std::vector<std::shared_ptr<const meta::v1::TableMetadata>> List() const;

  // Ids of every range of every cached table.
  std::set<uint64_t> ReferencedRanges() const;

 private:
  metadata::MetadataStore* const store_;
  const metadata::Keys keys_;
  const Limits limits_;

  // Serialises CreateTable / DropTable's record deletion / Sweep / Load
  // (held across store I/O; never taken by readers; not held across a
  // drop's range cleanups). Lock order: op_mu_, then mu_.
  absl::Mutex op_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  mutable absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<const meta::v1::TableMetadata>, std::less<>> tables_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace ledgerkv::kv
