// BookieStorage garbage collection: deleting ledgers from the index and
// reclaiming journal files (delete when dead, compact when mostly dead).
#include <algorithm>
#include <cstdio>
#include <map>
#include <tuple>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/fault_point.h"
#include "base/status_macros.h"
#include "ledger/bookie/bookie_storage.h"
#include "ledger/bookie/journal_reader.h"

namespace ledgerkv::bookie {
namespace {

// Live entries are re-appended in writer requests of about this size.
constexpr uint64_t kCopyChunkBytes = 4 << 20;

}  // namespace

std::vector<uint64_t> BookieStorage::LedgerIds() const {
  absl::MutexLock l(&mu_);
  std::vector<uint64_t> ids;
  ids.reserve(ledgers_.size());
  for (const auto& [id, st] : ledgers_) ids.push_back(id);
  std::sort(ids.begin(), ids.end());
  return ids;
}

std::vector<uint64_t> BookieStorage::JournalFiles() const {
  absl::MutexLock l(&mu_);
  std::vector<uint64_t> numbers;
  for (const auto& [n, f] : files_) numbers.push_back(n);
  std::sort(numbers.begin(), numbers.end());
  return numbers;
}

absl::Status BookieStorage::DeleteLedgers(absl::Span<const uint64_t> ledger_ids) {
  absl::MutexLock g(&gc_mu_);
  // Drain the applier first, so that no entry written before the deletion
  // reaches the index after it.
  auto barrier = std::make_unique<WriteRequest>();
  barrier->force_sync = true;
  SubmitAndWait(std::move(barrier));
  {
    absl::MutexLock a(&apply_mu_);
    // Adds published after the barrier may still wait for the applier; it
    // drops them once their ledger is gone from ledgers_ (ApplyWorks), so
    // they cannot leave index entries that no collection would find.
    static_cast<void>(LEDGERKV_FAULT("bookie.gc.deleting"));
    const absl::flat_hash_set<uint64_t> dead(ledger_ids.begin(), ledger_ids.end());
    // All or none: on a failure memory still holds every one of them, as
    // the index does, and the next round tries again.
    RETURN_IF_ERROR(index_->DeleteLedgers(ledger_ids));
    absl::MutexLock l(&mu_);
    ++ledger_deletions_;
    for (uint64_t id : ledger_ids) {
      ledgers_.erase(id);
      explicit_lacs_.erase(id);
      dirty_ledgers_.erase(id);
    }
    absl::erase_if(recent_, [&](const auto& kv) { return dead.contains(kv.first.ledger_id); });
  }
  // Deletions are not journal records: only a checkpoint makes them stick
  // (a crash before it brings the ledgers back until the next GC).
  return Checkpoint();
}

absl::Status BookieStorage::DeleteJournalFiles(const std::vector<uint64_t>& files,
                                               CompactionResult* result) {
  for (uint64_t n : files) {
    uint64_t size = 0;
    {
      absl::MutexLock l(&mu_);
      if (auto it = file_sizes_.find(n); it != file_sizes_.end()) size = it->second;
      files_.erase(n);
      file_sizes_.erase(n);
    }
    RETURN_IF_ERROR(env_->DeleteFile(JournalPath(n)));
    result->bytes_reclaimed += size;
    ++result->files_deleted;
  }
  if (!files.empty()) RETURN_IF_ERROR(env_->SyncDir(options_.dir));
  return absl::OkStatus();
}

absl::Status BookieStorage::CompactFiles(absl::flat_hash_set<uint64_t> to_compact,
                                         std::vector<LiveEntry> entries,
                                         CompactionResult* result) {
  std::sort(entries.begin(), entries.end(), [](const LiveEntry& a, const LiveEntry& b) {
    return std::tie(a.loc.file, a.loc.offset) < std::tie(b.loc.file, b.loc.offset);
  });
  size_t i = 0;
  while (i < entries.size()) {
    auto req = std::make_unique<WriteRequest>();
    uint64_t bytes = 0;
    for (; i < entries.size() && bytes < kCopyChunkBytes; ++i) {
      const LiveEntry& e = entries[i];
      if (!to_compact.contains(e.loc.file)) continue;
      std::shared_ptr<RandomAccessFile> file = FindFile(e.loc.file);
      RecordHeader h;
      absl::StatusOr<std::string> payload =
          file == nullptr ? absl::NotFoundError("journal file missing")
                          : ReadEntryRecord(file.get(), e.loc, e.ledger_id, e.entry_id, &h);
      if (!payload.ok()) {
        // Keep the file (and the evidence): a live entry we cannot copy
        // must stay where reads find it, failing loudly.
        absl::FPrintF(stderr, "bookie: gc: not compacting %s: %s\n",
                      JournalFileName(e.loc.file), payload.status().ToString());
        to_compact.erase(e.loc.file);
        continue;
      }
      bytes += e.loc.size;
      req->owned.push_back(std::move(*payload));
      WriteItem item;
      item.kind = WriteItem::Kind::kCopy;
      item.flags = kFlagCopy;
      item.entry = EntryView{e.ledger_id, e.entry_id, h.lac, h.entry_checksum, {}};
      item.old_location = e.loc;
      req->items.push_back(item);
    }
    // Views into `owned` only now that it no longer reallocates.
    for (size_t k = 0; k < req->items.size(); ++k) req->items[k].entry.payload = req->owned[k];
    const size_t copied = req->items.size();
    // Copies are synced even in relaxed mode: the index moves to them,
    // and the old (long durable) records are deleted after.
    req->force_sync = true;
    // Tests: an entry is rewritten (a recovery add) after compaction read
    // its old record and before the copy is published.
    static_cast<void>(LEDGERKV_FAULT("bookie.gc.copies_read"));
    bool passed = false;
    std::vector<uint64_t> failed_files;
    req->done = [&passed, &failed_files](WriteRequest& r) {
      passed = r.passed;
      for (const WriteItem& item : r.items) {
        if (item.code == v1::IO_ERROR) failed_files.push_back(item.old_location.file);
      }
    };
    SubmitAndWait(std::move(req));
    if (!passed) return absl::FailedPreconditionError("gc: journal is read-only");
    // An entry whose index could not be moved to its copy still points at
    // the old file: that file must stay.
    for (uint64_t f : failed_files) {
      absl::FPrintF(stderr, "bookie: gc: not compacting %s: index update failed\n",
                    JournalFileName(f));
      to_compact.erase(f);
    }
    result->entries_copied += copied;
  }
  // The new locations must be durable before the old copies go.
  RETURN_IF_ERROR(Checkpoint());
  result->files_compacted += static_cast<int>(to_compact.size());
  return DeleteJournalFiles(std::vector<uint64_t>(to_compact.begin(), to_compact.end()), result);
}

absl::StatusOr<BookieStorage::CompactionResult> BookieStorage::CompactJournal(
    double min_live_fraction, uint64_t max_copy_bytes, uint64_t max_walk_entries) {
  absl::MutexLock g(&gc_mu_);
  CompactionResult result;
  RETURN_IF_ERROR(Checkpoint());
  // Only files wholly before the checkpoint: replay never reads them, and
  // the writer never appends to them.
  std::map<uint64_t, uint64_t> sizes;
  {
    absl::MutexLock l(&mu_);
    for (const auto& [n, size] : file_sizes_) {
      if (n < checkpoint_.file) sizes[n] = size;
    }
  }
  if (sizes.empty()) return result;

  std::map<uint64_t, uint64_t> live;
  std::map<uint64_t, uint64_t> live_entries;
  RETURN_IF_ERROR(index_->ForEachEntry([&](uint64_t, int64_t, const Location& loc) {
    if (sizes.contains(loc.file)) {
      live[loc.file] += loc.size;
      ++live_entries[loc.file];
    }
  }));
  ++result.index_walks;
  std::vector<uint64_t> dead;
  std::vector<std::pair<uint64_t, uint64_t>> sparse;  // (file, live bytes), oldest first
  for (const auto& [n, size] : sizes) {
    const uint64_t l = live[n];
    if (l == 0) {
      dead.push_back(n);
    } else if (static_cast<double>(l) < min_live_fraction * static_cast<double>(size)) {
      sparse.emplace_back(n, l);
    }
  }
  // Dead files first: they free space without needing any.
  RETURN_IF_ERROR(DeleteJournalFiles(dead, &result));

  // In batches of at most max_copy_bytes of live bytes (at least one file),
  // oldest files first: each batch is copied, checkpointed and deleted
  // before the next, so a large half-dead journal never needs its whole
  // live size free at once. Every batch of the round runs: compaction must
  // keep up with a busy bookie. A file that cannot be compacted (a live
  // entry fails verification) is dropped from its batch; the next batch
  // goes on.
  struct Batch {
    absl::flat_hash_set<uint64_t> files;
    uint64_t copy_bytes = 0;
    uint64_t entries = 0;
  };
  std::vector<Batch> batches;
  for (const auto& [n, l] : sparse) {
    if (batches.empty() || batches.back().copy_bytes + l > max_copy_bytes) batches.emplace_back();
    Batch& b = batches.back();
    b.files.insert(n);
    b.copy_bytes += l;
    b.entries += live_entries[n];
  }
  // Their entries are found by walking the index, for a group of batches
  // at a time (their files only shrink meanwhile: nothing but compaction
  // moves an entry, and it moves it into a new file).
  size_t next = 0;  // the next batch to run
  bool stopped = false;
  while (next < batches.size() && !stopped) {
    size_t group_end = next;
    uint64_t group_entries = 0;
    absl::flat_hash_map<uint64_t, size_t> batch_of;  // file -> index in `collected`
    do {
      group_entries += batches[group_end].entries;
      for (uint64_t f : batches[group_end].files) batch_of[f] = group_end - next;
      ++group_end;
    } while (group_end < batches.size() &&
             group_entries + batches[group_end].entries <= max_walk_entries);
    std::vector<std::vector<LiveEntry>> collected(group_end - next);
    RETURN_IF_ERROR(index_->ForEachEntry([&](uint64_t ledger, int64_t entry, const Location& loc) {
      auto it = batch_of.find(loc.file);
      if (it != batch_of.end()) collected[it->second].push_back(LiveEntry{ledger, entry, loc});
    }));
    ++result.index_walks;
    for (size_t k = 0; next < group_end; ++k) {
      const Batch& b = batches[next];
      const uint64_t need = 2 * b.copy_bytes + (uint64_t{64} << 20);
      if (absl::StatusOr<FileSystemSpace> space = GetFileSystemSpace(options_.dir); space.ok()) {
        const uint64_t available = space->available;
        if (available < need) {
          size_t left = 0;
          for (size_t j = next; j < batches.size(); ++j) left += batches[j].files.size();
          absl::FPrintF(stderr,
                        "bookie: gc: not compacting %d journal files: %d bytes free, want %d "
                        "(twice the %d live bytes of the next batch, plus 64 MiB)\n",
                        left, available, need, b.copy_bytes);
          stopped = true;
          break;
        }
      }
      ++next;
      ++result.batches;
      RETURN_IF_ERROR(CompactFiles(b.files, std::move(collected[k]), &result));
    }
  }
  size_t deferred = 0;
  for (size_t j = next; j < batches.size(); ++j) deferred += batches[j].files.size();
  result.files_deferred = static_cast<int>(deferred);
  return result;
}

}  // namespace ledgerkv::bookie
