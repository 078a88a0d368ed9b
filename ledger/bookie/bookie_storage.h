// BookieStorage: the bookie's storage engine. One interleaved journal (all
// ledgers' entries and fence marks, append-only files rolled by size) is the
// source of truth; a RocksDB index maps (ledger, entry) to journal
// locations and keeps per-ledger state. Format and recovery rules:
// docs/bookie-format.md.
//
// Write path (group commit): Add/Fence queue requests; one writer thread
// takes everything queued, writes it with one writev(2), makes it durable
// with one fdatasync, publishes the entries' locations in memory (recent_)
// and the new ledger states, and then completes the requests. An applier
// thread moves the locations into the RocksDB index off the ack path. A
// failed write or sync turns the storage permanently read-only: nothing
// queued or later is acknowledged; reads go on.
//
// Threads: the writer, the applier, a checkpointer, and the LAC-waiter
// timer. Public methods are thread-safe. Callbacks run on the writer thread
// (the applier's for GC copies and barriers; the caller's when a request is
// answered without queueing); they must be short and must not wait for
// another Add/Fence.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "base/data_dir_lock.h"
#include "base/file.h"
#include "ledger/bookie/index.h"
#include "ledger/bookie/journal_file.h"
#include "ledger/bookie/journal_format.h"
#include "ledger/bookie/lac_waiters.h"
#include "proto/bookie.pb.h"

namespace ledgerkv::bookie {

using Code = ::ledgerkv::bookie::v1::Code;

struct StorageOptions {
  // Directory holding INSTANCE, CHECKPOINT, journal-*.log and index/.
  std::string dir;
  // File layer for the journal, checkpoint and instance files (RocksDB uses
  // its own). nullptr: Env::Default().
  Env* env = nullptr;
  // false: skip fdatasync on the add path (relaxed mode, off by default:
  // acknowledged entries can be lost on power failure, not on a process
  // crash). Checkpoints still sync.
  bool sync = true;
  // Roll to a new journal file when the current one reaches this size.
  uint64_t journal_roll_bytes = 256ull << 20;
  // Checkpoint after this many journal bytes, or this long, whichever first.
  uint64_t checkpoint_bytes = 64ull << 20;
  absl::Duration checkpoint_interval = absl::Seconds(30);
  // Upper bound on bytes written by one group commit (at least one request
  // is always taken).
  uint64_t max_batch_bytes = 8ull << 20;
  // Group commit wait (docs/bookie-format.md, "Write batches"): a batch
  // with fewer than half as many items as recent batches waits for more,
  // up to the recent fdatasync time and never longer than this. Zero
  // disables it. Only with sync (relaxed mode has no per-batch sync).
  absl::Duration group_commit_wait_max = absl::Milliseconds(1);
  // After the journal writer was idle this long, earlier batch sizes say
  // nothing about the next ones: the group commit wait starts afresh (the
  // next small batch does not wait). Tests of the wait raise it, so that a
  // slow machine's pause between their batches does not reset it.
  absl::Duration group_commit_forget_after_idle = absl::Milliseconds(10);
  // Close() checkpoints (fast restart). Tests turn this off to make Close
  // behave like a crash of the process (index memtable lost; replay needed).
  bool checkpoint_on_close = true;
  // Zero-filled space kept ahead of the journal's end, so that small write
  // batches overwrite existing blocks and their fdatasync needs no metadata
  // update (journal_file.h). 0 disables it. Only with the default file layer
  // (env == nullptr) and with sync.
  uint64_t journal_preallocate_bytes = 8ull << 20;
  // Disk usage watermarks (docs/bookie-format.md): with the data dir's file
  // system at least `disk_high_watermark` full (df's Use%, as a fraction),
  // adds are answered READ_ONLY until it is below `disk_low_watermark`
  // again. Fences, GC and reads go on. 1.0 turns it off. Checked every
  // `disk_check_interval`, every `disk_check_bytes` the journal writes, and
  // at Open. 0 < low < high <= 1, or high == 1 (off; low is then ignored).
  double disk_high_watermark = 0.95;
  double disk_low_watermark = 0.90;
  absl::Duration disk_check_interval = absl::Seconds(1);
  uint64_t disk_check_bytes = 4ull << 20;
};

// One entry of an add. The payload must stay valid until the add's callback.
struct EntryView {
  uint64_t ledger_id = 0;
  int64_t entry_id = 0;
  int64_t lac = -1;
  uint32_t checksum = 0;
  std::string_view payload;
};

// The LAC an entry may raise its ledger's to: below its own id. Normal adds
// outside -1 <= lac < entry_id are refused; recovery adds copy entries as
// stored, and one stored before that check (or from a client outside the
// protocol) may carry more.
inline int64_t EffectiveLac(int64_t lac, int64_t entry_id) {
  return std::min(lac, entry_id - 1);
}

struct StorageStats {
  // Failed (permanently) or over the disk usage watermark.
  bool read_only = false;
  // The failure's, else the watermark's.
  std::string read_only_reason;
  bool failed = false;
  bool disk_full = false;
  // Fraction of the data dir's file system in use at the last disk check
  // (-1 before one succeeded), and how many checks ran.
  double disk_usage = -1;
  uint64_t disk_checks = 0;
  uint64_t ledger_count = 0;
  uint64_t journal_bytes = 0;
  uint64_t entries_added = 0;
  uint64_t syncs = 0;
  // Batches that waited for more items (group commit wait).
  uint64_t group_commit_waits = 0;
  uint64_t corrupt_records_at_startup = 0;
  // StorageOptions::sync: false in relaxed mode (--no-sync), where adds are
  // acknowledged before their fdatasync.
  bool sync = true;
};

class BookieStorage {
 public:
  // Codes per entry, in request order: OK, FENCED, READ_ONLY, INVALID.
  using AddCallback = absl::AnyInvocable<void(std::vector<Code> codes) &&>;
  // OK (durable), READ_ONLY.
  using FenceCallback = absl::AnyInvocable<void(Code code) &&>;
  // Called when a long poll ends; `wake` tells why.
  using LacCallback = absl::AnyInvocable<void(LacWaiters::Wake wake) &&>;

