#include "base/fault_env.h"

#include <cerrno>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"

namespace ledgerkv {

class FaultWritableFile final : public WritableFile {
 public:
  FaultWritableFile(FaultInjectionEnv* env, std::string path, std::unique_ptr<WritableFile> base)
      : env_(env), path_(std::move(path)), base_(std::move(base)) {}

  absl::Status Append(std::string_view data) override {
    std::string_view one[1] = {data};
    return AppendV(one);
  }

  absl::Status AppendV(absl::Span<const std::string_view> parts) override {
    uint64_t total = 0;
    for (std::string_view p : parts) total += p.size();
    uint64_t allowed = total;
    absl::Status injected = env_->BeforeAppend(path_, total, &allowed);
    if (allowed == total) {
      absl::Status s = base_->AppendV(parts);
      if (s.ok()) env_->AfterAppend(path_, total);
      return s;
    }
    // A full disk: write a prefix of the data, then fail.
    std::vector<std::string_view> prefix;
    uint64_t left = allowed;
    for (std::string_view p : parts) {
      if (left == 0) break;
      std::string_view cut = p.substr(0, std::min<uint64_t>(left, p.size()));
      prefix.push_back(cut);
      left -= cut.size();
    }
    RETURN_IF_ERROR(base_->AppendV(prefix));
    env_->AfterAppend(path_, allowed);
    return injected;
  }

  absl::Status Sync() override {
    RETURN_IF_ERROR(env_->BeforeSync(path_));
    RETURN_IF_ERROR(base_->Sync());
    env_->AfterSync(path_);
    return absl::OkStatus();
  }

  absl::Status Close() override { return base_->Close(); }
  uint64_t Size() const override { return base_->Size(); }

 private:
  FaultInjectionEnv* const env_;
  const std::string path_;
  std::unique_ptr<WritableFile> base_;
};

FaultInjectionEnv::FaultInjectionEnv(Env* base) : base_(base) {}

void FaultInjectionEnv::FailNextSync() {
  absl::MutexLock l(&mu_);
  fail_next_sync_ = true;
}

void FaultInjectionEnv::FailAllSyncs(bool fail) {
  absl::MutexLock l(&mu_);
  fail_all_syncs_ = fail;
}

void FaultInjectionEnv::FailAppendsWithNoSpace(bool fail) {
  absl::MutexLock l(&mu_);
  no_space_ = fail;
}

int64_t FaultInjectionEnv::sync_count() const {
  absl::MutexLock l(&mu_);
  return sync_count_;
}

absl::Status FaultInjectionEnv::DropUnsyncedData() {
  absl::MutexLock l(&mu_);
  absl::Status first;
  for (auto it = files_.begin(); it != files_.end();) {
    auto cur = it++;
    const std::string& path = cur->first;
    FileState& st = cur->second;
    absl::Status s;
    if (st.created_since_dir_sync) {
      s = base_->DeleteFile(path);
      if (s.ok() || absl::IsNotFound(s)) {
        files_.erase(cur);
        continue;
      }
    } else if (st.size != st.synced_size) {
      s = base_->Truncate(path, st.synced_size);
      if (s.ok()) st.size = st.synced_size;
    }
    if (first.ok() && !s.ok()) first = s;
  }
  return first;
}

absl::Status FaultInjectionEnv::BeforeAppend(const std::string& path, uint64_t bytes,
                                             uint64_t* allowed) {
  absl::MutexLock l(&mu_);
  if (!no_space_) return absl::OkStatus();
  *allowed = bytes / 2;
  return absl::ResourceExhaustedError(
      absl::StrCat("write ", path, ": No space left on device (injected)"));
}

void FaultInjectionEnv::AfterAppend(const std::string& path, uint64_t bytes) {
  absl::MutexLock l(&mu_);
  files_[path].size += bytes;
}

void FaultInjectionEnv::SetSyncDelay(absl::Duration delay) {
  absl::MutexLock l(&mu_);
  sync_delay_ = delay;
}

absl::Status FaultInjectionEnv::BeforeSync(const std::string& path) {
  absl::Duration delay;
  {
    absl::MutexLock l(&mu_);
    delay = sync_delay_;
  }
  if (delay > absl::ZeroDuration()) absl::SleepFor(delay);
  absl::MutexLock l(&mu_);
  if (fail_all_syncs_ || std::exchange(fail_next_sync_, false)) {
    return absl::Status(absl::ErrnoToStatusCode(EIO),
                        absl::StrCat("fdatasync ", path, ": Input/output error (injected)"));
  }
  return absl::OkStatus();
}

void FaultInjectionEnv::AfterSync(const std::string& path) {
  absl::MutexLock l(&mu_);
  FileState& st = files_[path];
  st.synced_size = st.size;
  ++sync_count_;
}

absl::StatusOr<std::unique_ptr<WritableFile>> FaultInjectionEnv::NewWritableFile(
    const std::string& path) {
  const bool existed = base_->FileExists(path);
  ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> file, base_->NewWritableFile(path));
  {
    absl::MutexLock l(&mu_);
    auto [it, inserted] = files_.try_emplace(path);
    if (inserted) {
      it->second.size = file->Size();
      it->second.synced_size = existed ? file->Size() : 0;
      it->second.created_since_dir_sync = !existed;
    }
  }
  return std::unique_ptr<WritableFile>(
      std::make_unique<FaultWritableFile>(this, path, std::move(file)));
}

