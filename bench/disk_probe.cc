#include "bench/disk_probe.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cerrno>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace ledgerkv::bench {
namespace {

absl::Status Errno(const std::string& what) {
  return absl::InternalError(absl::StrCat(what, ": ", std::strerror(errno)));
}

class ScratchFile {
 public:
  ScratchFile(std::string path, bool keep) : path_(std::move(path)), keep_(keep) {}
  ~ScratchFile() {
    if (fd_ >= 0) close(fd_);
    if (!keep_) unlink(path_.c_str());
  }
  absl::Status Open() {
    fd_ = open(path_.c_str(), O_CREAT | O_TRUNC | O_WRONLY, 0644);
    return fd_ < 0 ? Errno("open " + path_) : absl::OkStatus();
  }
  int fd() const { return fd_; }

 private:
  std::string path_;
  const bool keep_;
  int fd_ = -1;
};

}  // namespace

absl::StatusOr<DiskLimits> MeasureDisk(const std::string& dir, absl::Duration duration,
                                       bool keep_files) {
  static std::atomic<int> calls{0};
  const std::string suffix = keep_files ? absl::StrCat(".", calls.fetch_add(1)) : "";
  DiskLimits out;
  {
    // Like a journal's tail: rewrite the same block and sync it; each sync
    // must reach stable storage, which is what bounds an unbatched writer.
    ScratchFile f(dir + "/.disk_probe_sync" + suffix, keep_files);
    if (auto s = f.Open(); !s.ok()) return s;
    std::vector<char> block(4096, 'x');
    int64_t n = 0;
    absl::Time start = absl::Now();
    absl::Time end = start + duration;
    while (absl::Now() < end) {
      if (pwrite(f.fd(), block.data(), block.size(), (n % 16) * 4096) < 0) return Errno("pwrite");
      if (fdatasync(f.fd()) != 0) return Errno("fdatasync");
      ++n;
    }
    out.fdatasyncs_per_sec = n / absl::ToDoubleSeconds(absl::Now() - start);
  }
  {
    // Streaming: one thread appends 1 MiB chunks while another syncs in a
    // loop, with at most 64 MiB written and not yet synced, so writing and
    // flushing overlap (as in a bookie, which writes the next batch while
    // the previous one syncs). A writer that stops to sync every few MiB
    // leaves the disk idle in between and reads as a slower disk.
    ScratchFile f(dir + "/.disk_probe_seq" + suffix, keep_files);
    if (auto s = f.Open(); !s.ok()) return s;
    constexpr int64_t kChunk = 1 << 20;
    constexpr int64_t kWindow = 64 << 20;
    std::vector<char> chunk(kChunk, 'y');
    std::atomic<int64_t> written{0};
    std::atomic<int64_t> synced{0};
    std::atomic<bool> done{false};
    std::atomic<int> sync_errno{0};
    std::thread syncer([&] {
      while (true) {
        const bool last = done.load();
        const int64_t target = written.load();
        if (!last && target == synced.load()) {
          // Nothing new: a sync now would only flush the device cache again.
          std::this_thread::sleep_for(std::chrono::microseconds(100));
          continue;
        }
        if (fdatasync(f.fd()) != 0) {
          sync_errno.store(errno);
          return;
        }
        synced.store(target);
        if (last) return;
      }
    });
    absl::Status write_error;
    const absl::Time start = absl::Now();
    const absl::Time end = start + duration;
    while (absl::Now() < end && sync_errno.load() == 0) {
      if (written.load() - synced.load() >= kWindow) {
        std::this_thread::sleep_for(std::chrono::microseconds(100));
        continue;
      }
      if (write(f.fd(), chunk.data(), chunk.size()) != static_cast<ssize_t>(chunk.size())) {
        write_error = Errno("write");
        break;
      }
      written.fetch_add(kChunk);
    }
    done.store(true);
    syncer.join();
    if (!write_error.ok()) return write_error;
    if (sync_errno.load() != 0) {
      errno = sync_errno.load();
      return Errno("fdatasync");
    }
    out.seq_write_mb_per_sec = written.load() / 1e6 / absl::ToDoubleSeconds(absl::Now() - start);
  }
  // Whatever the probe left for the filesystem's journal is committed now,
  // not during the caller's first measurement.
  ::sync();
  return out;
}

}  // namespace ledgerkv::bench
