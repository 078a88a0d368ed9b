// ClusterServer: `ledgerkv server`, a range server of a cluster coordinated
// through etcd (docs/cluster.md). It registers under a session (an etcd
// lease it refreshes itself), takes part in the controller election,
// serves the ranges assigned to it (opening a range fences its previous
// owner), answers requests for other ranges with UNAVAILABLE naming their
// owner, and serves linearizable reads only while its lease is certainly
// valid.
//
// Data directory: DIR/LOCK (flock) and DIR/ranges/<id>/ (local RocksDB of
// the ranges it served; kept across ownership changes, recovery decides
// whether they are still usable; removed once no table references the
// range, after a catalog reload).
//
// Threading: Start and Shutdown block; accessors are thread-safe. Internal
// threads: the lease thread (keepalives, re-registration) and the control
// thread (assignments, reconcile, controller passes). Watch callbacks only
// wake the control thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <set>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "base/data_dir_lock.h"
#include "kv_server/range/limits.h"
#include "metadata/metadata_store.h"
#include "proto/metadata.pb.h"

namespace grpc {
class Server;
}
namespace ledgerkv::ledger {
class LedgerClient;
}

namespace ledgerkv::kv {

class ActiveCalls;

class AdminService;
class KvService;
class RangeHost;
class TableCatalog;

struct ClusterServerOptions {
  std::string data_dir;
  // host:port; port 0 picks a free one (see address()).
  std::string listen;
  // The address to publish (registration, redirects, server id): "HOST"
  // (with the bound port) or "HOST:PORT". Empty: `listen` with the bound
  // port; a wildcard `listen` host (0.0.0.0, [::]) then refuses to start
  // (docs/cluster.md, "Addresses: listen and advertise").
  std::string advertise;
  // etcd://host:port[,host:port...] (embedded:// only for one-process tests).
  std::string metadata;
  std::string cluster = "default";
  // Defaults to the published address (address()).
  std::string server_id;
  // TTL of the server's session (etcd lease). Failover takes about this
  // long after a server dies.
  absl::Duration lease_ttl = absl::Seconds(5);
  // Replication of the ranges' logs and snapshots.
  int ensemble_size = 3;
  int write_quorum = 3;
  int ack_quorum = 2;
  int64_t snapshot_log_bytes = int64_t{64} << 20;
  absl::Duration snapshot_interval = absl::Minutes(10);
  Limits limits;
  // The controller's sweep of range records no table references (a crash
  // part-way through a create or drop, a cleanup that failed): every
  // `orphan_sweep_period`, records older than `orphan_min_age` are cleaned
  // (assignment, log, snapshots, then the record). Safety does not depend
  // on the age (a claim fences the create that wrote the record: a create
  // that outlasts it fails with ABORTED); it only keeps creates in progress
  // from being failed needlessly (docs/cluster.md, "Leftovers").
  absl::Duration orphan_sweep_period = absl::Minutes(5);
  absl::Duration orphan_min_age = absl::Minutes(10);
  // Automatic re-replication (ledger/auditor.h): the controller moves the
  // copies of every closed ledger off a bookie that has been unregistered
  // this long. Zero: never (operators run `ledgerkv ledger rereplicate`).
  absl::Duration rereplicate_after = absl::Minutes(5);
};

class ClusterServer {
 public:
  // Locks the data dir, connects to the store, starts serving gRPC,
  // registers (waiting up to a lease TTL for a previous registration of
  // the same id to expire) and starts the lease and control threads.
  // Errors: INVALID_ARGUMENT (options), FAILED_PRECONDITION (data dir in
  // use; server id registered by a live process), UNAVAILABLE (cannot
  // listen; store unreachable).
  static absl::StatusOr<std::unique_ptr<ClusterServer>> Start(ClusterServerOptions options);

  // Shutdown().
  ~ClusterServer();

  ClusterServer(const ClusterServer&) = delete;
  ClusterServer& operator=(const ClusterServer&) = delete;

  // The published address (`advertise`, or the listen host with the bound
  // port): where clients and redirects reach this server.
  const std::string& address() const { return address_; }
  const std::string& server_id() const { return server_id_; }
  const std::string& instance_id() const { return instance_id_; }

  // Whether this server currently holds the controller role.
  bool IsController() const ABSL_LOCKS_EXCLUDED(mu_);

  // Stops accepting requests, closes every range (pending writes finish),
  // then ends the session: the registration and (if held) the controller
  // key disappear at once, so the controller reassigns the ranges without
  // waiting for the TTL. Idempotent.
  void Shutdown() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  using Clock = std::chrono::steady_clock;

  explicit ClusterServer(ClusterServerOptions options);

  absl::Status Init();
  // New session + registration. FAILED_PRECONDITION if the id stays taken
  // for `wait`.
  absl::Status Register(absl::Duration wait) ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status StartWatches();
  void LeaseLoop() ABSL_LOCKS_EXCLUDED(mu_);
  void ControlLoop() ABSL_LOCKS_EXCLUDED(mu_);
  void LoseSession(const char* why) ABSL_LOCKS_EXCLUDED(mu_);

