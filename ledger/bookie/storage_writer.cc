// BookieStorage's write path: request queueing, the group-commit writer
// thread, read-only mode and checkpoints.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <limits>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/notification.h"
#include "base/entry_checksum.h"
#include "base/status_macros.h"
#include "ledger/bookie/bookie_storage.h"
#include "base/fault_point.h"

namespace ledgerkv::bookie {

void BookieStorage::Add(std::vector<EntryView> entries, bool recovery, AddCallback done) {
  auto req = std::make_unique<WriteRequest>();
  req->items.resize(entries.size());
  for (size_t i = 0; i < entries.size(); ++i) {
    WriteItem& item = req->items[i];
    item.kind = WriteItem::Kind::kEntry;
    item.flags = recovery ? kFlagRecovery : 0;
    item.entry = entries[i];
    const EntryView& e = entries[i];
    // Checked here, on the caller's thread, so that checksum work spreads
    // over the gRPC threads instead of serialising on the writer. An entry
    // carries the LAC its writer had before adding it, so -1 <= lac <
    // entry_id; a larger one would make readers and recoveries look for
    // entries nobody wrote. Recovery adds copy entries as a bookie stored
    // them (one from before this check, or from a client outside the
    // protocol, may carry more): they are kept, and their LAC counts only
    // up to entry_id - 1 (EffectiveLac). The largest id could never be read
    // (a read names first + count), so it is refused either way.
    const bool lac_in_range = e.lac >= -1 && e.lac < e.entry_id;
    if (e.entry_id < 0 || e.entry_id == std::numeric_limits<int64_t>::max() ||
        (!recovery && !lac_in_range) || e.payload.size() > kMaxPayloadSize ||
        EntryChecksum(e.ledger_id, e.entry_id, e.lac, e.payload) != e.checksum) {
      item.code = v1::INVALID;
    }
  }
  req->done = [done = std::move(done)](WriteRequest& r) mutable {
    std::vector<Code> codes;
    codes.reserve(r.items.size());
    for (const WriteItem& item : r.items) codes.push_back(item.code);
    std::move(done)(std::move(codes));
  };
  Enqueue(std::move(req));
}

void BookieStorage::Fence(uint64_t ledger_id, FenceCallback done) {
  bool already = false;
  {
    absl::MutexLock l(&mu_);
    // A ledger's state says fenced only once a fence record was synced (or
    // replayed): a further record would cost a write and an fdatasync and
    // change nothing. Recoverers re-send fences until they see one confirmed.
    // A read-only bookie confirms a fence it already made durable: the mark
    // still stops every add, and the recoverer needs its vote (refusing would
    // stall recovery of a ledger whose ensemble holds a failed disk).
    auto it = ledgers_.find(ledger_id);
    already = it != ledgers_.end() && it->second.fenced && !stopping_;
  }
  if (already) {
    std::move(done)(v1::OK);
    return;
  }
  auto req = std::make_unique<WriteRequest>();
  WriteItem item;
  item.kind = WriteItem::Kind::kFence;
  item.entry.ledger_id = ledger_id;
  req->items.push_back(item);
  req->done = [done = std::move(done)](WriteRequest& r) mutable {
    std::move(done)(r.items[0].code);
  };
  Enqueue(std::move(req));
}

void BookieStorage::Enqueue(std::unique_ptr<WriteRequest> req) {
  bool pending = false;
  for (const WriteItem& item : req->items) pending |= item.code == v1::CODE_UNSPECIFIED;
  if (pending || req->force_sync) {
    absl::MutexLock l(&mu_);
    if (!stopping_ && !read_only_) {
      if (queue_.empty()) writer_cv_.Signal();
      queued_items_ += req->items.size();
      queue_.push_back(std::move(req));
      return;
    }
  }
  for (WriteItem& item : req->items) {
    if (item.code == v1::CODE_UNSPECIFIED) item.code = v1::READ_ONLY;
  }
  std::move(req->done)(*req);
}

void BookieStorage::SubmitAndWait(std::unique_ptr<WriteRequest> req) {
  absl::Notification done;
  auto inner = std::move(req->done);
  req->done = [&done, inner = std::move(inner)](WriteRequest& r) mutable {
    if (inner) std::move(inner)(r);
    done.Notify();
  };
  Enqueue(std::move(req));
  done.WaitForNotification();
}

void BookieStorage::AwaitGroupLocked() {
  const absl::Duration wait = std::min(options_.group_commit_wait_max, recent_sync_time_);
  const double want = recent_batch_items_ / 2;
  // queued_items_ == 0: only barriers, which write nothing in sync mode.
  if (wait <= absl::ZeroDuration() || stopping_ || read_only_ || queued_items_ == 0 ||
      static_cast<double>(queued_items_) >= want) {
    return;
  }
  ++group_commit_waits_;
  auto enough = [this, want]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return stopping_ || read_only_ || static_cast<double>(queued_items_) >= want;
  };
  mu_.AwaitWithTimeout(absl::Condition(&enough), wait);
}