  // Opens (initialising an empty directory: new instance id) the storage,
  // replays the journal after the last checkpoint, truncates a torn tail of
  // the last journal file and starts the threads.
  // Errors: FAILED_PRECONDITION (directory holds data but no INSTANCE file,
  // or a malformed one); DATA_LOSS (corrupt record header or a missing
  // journal file in the middle of the journal, an index lost after a
  // checkpoint, or an instance id without CHECKPOINT: entries may be lost,
  // so the bookie must not serve as if it had them all); UNAVAILABLE
  // (directory in use by another process); I/O errors.
  static absl::StatusOr<std::unique_ptr<BookieStorage>> Open(StorageOptions options);

  // Close().
  ~BookieStorage();

  BookieStorage(const BookieStorage&) = delete;
  BookieStorage& operator=(const BookieStorage&) = delete;

  // Completes queued requests (writing them unless read-only), stops the
  // threads, ends LAC long polls (kShutdown), checkpoints if configured.
  // Later Add/Fence answer READ_ONLY. Idempotent.
  void Close();

  // The random 128-bit hex id of this data directory.
  const std::string& instance_id() const { return instance_id_; }

  // Adds entries. Entries with a bad checksum, a negative entry id or a
  // payload over kMaxPayloadSize get INVALID and are not written. Normal
  // adds (recovery=false) to a fenced ledger get FENCED. `done` runs once,
  // after every written entry is durable and readable (OK), or with
  // READ_ONLY for every entry that could not be made durable.
  void Add(std::vector<EntryView> entries, bool recovery, AddCallback done);

  // Fences a ledger (known or not): once `done` gets OK the mark is durable
  // and every later normal add of the ledger is FENCED. Idempotent: a ledger
  // already durably fenced is answered OK at once (on the caller's thread),
  // without another journal record or sync.
  void Fence(uint64_t ledger_id, FenceCallback done);