absl::StatusOr<std::unique_ptr<RandomAccessFile>> FaultInjectionEnv::NewRandomAccessFile(
    const std::string& path) {
  return base_->NewRandomAccessFile(path);
}

absl::Status FaultInjectionEnv::DeleteFile(const std::string& path) {
  RETURN_IF_ERROR(base_->DeleteFile(path));
  absl::MutexLock l(&mu_);
  files_.erase(path);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> FaultInjectionEnv::GetChildren(const std::string& dir) {
  return base_->GetChildren(dir);
}

absl::Status FaultInjectionEnv::CreateDirIfMissing(const std::string& dir) {
  return base_->CreateDirIfMissing(dir);
}

bool FaultInjectionEnv::FileExists(const std::string& path) { return base_->FileExists(path); }

absl::StatusOr<uint64_t> FaultInjectionEnv::GetFileSize(const std::string& path) {
  return base_->GetFileSize(path);
}

absl::Status FaultInjectionEnv::RenameFile(const std::string& from, const std::string& to) {
  RETURN_IF_ERROR(base_->RenameFile(from, to));
  absl::MutexLock l(&mu_);
  auto it = files_.find(from);
  if (it != files_.end()) {
    FileState st = it->second;
    files_.erase(it);
    // Until the directory is synced the rename itself may be lost; treat
    // the new name like a new file.
    st.created_since_dir_sync = true;
    files_[to] = st;
  }
  return absl::OkStatus();
}

absl::Status FaultInjectionEnv::SyncDir(const std::string& dir) {
  RETURN_IF_ERROR(base_->SyncDir(dir));
  absl::MutexLock l(&mu_);
  for (auto& [path, st] : files_) {
    if (DirName(path) == dir) st.created_since_dir_sync = false;
  }
  return absl::OkStatus();
}

absl::Status FaultInjectionEnv::Truncate(const std::string& path, uint64_t size) {
  RETURN_IF_ERROR(base_->Truncate(path, size));
  absl::MutexLock l(&mu_);
  auto it = files_.find(path);
  if (it != files_.end()) {
    it->second.size = size;
    // Truncation is metadata; without a sync it could be lost too, but the
    // shorter size is what callers rely on (they sync afterwards).
    if (it->second.synced_size > size) it->second.synced_size = size;
  }
  return absl::OkStatus();
}

}  // namespace ledgerkv
