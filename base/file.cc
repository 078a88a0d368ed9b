#include "base/file.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace ledgerkv {
namespace {

absl::Status ErrnoError(const std::string& what, const std::string& path, int err) {
  std::string msg = absl::StrCat(what, " ", path, ": ", std::strerror(err));
  if (err == ENOSPC || err == EDQUOT) return absl::ResourceExhaustedError(msg);
  if (err == ENOENT) return absl::NotFoundError(msg);
  return absl::Status(absl::ErrnoToStatusCode(err), msg);
}

class PosixWritableFile final : public WritableFile {
 public:
  PosixWritableFile(std::string path, int fd, uint64_t size)
      : path_(std::move(path)), fd_(fd), size_(size) {}
  ~PosixWritableFile() override { IgnoreError(Close()); }

  absl::Status Append(std::string_view data) override {
    std::string_view one[1] = {data};
    return AppendV(one);
  }

  absl::Status AppendV(absl::Span<const std::string_view> parts) override {
    if (fd_ < 0) return absl::FailedPreconditionError(absl::StrCat("append to closed ", path_));
    // writev takes at most IOV_MAX buffers and may write short; loop over
    // windows of the parts, resuming inside a part after a short write.
    size_t part = 0;
    size_t skip = 0;  // bytes of parts[part] already written
    while (part < parts.size()) {
      iovec iov[IOV_MAX];
      int n = 0;
      for (size_t i = part; i < parts.size() && n < IOV_MAX; ++i) {
        std::string_view p = parts[i];
        if (i == part) p.remove_prefix(skip);
        if (p.empty()) continue;
        iov[n].iov_base = const_cast<char*>(p.data());
        iov[n].iov_len = p.size();
        ++n;
      }
      if (n == 0) break;
      ssize_t w = ::writev(fd_, iov, n);
      if (w < 0) {
        if (errno == EINTR) continue;
        return ErrnoError("write", path_, errno);
      }
      size_ += static_cast<uint64_t>(w);
      size_t left = static_cast<size_t>(w);
      while (part < parts.size() && left > 0) {
        size_t rest = parts[part].size() - skip;
        if (left >= rest) {
          left -= rest;
          ++part;
          skip = 0;
        } else {
          skip += left;
          left = 0;
        }
      }
      while (part < parts.size() && parts[part].size() == skip) {
        ++part;
        skip = 0;
      }
    }
    return absl::OkStatus();
  }

  absl::Status Sync() override {
    if (fd_ < 0) return absl::FailedPreconditionError(absl::StrCat("sync of closed ", path_));
    if (::fdatasync(fd_) != 0) return ErrnoError("fdatasync", path_, errno);
    return absl::OkStatus();
  }

  absl::Status Close() override {
    if (fd_ < 0) return absl::OkStatus();
    int fd = std::exchange(fd_, -1);
    if (::close(fd) != 0) return ErrnoError("close", path_, errno);
    return absl::OkStatus();
  }

  uint64_t Size() const override { return size_; }

 private:
  const std::string path_;
  int fd_;
  uint64_t size_;
};

class PosixRandomAccessFile final : public RandomAccessFile {
 public:
  PosixRandomAccessFile(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  ~PosixRandomAccessFile() override { ::close(fd_); }

  absl::StatusOr<size_t> Read(uint64_t offset, size_t n, char* scratch) const override {
    size_t done = 0;
    while (done < n) {
      ssize_t r = ::pread(fd_, scratch + done, n - done, static_cast<off_t>(offset + done));
      if (r < 0) {
        if (errno == EINTR) continue;
        return ErrnoError("read", path_, errno);
      }
      if (r == 0) break;
      done += static_cast<size_t>(r);
    }
    return done;
  }

 private:
  const std::string path_;
  const int fd_;
};

class PosixEnv final : public Env {
 public:
  absl::StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) override {
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) return ErrnoError("open", path, errno);
    struct stat st;
    if (::fstat(fd, &st) != 0) {
      int err = errno;
      ::close(fd);
      return ErrnoError("stat", path, err);
    }
    return std::make_unique<PosixWritableFile>(path, fd, static_cast<uint64_t>(st.st_size));
  }

