// SmallTmpfs (tests): a real file system of a few MiB that a test can fill
// up, to see what a component does when a write fails with ENOSPC. Mounts
// a tmpfs (needs CAP_SYS_ADMIN: root in CI); unmounts it when destroyed.
#pragma once

#include <fcntl.h>
#include <sys/mount.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>
#include <system_error>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace ledgerkv {

class SmallTmpfs {
 public:
  SmallTmpfs() = default;
  SmallTmpfs(const SmallTmpfs&) = delete;
  SmallTmpfs& operator=(const SmallTmpfs&) = delete;
  ~SmallTmpfs() {
    if (mounted_) ::umount2(dir_.c_str(), MNT_DETACH);
  }

  // Mounts a tmpfs of `mib` MiB at the existing directory `dir`. An error
  // says why (typically EPERM without CAP_SYS_ADMIN: callers skip).
  absl::Status Mount(const std::string& dir, int mib) {
    const std::string opts = absl::StrCat("size=", mib, "m");
    if (::mount("tmpfs", dir.c_str(), "tmpfs", 0, opts.c_str()) != 0) {
      return absl::ErrnoToStatus(errno, absl::StrCat("mount a ", mib, " MiB tmpfs at ", dir));
    }
    dir_ = dir;
    mounted_ = true;
    return absl::OkStatus();
  }

  // Waits until the free space has not changed for `stable` (a component's
  // background writer, such as the bookie's journal filler, is done), for
  // at most `timeout`.
  void WaitForQuiet(absl::Duration stable = absl::Milliseconds(300),
                    absl::Duration timeout = absl::Seconds(10)) {
    const absl::Time give_up = absl::Now() + timeout;
    uint64_t last = Available();
    absl::Time since = absl::Now();
    while (absl::Now() < give_up && absl::Now() - since < stable) {
      absl::SleepFor(absl::Milliseconds(20));
      const uint64_t now = Available();
      if (now != last) {
        last = now;
        since = absl::Now();
      }
    }
  }

  // Writes a ballast file that leaves about `free_bytes` of the file
  // system free (in whole MiB). If something else took space meanwhile and
  // the ballast runs out of it, the file system is full: that is fine too.
  absl::Status FillLeaving(uint64_t free_bytes) {
    const uint64_t available = Available();
    if (available < free_bytes + (1 << 20)) {
      return absl::FailedPreconditionError(
          absl::StrCat("only ", available, " bytes free in ", dir_));
    }
    const int fd = ::open(BallastPath().c_str(), O_CREAT | O_TRUNC | O_WRONLY, 0644);
    if (fd < 0) return absl::ErrnoToStatus(errno, "create " + BallastPath());
    const std::string mib(1 << 20, 'b');
    absl::Status status;
    for (uint64_t left = available - free_bytes; left >= mib.size(); left -= mib.size()) {
      const ssize_t n = ::write(fd, mib.data(), mib.size());
      if (n == static_cast<ssize_t>(mib.size())) continue;
      if (n < 0 && errno != ENOSPC) status = absl::ErrnoToStatus(errno, "write " + BallastPath());
      break;  // short write or ENOSPC: full
    }
    ::close(fd);
    return status;
  }

  // Deletes the ballast: the space is free again.
  absl::Status Free() {
    std::error_code ec;
    if (!std::filesystem::remove(BallastPath(), ec)) {
      return absl::InternalError(absl::StrCat("remove ", BallastPath(), ": ", ec.message()));
    }
    return absl::OkStatus();
  }

 private:
  std::string BallastPath() const { return dir_ + "/ballast"; }
  uint64_t Available() const {
    struct statvfs fs;
    if (::statvfs(dir_.c_str(), &fs) != 0) return 0;
    return uint64_t{fs.f_bavail} * fs.f_frsize;
  }

  std::string dir_;
  bool mounted_ = false;
};

}  // namespace ledgerkv
