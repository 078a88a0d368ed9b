#include "ledger/bookie/journal_file.h"

#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"

namespace ledgerkv::bookie {
namespace {

// Zeros are written in steps of this size; a writer that catches up with
// the filler waits for one step at most. The writer's fdatasync also waits
// for every page of the file under write-back, so a step in flight stalls
// one of its syncs for what is left of the step's write (and the disk's
// cache flush waits for it too). 4 MiB steps stalled a sync for up to
// 9-31 ms about ten times a second under 100-byte adds; 1 MiB steps stall
// more syncs, each for a few ms at most. Three bookies on one disk took 9%
// more adds; one bookie as many as before, with its p99 add latency up
// from ~0.5 to ~1 ms (more syncs meet a step) and its longest stalls a
// third as long (docs/performance.md, "The zero filler's step").
constexpr uint64_t kFillStep = 1 << 20;

absl::Status Errno(const std::string& what, const std::string& path, int err) {
  std::string msg = absl::StrCat(what, " ", path, ": ", std::strerror(err));
  if (err == ENOSPC || err == EDQUOT) return absl::ResourceExhaustedError(msg);
  return absl::Status(absl::ErrnoToStatusCode(err), msg);
}

}  // namespace

absl::StatusOr<std::unique_ptr<PreallocatedJournalFile>> PreallocatedJournalFile::Open(
    const std::string& path, uint64_t size, uint64_t ahead) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return Errno("open", path, errno);
  // A second open(2): its own write-back error state (see the header).
  const int fill_fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fill_fd < 0) {
    absl::FPrintF(stderr, "bookie: %s: no journal preallocation: open: %s\n", path,
                  std::strerror(errno));
  }
  std::unique_ptr<PreallocatedJournalFile> file(new PreallocatedJournalFile(
      path, fd, fill_fd, size, std::max<uint64_t>(ahead, kFillStep)));
  file->filler_ = std::thread([f = file.get()] { f->FillLoop(); });
  return file;
}

PreallocatedJournalFile::PreallocatedJournalFile(std::string path, int fd, int fill_fd,
                                                 uint64_t size, uint64_t ahead)
    : path_(std::move(path)), ahead_(ahead), fd_(fd), fill_fd_(fill_fd) {
  absl::MutexLock l(&mu_);
  fill_failed_ = fill_fd_ < 0;
  size_ = size;
  // Whatever lies past `size` is not known to be zeros: never trust it.
  filled_ = size;
  reserved_ = size;
}

PreallocatedJournalFile::~PreallocatedJournalFile() { IgnoreError(Close()); }

uint64_t PreallocatedJournalFile::Size() const {
  absl::MutexLock l(&mu_);
  return size_;
}

uint64_t PreallocatedJournalFile::FilledAhead() const {
  absl::MutexLock l(&mu_);
  return filled_ > size_ ? filled_ - size_ : 0;
}

absl::Status PreallocatedJournalFile::Append(std::string_view data) {
  std::string_view one[1] = {data};
  return AppendV(one);
}

uint64_t PreallocatedJournalFile::ReserveAtEnd(uint64_t n) {
  absl::MutexLock l(&mu_);
  // Never write where the filler is writing zeros right now.
  auto clear = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !filling_ || fill_from_ >= size_ + n || fill_to_ <= size_;
  };
  mu_.Await(absl::Condition(&clear));
  reserved_ = std::max(reserved_, size_ + n);
  return size_;
}

absl::Status PreallocatedJournalFile::WriteAt(uint64_t offset,
                                              absl::Span<const std::string_view> parts) {
  // pwritev takes at most IOV_MAX buffers and may write short: loop over
  // windows of the parts, resuming inside a part after a short write.
  size_t part = 0;
  size_t skip = 0;
  uint64_t at = offset;
  while (part < parts.size()) {
    iovec iov[IOV_MAX];
    int count = 0;
    for (size_t i = part; i < parts.size() && count < IOV_MAX; ++i) {
      std::string_view p = parts[i];
      if (i == part) p.remove_prefix(skip);
      if (p.empty()) continue;
      iov[count].iov_base = const_cast<char*>(p.data());
      iov[count].iov_len = p.size();
      ++count;
    }
    if (count == 0) break;
    const ssize_t w = ::pwritev(fd_, iov, count, static_cast<off_t>(at));
    if (w < 0) {
      if (errno == EINTR) continue;
      // The tail is unknown now; the storage turns read-only.
      return Errno("write", path_, errno);
    }
    at += static_cast<uint64_t>(w);
    size_t left = static_cast<size_t>(w);
    while (part < parts.size() && left > 0) {
      const size_t rest = parts[part].size() - skip;
      if (left >= rest) {
        left -= rest;
        ++part;
        skip = 0;
      } else {
        skip += left;
        left = 0;
      }
    }
    while (part < parts.size() && parts[part].size() == skip) {
      ++part;
      skip = 0;
    }
  }
  return absl::OkStatus();
}

