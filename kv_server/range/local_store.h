// LocalStore: the local RocksDB of one range (docs/range-server.md, "Local
// state of a range"). Two column families: `default` holds user key ->
// stored value (stored_value.h), `meta` holds applied_seqno, revision,
// key_count and bytes (fixed64 each), always written in the same WriteBatch
// as the data they describe, so the DB is a consistent prefix of the log.
// RocksDB's own WAL is disabled on every write: the ledger log is the WAL.
// Both column families are always flushed together (atomic_flush), so what
// a crash leaves on disk is a consistent prefix too.
//
// Threading: thread-safe. Apply is called by one thread at a time (the
// range's apply path or recovery). Reads run concurrently with it. Close
// waits for running calls; later calls fail with UNAVAILABLE.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "kv_server/range/range.h"
#include "kv_server/range/stored_value.h"
#include "proto/range.pb.h"

namespace rocksdb {
class DB;
class ColumnFamilyHandle;
class Snapshot;
struct ReadOptions;
}  // namespace rocksdb

namespace ledgerkv::kv {

// What the meta column family says about the data beside it.
struct LocalMeta {
  uint64_t applied_seqno = 0;
  int64_t revision = 0;
  int64_t key_count = 0;
  int64_t bytes = 0;  // sum of key + value sizes of live keys
};

// A change of LocalMeta::key_count and LocalMeta::bytes.
struct StatsDelta {
  int64_t key_count = 0;
  int64_t bytes = 0;
};

// What a key counts for in LocalMeta::bytes: key + value size, 0 if absent.
inline int64_t LiveBytes(std::string_view key, const std::optional<StoredValue>& v) {
  return v.has_value() ? static_cast<int64_t>(key.size() + v->value.size()) : 0;
}

// A log record to apply: its seqno and the decoded effect.
struct SequencedEffect {
  uint64_t seqno = 0;
  const range::v1::Effect* effect = nullptr;
  // The effect's change of key_count and bytes, when the caller knows it:
  // the write path resolved the effect against the very state it is applied
  // on (the log prefix before it), so it has the keys' previous states
  // already. Apply then trusts it and skips reading them back. Unset (replay
  // after a restart): Apply reads each key's previous state.
  std::optional<StatsDelta> delta;
};

class LocalStore {
 public:
  struct Tuning {
    // The meta column family's memtable size; 0: RocksDB's default. Tests
    // make it small, so RocksDB flushes the meta long before the data.
    size_t meta_write_buffer_bytes = 0;
  };

  // Opens the DB in `dir`, creating it (and the directory) if missing.
  // Errors: local I/O or RocksDB errors as INTERNAL/DATA_LOSS naming `dir`;
  // DATA_LOSS if the meta column family is unreadable.
  static absl::StatusOr<std::unique_ptr<LocalStore>> Open(const std::string& dir,
                                                          const Tuning& tuning);
  static absl::StatusOr<std::unique_ptr<LocalStore>> Open(const std::string& dir) {
    return Open(dir, Tuning{});
  }
  // Removes `dir` and its restore scratch directory, crash-safely: `dir` is
  // renamed to `dir` + kWipedSuffix first, so a crash leaves it whole or
  // absent, never half removed. REQUIRES: not open.
  static absl::Status Destroy(const std::string& dir);
  // What Destroy renames a store to before removing it; a leftover of a
  // crash is removed by the next Destroy and by Open.
  static constexpr char kWipedSuffix[] = ".wiped";

  ~LocalStore();
  LocalStore(const LocalStore&) = delete;
  LocalStore& operator=(const LocalStore&) = delete;

  // True when Open found an existing DB (false: created empty).
  bool existed() const { return existed_; }
  // The meta as last written (by Open's read, Apply or ResetMeta).
  LocalMeta meta() const;

  // Latest state of `key` (nullopt: absent).
  absl::StatusOr<std::optional<StoredValue>> Get(std::string_view key);
  // `key` and the revision, read at one consistent point.
  absl::StatusOr<std::pair<std::optional<StoredValue>, int64_t>> GetWithRevision(
      std::string_view key);

  // Calls `visit` for the keys of [start, end) (end empty: unbounded) in
  // order at the latest state, until it returns false.
  absl::Status Visit(std::string_view start, std::string_view end,
                     const std::function<bool(std::string_view key, StoredValue value)>& visit);

  // A read of [spec.start, spec.end) at one consistent point: at most
  // min(spec.limit, max_keys) keys, count of every key in the bounds.
  absl::StatusOr<ScanResult> Scan(const ScanSpec& spec, int64_t max_keys);

  // Applies `effects` (in seqno order, each above meta().applied_seqno) in
  // one WriteBatch together with the new meta. Keeps key_count and bytes
  // exact: from an effect's `delta` when given, else by reading each key's
  // previous state. On error nothing is written.
  absl::Status Apply(const std::vector<SequencedEffect>& effects);

  // Rewrites the meta after the data column family was loaded by a
  // snapshot restore: counts keys and bytes, stores them with
  // `applied_seqno` and `revision`.
  absl::Status ResetMeta(uint64_t applied_seqno, int64_t revision);

  // Whether the data column family holds any key.
  absl::StatusOr<bool> HasData();

  // Makes everything applied so far durable: flushes both column families
  // in one atomic flush and waits for it.
  absl::Status Flush();

  // Reads the meta at `at` (a pinned rocksdb snapshot), for snapshots.
  absl::StatusOr<LocalMeta> ReadMeta(const rocksdb::ReadOptions& at);

  // Flushes the memtables and closes the DB. Idempotent.
  absl::Status Close();

  // For the snapshotter and restore. Valid until Close.
  rocksdb::DB* db() const ABSL_NO_THREAD_SAFETY_ANALYSIS { return db_; }
  rocksdb::ColumnFamilyHandle* data_cf() const ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return data_cf_;
  }
  rocksdb::ColumnFamilyHandle* meta_cf() const ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return meta_cf_;
  }
  const std::string& dir() const { return dir_; }

 private:
  LocalStore(std::string dir, bool existed) : dir_(std::move(dir)), existed_(existed) {}

  absl::Status CheckOpenLocked() const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  absl::Status ScanLocked(const ScanSpec& spec, int64_t max_keys, const rocksdb::Snapshot* snap,
                          ScanResult* result) ABSL_SHARED_LOCKS_REQUIRED(mu_);
  absl::StatusOr<LocalMeta> ReadMetaLocked(const rocksdb::ReadOptions& at)
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  absl::Status CloseLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Constant after construction.
  const std::string dir_;
  const bool existed_;

  // Shared by every DB call, exclusive for Close.
  mutable absl::Mutex mu_;
  rocksdb::DB* db_ ABSL_GUARDED_BY(mu_) = nullptr;
  rocksdb::ColumnFamilyHandle* data_cf_ ABSL_GUARDED_BY(mu_) = nullptr;
  rocksdb::ColumnFamilyHandle* meta_cf_ ABSL_GUARDED_BY(mu_) = nullptr;

  mutable absl::Mutex meta_mu_;
  LocalMeta meta_ ABSL_GUARDED_BY(meta_mu_);
};

}  // namespace ledgerkv::kv