void BookieStorage::WriterLoop() {
  // After this long without work, earlier batch sizes say nothing about
  // the next ones: the group commit wait starts afresh.
  const absl::Duration forget_batches_after_idle = options_.group_commit_forget_after_idle;
  std::vector<std::unique_ptr<WriteRequest>> batch;
  while (true) {
    batch.clear();
    {
      absl::MutexLock l(&mu_);
      if (queue_.empty() && !stopping_) {
        const absl::Time idle_since = absl::Now();
        while (queue_.empty() && !stopping_) writer_cv_.Wait(&mu_);
        if (absl::Now() - idle_since > forget_batches_after_idle) recent_batch_items_ = 0;
      }
      if (queue_.empty()) return;  // stopping, and every request answered
      AwaitGroupLocked();
      uint64_t bytes = 0;
      uint64_t items = 0;
      uint64_t client_items = 0;  // adds and fences: what a group is made of
      size_t take = 0;
      while (take < queue_.size() && (take == 0 || bytes < options_.max_batch_bytes)) {
        for (const WriteItem& item : queue_[take]->items) {
          bytes += kRecordHeaderSize + item.entry.payload.size();
          client_items += item.kind != WriteItem::Kind::kCopy;
        }
        items += queue_[take]->items.size();
        ++take;
      }
      queued_items_ -= items;
      if (client_items > 0) {
        // One backlog (after a stall) must not make the usual batches look
        // small: a batch counts for at most twice the average, plus 64.
        const double sample =
            std::min(static_cast<double>(client_items), 2 * recent_batch_items_ + 64);
        recent_batch_items_ = 0.9 * recent_batch_items_ + 0.1 * sample;
      }
      if (take == queue_.size()) {
        batch.swap(queue_);
      } else {
        std::move(queue_.begin(), queue_.begin() + take, std::back_inserter(batch));
        queue_.erase(queue_.begin(), queue_.begin() + take);
      }
    }
    ProcessBatch(batch);
    MarkSyncedIfIdle();
  }
}

void BookieStorage::MarkSyncedIfIdle() {
  // Only the preallocated file (the default file layer) can write a mark
  // that the next batch overwrites; test Envs only append.
  if (!unmarked_sync_ || prealloc_ == nullptr) return;
  {
    absl::MutexLock l(&mu_);
    if (!queue_.empty() || read_only_) return;
  }
  unmarked_sync_ = false;
  RecordHeader h;
  h.type = RecordType::kSyncMark;
  h.ledger_id = 0;
  const uint64_t offset = journal_->Size();
  h.batch_offset = offset;
  char mark[kRecordHeaderSize];
  EncodeRecordHeader(h, journal_number_, offset, mark);
  // No sync: a mark that a power loss takes only leaves that batch without
  // its proof, as before marks existed. The acknowledgements went out
  // already; this costs them nothing. The mark is not part of the journal's
  // size: the next batch is written over it, so marks take no space.
  absl::Status s = prealloc_->WriteAtEnd(offset, std::string_view(mark, kRecordHeaderSize));
  if (!s.ok()) EnterReadOnly(absl::StrCat("journal write (sync mark) failed: ", s.ToString()));
}

// The largest batch buffer kept between batches (WriteBatchToJournal).
constexpr size_t kKeepBatchBufBytes = size_t{8} << 20;