  // Whether the lease is certainly valid now (docs/cluster.md).
  bool LeaseValid() const;
  absl::Status CheckLinearizableRead() const;

  // Re-lists assignments/ into assignments_.
  absl::Status RefreshAssignments() ABSL_LOCKS_EXCLUDED(mu_);
  // Opens assigned ranges, releases the others.
  void Reconcile() ABSL_LOCKS_EXCLUDED(mu_);
  bool AssignedHere(uint64_t range_id) const ABSL_LOCKS_EXCLUDED(mu_);
  std::string OwnerAddress(uint64_t range_id) const ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status DeleteAssignment(uint64_t range_id);
  // Right after a successful catalog reload, on the control thread: removes
  // the local directories of ranges no table references (dropped while
  // another server owned them, or while this one was down), logging what it
  // removed or why it could not (docs/cluster.md, "Local directories").
  void SweepLocalDirs() ABSL_LOCKS_EXCLUDED(mu_);

  // Closes a range the controller asked us to move, then assigns it to
  // its target (CAS on the assignment's version).
  void HandOver(const meta::v1::RangeAssignment& assignment, metadata::Version version)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Controller role.
  void Campaign() ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status ControllerPass() ABSL_LOCKS_EXCLUDED(mu_);
  // Asks the busiest live server to hand one range to the least busy one
  // when their range counts differ by 2 or more (one move at a time).
  absl::Status Rebalance(const metadata::TxnCompare& still_controller,
                         const std::map<std::string, meta::v1::ServerRegistration>& live,
                         const std::map<uint64_t, meta::v1::RangeAssignment>& assignments,
                         const std::map<uint64_t, metadata::Version>& versions,
                         const std::set<uint64_t>& referenced,
                         const std::map<std::string, int>& load);

  void Wake() ABSL_LOCKS_EXCLUDED(mu_);
  // While this server is the controller: TableCatalog::Sweep every
  // orphan_sweep_period (its own thread: cleanups block on bookies and
  // etcd, and the control thread must keep failing over ranges).
  void SweepLoop() ABSL_LOCKS_EXCLUDED(mu_);
  // While this server is the controller: an Auditor pass every quarter of
  // rereplicate_after (1 s to 1 min), on its own thread (copies take long).
  void AuditLoop() ABSL_LOCKS_EXCLUDED(mu_);
  // RangeHostOptions::on_table_miss (docs/cluster.md, "Tables").
  absl::Status OnTableMiss(std::string_view table, absl::Status not_found)
      ABSL_LOCKS_EXCLUDED(mu_);

  const ClusterServerOptions options_;
  const metadata::Keys keys_;
  std::string address_;
  std::string server_id_;
  std::string instance_id_;
  DataDirLock lock_;  // the data dir's LOCK, held while running

  std::unique_ptr<metadata::MetadataStore> store_;
  std::unique_ptr<ledger::LedgerClient> client_;
  std::unique_ptr<TableCatalog> catalog_;
  std::unique_ptr<RangeHost> host_;
  std::unique_ptr<KvService> kv_service_;
  std::unique_ptr<AdminService> admin_service_;
  // Counted by the services, read by StopServing: declared before server_
  // so that it outlives it.
  std::shared_ptr<ActiveCalls> calls_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<metadata::WatchHandle> watches_[3];

  // Nanoseconds of Clock (steady) until which the lease is certainly valid;
  // 0 when there is no session. Read on every linearizable read.
  std::atomic<int64_t> lease_valid_until_{0};

  mutable absl::Mutex mu_;
  absl::CondVar cv_;
  metadata::SessionId session_ ABSL_GUARDED_BY(mu_) = metadata::kNoSession;
  // Version of `controller` we created; 0 when not the controller.
  metadata::Version controller_version_ ABSL_GUARDED_BY(mu_) = 0;
  // The session under which a controller create of this process failed
  // UNAVAILABLE (it may have landed, or may yet); while it is the current
  // one, failed creates read the key back. kNoSession: none in doubt.
  metadata::SessionId campaign_in_doubt_ ABSL_GUARDED_BY(mu_) = metadata::kNoSession;
  std::map<uint64_t, meta::v1::RangeAssignment> assignments_ ABSL_GUARDED_BY(mu_);
  std::map<uint64_t, metadata::Version> assignment_versions_ ABSL_GUARDED_BY(mu_);
  bool dirty_ ABSL_GUARDED_BY(mu_) = true;
  // Tables a request named that the catalog did not know, and when.
  std::map<std::string, int64_t, std::less<>> table_misses_ ABSL_GUARDED_BY(mu_);
  // Steady-clock ns when the last successful catalog load started.
  int64_t tables_load_started_ ABSL_GUARDED_BY(mu_) = 0;
  bool tables_dirty_ ABSL_GUARDED_BY(mu_) = true;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool shut_down_ = false;
  std::thread lease_thread_;
  std::thread control_thread_;
  std::thread sweep_thread_;
  std::thread audit_thread_;
};

}  // namespace ledgerkv::kv