absl::Status PreallocatedJournalFile::AppendV(absl::Span<const std::string_view> parts) {
  if (fd_ < 0) return absl::FailedPreconditionError(absl::StrCat("append to closed ", path_));
  uint64_t n = 0;
  for (std::string_view p : parts) n += p.size();
  const uint64_t offset = ReserveAtEnd(n);
  {
    absl::MutexLock l(&mu_);
    average_batch_ = batches_++ == 0 ? static_cast<double>(n)
                                     : 0.9 * average_batch_ + 0.1 * static_cast<double>(n);
  }
  RETURN_IF_ERROR(WriteAt(offset, parts));
  absl::MutexLock l(&mu_);
  size_ = offset + n;
  return absl::OkStatus();
}

absl::Status PreallocatedJournalFile::WriteAtEnd(uint64_t offset, std::string_view data) {
  if (fd_ < 0) return absl::FailedPreconditionError(absl::StrCat("write to closed ", path_));
  if (ReserveAtEnd(data.size()) != offset) {
    return absl::InternalError(absl::StrCat("write at end of ", path_, ": the end is not at ",
                                            offset));
  }
  std::string_view one[1] = {data};
  return WriteAt(offset, one);
}

absl::Status PreallocatedJournalFile::Sync() {
  if (fd_ < 0) return absl::FailedPreconditionError(absl::StrCat("sync of closed ", path_));
  if (::fdatasync(fd_) != 0) return Errno("fdatasync", path_, errno);
  return absl::OkStatus();
}

bool PreallocatedJournalFile::FillWantedLocked() const {
  if (stop_) return true;
  return !fill_failed_ && batches_ >= kFillAfterBatches && average_batch_ < kFillMaxAverageBatch &&
         filled_ < reserved_ + ahead_;
}

void PreallocatedJournalFile::FillLoop() {
  const std::string zeros(kFillStep, '\0');
  for (;;) {
    uint64_t from;
    {
      absl::MutexLock l(&mu_);
      mu_.Await(absl::Condition(this, &PreallocatedJournalFile::FillWantedLocked));
      if (stop_) return;
      from = std::max(filled_, reserved_);
      filling_ = true;
      fill_from_ = from;
      fill_to_ = from + kFillStep;
    }
    // The zeros go to the disk now (sync_file_range, without a cache
    // flush), so that the writer's next fdatasync does not have to write
    // them. That sync makes the new size and blocks durable once; the ones
    // after it find no metadata to write. Zeros need no durability of
    // their own: nothing relies on them being there after a crash.
    std::string failure;
    const ssize_t wrote = ::pwrite(fill_fd_, zeros.data(), zeros.size(), static_cast<off_t>(from));
    if (wrote < 0) {
      failure = std::strerror(errno);
    } else if (wrote != static_cast<ssize_t>(zeros.size())) {
      // A short write sets no errno; on a local file it means no space.
      failure = absl::StrCat("short write (", wrote, " of ", zeros.size(), " bytes): disk full?");
    } else if (::sync_file_range(fill_fd_, static_cast<off_t>(from),
                                 static_cast<off_t>(zeros.size()),
                                 SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE |
                                     SYNC_FILE_RANGE_WAIT_AFTER) != 0) {
      failure = std::strerror(errno);
    }
    const bool ok = failure.empty();
    absl::MutexLock l(&mu_);
    filling_ = false;
    if (!ok) {
      // Not an error of the journal: the writer just appends from now on.
      // An I/O error here is the file's, and the writer's own description
      // reports it to the writer's next fdatasync too.
      fill_failed_ = true;
      absl::FPrintF(stderr, "bookie: %s: journal preallocation stopped: %s\n", path_, failure);
      continue;
    }
    filled_ = std::max(filled_, from + kFillStep);
  }
}

void PreallocatedJournalFile::StopFiller() {
  {
    absl::MutexLock l(&mu_);
    stop_ = true;
  }
  if (filler_.joinable()) filler_.join();
}

absl::Status PreallocatedJournalFile::Seal() {
  if (fd_ < 0) return absl::FailedPreconditionError(absl::StrCat("seal of closed ", path_));
  StopFiller();
  uint64_t size;
  {
    absl::MutexLock l(&mu_);
    size = size_;
    filled_ = size_;
  }
  if (::ftruncate(fd_, static_cast<off_t>(size)) != 0) return Errno("truncate", path_, errno);
  if (::fdatasync(fd_) != 0) return Errno("fdatasync", path_, errno);
  return absl::OkStatus();
}

absl::Status PreallocatedJournalFile::Close() {
  if (fd_ < 0) return absl::OkStatus();
  StopFiller();
  if (fill_fd_ >= 0) ::close(std::exchange(fill_fd_, -1));  // only zeros went through it
  const int fd = std::exchange(fd_, -1);
  if (::close(fd) != 0) return Errno("close", path_, errno);
  return absl::OkStatus();
}

}  // namespace ledgerkv::bookie