void BookieStorage::ProcessBatch(std::vector<std::unique_ptr<WriteRequest>>& batch) {
  bool force_sync = false;
  bool ok;
  uint64_t deletions_at_decision;
  {
    absl::MutexLock l(&mu_);
    ok = !read_only_;
    deletions_at_decision = ledger_deletions_;
    // Fences and normal adds are decided in queue order: an add queued after
    // a fence of its ledger (even in this batch) is FENCED.
    absl::flat_hash_set<uint64_t> fenced_here;
    // Adds to ledgers this bookie does not hold: a new ledger, or one that
    // garbage collection deleted, whose tombstone keeps it fenced for good
    // (a deposed writer must not get acknowledgements from the bookies its
    // fence was on once the ledger is gone). One index lookup per such
    // ledger and batch: the first batch of each new ledger. Under mu_, so
    // that no deletion (tombstone first, then erased from ledgers_ under
    // mu_) falls between the lookup and the decision.
    absl::flat_hash_map<uint64_t, v1::Code> unknown;
    for (auto& req : batch) {
      force_sync |= req->force_sync;
      for (WriteItem& item : req->items) {
        if (item.code != v1::CODE_UNSPECIFIED) continue;
        const uint64_t ledger = item.entry.ledger_id;
        if (item.kind == WriteItem::Kind::kFence) {
          fenced_here.insert(ledger);
        } else if (item.kind == WriteItem::Kind::kEntry) {
          auto it = ledgers_.find(ledger);
          const bool recovery = (item.flags & kFlagRecovery) != 0;
          if (!recovery &&
              (fenced_here.contains(ledger) || (it != ledgers_.end() && it->second.fenced))) {
            item.code = v1::FENCED;
          } else if (it == ledgers_.end()) {
            // Recovery adds too: a deleted ledger has no recovery left to
            // finish, and one stored would bring the ledger back unfenced.
            auto [u, inserted] = unknown.try_emplace(ledger, v1::CODE_UNSPECIFIED);
            if (inserted) {
              absl::StatusOr<bool> deleted = index_->IsDeleted(ledger);
              if (!deleted.ok()) {
                absl::FPrintF(stderr, "bookie: ledger %d: %s\n", ledger,
                              deleted.status().ToString());
                u->second = v1::IO_ERROR;
              } else if (*deleted) {
                u->second = v1::FENCED;
              }
            }
            item.code = u->second;  // CODE_UNSPECIFIED: a new ledger, decided as usual
          }
          // Over the disk watermark: normal adds are refused, also those
          // queued before the check fired (nothing of them is written).
          // Recovery adds, fences and GC copies still go through: they
          // finish recoveries and free space, and take little of it.
          if (item.code == v1::CODE_UNSPECIFIED && disk_full_ && !recovery) {
            item.code = v1::READ_ONLY;
          }
        }
      }
    }
  }
  if (ok) ok = WriteBatchToJournal(batch, force_sync);
  if (!ok) {
    for (auto& req : batch) {
      for (WriteItem& item : req->items) {
        if (item.code == v1::CODE_UNSPECIFIED) item.code = v1::READ_ONLY;
      }
      std::move(req->done)(*req);
    }
    return;
  }
  ApplyWork work;
  std::vector<std::pair<uint64_t, int64_t>> lac_changes;
  PublishBatch(batch, deletions_at_decision, &work, &lac_changes);
  // Acknowledge: everything is durable and readable (through recent_).
  // Barriers and GC copies wait for the index (the applier completes them).
  for (auto& req : batch) {
    bool deferred = req->force_sync;
    for (WriteItem& item : req->items) {
      if (item.kind == WriteItem::Kind::kCopy) {
        deferred = true;
      } else if (item.code == v1::CODE_UNSPECIFIED) {
        item.code = v1::OK;
      }
    }
    if (deferred) {
      work.deferred.push_back(std::move(req));
    } else {
      req->passed = true;
      std::move(req->done)(*req);
    }
  }
  {
    absl::MutexLock l(&mu_);
    apply_queue_.push_back(std::move(work));
    applier_cv_.Signal();
  }
  for (const auto& [ledger, lac] : lac_changes) lac_waiters_.Notify(ledger, lac);
}

