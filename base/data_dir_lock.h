// An exclusive lock on a process's data directory (DIR/LOCK, flock'ed while
// the process runs, holding its pid for the error message of the next one).
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace ledgerkv {

// Locks `dir`/LOCK (flock, not blocking) and writes this process's pid into
// it. Returns the locked fd (close it to unlock; the kernel unlocks on exit
// too). A lock is held per open file description, so a second lock of the
// same directory fails also within one process. FAILED_PRECONDITION "data
// dir D is in use by another ledgerkv process (pid P, lock D/LOCK)" (or "by
// this process" when P is this process's pid), or when the file cannot be
// opened.
absl::StatusOr<int> LockDataDir(const std::string& dir);

// A LockDataDir lock, released when this is destroyed or assigned over
// (a default-constructed one holds nothing).
class DataDirLock {
 public:
  DataDirLock() = default;
  // LockDataDir(dir), held by the returned object; its errors.
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
