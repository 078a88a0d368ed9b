// Which ranges this process serves, and the Range objects that serve them
// (docs/range-server.md, "Ownership seam for cluster mode").
//
// RangeLocator is what the gRPC services need: the table's ranges and the
// Range serving one of them. RangeHost implements it for standalone mode:
// it opens every range of every table, reopens a range whose log failed
// (with backoff, on its own thread), and destroys a dropped table's ranges.
// Cluster mode replaces the source of assignments and adds the lease check;
// the services keep talking to a RangeLocator.
//
// Threading: every method is thread-safe. Table/RangeFor/Serving/Stats
// never block on I/O (gRPC reactions call them). OpenAll, OpenTable,
// DestroyRange, SweepLocalDirs and Shutdown block (network, disk).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "kv_server/catalog.h"
#include "kv_server/range/range.h"
#include "proto/metadata.pb.h"

namespace ledgerkv::ledger {
class LedgerClient;
}
namespace ledgerkv::snapshot {
class SnapshotStore;
}
namespace ledgerkv::wal {
class LogWriter;
}

namespace ledgerkv::kv {

class RangeLocator {
 public:
  virtual ~RangeLocator() = default;

  // The table's ranges, in key order. NOT_FOUND "table T not found".
  virtual absl::StatusOr<std::shared_ptr<const meta::v1::TableMetadata>> Table(
      std::string_view table) = 0;

  // The Range serving `spec` of `table` here. UNAVAILABLE, marked
  // retry-safe (retry.h), "range N of table T is not being served
  // (recovering ...)" while it is opening or recovering, or "... not served
  // here" (with the owner when known) if another process owns it.
  virtual absl::StatusOr<std::shared_ptr<Range>> Serving(const meta::v1::TableMetadata& table,
                                                         const meta::v1::RangeSpec& spec) = 0;

  // host:port clients reach this process at (RangeInfo.owner).
  virtual std::string owner() const = 0;

  // Table(), then the range holding `key`, then Serving().
  absl::StatusOr<std::shared_ptr<Range>> Lookup(std::string_view table, std::string_view key);
};

struct RangeHostOptions {
  // Range data directories are <ranges_dir>/<range id>.
  std::string ranges_dir;
  // Template of every range's options: log, snapshot, policy, limits. The
  // host sets data_dir and on_failed per range.
  RangeOptions range;
  // Reopen backoff after a failure: doubles from min to max.
  absl::Duration min_backoff = absl::Milliseconds(100);
  absl::Duration max_backoff = absl::Seconds(5);

  // Cluster mode (docs/cluster.md); empty in standalone mode.
  // Asked right before every open attempt (first or retry): false drops
  // the range from this host instead of opening it (it moved elsewhere, or
  // this server's lease is not valid). Called without the host's lock.
  std::function<bool(uint64_t range_id)> may_open;
  // The address of the process serving a range not served here ("" if
  // unknown), for redirects and DescribeTable.
  std::function<std::string(uint64_t range_id)> owner_of;
  // Called by DestroyRange before anything is deleted (cluster mode: drop
  // the range's assignment so that its owner stops serving it).
  std::function<absl::Status(uint64_t range_id)> before_destroy;
  // Called when a request names a table the catalog does not know, with
  // the NOT_FOUND; returns the status to answer (cluster mode: a table just
  // created through another server may not have reached this catalog yet).
  // Must not block.
  std::function<absl::Status(std::string_view table, absl::Status not_found)> on_table_miss;
};

// What standalone and cluster servers set alike: ranges in
// <data_dir>/ranges, logs and snapshots through `client` on (E, Qw, Qa)
// with their metadata in `store` under `cluster`, snapshots after
// `snapshot_log_bytes` of log or `snapshot_interval` with writes, and the
// log rolled at half the snapshot period (truncation drops whole ledgers:
// the log then stays within about two periods of the newest snapshot).
struct ServingOptions {
  std::string data_dir;
  ledger::LedgerClient* client = nullptr;
  metadata::MetadataStore* store = nullptr;
  std::string cluster;
  int ensemble_size = 1;
  int write_quorum = 1;
  int ack_quorum = 1;
  int64_t snapshot_log_bytes = int64_t{64} << 20;
  absl::Duration snapshot_interval = absl::Minutes(10);
  Limits limits;
};
RangeHostOptions MakeRangeHostOptions(const ServingOptions& o);

class RangeHost final : public RangeLocator {
 public:
  // `catalog` must outlive the host; options.range.log/snapshot name the
  // ledger client and metadata store (they too must outlive it).
  // INVALID_ARGUMENT for missing options; SnapshotStore::Create errors.
  static absl::StatusOr<std::unique_ptr<RangeHost>> Create(TableCatalog* catalog,
                                                           RangeHostOptions options);

