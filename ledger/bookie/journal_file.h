// PreallocatedJournalFile: the journal file being written, kept ahead of its
// end with zero-filled, synced space so that the writer's batches overwrite
// blocks that already exist (docs/bookie-format.md, "Preallocation").
//
// Why: an fdatasync after an append must also write the inode (the file
// size, new blocks). An fdatasync after overwriting existing blocks writes
// only the data, so it is faster and its time does not depend on metadata
// traffic elsewhere on the file system. Space reserved with fallocate(2)
// does not help: writing into unwritten extents converts them, which is
// again a metadata update. So the space is filled with real zeros, by a
// background thread, off the acknowledgement path.
//
// Zeros are never a valid record header, so after a crash replay sees the
// zero tail as a torn tail and cuts the file there (as it did before);
// Seal() cuts it before the file stops being the last one (roll, close), so
// only the last journal file can have one.
//
// Filling doubles the bytes written to the disk, which is worth it only
// while write batches are small (then the inode write is a large part of
// each sync): filling pauses while the recent average batch is at least
// kFillMaxAverageBatch, and the file simply grows by appending.
//
// The filler writes and syncs through its own open file description (a
// second open(2), not a dup): since Linux 4.14 a write-back error is
// reported once per open file description, by whichever of fdatasync and
// sync_file_range on it looks first. Sharing one would let the filler's
// sync_file_range take an I/O error of the writer's batch, and the
// writer's fdatasync then return 0 for pages that never reached the disk:
// an acknowledgement of lost data. With two descriptions each sees it.
//
// Threading: AppendV, Sync, Seal, Close and Size are called by one thread at
// a time (the storage's writer); the filler thread is internal.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "base/file.h"

namespace ledgerkv::bookie {

class PreallocatedJournalFile final : public WritableFile {
 public:
  // Batches averaging this many bytes or more pause filling.
  static constexpr uint64_t kFillMaxAverageBatch = 32 << 10;
  // Filling starts after this many batches (an idle or short-lived bookie
  // writes no zeros).
  static constexpr int kFillAfterBatches = 64;

  // Opens (creating if missing) the journal file at `path`, whose records
  // end at `size` (anything after it is unused: zeros or a torn tail that
  // replay already rejected). Keeps about `ahead` bytes filled past the end.
  // REQUIRES: ahead > 0.
  static absl::StatusOr<std::unique_ptr<PreallocatedJournalFile>> Open(const std::string& path,
                                                                       uint64_t size,
                                                                       uint64_t ahead);

  // Close(). Does not Seal(): a file dropped without one keeps its zero
  // tail, which replay treats as a torn tail.
  ~PreallocatedJournalFile() override;

  PreallocatedJournalFile(const PreallocatedJournalFile&) = delete;
  PreallocatedJournalFile& operator=(const PreallocatedJournalFile&) = delete;

  // WritableFile: AppendV writes at Size() (pwritev); Sync is fdatasync.
  absl::Status Append(std::string_view data) override;
  absl::Status AppendV(absl::Span<const std::string_view> parts) override;
  absl::Status Sync() override;
  // Writes `data` at Size() without making it part of the file: Size() does
  // not move, the next AppendV overwrites it, Seal cuts it off. For the
  // journal's sync mark (journal_format.h), which only matters while it is
  // the last thing in the file. Same thread as AppendV.
  // `offset` must be Size() (the caller encoded it into `data`).
  absl::Status WriteAtEnd(uint64_t offset, std::string_view data);
  // Stops the filler; does not cut or sync. Idempotent.
  absl::Status Close() override;
  uint64_t Size() const override;

  // Stops the filler, cuts the file at Size() and syncs, so that no zero
  // tail remains. Call before the file stops being the last journal file.
  absl::Status Seal();

  // Bytes of the file past Size() known to be zero-filled and durable
  // (tests).
  uint64_t FilledAhead() const;

  // The descriptors of the writer and of the filler (-1 if preallocation
  // could not open its own), for tests. Valid until Close.
  int writer_fd_for_test() const { return fd_; }
  int filler_fd_for_test() const { return fill_fd_; }

 private:
  // Waits until the filler is clear of [Size(), Size() + n), keeps it above
  // that range, and returns Size().
  uint64_t ReserveAtEnd(uint64_t n) ABSL_LOCKS_EXCLUDED(mu_);
  // pwritev of `parts` at `offset`, resuming after short writes.
  absl::Status WriteAt(uint64_t offset, absl::Span<const std::string_view> parts);
  PreallocatedJournalFile(std::string path, int fd, int fill_fd, uint64_t size, uint64_t ahead);
  void FillLoop();
  bool FillWantedLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void StopFiller() ABSL_LOCKS_EXCLUDED(mu_);

  // Constant after construction.
  const std::string path_;
  const uint64_t ahead_;
  // Valid until Close, which stops the filler before closing them.
  int fd_;
  // The filler's own open file description of the same file; -1: none
  // (then nothing is filled).
  int fill_fd_;

  mutable absl::Mutex mu_;
  // End of the records written (the logical size).
  uint64_t size_ ABSL_GUARDED_BY(mu_);
  // The file holds synced zeros up to here (when above size_).
  uint64_t filled_ ABSL_GUARDED_BY(mu_);
  // A write in progress covers [size_, reserved_); the filler stays above it.
  uint64_t reserved_ ABSL_GUARDED_BY(mu_);
  // The filler is writing zeros over [fill_from_, fill_to_).
  bool filling_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t fill_from_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t fill_to_ ABSL_GUARDED_BY(mu_) = 0;
  // Exponential average of the bytes per AppendV (one per write batch).
  double average_batch_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t batches_ ABSL_GUARDED_BY(mu_) = 0;
  // A fill failed (e.g. out of space): the file just grows from then on.
  bool fill_failed_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;

  std::thread filler_;
};

}  // namespace ledgerkv::bookie