bool BookieStorage::WriteBatchToJournal(std::vector<std::unique_ptr<WriteRequest>>& batch,
                                        bool force_sync) {
  size_t records = 0;
  for (auto& req : batch) {
    for (const WriteItem& item : req->items) records += item.code == v1::CODE_UNSPECIFIED;
  }
  if (records == 0) {
    if (!force_sync || options_.sync) return true;
    absl::Status s = journal_->Sync();
    if (!s.ok()) EnterReadOnly(absl::StrCat("journal fdatasync failed: ", s.ToString()));
    return s.ok();
  }
  if (journal_->Size() >= options_.journal_roll_bytes) {
    // Files before the last are complete and durable: sync before leaving.
    absl::Status s = options_.sync ? absl::OkStatus() : journal_->Sync();
    if (s.ok()) s = OpenNewJournalFile(journal_number_ + 1);
    if (!s.ok()) {
      EnterReadOnly(absl::StrCat("journal roll failed: ", s.ToString()));
      return false;
    }
  }
  // Headers, and payloads of up to kInlinePayloadBytes, are copied into one
  // buffer: the batch's small records go to pwritev as one piece instead of
  // two per record (the kernel's per-piece cost is what a 64-entry batch of
  // 100-byte entries paid most for). Larger payloads stay where they are.
  constexpr size_t kInlinePayloadBytes = 4096;
  size_t buffered = 0;
  for (auto& req : batch) {
    for (const WriteItem& item : req->items) {
      if (item.code != v1::CODE_UNSPECIFIED) continue;
      buffered += kRecordHeaderSize;
      if (item.kind != WriteItem::Kind::kFence && item.entry.payload.size() <= kInlinePayloadBytes) {
        buffered += item.entry.payload.size();
      }
    }
  }
  batch_buf_.resize(buffered);
  std::vector<std::string_view> parts;
  const uint64_t batch_offset = journal_->Size();
  uint64_t offset = batch_offset;
  char* const buf = batch_buf_.data();
  size_t run_start = 0;  // the part of batch_buf_ not yet in `parts`
  size_t used = 0;
  for (auto& req : batch) {
    for (WriteItem& item : req->items) {
      if (item.code != v1::CODE_UNSPECIFIED) continue;
      RecordHeader h;
      h.ledger_id = item.entry.ledger_id;
      h.flags = item.flags;
      h.batch_offset = batch_offset;
      if (item.kind == WriteItem::Kind::kFence) {
        h.type = RecordType::kFence;
      } else {
        h.type = RecordType::kEntry;
        h.payload_size = static_cast<uint32_t>(item.entry.payload.size());
        h.entry_checksum = item.entry.checksum;
        h.entry_id = item.entry.entry_id;
        h.lac = item.entry.lac;
      }
      EncodeRecordHeader(h, journal_number_, offset, buf + used);
      used += kRecordHeaderSize;
      const uint32_t size = static_cast<uint32_t>(kRecordHeaderSize + h.payload_size);
      item.location = Location{journal_number_, offset, size};
      if (h.payload_size > 0) {
        if (h.payload_size <= kInlinePayloadBytes) {
          std::memcpy(buf + used, item.entry.payload.data(), h.payload_size);
          used += h.payload_size;
        } else {
          parts.emplace_back(buf + run_start, used - run_start);
          parts.push_back(item.entry.payload);
          run_start = used;
        }
      }
      offset += size;
    }
  }
  if (used > run_start) parts.emplace_back(buf + run_start, used - run_start);
  absl::Status s = journal_->AppendV(parts);
  // A batch may take one request of up to 64 MiB of small entries whole:
  // such a buffer is not kept for the batches of the usual size.
  if (batch_buf_.capacity() > kKeepBatchBufBytes) std::string().swap(batch_buf_);
  if (!s.ok()) {
    EnterReadOnly(absl::StrCat("journal write failed: ", s.ToString()));
    return false;
  }
  // Between two ticks of the checkpointer a fast writer could run far past
  // the watermark: it checks by itself every disk_check_bytes. This batch
  // is written and goes on to its sync; the check stops the next ones.
  bytes_since_disk_check_ += offset - batch_offset;
  if (bytes_since_disk_check_ >= options_.disk_check_bytes) {
    bytes_since_disk_check_ = 0;
    CheckDiskUsage();
  }
  if (options_.sync || force_sync) {
    const absl::Time start = absl::Now();
    // Power-loss tests copy the journal here (the batch written, not yet
    // synced) and fire the point to stand for a power loss before the
    // fdatasync completed: the batch fails as a failed sync does, so
    // nothing in it is acknowledged and nothing more is written.
    s = LEDGERKV_FAULT("bookie.journal.before_sync", JournalPath(journal_number_))
            ? absl::UnavailableError("fault point bookie.journal.before_sync fired")
            : journal_->Sync();
    if (options_.sync) {
      const absl::Duration took = absl::Now() - start;
      recent_sync_time_ = recent_sync_time_ == absl::ZeroDuration()
                              ? took
                              : 0.9 * recent_sync_time_ + 0.1 * took;
    }
    if (!s.ok()) {
      EnterReadOnly(absl::StrCat("journal fdatasync failed: ", s.ToString()));
      return false;
    }
    unmarked_sync_ = true;
    // Power-loss tests copy the journal here: what the disk holds for sure
    // from now on (before the sync mark and the next batch).
    static_cast<void>(LEDGERKV_FAULT("bookie.journal.synced", JournalPath(journal_number_)));
    absl::MutexLock l(&mu_);
    ++syncs_;
  }
  return true;
}

