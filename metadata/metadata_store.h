// The metadata store interface (ARCHITECTURE.md section 3): a small,
// strongly consistent, versioned key-value store with CAS, prefix listing,
// watches and sessions. Implementations: embedded (embedded_store.h, one
// process, durable on local disk) and etcd (etcd_store.h, cluster mode); open
// either by URI with OpenMetadataStore (open_store.h).
// Both pass metadata_contract_test.h.
//
// Versions follow etcd: the store keeps one global revision counter, raised
// by every committed mutation; a key's version is the revision that last
// modified it (etcd's mod_revision). Versions are > 0.
//
// Threading: every method is safe to call concurrently. Methods may block on
// I/O (fsync, network): never call them from a gRPC reaction; callers hop to
// their own thread first. Watch and session callbacks run on the store's own
// threads and must not block for long.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace ledgerkv::metadata {

using Version = int64_t;
// expected_version: the key must not exist.
inline constexpr Version kMustNotExist = 0;
// expected_version: unconditional.
inline constexpr Version kAnyVersion = -1;

using SessionId = int64_t;
inline constexpr SessionId kNoSession = 0;

struct VersionedValue {
  std::string value;
  Version version = 0;  // revision of the last modification
};

struct KeyValue {
  std::string key;
  std::string value;
  Version version = 0;
};

struct WatchEvent {
  enum class Type { kPut, kDelete };
  Type type = Type::kPut;
  std::string key;
  std::string value;     // empty for kDelete
  Version version = 0;   // the revision of this change
};

// Compare: `key`'s version equals `expected_version` (kMustNotExist: absent).
struct TxnCompare {
  std::string key;
  Version expected_version = kAnyVersion;
};

struct TxnOp {
  enum class Type { kPut, kDelete };
  Type type = Type::kPut;
  std::string key;
  std::string value;
  SessionId session = kNoSession;  // kPut only: ephemeral key of this session
};

struct TxnResult {
  bool succeeded = false;
  Version revision = 0;  // store revision after the txn (when succeeded)
};

// A live watch; destroying or cancelling it stops callbacks (Cancel waits
// for a running callback to return, unless called from inside one).
class WatchHandle {
 public:
  virtual ~WatchHandle() = default;
  virtual void Cancel() = 0;
};

using WatchCallback = std::function<void(const std::vector<WatchEvent>& events)>;

struct SessionOptions {
  absl::Duration ttl = absl::Seconds(10);
  // Keep the session alive from a background thread until CloseSession.
  // Tests turn this off to make a session expire.
  bool auto_keepalive = true;
  // Called once, from a store thread, when the session ends without
  // CloseSession (TTL ran out, or the connection to the store was lost).
  std::function<void()> on_expired;
};

class MetadataStore {
 public:
  virtual ~MetadataStore() = default;

  // Returns the value and version of `key`.
  // NOT_FOUND if the key does not exist; UNAVAILABLE if the store is unreachable;
  // INVALID_ARGUMENT for an empty key.
  virtual absl::StatusOr<VersionedValue> Get(std::string_view key) = 0;

  // Writes `key` if its version equals `expected_version` (kMustNotExist:
  // the key must be absent; kAnyVersion: unconditional). With a session the
  // key is ephemeral: it is deleted when the session ends.
  // Returns the new version. ABORTED if the version did not match (nothing
  // written); NOT_FOUND if the session does not exist or has ended;
  // INVALID_ARGUMENT for an empty key.
  virtual absl::StatusOr<Version> Put(std::string_view key, std::string_view value,
                                      Version expected_version,
                                      SessionId session = kNoSession) = 0;

  // Deletes `key` if its version equals `expected_version` (or kAnyVersion).
  // NOT_FOUND if the key does not exist; ABORTED on a version mismatch;
  // INVALID_ARGUMENT for an empty key.
  virtual absl::Status Delete(std::string_view key, Version expected_version) = 0;

