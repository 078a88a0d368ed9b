#include "bench/disk_probe.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
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
  explicit ScratchFile(std::string path) : path_(std::move(path)) {}
  ~ScratchFile() {
    if (fd_ >= 0) close(fd_);
    unlink(path_.c_str());
  }
  absl::Status Open() {
    fd_ = open(path_.c_str(), O_CREAT | O_TRUNC | O_WRONLY, 0644);
    return fd_ < 0 ? Errno("open " + path_) : absl::OkStatus();
  }
  int fd() const { return fd_; }

 private:
  std::string path_;
  int fd_ = -1;
};

}  // namespace

absl::StatusOr<DiskLimits> MeasureDisk(const std::string& dir, absl::Duration duration) {
  DiskLimits out;
  {
    // Like a journal's tail: rewrite the same block and sync it; each sync
    // must reach stable storage, which is what bounds an unbatched writer.
    ScratchFile f(dir + "/.disk_probe_sync");
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
    ScratchFile f(dir + "/.disk_probe_seq");
    if (auto s = f.Open(); !s.ok()) return s;
    std::vector<char> chunk(1 << 20, 'y');
    int64_t bytes = 0;
    absl::Time start = absl::Now();
    absl::Time end = start + duration;
    while (absl::Now() < end) {
      if (write(f.fd(), chunk.data(), chunk.size()) != static_cast<ssize_t>(chunk.size())) {
        return Errno("write");
      }
      bytes += chunk.size();
      if (bytes % (8 << 20) == 0 && fdatasync(f.fd()) != 0) return Errno("fdatasync");
    }
    if (fdatasync(f.fd()) != 0) return Errno("fdatasync");
    out.seq_write_mb_per_sec = bytes / 1e6 / absl::ToDoubleSeconds(absl::Now() - start);
  }
  return out;
}

}  // namespace ledgerkv::bench