void BookieStorage::PublishBatch(std::vector<std::unique_ptr<WriteRequest>>& batch,
                                 uint64_t deletions_at_decision, ApplyWork* work,
                                 std::vector<std::pair<uint64_t, int64_t>>* lac_changes) {
  uint64_t entries = 0;
  uint64_t bytes = 0;
  absl::MutexLock l(&mu_);
  if (ledger_deletions_ != deletions_at_decision) {
    // A deletion ran between this batch's decision and now: an add decided
    // while its ledger was held (so without the tombstone lookup) whose
    // ledger is gone now would bring it back in memory, unfenced, and the
    // tombstone would never be read again: a deposed writer's next adds
    // would be acknowledged (docs/bookie-format.md, "Garbage collection",
    // step 4). The deletion won; such adds are answered FENCED. They are
    // in the journal, before the deletion's checkpoint: never replayed.
    absl::flat_hash_map<uint64_t, v1::Code> gone;
    for (auto& req : batch) {
      for (WriteItem& item : req->items) {
        if (item.code != v1::CODE_UNSPECIFIED || item.kind != WriteItem::Kind::kEntry) continue;
        const uint64_t ledger = item.entry.ledger_id;
        if (ledgers_.contains(ledger)) continue;
        auto [g, inserted] = gone.try_emplace(ledger, v1::CODE_UNSPECIFIED);
        if (inserted) {
          absl::StatusOr<bool> deleted = index_->IsDeleted(ledger);
          if (!deleted.ok()) {
            absl::FPrintF(stderr, "bookie: ledger %d: %s\n", ledger, deleted.status().ToString());
            g->second = v1::IO_ERROR;
          } else if (*deleted) {
            g->second = v1::FENCED;
          }
        }
        item.code = g->second;  // CODE_UNSPECIFIED: a new ledger, published as usual
      }
    }
  }
  absl::flat_hash_map<uint64_t, LedgerState> states;
  for (auto& req : batch) {
    for (WriteItem& item : req->items) {
      if (item.code != v1::CODE_UNSPECIFIED) continue;
      const uint64_t ledger = item.entry.ledger_id;
      bytes += item.location.size;
      const EntryKey key{ledger, item.entry.entry_id};
      if (item.kind == WriteItem::Kind::kCopy) {
        // Not visible until the applier has checked it is still wanted.
        work->items.push_back(ApplyItem{key, item.location, &item});
        continue;
      }
      auto [it, inserted] = states.try_emplace(ledger);
      if (inserted) {
        auto cur = ledgers_.find(ledger);
        if (cur != ledgers_.end()) it->second = cur->second;
      }
      LedgerState& st = it->second;
      if (item.kind == WriteItem::Kind::kFence) {
        st.fenced = true;
      } else {
        st.lac = std::max(st.lac, EffectiveLac(item.entry.lac, item.entry.entry_id));
        st.last_entry_id = std::max(st.last_entry_id, item.entry.entry_id);
        recent_[key] = item.location;
        work->items.push_back(ApplyItem{key, item.location, nullptr});
        ++entries;
      }
    }
  }
  for (const auto& [ledger, st] : states) {
    LedgerState& cur = ledgers_[ledger];
    if (st.lac > cur.lac) lac_changes->emplace_back(ledger, st.lac);
    cur = st;
    if (!explicit_lacs_.empty()) {
      auto it = explicit_lacs_.find(ledger);
      if (it != explicit_lacs_.end() && it->second <= st.lac) explicit_lacs_.erase(it);
    }
    // Written to the index at the next checkpoint; replay recomputes them
    // for the journal after it.
    dirty_ledgers_.insert(ledger);
  }
  work->end = JournalPosition{journal_number_, journal_->Size()};
  file_sizes_[journal_number_] = journal_->Size();
  entries_added_ += entries;
  bytes_since_checkpoint_ += bytes;
  if (bytes_since_checkpoint_ >= options_.checkpoint_bytes) checkpoint_cv_.Signal();
}