  // Reads one entry (blocking disk I/O: not for gRPC threads). Returns OK
  // and fills *entry; NO_SUCH_ENTRY only if the index positively holds
  // nothing for it; CORRUPT if the stored record fails verification;
  // IO_ERROR if it cannot be read. Does not check NO_SUCH_LEDGER.
  Code ReadEntry(uint64_t ledger_id, int64_t entry_id, v1::Entry* entry);

  // The state of a ledger, or nullopt when the storage holds neither
  // entries nor a fence mark for it. Its `lac` is the higher of the
  // piggybacked LAC and the explicit one (SetExplicitLac).
  std::optional<LedgerState> GetLedger(uint64_t ledger_id) const;

  // Raises the ledger's LAC to `lac` as its writer said explicitly (kept in
  // memory only; never lowers it) and wakes the long polls it satisfies.
  // Returns OK, NO_SUCH_LEDGER (nothing held of it: no state is created),
  // FENCED or INVALID (lac < -1), and the LAC GetLedger now reports.
  std::pair<Code, int64_t> SetExplicitLac(uint64_t ledger_id, int64_t lac);

  // Long poll: runs `done` with kAdvanced once the ledger's LAC is above
  // `at_most` (at once, on this thread, if it already is), kTimeout at
  // `deadline`, kShutdown at Close.
  void WaitForLac(uint64_t ledger_id, int64_t at_most, absl::Time deadline, LacCallback done);

  // Failed, or over the disk usage watermark: adds are answered READ_ONLY.
  bool read_only() const { return read_only_flag_.load(std::memory_order_acquire); }
  // A write, sync, roll or index write failed: read-only for good.
  bool failed() const;
  // Read-only for good, as after a failure (adds and fences refused, reads
  // go on), for a reason from outside the storage (the bookie's cookie was
  // deleted while it ran). Logged, and GetStats().read_only_reason says
  // `reason` unless the storage was read-only for good already.
  void RefuseAddsForGood(std::string reason) { EnterReadOnly(std::move(reason)); }
  StorageStats GetStats() const;

  // Called whenever read_only() changes (failure, crossing a disk
  // watermark either way), from the thread that noticed, with no lock
  // held; it may run more than once and concurrently with itself. Set
  // before traffic starts.
  void SetReadOnlyListener(std::function<void()> listener);

  // Checks the disk usage against the watermarks now (the storage also
  // does so by itself, see StorageOptions).
  void CheckDiskUsage();

  // Makes the index durable up to the current journal position and records
  // that position in CHECKPOINT, so a restart replays only what follows.
  // The journal is synced up to that position first, in relaxed mode too.
  absl::Status Checkpoint();

  // How far the index covers the journal (tests).
  JournalPosition AppliedPositionForTest() const;

  // --- Garbage collection (storage_gc.cc) ---

  // Ids of every ledger the storage holds (entries or fence mark).
  std::vector<uint64_t> LedgerIds() const;

  // Removes the ledgers from the index (their journal bytes become dead)
  // and checkpoints, so the deletion survives restarts.
  absl::Status DeleteLedgers(absl::Span<const uint64_t> ledger_ids);

  struct CompactionResult {
    int files_deleted = 0;
    int files_compacted = 0;
    // Batches of at most max_copy_bytes the compaction ran in.
    int batches = 0;
    // Walks of the whole index: one to sum live bytes per file, then one
    // per group of batches whose live entries fit max_walk_entries.
    int index_walks = 0;
    // Files that qualified for compaction and were left for a later call
    // (too little free space).
    int files_deferred = 0;
    uint64_t entries_copied = 0;
    uint64_t bytes_reclaimed = 0;
  };
  // Reclaims journal files wholly before the checkpoint. First deletes
  // those without live entries. Then, for those whose live bytes are below
  // `min_live_fraction` of their size, oldest first, in batches of at most
  // `max_copy_bytes` of live bytes (at least one file; bounds the memory a
  // batch holds), re-appends the live entries through the writer (index
  // updated only if it still points at the old copy), checkpoints, then
  // deletes them. Starts no batch while the file system has less than
  // twice its bytes to copy plus 64 MiB free (filling the disk would turn
  // the bookie read-only): the rest waits for a later call. The index is
  // keyed by ledger, not by file, so finding a batch's entries takes a walk
  // of the whole index: one walk collects the entries of as many
  // consecutive batches as hold at most `max_walk_entries` live entries
  // between them (at least one batch; 40 bytes of memory each).
  static constexpr uint64_t kDefaultMaxCopyBytes = uint64_t{64} << 20;
  static constexpr uint64_t kDefaultMaxWalkEntries = uint64_t{1} << 20;
  absl::StatusOr<CompactionResult> CompactJournal(
      double min_live_fraction = 0.5, uint64_t max_copy_bytes = kDefaultMaxCopyBytes,
      uint64_t max_walk_entries = kDefaultMaxWalkEntries);

