// A small file layer (in the manner of leveldb's Env) so that storage code
// can be run over a fault-injecting implementation (base/fault_env.h) in
// crash and disk-failure tests. Env::Default() is plain POSIX with real
// fdatasync; nothing here buffers in user space, so an Append is in the
// kernel's page cache when it returns and a Sync makes it durable.
//
// Errors carry the path and the strerror text. ENOSPC maps to
// RESOURCE_EXHAUSTED, ENOENT to NOT_FOUND, other errnos via absl::ErrnoToStatus.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace ledgerkv {

// A file opened for appending. Not thread-safe: one writer at a time.
class WritableFile {
 public:
  virtual ~WritableFile() = default;

  // Appends `data` at the end of the file (write(2) until done).
  // On error some prefix of `data` may have been written; the caller must
  // treat the file's tail as unknown.
  virtual absl::Status Append(std::string_view data) = 0;

  // Appends the concatenation of `parts` (writev(2), so payloads need not
  // be copied into one buffer). Same failure contract as Append.
  virtual absl::Status AppendV(absl::Span<const std::string_view> parts) = 0;

  // Makes everything appended so far durable (fdatasync(2)).
  virtual absl::Status Sync() = 0;

  // Closes the file. Does not sync. Further calls fail. Idempotent.
  virtual absl::Status Close() = 0;

  // The file size: the size at open plus every byte appended since.
  virtual uint64_t Size() const = 0;
};

// A file opened for positional reads. Thread-safe (pread(2)).
class RandomAccessFile {
 public:
  virtual ~RandomAccessFile() = default;

  // Reads up to `n` bytes at `offset` into scratch[0, n) and returns how
  // many were read (fewer only at end of file).
  virtual absl::StatusOr<size_t> Read(uint64_t offset, size_t n, char* scratch) const = 0;
};

class Env {
 public:
  virtual ~Env() = default;

  // The POSIX environment. Never deleted.
  static Env* Default();

  // Opens `path` for appending, creating it if missing (the directory entry
  // of a new file is durable only after SyncDir of its directory).
  virtual absl::StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(
      const std::string& path) = 0;

  // Opens an existing file for reading. NOT_FOUND if it does not exist.
  virtual absl::StatusOr<std::unique_ptr<RandomAccessFile>> NewRandomAccessFile(
      const std::string& path) = 0;

  // Removes a file. NOT_FOUND if it does not exist.
  virtual absl::Status DeleteFile(const std::string& path) = 0;

  // Returns the names (not paths) of the entries of `dir`, excluding "." and
  // "..", in no particular order.
  virtual absl::StatusOr<std::vector<std::string>> GetChildren(const std::string& dir) = 0;

  // Creates `dir` (not its parents) unless it already exists as a directory.
  virtual absl::Status CreateDirIfMissing(const std::string& dir) = 0;

  virtual bool FileExists(const std::string& path) = 0;

  virtual absl::StatusOr<uint64_t> GetFileSize(const std::string& path) = 0;

  // rename(2): atomically replaces `to`. Durable after SyncDir.
  virtual absl::Status RenameFile(const std::string& from, const std::string& to) = 0;

  // fsync(2) of a directory: makes creations, renames and deletions of its
  // entries durable.
  virtual absl::Status SyncDir(const std::string& dir) = 0;

  // Sets the size of `path` to `size` (truncate(2)); not synced.
  virtual absl::Status Truncate(const std::string& path, uint64_t size) = 0;
};

// Reads the whole of `path` into a string.
absl::StatusOr<std::string> ReadFileToString(Env* env, const std::string& path);

// Replaces `path` with `contents` crash-atomically: writes `path`.tmp, syncs
// it, renames it over `path` and syncs the directory.
absl::Status WriteFileAtomically(Env* env, const std::string& path, std::string_view contents);

// Returns the directory part of `path` ("." when it has none).
std::string DirName(const std::string& path);

// Space of the file system holding `path` (statvfs), in bytes, as df counts
// it: `used` by anyone, `available` to unprivileged users.
struct FileSystemSpace {
  uint64_t used = 0;
  uint64_t available = 0;
  // used / (used + available): df's Use%, as a fraction.
  double UsedFraction() const {
    const double total = static_cast<double>(used) + static_cast<double>(available);
    return total > 0 ? static_cast<double>(used) / total : 0;
  }
};
absl::StatusOr<FileSystemSpace> GetFileSystemSpace(const std::string& path);

}  // namespace ledgerkv