void BookieStorage::ApplierLoop() {
  std::vector<ApplyWork> works;
  while (true) {
    {
      absl::MutexLock l(&mu_);
      while (apply_queue_.empty() && !applier_stop_) applier_cv_.Wait(&mu_);
      if (apply_queue_.empty()) return;
      // Taking several batches at once turns them into one index write.
      works.swap(apply_queue_);
    }
    bool ok;
    {
      absl::MutexLock a(&apply_mu_);
      ok = ApplyWorks(works);
    }
    for (ApplyWork& work : works) {
      for (auto& req : work.deferred) {
        req->passed = ok;
        for (WriteItem& item : req->items) {
          if (item.kind == WriteItem::Kind::kCopy && item.code == v1::CODE_UNSPECIFIED) {
            item.code = ok ? v1::OK : v1::READ_ONLY;
          }
        }
        std::move(req->done)(*req);
      }
    }
    works.clear();
  }
}

bool BookieStorage::ApplyWorks(std::vector<ApplyWork>& works) {
  {
    absl::MutexLock l(&mu_);
    // After a failed index write the index has a gap: stop moving entries
    // there (they stay readable through recent_; replay redoes them).
    if (applier_failed_) return false;
  }
  // Entries of ledgers deleted after they were published: DeleteLedgers
  // already removed the ledger from the index and from ledgers_, so an
  // index entry written now would be an orphan that keeps its journal file
  // alive forever. (A later add to the same id re-creates the ledger in
  // ledgers_, so the next collection finds and deletes it.)
  absl::flat_hash_set<uint64_t> deleted;
  {
    absl::MutexLock l(&mu_);
    for (const ApplyWork& work : works) {
      for (const ApplyItem& item : work.items) {
        if (item.copy == nullptr && !ledgers_.contains(item.key.ledger_id)) {
          deleted.insert(item.key.ledger_id);
        }
      }
    }
  }
  Index::Batch index_batch;
  for (ApplyWork& work : works) {
    for (ApplyItem& item : work.items) {
      if (item.copy == nullptr) {
        if (deleted.contains(item.key.ledger_id)) continue;
        index_batch.PutEntry(item.key.ledger_id, item.key.entry_id, item.location);
        continue;
      }
      // A copy moves the index only if nothing replaced or deleted the entry
      // since GC read it. A newer write is still in recent_ (copies never
      // are) or already in the index under another location.
      bool pending;
      {
        absl::MutexLock l(&mu_);
        pending = recent_.contains(item.key);
      }
      if (pending) continue;
      absl::StatusOr<std::optional<Location>> cur =
          index_->GetEntry(item.key.ledger_id, item.key.entry_id);
      if (!cur.ok()) {
        item.copy->code = v1::IO_ERROR;
      } else if (cur->has_value() && **cur == item.copy->old_location) {
        index_batch.PutEntry(item.key.ledger_id, item.key.entry_id, item.location);
      }
    }
  }
  absl::Status s = index_batch.empty() ? absl::OkStatus() : index_->Write(index_batch);
  if (!s.ok()) {
    {
      absl::MutexLock l(&mu_);
      applier_failed_ = true;
    }
    EnterReadOnly(absl::StrCat("index write failed: ", s.ToString()));
    return false;
  }
  absl::MutexLock l(&mu_);
  for (const ApplyWork& work : works) {
    for (const ApplyItem& item : work.items) {
      if (item.copy != nullptr) continue;
      auto it = recent_.find(item.key);
      // A later write of the same entry may have replaced ours meanwhile.
      if (it != recent_.end() && it->second == item.location) recent_.erase(it);
    }
  }
  applied_ = works.back().end;
  return true;
}

absl::StatusOr<std::optional<Location>> BookieStorage::LookupEntry(uint64_t ledger_id,
                                                                   int64_t entry_id) {
  {
    absl::MutexLock l(&mu_);
    auto it = recent_.find(EntryKey{ledger_id, entry_id});
    if (it != recent_.end()) return std::optional<Location>(it->second);
  }
  // The applier writes the index before erasing from recent_, so a miss
  // above means the index has it (or nobody does).
  return index_->GetEntry(ledger_id, entry_id);
}

