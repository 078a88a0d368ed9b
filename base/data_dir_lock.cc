#include "base/data_dir_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace ledgerkv {

absl::StatusOr<int> LockDataDir(const std::string& dir) {
  const std::string path = dir + "/LOCK";
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    return absl::FailedPreconditionError(absl::StrCat("open ", path, ": ", std::strerror(errno)));
  }
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    char pid[32] = {};
    const ssize_t n = ::pread(fd, pid, sizeof(pid) - 1, 0);
    ::close(fd);
    const std::string holder =
        n > 0 ? std::string(pid, static_cast<size_t>(n)) : std::string("unknown");
    if (holder == std::to_string(::getpid())) {
      // Most likely this process (a second open); a process with the same
      // pid in another pid namespace sharing the directory looks the same.
      return absl::FailedPreconditionError(
          absl::StrCat("data dir ", dir, " is in use by this process (pid ", holder, ", lock ",
                       path, "), or by one with the same pid in another pid namespace"));
    }
    return absl::FailedPreconditionError(absl::StrCat(
        "data dir ", dir, " is in use by another ledgerkv process (pid ", holder, ", lock ", path,
        ")"));
  }
  const std::string pid = std::to_string(::getpid());
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, pid.data(), pid.size(), 0) < 0) {
    // The pid is informational only; the flock is the lock.
    absl::FPrintF(stderr, "ledgerkv: cannot write pid to %s: %s\n", path, std::strerror(errno));
  }
  return fd;
}

absl::StatusOr<DataDirLock> DataDirLock::Acquire(const std::string& dir) {
  absl::StatusOr<int> fd = LockDataDir(dir);
  if (!fd.ok()) return fd.status();
  return DataDirLock(*fd);
}

DataDirLock::~DataDirLock() {
  if (fd_ >= 0) ::close(fd_);
}

DataDirLock::DataDirLock(DataDirLock&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}

DataDirLock& DataDirLock::operator=(DataDirLock&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

}  // namespace ledgerkv