  absl::StatusOr<std::unique_ptr<RandomAccessFile>> NewRandomAccessFile(
      const std::string& path) override {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return ErrnoError("open", path, errno);
    return std::make_unique<PosixRandomAccessFile>(path, fd);
  }

  absl::Status DeleteFile(const std::string& path) override {
    if (::unlink(path.c_str()) != 0) return ErrnoError("unlink", path, errno);
    return absl::OkStatus();
  }

  absl::StatusOr<std::vector<std::string>> GetChildren(const std::string& dir) override {
    DIR* d = ::opendir(dir.c_str());
    if (d == nullptr) return ErrnoError("opendir", dir, errno);
    std::vector<std::string> names;
    while (struct dirent* e = ::readdir(d)) {
      std::string_view name = e->d_name;
      if (name == "." || name == "..") continue;
      names.emplace_back(name);
    }
    ::closedir(d);
    return names;
  }

  absl::Status CreateDirIfMissing(const std::string& dir) override {
    if (::mkdir(dir.c_str(), 0755) == 0) return absl::OkStatus();
    int err = errno;
    struct stat st;
    if (err == EEXIST && ::stat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
      return absl::OkStatus();
    }
    return ErrnoError("mkdir", dir, err);
  }

  bool FileExists(const std::string& path) override { return ::access(path.c_str(), F_OK) == 0; }

  absl::StatusOr<uint64_t> GetFileSize(const std::string& path) override {
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) return ErrnoError("stat", path, errno);
    return static_cast<uint64_t>(st.st_size);
  }

  absl::Status RenameFile(const std::string& from, const std::string& to) override {
    if (::rename(from.c_str(), to.c_str()) != 0) {
      return ErrnoError(absl::StrCat("rename to ", to, " of"), from, errno);
    }
    return absl::OkStatus();
  }

  absl::Status SyncDir(const std::string& dir) override {
    int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return ErrnoError("open", dir, errno);
    int rc = ::fsync(fd);
    int err = errno;
    ::close(fd);
    if (rc != 0) return ErrnoError("fsync", dir, err);
    return absl::OkStatus();
  }

  absl::Status Truncate(const std::string& path, uint64_t size) override {
    if (::truncate(path.c_str(), static_cast<off_t>(size)) != 0) {
      return ErrnoError("truncate", path, errno);
    }
    return absl::OkStatus();
  }
};

}  // namespace

Env* Env::Default() {
  static Env* env = new PosixEnv();
  return env;
}

absl::StatusOr<std::string> ReadFileToString(Env* env, const std::string& path) {
  ASSIGN_OR_RETURN(uint64_t size, env->GetFileSize(path));
  ASSIGN_OR_RETURN(std::unique_ptr<RandomAccessFile> file, env->NewRandomAccessFile(path));
  std::string out(size, '\0');
  ASSIGN_OR_RETURN(size_t n, file->Read(0, out.size(), out.data()));
  out.resize(n);
  return out;
}

absl::Status WriteFileAtomically(Env* env, const std::string& path, std::string_view contents) {
  const std::string tmp = path + ".tmp";
  if (env->FileExists(tmp)) RETURN_IF_ERROR(env->DeleteFile(tmp));
  {
    ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> file, env->NewWritableFile(tmp));
    RETURN_IF_ERROR(file->Append(contents));
    RETURN_IF_ERROR(file->Sync());
    RETURN_IF_ERROR(file->Close());
  }
  RETURN_IF_ERROR(env->RenameFile(tmp, path));
  return env->SyncDir(DirName(path));
}

absl::StatusOr<FileSystemSpace> GetFileSystemSpace(const std::string& path) {
  struct statvfs fs;
  if (::statvfs(path.c_str(), &fs) != 0) return absl::ErrnoToStatus(errno, "statvfs " + path);
  FileSystemSpace space;
  space.used = static_cast<uint64_t>(fs.f_blocks - fs.f_bfree) * fs.f_frsize;
  space.available = static_cast<uint64_t>(fs.f_bavail) * fs.f_frsize;
  return space;
}

std::string DirName(const std::string& path) {
  size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

}  // namespace ledgerkv