  // Shutdown().
  ~RangeHost() override;

  RangeHost(const RangeHost&) = delete;
  RangeHost& operator=(const RangeHost&) = delete;

  // Opens every range of every table in the catalog, one after the other.
  // A range that fails to open is logged and retried in the background;
  // returns the number of ranges serving.
  int OpenAll();

  // Opens the ranges of a new table (blocks). Returns the first open error
  // (those ranges are retried in the background).
  absl::Status OpenTable(const meta::v1::TableMetadata& table);

  // TableCatalog::RangeCleanup: stops serving the range (waiting for an
  // open in progress), closes it, deletes its log's ledgers and the log
  // record, its snapshots and its local directory. Idempotent: what is
  // already gone is skipped. Returns the first error (the rest is still
  // attempted).
  absl::Status DestroyRange(const meta::v1::RangeMetadata& range);

  // Cluster mode: starts serving `descriptor` here, opening it on the
  // reopen thread (does not block). A range already known is left alone.
  void Adopt(const RangeDescriptor& descriptor) ABSL_LOCKS_EXCLUDED(mu_);

  // Cluster mode: stops serving the range (waiting for an open in
  // progress) and closes it, keeping its local data. Blocks. No-op for a
  // range not known here.
  void Release(uint64_t range_id) ABSL_LOCKS_EXCLUDED(mu_);

  // Ids of the ranges known here (serving, opening or waiting to reopen).
  std::vector<uint64_t> Known() const ABSL_LOCKS_EXCLUDED(mu_);

  // Removes the local directories of ranges that no table references:
  // <ranges_dir>/<id> and <ranges_dir>/<id>.restore for every id that is
  // not in `referenced` and not known here (Known(), or a range still
  // being closed or destroyed). Left alone: entries whose name is not a
  // canonical decimal range id (with an optional ".restore"), and entries
  // that are not directories (symlinks included). Each removal is logged
  // to stderr. Returns the ids whose directories were removed (ascending);
  // on a failure, the first error (the other ids are still attempted).
  // UNAVAILABLE after Shutdown. A missing ranges_dir is not an error.
  //
  // The caller must pass every range id of a table listing that succeeded
  // and was taken after every table whose range this host may adopt was
  // created (cluster mode: call it on the thread that adopts, right after
  // a catalog reload; a failed listing must not lead to a sweep). A range
  // added here while its directory is being removed waits for the removal
  // before opening (it then recovers from its log and snapshots).
  absl::StatusOr<std::vector<uint64_t>> SweepLocalDirs(const std::set<uint64_t>& referenced)
      ABSL_LOCKS_EXCLUDED(mu_);

  // This process's address if it serves the range, else options.owner_of.
  std::string OwnerOf(uint64_t range_id) const ABSL_LOCKS_EXCLUDED(mu_);

  // Stats of a range served here. UNAVAILABLE (retry-safe) otherwise.
  absl::StatusOr<RangeStats> Stats(uint64_t range_id);

  // Sets the address reported by owner() (the gRPC listen address, known
  // once the server is up).
  void set_owner(std::string address);

  // Stops reopening, closes every range (waiting for their pending writes).
  // Idempotent. Later lookups are UNAVAILABLE.
  void Shutdown();

  // RangeLocator.
  absl::StatusOr<std::shared_ptr<const meta::v1::TableMetadata>> Table(
      std::string_view table) override;
  absl::StatusOr<std::shared_ptr<Range>> Serving(const meta::v1::TableMetadata& table,
                                                 const meta::v1::RangeSpec& spec) override;
  std::string owner() const override;

