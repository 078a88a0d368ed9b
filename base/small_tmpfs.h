// SmallTmpfs (tests): a real file system of a few MiB that a test can fill
// up, to see what a component does when a write fails with ENOSPC. Mounts
// a tmpfs (needs CAP_SYS_ADMIN: root in CI); unmounts it when destroyed.
// A test process that crashes cannot unmount: its mounts name it (source
// "ledgerkv-test-<pid>" in /proc/mounts), and the next Mount, in any test
// process, detaches those of processes that no longer exist.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <system_error>
#include <vector>

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
    DetachLeftovers();
    const std::string opts = absl::StrCat("size=", mib, "m");
    const std::string source = absl::StrCat(kSourcePrefix, ::getpid());
    if (::mount(source.c_str(), dir.c_str(), "tmpfs", 0, opts.c_str()) != 0) {
      return absl::ErrnoToStatus(errno, absl::StrCat("mount a ", mib, " MiB tmpfs at ", dir));
    }
    dir_ = dir;
    mounted_ = true;
    return absl::OkStatus();
  }

  // Detaches every SmallTmpfs mount of a process that no longer exists
  // (one that crashed before unmounting). Returns how many it detached.
  static int DetachLeftovers() {
    std::ifstream mounts("/proc/mounts");
    std::string line;
    std::vector<std::string> stale;
    while (std::getline(mounts, line)) {
      std::istringstream fields(line);
      std::string source, target, type;
      fields >> source >> target >> type;
      if (type != "tmpfs" || source.rfind(kSourcePrefix, 0) != 0) continue;
      const long pid = std::strtol(source.c_str() + std::strlen(kSourcePrefix), nullptr, 10);
      if (pid <= 0 || (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH)) {
        stale.push_back(target);  // /proc/mounts escapes blanks as \040; ours have none
      }
    }
    int detached = 0;
    for (const std::string& target : stale) detached += ::umount2(target.c_str(), MNT_DETACH) == 0;
    return detached;
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
    return WriteBallast(O_TRUNC, available - free_bytes);
  }

  // Grows the ballast (keeping what it holds) until about `free_bytes` of
  // the file system are free: the disk full again after something freed
  // space. Nothing to do if no more than that is free.
  absl::Status TopUpLeaving(uint64_t free_bytes) {
    const uint64_t available = Available();
    if (available <= free_bytes) return absl::OkStatus();
    return WriteBallast(O_APPEND, available - free_bytes);
  }

  // Shortens the ballast (in one truncate, so no moment frees more) until
  // about `free_bytes` of the file system are free.
  absl::Status ShrinkBallastLeaving(uint64_t free_bytes) {
    const uint64_t available = Available();
    if (free_bytes <= available) return absl::OkStatus();
    std::error_code ec;
    const uint64_t size = std::filesystem::file_size(BallastPath(), ec);
    if (ec) return absl::InternalError(absl::StrCat("size of ", BallastPath(), ": ", ec.message()));
    const uint64_t release = free_bytes - available;
    if (release > size) {
      return absl::FailedPreconditionError(
          absl::StrCat("the ballast (", size, " bytes) cannot free ", release, " bytes"));
    }
    if (::truncate(BallastPath().c_str(), static_cast<off_t>(size - release)) != 0) {
      return absl::ErrnoToStatus(errno, "truncate " + BallastPath());
    }
    return absl::OkStatus();
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
  // Writes `bytes` (whole MiB) to the ballast opened with `mode` (O_TRUNC
  // or O_APPEND); a short write or ENOSPC means full, which is fine.
  absl::Status WriteBallast(int mode, uint64_t bytes) {
    const int fd = ::open(BallastPath().c_str(), O_CREAT | O_WRONLY | mode, 0644);
    if (fd < 0) return absl::ErrnoToStatus(errno, "open " + BallastPath());
    const std::string mib(1 << 20, 'b');
    absl::Status status;
    for (uint64_t left = bytes; left >= mib.size(); left -= mib.size()) {
      const ssize_t n = ::write(fd, mib.data(), mib.size());
      if (n == static_cast<ssize_t>(mib.size())) continue;
      if (n < 0 && errno != ENOSPC) status = absl::ErrnoToStatus(errno, "write " + BallastPath());
      break;
    }
    ::close(fd);
    return status;
  }
  uint64_t Available() const {
    struct statvfs fs;
    if (::statvfs(dir_.c_str(), &fs) != 0) return 0;
    return uint64_t{fs.f_bavail} * fs.f_frsize;
  }

  static constexpr const char* kSourcePrefix = "ledgerkv-test-";

  std::string dir_;
  bool mounted_ = false;
};

}  // namespace ledgerkv
