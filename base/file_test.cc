#include "base/file.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/fault_env.h"
#include "base/small_tmpfs.h"
#include "base/test_port.h"
#include "gtest/gtest.h"

namespace ledgerkv {
namespace {

// A fresh directory, removed at the end of the test.
class ScopedDir {
 public:
  ScopedDir() : path_(::testing::TempDir() + "/base_file_test.XXXXXX") {
    EXPECT_NE(::mkdtemp(path_.data()), nullptr);
  }
  ~ScopedDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::string ReadAll(Env* env, const std::string& path) {
  absl::StatusOr<std::string> s = ReadFileToString(env, path);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *s : std::string();
}

// AppendV must write every part in order even past writev's IOV_MAX limit,
// because the journal writes a header and a payload per entry in one call.
TEST(PosixEnvTest, AppendVWritesManyPartsInOrder) {
  Env* env = Env::Default();
  ScopedDir tmp;
  const std::string path = tmp.path() + "/f";
  auto file = env->NewWritableFile(path);
  ASSERT_TRUE(file.ok()) << file.status();
  std::vector<std::string> storage;
  std::string expected;
  for (int i = 0; i < 3000; ++i) {
    storage.push_back(i % 7 == 0 ? std::string() : absl::StrCat(i, ","));
    expected += storage.back();
  }
  std::vector<std::string_view> parts(storage.begin(), storage.end());
  ASSERT_TRUE((*file)->AppendV(parts).ok());
  ASSERT_TRUE((*file)->Sync().ok());
  EXPECT_EQ((*file)->Size(), expected.size());
  ASSERT_TRUE((*file)->Close().ok());
  EXPECT_EQ(ReadAll(env, path), expected);

  // Reopening appends at the end and reports the existing size.
  auto again = env->NewWritableFile(path);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ((*again)->Size(), expected.size());
  ASSERT_TRUE((*again)->Append("tail").ok());
  EXPECT_EQ(ReadAll(env, path), expected + "tail");
}

TEST(PosixEnvTest, RandomAccessReadIsShortOnlyAtEof) {
  Env* env = Env::Default();
  ScopedDir tmp;
  const std::string path = tmp.path() + "/f";
  ASSERT_TRUE(WriteFileAtomically(env, path, "0123456789").ok());
  auto file = env->NewRandomAccessFile(path);
  ASSERT_TRUE(file.ok());
  char buf[16];
  auto n = (*file)->Read(3, 4, buf);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(std::string(buf, *n), "3456");
  n = (*file)->Read(8, 10, buf);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(std::string(buf, *n), "89");
}

TEST(PosixEnvTest, DirectoryOperations) {
  Env* env = Env::Default();
  ScopedDir tmp;
  const std::string dir = tmp.path();
  ASSERT_TRUE(env->CreateDirIfMissing(dir + "/sub").ok());
  ASSERT_TRUE(env->CreateDirIfMissing(dir + "/sub").ok());
  ASSERT_TRUE(WriteFileAtomically(env, dir + "/sub/a", "x").ok());
  ASSERT_TRUE(env->RenameFile(dir + "/sub/a", dir + "/sub/b").ok());
  EXPECT_FALSE(env->FileExists(dir + "/sub/a"));
  auto children = env->GetChildren(dir + "/sub");
  ASSERT_TRUE(children.ok());
  EXPECT_EQ(*children, std::vector<std::string>{"b"});
  ASSERT_TRUE(env->Truncate(dir + "/sub/b", 0).ok());
  EXPECT_EQ(*env->GetFileSize(dir + "/sub/b"), 0u);
  EXPECT_TRUE(absl::IsNotFound(env->DeleteFile(dir + "/sub/missing")));
  EXPECT_TRUE(absl::IsNotFound(env->NewRandomAccessFile(dir + "/missing").status()));
  EXPECT_EQ(DirName("/a/b/c"), "/a/b");
  EXPECT_EQ(DirName("c"), ".");
}

// Power loss keeps exactly what was synced: crash tests rely on this to
// check that every acknowledged write survives and nothing else is assumed.
TEST(FaultInjectionEnvTest, DropUnsyncedDataKeepsOnlySyncedBytes) {
  FaultInjectionEnv env(Env::Default());
  ScopedDir tmp;
  const std::string dir = tmp.path();
  auto file = env.NewWritableFile(dir + "/log");
  ASSERT_TRUE(file.ok());
  ASSERT_TRUE(env.SyncDir(dir).ok());
  ASSERT_TRUE((*file)->Append("synced").ok());
  ASSERT_TRUE((*file)->Sync().ok());
  ASSERT_TRUE((*file)->Append("-lost").ok());
  // A file whose directory entry was never synced disappears entirely.
  auto unsynced_dir = env.NewWritableFile(dir + "/new");
  ASSERT_TRUE(unsynced_dir.ok());
  ASSERT_TRUE((*unsynced_dir)->Append("data").ok());
  ASSERT_TRUE((*unsynced_dir)->Sync().ok());
  EXPECT_EQ(env.sync_count(), 2);

  ASSERT_TRUE(env.DropUnsyncedData().ok());
  EXPECT_EQ(ReadAll(&env, dir + "/log"), "synced");
  EXPECT_FALSE(env.FileExists(dir + "/new"));
}

TEST(FaultInjectionEnvTest, FailedSyncSyncsNothing) {
  FaultInjectionEnv env(Env::Default());
  ScopedDir tmp;
  const std::string dir = tmp.path();
  auto file = env.NewWritableFile(dir + "/log");
  ASSERT_TRUE(file.ok());
  ASSERT_TRUE(env.SyncDir(dir).ok());
  ASSERT_TRUE((*file)->Append("abc").ok());
  env.FailNextSync();
  absl::Status s = (*file)->Sync();
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("Input/output error"), std::string::npos) << s;
  ASSERT_TRUE(env.DropUnsyncedData().ok());
  EXPECT_EQ(ReadAll(&env, dir + "/log"), "");
  // Only the next sync failed.
  ASSERT_TRUE((*file)->Append("def").ok());
  EXPECT_TRUE((*file)->Sync().ok());