void BookieStorage::EnterReadOnly(std::string reason) {
  std::function<void()> listener;
  bool changed;
  {
    absl::MutexLock l(&mu_);
    if (read_only_) return;
    changed = !read_only_flag_.load(std::memory_order_relaxed);
    read_only_ = true;
    UpdateReadOnlyFlagLocked();
    read_only_reason_ = reason;
    listener = read_only_listener_;
    // Batches the writer decides from here on are answered READ_ONLY (it
    // sees read_only_). A failure of the writer's own write or sync fails
    // its batch too. One batch the writer decided before another thread
    // (the index applier) set this is still written, synced and answered:
    // its adds are durable, and its entries stay in recent_ and ahead of
    // applied_, so a restart replays them into the index.
  }
  absl::FPrintF(stderr, "bookie: turning READ-ONLY: %s\n", reason);
  if (changed && listener) listener();
}

void BookieStorage::UpdateReadOnlyFlagLocked() {
  read_only_flag_.store(read_only_ || disk_full_, std::memory_order_release);
}

void BookieStorage::CheckDiskUsage() {
  const absl::StatusOr<FileSystemSpace> space = GetFileSystemSpace(options_.dir);
  std::function<void()> listener;
  std::string message;
  {
    absl::MutexLock l(&mu_);
    ++disk_checks_;
    if (!space.ok() || space->used + space->available == 0) {
      // Leaves the state as it is: a check that cannot see the disk says
      // nothing about it. Logged once.
      if (!disk_check_error_logged_) {
        disk_check_error_logged_ = true;
        message = absl::StrFormat("bookie: cannot check the disk usage of %s: %s", options_.dir,
                                  space.ok() ? "the file system reports no blocks"
                                             : space.status().ToString());
      }
    } else {
      disk_usage_ = space->UsedFraction();
      const bool was = read_only_ || disk_full_;
      if (!disk_full_ && options_.disk_high_watermark < 1 &&
          disk_usage_ >= options_.disk_high_watermark) {
        disk_full_ = true;
        disk_full_reason_ = absl::StrFormat(
            "disk usage %.1f%% of %s is at or above the high watermark %g%%: adds refused "
            "until it is below %g%% (fences, recovery adds, reads and GC go on)",
            100 * disk_usage_, options_.dir, 100 * options_.disk_high_watermark,
            100 * options_.disk_low_watermark);
        message = absl::StrCat("bookie: turning READ-ONLY for adds: ", disk_full_reason_);
      } else if (disk_full_ && (options_.disk_high_watermark >= 1 ||
                                disk_usage_ < options_.disk_low_watermark)) {
        disk_full_ = false;
        disk_full_reason_.clear();
        message = absl::StrFormat(
            "bookie: disk usage %.1f%% of %s is below the low watermark %g%%: taking adds again%s",
            100 * disk_usage_, options_.dir, 100 * options_.disk_low_watermark,
            read_only_ ? " (but the bookie failed earlier and stays read-only)" : "");
      }
      UpdateReadOnlyFlagLocked();
      if (was != (read_only_ || disk_full_)) listener = read_only_listener_;
    }
  }
  if (!message.empty()) absl::FPrintF(stderr, "%s\n", message);
  if (listener) listener();
}

absl::Status BookieStorage::Checkpoint() {
  absl::MutexLock c(&checkpoint_mu_);
  // A barrier through the writer: when it completes, everything written
  // before it is synced (even in relaxed mode) and applied to the index.
  auto barrier = std::make_unique<WriteRequest>();
  barrier->force_sync = true;
  bool passed = false;
  barrier->done = [&passed](WriteRequest& r) { passed = r.passed; };
  SubmitAndWait(std::move(barrier));
  // Tests add unsynced (relaxed) batches here, which the index may cover
  // by the time CommitCheckpoint reads how far it goes.
  static_cast<void>(LEDGERKV_FAULT("bookie.checkpoint.barrier_passed"));
  return CommitCheckpoint(passed);
}

JournalPosition BookieStorage::AppliedPositionForTest() const {
  absl::MutexLock l(&mu_);
  return applied_;
}

