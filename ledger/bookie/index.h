// The bookie's index: a RocksDB database mapping (ledger id, entry id) to the
// entry's journal location, plus per-ledger state. Layout (big-endian ids,
// so that RocksDB's byte order is id order):
//   'e' ledger_id:8 entry_id:8  ->  file:8 offset:8 size:4
//   'l' ledger_id:8             ->  flags:1 (bit 0 fenced) lac:8 last_entry_id:8
//   'd' ledger_id:8             ->  (empty)  the ledger was deleted: a tombstone
//
// The journal is the write-ahead log, so index writes skip RocksDB's WAL and
// are never synced one by one: Flush() (a memtable flush, synced by RocksDB)
// is the index half of a checkpoint, and startup replay of the journal after
// the checkpoint redoes whatever a crash lost. Every index update is
// idempotent ("latest location wins", flags OR, ids max) so replaying a
// record twice is harmless. Thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "ledger/bookie/journal_format.h"

namespace rocksdb {
class DB;
class WriteBatch;
}  // namespace rocksdb

namespace ledgerkv::bookie {

struct LedgerState {
  bool fenced = false;
  int64_t lac = -1;            // highest LAC piggybacked on a held entry
  int64_t last_entry_id = -1;  // highest entry id held (-1: none)
  bool operator==(const LedgerState&) const = default;
};

class Index {
 public:
  // A group of updates applied atomically by Write().
  class Batch {
   public:
    Batch();
    ~Batch();
    // Sets the location of an entry (replacing any previous one).
    void PutEntry(uint64_t ledger_id, int64_t entry_id, const Location& loc);
    // Sets a ledger's state.
    void PutLedger(uint64_t ledger_id, const LedgerState& state);
    // Whether the batch holds no update.
    bool empty() const;
    // Drops every update (for reuse).
    void Clear();

   private:
    friend class Index;
    std::unique_ptr<rocksdb::WriteBatch> batch_;
  };

  // Opens the database in directory `path`, creating it if `may_create`.
  // Errors: DATA_LOSS if it does not exist and !may_create; RocksDB could
  // not open it (e.g. locked by another process: the data directory is in
  // use; or damaged files).
  static absl::StatusOr<std::unique_ptr<Index>> Open(const std::string& path, bool may_create);
  ~Index();

  // Applies `batch` (not synced: see the file comment).
  absl::Status Write(Batch& batch);

  // Returns the location of an entry, std::nullopt if the index holds none
  // (a positive "not here"), or an error if the lookup failed.
  absl::StatusOr<std::optional<Location>> GetEntry(uint64_t ledger_id, int64_t entry_id);

  // Calls fn for every ledger state, in id order.
  absl::Status ForEachLedger(const std::function<void(uint64_t, const LedgerState&)>& fn);

  // Calls fn for every entry location, in (ledger, entry) order, from one
  // consistent snapshot.
  absl::Status ForEachEntry(
      const std::function<void(uint64_t ledger_id, int64_t entry_id, const Location&)>& fn);

  // Removes the ledgers' entries and states, and leaves a tombstone for
  // each, in one atomic write (all of them or none, so that the caller's
  // view in memory can follow the outcome): a deleted ledger stays fenced
  // for good (IsDeleted), as its fence mark would have kept it
  // (docs/bookie-format.md, "Garbage collection"). Tombstones are never
  // removed (9 bytes of key each).
  absl::Status DeleteLedgers(absl::Span<const uint64_t> ledger_ids);

  // Whether DeleteLedgers deleted this ledger (a tombstone exists).
  absl::StatusOr<bool> IsDeleted(uint64_t ledger_id);

  // Makes every update applied so far durable (memtable flush, waited for).
  absl::Status Flush();

 private:
  explicit Index(std::unique_ptr<rocksdb::DB> db);
  std::unique_ptr<rocksdb::DB> db_;  // Constant after construction.
};

}  // namespace ledgerkv::bookie