  // Journal file numbers currently present (tests).
  std::vector<uint64_t> JournalFiles() const;

 private:
  // CompactJournal's steps (gc_mu_ held): deletes journal files; compacts
  // one batch of files (copies, checkpoint, deletion).
  absl::Status DeleteJournalFiles(const std::vector<uint64_t>& files, CompactionResult* result)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(gc_mu_);
  struct LiveEntry {
    uint64_t ledger_id;
    int64_t entry_id;
    Location loc;
  };
  // `entries`: the live entries of `to_compact`'s files, as a walk of the
  // index found them (some may have moved or gone since: the copy's index
  // update then leaves them be).
  absl::Status CompactFiles(absl::flat_hash_set<uint64_t> to_compact,
                            std::vector<LiveEntry> entries, CompactionResult* result)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(gc_mu_);

  // The ledger's LAC: the higher of the piggybacked and the explicit one.
  int64_t LacLocked(uint64_t ledger_id, const LedgerState& st) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  struct WriteItem {
    enum class Kind : uint8_t { kEntry, kFence, kCopy };
    Kind kind = Kind::kEntry;
    uint8_t flags = 0;
    EntryView entry;
    Location old_location;  // kCopy: the copy replaces this one
    Code code = v1::CODE_UNSPECIFIED;
    Location location;      // where it was written
  };
  struct WriteRequest {
    std::vector<WriteItem> items;
    // A checkpoint barrier: synced even in relaxed mode, and completed only
    // once applied to the index (as are requests with kCopy items).
    bool force_sync = false;
    bool passed = false;  // written, synced (and, if deferred, applied)
    // Payload storage for items whose bytes the request owns (GC copies).
    std::vector<std::string> owned;
    absl::AnyInvocable<void(WriteRequest&) &&> done;
  };
  struct EntryKey {
    uint64_t ledger_id;
    int64_t entry_id;
    bool operator==(const EntryKey&) const = default;
    template <typename H>
    friend H AbslHashValue(H h, const EntryKey& k) {
      return H::combine(std::move(h), k.ledger_id, k.entry_id);
    }
  };
  // One synced batch on its way into the index (applier thread).
  struct ApplyItem {
    EntryKey key;
    Location location;
    WriteItem* copy = nullptr;  // kCopy: the item (owned by a deferred request)
  };
  struct ApplyWork {
    std::vector<ApplyItem> items;
    std::vector<std::unique_ptr<WriteRequest>> deferred;  // completed after apply
    JournalPosition end;
  };

  explicit BookieStorage(StorageOptions options);

  absl::Status Init();
  absl::Status LoadOrCreateInstanceId(const std::vector<std::string>& children);
  absl::StatusOr<JournalPosition> ReadCheckpoint();
  // Replays file `number` from `start`; `last` says whether it is the last
  // journal file (where a torn tail is truncated).
  absl::Status ReplayFile(uint64_t number, uint64_t start, bool last,
                          absl::flat_hash_map<uint64_t, LedgerState>* touched);
  absl::Status OpenNewJournalFile(uint64_t number);
  absl::Status WriteCheckpointFile(const JournalPosition& pos);
  // Writes dirty ledger states, flushes the index and records the applied
  // position in CHECKPOINT. `synced`: everything applied is durable in the
  // journal (required in relaxed mode). `writer_stopped`: Close, after the
  // writer thread ended and the journal was synced, so nothing more can be
  // written (no second barrier is needed, nor possible).
  absl::Status CommitCheckpoint(bool synced, bool writer_stopped = false)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(checkpoint_mu_);

