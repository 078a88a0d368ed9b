// EmbeddedStore: the MetadataStore of one process (standalone mode, unit
// tests), durable on local disk in a RocksDB database. On-disk layout and
// semantics: docs/metadata.md.
//
// Every mutation is one synced RocksDB WriteBatch that also carries the
// global revision, so a crash never half-applies a change and the revision
// keeps rising across restarts. Sessions live in memory only: when a store is
// opened, every ephemeral key a previous process left behind is deleted.
//
// Threads: a session reaper (expires sessions whose TTL ran out) and a watch
// dispatcher (runs watch callbacks in revision order). Session on_expired
// callbacks run on the reaper thread, after the session's keys are deleted.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "metadata/metadata_store.h"

namespace rocksdb {
class ColumnFamilyHandle;
class DB;
}  // namespace rocksdb

namespace ledgerkv::metadata {

class WatchHub;

class EmbeddedStore : public MetadataStore {
 public:
  struct Options {
    // Events kept in memory for Watch from an older revision; watching from
    // a revision that has dropped out is OUT_OF_RANGE. History starts empty
    // at Open.
    size_t watch_history_events = 10000;
    // Open only a store that exists (NOT_FOUND otherwise, creating
    // nothing): for operator commands, where a mistyped directory must not
    // quietly become a new, empty store.
    bool must_exist = false;
  };

  // Opens (creating if needed) the store in directory `dir`, deletes the
  // ephemeral keys of any previous process (as one new revision) and starts
  // the background threads.
  // Errors: the directory cannot be created or is not a directory (the errno
  // code, e.g. FAILED_PRECONDITION / PERMISSION_DENIED); it is locked by
  // another open store (UNAVAILABLE); RocksDB cannot open it or it holds data
  // of an unknown format (DATA_LOSS / FAILED_PRECONDITION). Messages name
  // `dir`.
  static absl::StatusOr<std::unique_ptr<EmbeddedStore>> Open(const std::string& dir);
  static absl::StatusOr<std::unique_ptr<EmbeddedStore>> Open(const std::string& dir,
                                                             const Options& options);

  // Stops the threads (no callbacks run afterwards) and closes the database.
  // Live sessions end without on_expired; their keys are removed by the next
  // Open. REQUIRES: not called from a watch or session callback.
  ~EmbeddedStore() override;

  EmbeddedStore(const EmbeddedStore&) = delete;
  EmbeddedStore& operator=(const EmbeddedStore&) = delete;

  // MetadataStore. After a failed disk write the store refuses every later
  // mutation with UNAVAILABLE (it cannot know what reached the disk); reads
  // keep working. Reads never take the write lock.
  absl::StatusOr<VersionedValue> Get(std::string_view key) override;
  absl::StatusOr<Version> Put(std::string_view key, std::string_view value,
                              Version expected_version, SessionId session = kNoSession) override;
  absl::Status Delete(std::string_view key, Version expected_version) override;
  absl::StatusOr<std::vector<KeyValue>> List(std::string_view prefix) override;
  absl::StatusOr<TxnResult> Txn(const std::vector<TxnCompare>& compares,
                                const std::vector<TxnOp>& ops) override;
  absl::StatusOr<std::unique_ptr<WatchHandle>> Watch(std::string_view prefix, Version from_version,
                                                     WatchCallback callback) override;
  absl::StatusOr<SessionId> CreateSession(const SessionOptions& options) override;
  absl::Status KeepAlive(SessionId session) override;
  absl::Status CloseSession(SessionId session) override;
  absl::StatusOr<Version> CurrentRevision() override;

  // The directory this store was opened in.
  const std::string& dir() const { return dir_; }

 private:
  // A key's stored state (the decoded RocksDB value).
  struct Record {
    Version version = 0;
    SessionId session = kNoSession;
    std::string value;
  };
  // One key change of a commit.
  struct Change {
    std::string key;
    bool is_delete = false;
    std::string value;
    SessionId session = kNoSession;      // kPut: the new owner (0: persistent)
    SessionId old_session = kNoSession;  // the owner before the change
  };
  struct Session {
    absl::Duration ttl;
    absl::Time deadline;  // InfiniteFuture() with auto keepalive
    std::function<void()> on_expired;
    absl::flat_hash_set<std::string> keys;  // its ephemeral keys now
  };

  EmbeddedStore(std::string dir, std::unique_ptr<rocksdb::DB> db,
                std::vector<rocksdb::ColumnFamilyHandle*> handles, Version revision);

  // Deletes ephemeral keys left by a previous process; starts the threads.
  absl::Status Recover(const Options& options);
  absl::StatusOr<std::optional<Record>> ReadRecord(std::string_view key);
  // Writes `changes` as revision revision_+1 in one synced batch, then
  // updates session bookkeeping and publishes the watch events.
  absl::StatusOr<Version> CommitLocked(std::vector<Change> changes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  // NOT_FOUND unless `session` is live (exists and its TTL has not run out).
  absl::Status CheckSessionLocked(SessionId session) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Deletes the keys still owned by an ended session.
  absl::Status DeleteSessionKeysLocked(SessionId id, const Session& session)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  void ReaperLoop();
  // Ends every session whose deadline passed; runs their on_expired.
  void ExpireDueSessions() ABSL_LOCKS_EXCLUDED(write_mu_, mu_);

  // Constant after construction.
  const std::string dir_;
  std::unique_ptr<rocksdb::DB> db_;
  rocksdb::ColumnFamilyHandle* meta_cf_ = nullptr;  // owned by db_ (default CF)
  rocksdb::ColumnFamilyHandle* kv_cf_ = nullptr;    // owned; destroyed before db_
  std::shared_ptr<WatchHub> hub_;

  // Serialises mutations: read-check-write of a CAS and the synced write
  // happen under it, so commits are totally ordered by revision.
  // Lock order: write_mu_, then mu_, then the hub's lock.
  absl::Mutex write_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  Version revision_ ABSL_GUARDED_BY(write_mu_);
  absl::Status failed_ ABSL_GUARDED_BY(write_mu_);

  // Sessions. Removing a session also needs write_mu_ (its keys are deleted
  // in the same step), so a session checked live under write_mu_ stays live
  // until the commit.
  absl::Mutex mu_;
  absl::CondVar reaper_cv_;  // a deadline moved earlier, or shutdown
  absl::flat_hash_map<SessionId, Session> sessions_ ABSL_GUARDED_BY(mu_);
  SessionId next_session_ ABSL_GUARDED_BY(mu_) = 1;
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
  std::thread reaper_;
};

}  // namespace ledgerkv::metadata