  // Returns every key starting with `prefix`, in key order, from one
  // consistent point in time. An error is an error: callers that delete
  // things "missing" from a listing must never treat a failed List as empty.
  virtual absl::StatusOr<std::vector<KeyValue>> List(std::string_view prefix) = 0;

  // Atomically: if every compare holds, applies every op in order.
  // Returns succeeded=false (and changes nothing) when a compare fails.
  // INVALID_ARGUMENT for empty keys, or two ops on one key (etcd rejects
  // those too); NOT_FOUND for an ended session. A delete of an absent key is
  // a no-op; a txn that changes nothing does not raise the revision.
  virtual absl::StatusOr<TxnResult> Txn(const std::vector<TxnCompare>& compares,
                                        const std::vector<TxnOp>& ops) = 0;

  // Delivers, in revision order, every change to keys under `prefix` with
  // revision >= from_version (0: only changes after the call), then new
  // changes as they commit. OUT_OF_RANGE if from_version is older than the
  // history the store still keeps (the caller re-lists and watches anew);
  // INVALID_ARGUMENT if it is negative.
  virtual absl::StatusOr<std::unique_ptr<WatchHandle>> Watch(std::string_view prefix,
                                                             Version from_version,
                                                             WatchCallback callback) = 0;

  // Creates a session (an etcd lease). Returns its id (> 0).
  virtual absl::StatusOr<SessionId> CreateSession(const SessionOptions& options) = 0;

  // Refreshes the session's TTL. NOT_FOUND if it has ended.
  virtual absl::Status KeepAlive(SessionId session) = 0;

  // Ends the session and deletes its ephemeral keys. NOT_FOUND if it had
  // already ended. on_expired is not called.
  virtual absl::Status CloseSession(SessionId session) = 0;

  // The store's current revision.
  virtual absl::StatusOr<Version> CurrentRevision() = 0;
};

// Returns the next id of `kind` (1, 2, 3, ...), never handing out the same
// id twice, even across restarts and concurrent callers. Stored at `key`
// (Keys::IdGen(kind)) and advanced by CAS.
absl::StatusOr<uint64_t> NextId(MetadataStore& store, std::string_view key);

// Metadata key layout: /ledgerkv/<cluster>/...
class Keys {
 public:
  explicit Keys(std::string cluster) : root_("/ledgerkv/" + cluster + "/") {}
  const std::string& Root() const { return root_; }
  std::string BookiesPrefix() const { return root_ + "bookies/"; }
  std::string Bookie(std::string_view id) const { return BookiesPrefix() + std::string(id); }
  std::string Cookie(std::string_view id) const { return root_ + "cookies/" + std::string(id); }
  std::string LedgersPrefix() const { return root_ + "ledgers/"; }
  // Zero-padded so that listing order is id order.
  std::string Ledger(uint64_t id) const;
  // Parses a key produced by Ledger(); false if it is not one.
  bool ParseLedgerKey(std::string_view key, uint64_t* id) const;
  std::string IdGen(std::string_view kind) const { return root_ + "idgen/" + std::string(kind); }
  std::string Log(std::string_view name) const { return root_ + "logs/" + std::string(name); }
  std::string Table(std::string_view name) const { return root_ + "tables/" + std::string(name); }
  std::string Range(uint64_t id) const;
  // A CreateTable in progress (docs/cluster.md, "Leftovers").
  std::string Creating(uint64_t table_id) const;
  std::string CreatingPrefix() const { return root_ + "creating/"; }
  std::string RangesPrefix() const { return root_ + "ranges/"; }
  std::string ServersPrefix() const { return root_ + "servers/"; }
  std::string Server(std::string_view id) const { return ServersPrefix() + std::string(id); }
  std::string TablesPrefix() const { return root_ + "tables/"; }
  std::string AssignmentsPrefix() const { return root_ + "assignments/"; }
  std::string Assignment(uint64_t range_id) const;
  std::string Controller() const { return root_ + "controller"; }

 private:
  std::string root_;
};

}  // namespace ledgerkv::metadata