  void Enqueue(std::unique_ptr<WriteRequest> req);
  void WriterLoop();
  // Writer thread: when the queue holds fewer than half as many items as
  // recent batches, waits (at most the recent sync time, capped by
  // group_commit_wait_max) for more to arrive.
  void AwaitGroupLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ProcessBatch(std::vector<std::unique_ptr<WriteRequest>>& batch);
  // Writes and syncs the batch's items; false if it failed (read-only now).
  bool WriteBatchToJournal(std::vector<std::unique_ptr<WriteRequest>>& batch, bool force_sync);
  // Writes a sync mark after the last synced batch if no request is
  // waiting (the next batch would prove that sync just as well).
  void MarkSyncedIfIdle();
  // After a batch's sync: publishes its entries (recent_) and ledger
  // states, and queues the index update. `deletions_at_decision`:
  // ledger_deletions_ when the batch's adds were decided; entries of a
  // ledger deleted since are answered FENCED, not published.
  void PublishBatch(std::vector<std::unique_ptr<WriteRequest>>& batch,
                    uint64_t deletions_at_decision, ApplyWork* work,
                    std::vector<std::pair<uint64_t, int64_t>>* lac_changes);
  void ApplierLoop();
  // Writes the works' entry locations to the index; false if that failed.
  bool ApplyWorks(std::vector<ApplyWork>& works) ABSL_EXCLUSIVE_LOCKS_REQUIRED(apply_mu_);
  // Where the index (or recent_) says the entry is; nullopt if nowhere.
  absl::StatusOr<std::optional<Location>> LookupEntry(uint64_t ledger_id, int64_t entry_id);
  void EnterReadOnly(std::string reason);
  // read_only_flag_ from read_only_ and disk_full_.
  void UpdateReadOnlyFlagLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CheckpointLoop();
  // Runs a request through the writer and waits for it (GC, checkpoints).
  void SubmitAndWait(std::unique_ptr<WriteRequest> req);

  std::shared_ptr<RandomAccessFile> FindFile(uint64_t number) const;
  std::string JournalPath(uint64_t number) const;

  // Constant after construction / Open.
  const StorageOptions options_;
  Env* const env_;
  // Held from before the instance id is read or created until the index is
  // closed (declared before it): a second bookie started on the same
  // directory, even on its first start, writes nothing there.
  DataDirLock dir_lock_;
  std::string instance_id_;
  // INSTANCE still says "new": the first start has not written CHECKPOINT
  // (set and cleared by Init only).
  bool instance_new_ = false;
  std::unique_ptr<Index> index_;
  LacWaiters lac_waiters_;

  bool Preallocating() const;
  // Opens the last journal file (replayed; `size` bytes of records) for
  // appending.
  absl::Status ReopenJournalFile(uint64_t number, uint64_t size);

  // Owned by the writer thread (and by Open/Close while it is not running).
  std::unique_ptr<WritableFile> journal_;
  // journal_ when it is preallocated, else nullptr.
  PreallocatedJournalFile* prealloc_ = nullptr;
  uint64_t journal_number_ = 0;
  // A batch's record headers and small payloads, written as one piece
  // (WriteBatchToJournal). Given back after a batch when over 8 MiB.
  std::string batch_buf_;
  // The journal ends with a synced batch that no sync mark or later batch
  // follows yet (sync mode only).
  bool unmarked_sync_ = false;

