// Starting and killing real `ledgerkv` processes from tests.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace ledgerkv::testing {

// Path of a binary built in this build tree (LEDGERKV_BIN_DIR is set by
// ctest; falls back to the path relative to the test binary).
std::string BinaryPath(const std::string& relative);

// A loopback TCP port that was free a moment ago, outside the kernel's
// ephemeral range (for servers that must restart on the same address;
// base/test_port.h).
int FreePort();

// A child process with stdout piped to the parent; stderr goes to a log file
// (printed when a test fails, see LogTail). The child inherits no descriptor
// but 0-2 and is killed (SIGKILL) when the thread that started it exits, so
// a crashed or aborted test leaves no process behind. Start processes from
// a thread that outlives them (the test's main thread).
class Process {
 public:
  // Starts `argv` and waits until a stdout line contains `ready_marker`
  // (returned by ready_line()). DEADLINE_EXCEEDED if it does not appear in
  // `timeout`; INTERNAL if the process exits first (with the stderr tail).
  // `extra_env` ("NAME=value") is added to the environment the child
  // inherits (a name given replaces the inherited one).
  static absl::StatusOr<std::unique_ptr<Process>> Start(std::vector<std::string> argv,
                                                        const std::string& ready_marker,
                                                        absl::Duration timeout = absl::Seconds(30),
                                                        std::vector<std::string> extra_env = {});
  ~Process();  // kill -9 if still running

  pid_t pid() const { return pid_; }
  const std::string& ready_line() const { return ready_line_; }

  // kill -9 and reap.
  void Kill();
  // SIGTERM; returns the exit status (or -1 if it had to be killed after `timeout`).
  int Terminate(absl::Duration timeout = absl::Seconds(10));
  void Stop();      // SIGSTOP
  void Continue();  // SIGCONT
  // The last `bytes` of the process's stderr.
  std::string LogTail(size_t bytes = 4000) const;

 private:
  Process() = default;
  pid_t pid_ = -1;
  int stdout_fd_ = -1;
  std::string log_path_;
  std::string ready_line_;
};

// A fresh directory under the test temp dir, removed by the destructor.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace ledgerkv::testing