 private:
  enum class State { kOpening, kServing, kFailed };
  struct Slot {
    RangeDescriptor descriptor;
    State state = State::kOpening;
    // Set while kServing, and while kFailed if the failed instance still
    // answers reads (Range::ServingReadsOnly): it stays, also in kOpening
    // while the reopen thread tries the range's log, until a new log is
    // open (ReopenSlotLocked) or the slot is released or destroyed.
    std::shared_ptr<Range> range;
    absl::Status error;            // last failure
    absl::Time retry_at;
    absl::Duration backoff;
    // Bumped on every open, so a stale on_failed is ignored.
    uint64_t generation = 0;
  };

  RangeHost(TableCatalog* catalog, RangeHostOptions options,
            std::unique_ptr<snapshot::SnapshotStore> snapshots);

  // Adds a slot in kOpening unless the range is known already; returns
  // whether the caller should open it.
  bool AddSlot(const RangeDescriptor& descriptor) ABSL_LOCKS_EXCLUDED(mu_);
  // Opens the range of slot `id` (in kOpening, with no instance) and moves
  // it to kServing or kFailed. Blocks. `log`: the range's log, already
  // opened for writing (Range::Open's overload), or null.
  absl::Status OpenSlot(uint64_t id, std::unique_ptr<wal::LogWriter> log = nullptr)
      ABSL_LOCKS_EXCLUDED(mu_);
  // The reopen thread's attempt for slot `id` (kFailed, due), called and
  // returning with mu_ held. A failed instance still answering reads keeps
  // answering them until the range's log opens: only then is it closed and
  // the range opened over that log. Without one, plain OpenSlot.
  void ReopenSlotLocked(uint64_t id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // For Release and DestroyRange: the failed instance still answering reads
  // of slot `id` while the reopen thread tries its log (kOpening), taken
  // out (counted in closing_) so that it stops answering at once; null if
  // there is none. CloseTaken closes it and ends the count.
  std::shared_ptr<Range> TakeReadableWhileOpeningLocked(uint64_t id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CloseTaken(uint64_t id, std::shared_ptr<Range> range) ABSL_LOCKS_EXCLUDED(mu_);
  void OnFailed(uint64_t id, uint64_t generation, const absl::Status& why) ABSL_LOCKS_EXCLUDED(mu_);
  void FailLocked(Slot& slot, const absl::Status& why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Waits until SweepLocalDirs is not removing range `id`'s directory.
  void AwaitNotSweepingLocked(uint64_t id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // closing_ bookkeeping (a range out of slots_ whose files are in use).
  void BeginClosingLocked(uint64_t id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EndClosingLocked(uint64_t id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status DeleteLog(uint64_t range_id);
  std::string RangeDir(uint64_t range_id) const;
  // The range's local DB, its restore scratch dir, and a wipe's leftover
  // (ParseRangeDirName's names).
  std::vector<std::string> LocalDirs(uint64_t range_id) const;
  void ReopenLoop();

  // Constant after construction.
  TableCatalog* const catalog_;
  const RangeHostOptions options_;
  const std::unique_ptr<snapshot::SnapshotStore> snapshots_;

  mutable absl::Mutex mu_;
  absl::CondVar cv_;  // work for the reopen thread, or an open finished
  std::map<uint64_t, Slot> slots_ ABSL_GUARDED_BY(mu_);
  // Failed ranges the reopen thread must close (Close blocks).
  std::vector<std::shared_ptr<Range>> to_close_ ABSL_GUARDED_BY(mu_);
  // Ranges no longer in slots_ whose directory is still in use (closing on
  // the reopen thread, in Release, or being destroyed), with a count:
  // SweepLocalDirs skips them.
  std::map<uint64_t, int> closing_ ABSL_GUARDED_BY(mu_);
  // Ranges whose directories SweepLocalDirs is removing: opening or
  // destroying one waits.
  std::set<uint64_t> sweeping_ ABSL_GUARDED_BY(mu_);
  std::string owner_ ABSL_GUARDED_BY(mu_);
  uint64_t next_generation_ ABSL_GUARDED_BY(mu_) = 1;
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
  std::thread reopen_thread_;
};

}  // namespace ledgerkv::kv
