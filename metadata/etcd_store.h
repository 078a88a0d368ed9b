// EtcdStore: the MetadataStore of cluster mode, over etcd's v3 gRPC API
// (proto/etcd/, a subset of etcd's own protos). Semantics and the mapping to
// etcd: docs/metadata.md, "etcd store".
//
// - A Version is etcd's mod_revision; the store revision is etcd's.
// - CAS is one Txn: compare MOD == expected (kMustNotExist: CREATE == 0);
//   a failed compare is ABORTED and writes nothing.
// - A session is an etcd lease; ephemeral keys carry the lease. A keeper
//   thread refreshes auto-keepalive sessions every TTL/3 and ends a session
//   (on_expired) once etcd says the lease is gone or etcd has been
//   unreachable for a whole TTL counted from the last refresh it answered:
//   by then etcd may already have given the session's keys away.
// - Each watch has a thread and a stream of its own (etcd_watch.h); a broken
//   stream resumes from the revision after the last one delivered.
// - Every RPC has a deadline (op_timeout). Unreachable etcd is UNAVAILABLE,
//   naming etcd and the endpoint; operations work again when it returns.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "metadata/metadata_store.h"

namespace ledgerkv::metadata {

namespace internal {
class EtcdConnection;
class EtcdWatch;
}  // namespace internal

struct EtcdOptions {
  // host:port of etcd members (their client URLs, plain HTTP). Tried in
  // order; on UNAVAILABLE the next one (see EtcdConnection::Call for why a
  // mutation moves on only while it cannot have been sent).
  std::vector<std::string> endpoints;
  // Prepended to every key (and stripped from keys returned): a namespace,
  // e.g. for tests sharing one etcd. Empty: keys are used as they are.
  std::string key_prefix;
  // Create fails with UNAVAILABLE unless an endpoint answers within this.
  absl::Duration dial_timeout = absl::Seconds(5);
  // Deadline of every RPC (a multi-page List: of every page).
  absl::Duration op_timeout = absl::Seconds(5);
  // Keys per Range page in List.
  int64_t list_page_size = 1000;
};

class EtcdStore : public MetadataStore {
 public:
  // Connects and checks that etcd answers (a Range). INVALID_ARGUMENT for
  // no endpoints, an empty endpoint or a non-positive timeout; UNAVAILABLE
  // if no endpoint answers within dial_timeout.
  static absl::StatusOr<std::unique_ptr<EtcdStore>> Create(EtcdOptions options);

  // Cancels every watch (no callbacks run afterwards), stops the keeper and
  // revokes the live sessions (best effort, one op_timeout), so a process
  // that shuts down gives up what it owned at once. on_expired is not
  // called. REQUIRES: not called from a watch or session callback.
  ~EtcdStore() override;

  EtcdStore(const EtcdStore&) = delete;
  EtcdStore& operator=(const EtcdStore&) = delete;

  // MetadataStore. Reads are linearizable (etcd's default).
  absl::StatusOr<VersionedValue> Get(std::string_view key) override;
  absl::StatusOr<Version> Put(std::string_view key, std::string_view value,
                              Version expected_version, SessionId session = kNoSession) override;
  absl::Status Delete(std::string_view key, Version expected_version) override;
  // Pages through the prefix at the revision of the first page, so the
  // result is one point in time. If etcd compacts that revision mid-way the
  // listing restarts (up to 3 times, then OUT_OF_RANGE).
  absl::StatusOr<std::vector<KeyValue>> List(std::string_view prefix) override;
  absl::StatusOr<TxnResult> Txn(const std::vector<TxnCompare>& compares,
                                const std::vector<TxnOp>& ops) override;
  // Waits until etcd confirms the watch (UNAVAILABLE after op_timeout).
  // OUT_OF_RANGE if from_version was compacted. Resumes by itself after a
  // broken stream (see etcd_watch.h).
  absl::StatusOr<std::unique_ptr<WatchHandle>> Watch(std::string_view prefix, Version from_version,
                                                     WatchCallback callback) override;
  // etcd rounds the TTL up to whole seconds and to its minimum TTL.
  absl::StatusOr<SessionId> CreateSession(const SessionOptions& options) override;
  absl::Status KeepAlive(SessionId session) override;
  // The session is forgotten locally first; UNAVAILABLE means etcd did not
  // confirm the revoke: the keeper then revokes the lease once etcd answers
  // again (its keys go then, or when etcd expires the lease, if sooner).
  absl::Status CloseSession(SessionId session) override;
  absl::StatusOr<Version> CurrentRevision() override;

  // "etcd at host:port,...".
  const std::string& description() const;

 private:
  struct Session {
    bool auto_keepalive = true;
    absl::Duration ttl;  // as granted by etcd
    // etcd may have ended the lease from then on: the last refresh etcd
    // confirmed was sent at deadline - ttl.
    absl::Time deadline;
    absl::Time next_refresh;  // auto_keepalive: when the keeper refreshes it
    std::function<void()> on_expired;
  };

  EtcdStore(EtcdOptions options, std::shared_ptr<internal::EtcdConnection> conn);

  std::string FullKey(std::string_view key) const;
  std::string UserKey(const std::string& full_key) const;
  // NOT_FOUND unless `session` is live here.
  absl::Status CheckSession(SessionId session) ABSL_LOCKS_EXCLUDED(mu_);
  // Sends one keepalive for each lease; returns each lease's new TTL in
  // seconds (<= 0: the lease is gone), in order.
  // `timeout` (if > 0) replaces op_timeout.
  absl::StatusOr<std::vector<int64_t>> SendKeepAlives(const std::vector<SessionId>& leases,
                                                      absl::Duration timeout = absl::ZeroDuration());
  // Remaining TTL of a lease in seconds (<= 0: gone). `timeout` as above.
  absl::StatusOr<int64_t> TimeToLive(SessionId lease, absl::Duration timeout = absl::ZeroDuration());
  absl::Status Revoke(SessionId lease, absl::Duration timeout = absl::ZeroDuration());
  // How long the keeper may block on one etcd call now: until the nearest
  // deadline of a live session, so that its loss is reported on time,
  // within [100 ms, op_timeout].
  absl::Duration KeeperCallTimeout() ABSL_LOCKS_EXCLUDED(mu_);
  // Forgets an ended session and queues its on_expired for the keeper.
  void EndSessionLocked(SessionId id, bool revoke_later) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void KeeperLoop();
  // One pass of the keeper: refreshes due sessions, ends lost ones, revokes
  // leases of sessions given up while etcd was unreachable.
  void KeeperPass() ABSL_LOCKS_EXCLUDED(mu_);

  const EtcdOptions options_;
  const std::shared_ptr<internal::EtcdConnection> conn_;

  absl::Mutex mu_;
  absl::CondVar keeper_cv_;  // sessions_ changed, callbacks queued, shutdown
  absl::flat_hash_map<SessionId, Session> sessions_ ABSL_GUARDED_BY(mu_);
  // Leases of sessions ended here while etcd may still hold them.
  std::vector<SessionId> orphaned_leases_ ABSL_GUARDED_BY(mu_);
  absl::Time orphan_retry_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  std::vector<std::function<void()>> expired_callbacks_ ABSL_GUARDED_BY(mu_);
  std::vector<std::weak_ptr<internal::EtcdWatch>> watches_ ABSL_GUARDED_BY(mu_);
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
  std::thread keeper_;
};

}  // namespace ledgerkv::metadata
