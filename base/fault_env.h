// FaultInjectionEnv: an Env wrapper for crash and disk-failure tests (in the
// manner of leveldb's db/fault_injection_test.cc and RocksDB's
// utilities/fault_injection_fs.h). It can
//   - fail the next Sync, or every Sync, with EIO (nothing is synced);
//   - fail Appends with ENOSPC after writing only part of the data, as a
//     full disk does;
//   - simulate power loss: DropUnsyncedData() cuts every file written
//     through it back to the size it had at its last successful Sync, and
//     deletes files created since the last SyncDir of their directory.
// Only files written through this Env are tracked; a file that existed
// before it was first opened here counts as synced up to its size then.
// Thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "base/file.h"

namespace ledgerkv {

class FaultInjectionEnv final : public Env {
 public:
  // `base` must outlive this Env.
  explicit FaultInjectionEnv(Env* base);

  // The next Sync (of any file) fails with EIO and syncs nothing.
  void FailNextSync();
  // Every Sync fails with EIO while `fail` is set.
  void FailAllSyncs(bool fail);
  // Every Sync takes at least `delay` longer (a slow disk). Zero: none.
  void SetSyncDelay(absl::Duration delay);
  // Every Append fails with ENOSPC (after writing about half its bytes)
  // while `fail` is set.
  void FailAppendsWithNoSpace(bool fail);

  // Power loss: truncates every tracked file to its last synced size and
  // deletes tracked files created since their directory was last synced.
  // Call after the code under test has stopped writing (files may stay open).
  // Returns the first error met (it still processes every file).
  absl::Status DropUnsyncedData();

  // Number of successful Sync calls so far (for group-commit assertions).
  int64_t sync_count() const;

  // Env.
  absl::StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) override;
  absl::StatusOr<std::unique_ptr<RandomAccessFile>> NewRandomAccessFile(
      const std::string& path) override;
  absl::Status DeleteFile(const std::string& path) override;
  absl::StatusOr<std::vector<std::string>> GetChildren(const std::string& dir) override;
  absl::Status CreateDirIfMissing(const std::string& dir) override;
  bool FileExists(const std::string& path) override;
  absl::StatusOr<uint64_t> GetFileSize(const std::string& path) override;
  absl::Status RenameFile(const std::string& from, const std::string& to) override;
  absl::Status SyncDir(const std::string& dir) override;
  absl::Status Truncate(const std::string& path, uint64_t size) override;

 private:
  friend class FaultWritableFile;

  struct FileState {
    uint64_t size = 0;         // bytes written so far
    uint64_t synced_size = 0;  // size at the last successful Sync
    bool created_since_dir_sync = false;
  };

  // Hooks for FaultWritableFile.
  absl::Status BeforeAppend(const std::string& path, uint64_t bytes, uint64_t* allowed);
  void AfterAppend(const std::string& path, uint64_t bytes);
  absl::Status BeforeSync(const std::string& path);
  void AfterSync(const std::string& path);

  Env* const base_;  // Constant after construction.

  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, FileState> files_ ABSL_GUARDED_BY(mu_);
  bool fail_next_sync_ ABSL_GUARDED_BY(mu_) = false;
  bool fail_all_syncs_ ABSL_GUARDED_BY(mu_) = false;
  absl::Duration sync_delay_ ABSL_GUARDED_BY(mu_);
  bool no_space_ ABSL_GUARDED_BY(mu_) = false;
  int64_t sync_count_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace ledgerkv