  // Serialises Checkpoint and CompactJournal/DeleteLedgers with each other.
  // Lock order: gc_mu_, checkpoint_mu_, apply_mu_, mu_.
  absl::Mutex gc_mu_ ABSL_ACQUIRED_BEFORE(checkpoint_mu_);
  absl::Mutex checkpoint_mu_ ABSL_ACQUIRED_BEFORE(apply_mu_);
  // Serialises index mutations (the applier, ledger deletion, checkpoint
  // state writes) so that a compaction copy's "still points at the old copy"
  // check and its update are atomic.
  absl::Mutex apply_mu_ ABSL_ACQUIRED_BEFORE(mu_);

  mutable absl::Mutex mu_;
  absl::CondVar writer_cv_;      // queue non-empty or stopping
  absl::CondVar checkpoint_cv_;  // enough bytes for a checkpoint, or stopping
  absl::CondVar applier_cv_;     // apply_queue_ non-empty or applier_stop_
  std::vector<std::unique_ptr<WriteRequest>> queue_ ABSL_GUARDED_BY(mu_);
  // Synced batches not yet in the index, in journal order.
  std::vector<ApplyWork> apply_queue_ ABSL_GUARDED_BY(mu_);
  // Entries acknowledged but maybe not yet in the index: reads look here
  // first. The applier erases an entry after writing it to the index.
  absl::flat_hash_map<EntryKey, Location> recent_ ABSL_GUARDED_BY(mu_);
  bool applier_stop_ ABSL_GUARDED_BY(mu_) = false;
  bool applier_failed_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  // Failed: permanent (docs/bookie-format.md, "Read-only mode").
  bool read_only_ ABSL_GUARDED_BY(mu_) = false;
  std::string read_only_reason_ ABSL_GUARDED_BY(mu_);
  // Over the disk usage watermark: adds refused until below the low one.
  bool disk_full_ ABSL_GUARDED_BY(mu_) = false;
  std::string disk_full_reason_ ABSL_GUARDED_BY(mu_);
  double disk_usage_ ABSL_GUARDED_BY(mu_) = -1;
  uint64_t disk_checks_ ABSL_GUARDED_BY(mu_) = 0;
  bool disk_check_error_logged_ ABSL_GUARDED_BY(mu_) = false;
  std::function<void()> read_only_listener_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, LedgerState> ledgers_ ABSL_GUARDED_BY(mu_);
  // LACs written explicitly by writers (SetExplicitLac), for ledgers in
  // ledgers_, dropped once the piggybacked LAC catches up; in memory only.
  absl::flat_hash_map<uint64_t, int64_t> explicit_lacs_ ABSL_GUARDED_BY(mu_);
  // Ledgers whose state changed since the last checkpoint wrote them.
  absl::flat_hash_set<uint64_t> dirty_ledgers_ ABSL_GUARDED_BY(mu_);
  // DeleteLedgers calls that erased ledgers from ledgers_: a batch decided
  // before one and published after it looks its ledgers up again.
  uint64_t ledger_deletions_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<uint64_t, std::shared_ptr<RandomAccessFile>> files_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, uint64_t> file_sizes_ ABSL_GUARDED_BY(mu_);
  JournalPosition applied_ ABSL_GUARDED_BY(mu_);     // the index covers the journal up to here
  JournalPosition checkpoint_ ABSL_GUARDED_BY(mu_);  // durable CHECKPOINT
  uint64_t bytes_since_checkpoint_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t entries_added_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t syncs_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t group_commit_waits_ ABSL_GUARDED_BY(mu_) = 0;
  // Items (adds, fences, GC copies) in queue_.
  uint64_t queued_items_ ABSL_GUARDED_BY(mu_) = 0;
  // The writer thread's own: moving averages of the adds and fences per
  // batch and of the fdatasync time (group commit wait).
  double recent_batch_items_ = 0;
  // Journal bytes written since the writer last checked the disk usage.
  uint64_t bytes_since_disk_check_ = 0;
  absl::Duration recent_sync_time_;
  uint64_t corrupt_records_ ABSL_GUARDED_BY(mu_) = 0;
  std::atomic<bool> read_only_flag_{false};

  std::thread writer_;
  std::thread applier_;
  std::thread checkpointer_;
};

}  // namespace ledgerkv::bookie