absl::Status BookieStorage::CommitCheckpoint(bool synced, bool writer_stopped) {
  JournalPosition pos;
  {
    // Under apply_mu_ the index does not move: it covers exactly the journal
    // up to `pos`. The ledger states may already include later synced
    // batches (the writer publishes them first); replaying those from `pos`
    // changes nothing, since state updates are max/or.
    absl::MutexLock a(&apply_mu_);
    Index::Batch states;
    absl::flat_hash_set<uint64_t> dirty;
    {
      absl::MutexLock l(&mu_);
      // Without the barrier (closing, or read-only), what the index covers
      // is durable only if every batch was synced before it was applied.
      if (!synced && !options_.sync) {
        return absl::FailedPreconditionError(
            "bookie storage is read-only or closing; cannot checkpoint in relaxed mode");
      }
      pos = applied_;
      // Take the dirty set now: the writer thread (which holds mu_ but not
      // apply_mu_) may publish and dirty more ledgers while the index write
      // below runs without mu_, and those must stay dirty for the next
      // checkpoint, or their fence marks and last entry ids would be lost
      // once CHECKPOINT moves past their journal records.
      dirty = std::exchange(dirty_ledgers_, {});
      for (uint64_t id : dirty) {
        auto it = ledgers_.find(id);
        if (it != ledgers_.end()) states.PutLedger(id, it->second);
      }
    }
    // A test hook: tests publish a batch here, while mu_ is released.
    static_cast<void>(LEDGERKV_FAULT("bookie.checkpoint.states_taken"));
    if (!states.empty()) {
      absl::Status written = index_->Write(states);
      if (!written.ok()) {
        absl::MutexLock l(&mu_);
        dirty_ledgers_.insert(dirty.begin(), dirty.end());
        return written;
      }
    }
  }
  if (!options_.sync && !writer_stopped) {
    // In relaxed mode the batches the applier took after the caller's
    // barrier (with it, or before apply_mu_ above) were written but not
    // synced, and `pos` may lie among them. Sync through a second barrier
    // before CHECKPOINT names `pos`: after a power loss it must never lie
    // beyond the journal's end, or the bookie refuses to start.
    auto barrier = std::make_unique<WriteRequest>();
    barrier->force_sync = true;
    bool passed = false;
    barrier->done = [&passed](WriteRequest& r) { passed = r.passed; };
    SubmitAndWait(std::move(barrier));
    if (!passed) {
      // The sync failed: the storage is read-only now, and CHECKPOINT stays
      // where it was (replay from there rebuilds every state).
      return absl::FailedPreconditionError(
          "bookie storage: the journal could not be synced for a checkpoint");
    }
  }
  RETURN_IF_ERROR(index_->Flush());
  // Tests: a crash here leaves the index flushed past CHECKPOINT.
  if (LEDGERKV_FAULT("bookie.checkpoint.flushed")) {
    return absl::AbortedError("fault point bookie.checkpoint.flushed");
  }
  RETURN_IF_ERROR(WriteCheckpointFile(pos));
  absl::MutexLock l(&mu_);
  checkpoint_ = pos;
  bytes_since_checkpoint_ = 0;
  return absl::OkStatus();
}

void BookieStorage::CheckpointLoop() {
  mu_.Lock();
  absl::Time next = absl::Now() + options_.checkpoint_interval;
  absl::Time next_disk_check = absl::Now() + options_.disk_check_interval;
  while (!stopping_) {
    checkpoint_cv_.WaitWithDeadline(&mu_, std::min(next, next_disk_check));
    if (stopping_) break;
    if (absl::Now() >= next_disk_check) {
      mu_.Unlock();
      CheckDiskUsage();
      mu_.Lock();
      next_disk_check = absl::Now() + options_.disk_check_interval;
      if (stopping_) break;
    }
    const bool due = bytes_since_checkpoint_ >= options_.checkpoint_bytes ||
                     (absl::Now() >= next && applied_ != checkpoint_);
    if (absl::Now() >= next) next = absl::Now() + options_.checkpoint_interval;
    if (!due || read_only_) continue;
    mu_.Unlock();
    absl::Status s = Checkpoint();
    if (!s.ok()) absl::FPrintF(stderr, "bookie: checkpoint failed: %s\n", s.ToString());
    mu_.Lock();
  }
  mu_.Unlock();
}

}  // namespace ledgerkv::bookie
