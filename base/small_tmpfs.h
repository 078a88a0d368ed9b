// SmallTmpfs (tests): a real file system of a few MiB that a test can fill
// up, to see what a component does when a write fails with ENOSPC. Mounts
// a tmpfs (needs CAP_SYS_ADMIN: root in CI); unmounts it when destroyed.
#pragma once

#include <sys/mount.h>
#include <sys/statvfs.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

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

  // Writes a ballast file that leaves about `free_bytes` of the file
  // system free (in whole MiB).
  absl::Status FillLeaving(uint64_t free_bytes) {
    struct statvfs fs;
    if (::statvfs(dir_.c_str(), &fs) != 0) return absl::ErrnoToStatus(errno, "statvfs " + dir_);
    const uint64_t available = uint64_t{fs.f_bavail} * fs.f_frsize;
    if (available < free_bytes + (1 << 20)) {
      return absl::FailedPreconditionError(
          absl::StrCat("only ", available, " bytes free in ", dir_));
    }
    std::ofstream ballast(BallastPath(), std::ios::binary);
    const std::string mib(1 << 20, 'b');
    for (uint64_t left = available - free_bytes; left >= mib.size(); left -= mib.size()) {
      ballast.write(mib.data(), static_cast<std::streamsize>(mib.size()));
    }
    ballast.close();
    if (!ballast) return absl::InternalError("cannot write " + BallastPath());
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

  std::string dir_;
  bool mounted_ = false;
};

}  // namespace ledgerkv
