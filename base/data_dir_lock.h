// An exclusive lock on a process's data directory (DIR/LOCK, flock'ed while
// the process runs, holding its pid for the error message of the next one).
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace ledgerkv {

// Locks `dir`/LOCK and writes this process's pid into it. Returns the
// locked fd (close it to unlock; the kernel unlocks on exit too).
// FAILED_PRECONDITION "data dir D is in use by another ledgerkv process
// (pid P, lock D/LOCK)", or when the file cannot be opened.
absl::StatusOr<int> LockDataDir(const std::string& dir);

// A LockDataDir lock, released when this is destroyed.
class DataDirLock {
 public:
  DataDirLock() = default;
  static absl::StatusOr<DataDirLock> Acquire(const std::string& dir);
  ~DataDirLock();
  DataDirLock(DataDirLock&& other) noexcept;
  DataDirLock& operator=(DataDirLock&& other) noexcept;
  DataDirLock(const DataDirLock&) = delete;
  DataDirLock& operator=(const DataDirLock&) = delete;

 private:
  explicit DataDirLock(int fd) : fd_(fd) {}
  int fd_ = -1;
};

}  // namespace ledgerkv
