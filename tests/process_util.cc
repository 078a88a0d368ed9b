#include "tests/process_util.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string_view>

#include "absl/debugging/failure_signal_handler.h"
#include "absl/debugging/symbolize.h"
#include "absl/strings/str_cat.h"
#include "base/test_port.h"

namespace ledgerkv::testing {
namespace {

// Every test linking this library prints a symbolized stack trace when it
// crashes (e.g. an abort inside a library), so a rare crash in CI leaves
// something to debug. The handler re-raises the signal: the test still
// fails the same way.
// Not under ASan, whose own handlers report more.
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define LEDGERKV_TEST_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define LEDGERKV_TEST_ASAN 1
#endif
#ifndef LEDGERKV_TEST_ASAN
[[maybe_unused]] const bool kCrashHandlerInstalled = [] {
  absl::InitializeSymbolizer("/proc/self/exe");
  absl::InstallFailureSignalHandler(absl::FailureSignalHandlerOptions());
  return true;
}();
#endif

}  // namespace

std::string BinaryPath(const std::string& relative) {
  const char* dir = std::getenv("LEDGERKV_BIN_DIR");
  if (dir != nullptr) return absl::StrCat(dir, "/", relative);
  auto self = std::filesystem::read_symlink("/proc/self/exe");
  // Test binaries live one folder below the build root.
  return (self.parent_path().parent_path() / relative).string();
}

int FreePort() { return PickRestartablePort(); }

absl::StatusOr<std::unique_ptr<Process>> Process::Start(std::vector<std::string> argv,
                                                         const std::string& ready_marker,
                                                         absl::Duration timeout,
                                                         std::vector<std::string> extra_env) {
  std::unique_ptr<Process> p(new Process());
  static int counter = 0;
  p->log_path_ = absl::StrCat(std::filesystem::temp_directory_path().string(), "/ledgerkv-proc-",
                              getpid(), "-", counter++, ".log");
  // Everything the child needs is prepared before fork: between fork and
  // exec the child of a multi-threaded test may only make async-signal-safe
  // calls (no malloc: another thread may have held its lock at fork time).
  std::vector<char*> args;
  for (auto& a : argv) args.push_back(a.data());
  args.push_back(nullptr);
  // The ledgerkv binary turns absl's mutex deadlock detector off for speed;
  // children of tests keep it on, so a lock-order inversion still shows.
  static const std::string kDetect = "LEDGERKV_MUTEX_DEADLOCK_DETECTION=1";
  for (const std::string& e : extra_env) {
    if (e.find('=') == std::string::npos || e.front() == '=') {
      return absl::InvalidArgumentError(absl::StrCat("extra_env entry \"", e, "\" is not NAME=value"));
    }
  }
  std::vector<char*> env;
  auto replaced = [&extra_env](std::string_view var) {
    for (const std::string& e : extra_env) {
      const std::string_view name = std::string_view(e).substr(0, e.find('=') + 1);
      if (var.starts_with(name)) return true;
    }
    return false;
  };
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::string_view(*e).starts_with("LEDGERKV_MUTEX_DEADLOCK_DETECTION=")) continue;
    if (replaced(*e)) continue;
    env.push_back(*e);
  }
  for (std::string& e : extra_env) env.push_back(e.data());
  env.push_back(const_cast<char*>(kDetect.c_str()));
  env.push_back(nullptr);
  const char* log_path = p->log_path_.c_str();
  const pid_t parent = getpid();
  int pipefd[2];
  if (pipe2(pipefd, O_CLOEXEC) != 0) return absl::InternalError("pipe failed");
  pid_t pid = fork();
  if (pid < 0) {
    close(pipefd[0]);
    close(pipefd[1]);
    return absl::InternalError("fork failed");
  }
  if (pid == 0) {
    // Die with the test: an aborted or crashed test must not leave bookies
    // or servers running (holding ports, data dirs and inherited fds).
    // Checking getppid() afterwards closes the race with a parent that died
    // before prctl took effect.
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent) _exit(126);
    dup2(pipefd[1], STDOUT_FILENO);
    int log = open(log_path, O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0644);
    if (log >= 0) dup2(log, STDERR_FILENO);  // dup2 clears close-on-exec on fd 2
    // Close every inherited descriptor but stdin/stdout/stderr (the test's
    // sockets, RocksDB files, other children's pipes): a child must not keep
    // them open after the test closed its side.
    if (close_range(3, ~0U, 0) != 0) {
      rlimit limit{};
      const rlim_t max_fd = getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY
                                ? limit.rlim_cur
                                : 65536;
      for (rlim_t fd = 3; fd < max_fd; ++fd) close(static_cast<int>(fd));
    }
    execve(args[0], args.data(), env.data());
    _exit(127);
  }
  close(pipefd[1]);
  p->pid_ = pid;
  p->stdout_fd_ = pipefd[0];
  std::string buf;
  absl::Time deadline = absl::Now() + timeout;
  while (true) {
    size_t nl;
    while ((nl = buf.find('\n')) != std::string::npos) {
      std::string line = buf.substr(0, nl);
      buf.erase(0, nl + 1);
      if (line.find(ready_marker) != std::string::npos) {
        p->ready_line_ = line;
        return p;
      }
    }
    int remaining = static_cast<int>(absl::ToInt64Milliseconds(deadline - absl::Now()));
    if (remaining <= 0) {
      return absl::DeadlineExceededError(
          absl::StrCat("no '", ready_marker, "' from ", argv[0], "; stderr: ", p->LogTail()));
    }
    pollfd pfd{p->stdout_fd_, POLLIN, 0};
    if (poll(&pfd, 1, remaining) <= 0) continue;
    char chunk[4096];
    ssize_t n = read(p->stdout_fd_, chunk, sizeof(chunk));
    if (n <= 0) {
      int status = 0;
      waitpid(p->pid_, &status, 0);
      p->pid_ = -1;
      return absl::InternalError(absl::StrCat(argv[0], " exited (status ", status,
                                              ") before ready; stderr: ", p->LogTail()));
    }
    buf.append(chunk, static_cast<size_t>(n));
  }
}

Process::~Process() {
  Kill();
  if (stdout_fd_ >= 0) close(stdout_fd_);
  if (!log_path_.empty()) std::filesystem::remove(log_path_);
}

void Process::Kill() {
  if (pid_ <= 0) return;
  kill(pid_, SIGKILL);
  int status;
  waitpid(pid_, &status, 0);
  pid_ = -1;
}

int Process::Terminate(absl::Duration timeout) {
  if (pid_ <= 0) return -1;
  kill(pid_, SIGTERM);
  absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    int status;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  Kill();
  return -1;
}

void Process::Stop() {
  if (pid_ > 0) kill(pid_, SIGSTOP);
}
void Process::Continue() {
  if (pid_ > 0) kill(pid_, SIGCONT);
}

std::string Process::LogTail(size_t bytes) const {
  std::ifstream in(log_path_);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string s = ss.str();
  return s.size() > bytes ? s.substr(s.size() - bytes) : s;
}

TempDir::TempDir() {
  std::string tmpl = (std::filesystem::temp_directory_path() / "ledgerkv-test-XXXXXX").string();
  char* made = mkdtemp(tmpl.data());
  path_ = made != nullptr ? made : "";
}

TempDir::~TempDir() {
  std::error_code ec;
  if (!path_.empty()) std::filesystem::remove_all(path_, ec);
}

}  // namespace ledgerkv::testing