  env.FailAllSyncs(true);
  EXPECT_FALSE((*file)->Sync().ok());
  EXPECT_FALSE((*file)->Sync().ok());
  env.FailAllSyncs(false);
  EXPECT_TRUE((*file)->Sync().ok());
}

TEST(FaultInjectionEnvTest, NoSpaceWritesAPrefixAndFails) {
  FaultInjectionEnv env(Env::Default());
  ScopedDir tmp;
  const std::string path = tmp.path() + "/log";
  auto file = env.NewWritableFile(path);
  ASSERT_TRUE(file.ok());
  env.FailAppendsWithNoSpace(true);
  absl::Status s = (*file)->Append("0123456789");
  EXPECT_TRUE(absl::IsResourceExhausted(s)) << s;
  EXPECT_EQ(ReadAll(&env, path), "01234");
  env.FailAppendsWithNoSpace(false);
  EXPECT_TRUE((*file)->Append("x").ok());
}

// Whether a file system is mounted at `dir` (as /proc/mounts names it).
bool MountedAt(const std::string& dir) {
  const std::string target = std::filesystem::canonical(dir).string();
  std::ifstream mounts("/proc/mounts");
  std::string line;
  while (std::getline(mounts, line)) {
    std::istringstream fields(line);
    std::string source, at;
    fields >> source >> at;
    if (at == target) return true;
  }
  return false;
}

// A test process that crashes with a SmallTmpfs mounted cannot unmount it;
// the next SmallTmpfs mount, in any test process, detaches it, so crashed
// runs do not pile mounts up on a CI machine. Live processes' mounts stay.
TEST(SmallTmpfsTest, AMountLeftByACrashedTestProcessIsDetachedByTheNextMount) {
  ScopedDir crashed_dir;
  ScopedDir live_dir;
  ScopedDir next_dir;
  SmallTmpfs live;
  absl::Status live_mounted = live.Mount(live_dir.path(), 1);
  if (!live_mounted.ok()) GTEST_SKIP() << "cannot mount here: " << live_mounted;
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    SmallTmpfs fs;
    // Exits without the destructor, as a crash would.
    ::_exit(fs.Mount(crashed_dir.path(), 1).ok() ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the child could not mount";
  ASSERT_TRUE(MountedAt(crashed_dir.path())) << "the crashed process's mount is not there";

  SmallTmpfs next;
  ASSERT_TRUE(next.Mount(next_dir.path(), 1).ok());
  EXPECT_FALSE(MountedAt(crashed_dir.path())) << "the leftover mount was not detached";
  EXPECT_TRUE(MountedAt(live_dir.path())) << "a live process's mount was detached";
  EXPECT_TRUE(MountedAt(next_dir.path()));
}

// Servers restarted on the same address take their port from below the
// kernel's ephemeral range: a port the kernel hands out for port 0 or an
// outgoing connection (which a parallel test would hold) is never picked.
TEST(TestPortTest, RestartablePortsAreFreeAndOutsideTheEphemeralRange) {
  int low = 0, high = 0;
  std::ifstream("/proc/sys/net/ipv4/ip_local_port_range") >> low >> high;
  ASSERT_GT(low, kLowestTestPort + 1000) << "this machine leaves no room below its ephemeral range";
  std::set<int> picked;
  // 1000 picks of ~22 000 ports: without the rule, a repeat is all but
  // certain (birthday bound).
  for (int i = 0; i < 1000; ++i) {
    const int port = PickRestartablePort();
    EXPECT_GE(port, kLowestTestPort);
    EXPECT_LT(port, low) << "picked from the ephemeral range " << low << "-" << high;
    // Ports of a cluster are picked before any is bound: never twice.
    EXPECT_TRUE(picked.insert(port).second) << "port " << port << " picked twice";
  }
  // A port held by a listener is not handed out again.
  const int held = PickRestartablePort();
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr = test_port_internal::Loopback(held);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0) << "picked a busy port";
  ASSERT_EQ(::listen(fd, 1), 0);
  EXPECT_FALSE(test_port_internal::CanBind(held));
  ::close(fd);
}

// Test processes run in parallel (ctest -j2) and pick ports from the same
// range: a port another live process claimed is never picked, and its
// claims end with it. (The other process claims a block of 100 ports only,
// so that parallel tests keep picking elsewhere meanwhile.)
TEST(TestPortTest, APortClaimedByAnotherProcessIsNotPicked) {
  constexpr int kLo = 30000, kHi = 30100;
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // Claims every port of the block, as PickRestartablePort does (a port
    // this test process picked before stays its own).
    const int fd = ::open(test_port_internal::kLockFile, O_RDWR | O_CREAT, 0666);
    int claimed = 0;
    for (int port = kLo; fd >= 0 && port < kHi; ++port) {
      struct flock lock {};
      lock.l_type = F_WRLCK;
      lock.l_whence = SEEK_SET;
      lock.l_start = port;
      lock.l_len = 1;
      claimed += ::fcntl(fd, F_SETLK, &lock) == 0 ? 1 : 0;
    }
    const char ok = claimed > 0 ? 'y' : 'n';
    (void)!::write(ready[1], &ok, 1);
    ::pause();
    ::_exit(0);
  }
  char ok = 0;
  ASSERT_EQ(::read(ready[0], &ok, 1), 1);
  EXPECT_EQ(ok, 'y') << "the other process could not claim the block";
  // Every port of the block is claimed (by it, or by this process before).
  EXPECT_EQ(test_port_internal::PickIn(kLo, kHi), 0) << "picked a port another process claimed";
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  ::close(ready[0]);
  ::close(ready[1]);
  const int after = test_port_internal::PickIn(kLo, kHi);
  EXPECT_GE(after, kLo) << "a dead process's claims must not outlive it";
  EXPECT_LT(after, kHi);
}

}  // namespace
}  // namespace ledgerkv
