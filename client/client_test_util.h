// Test helpers for client/ end-to-end tests: a real `ledgerkv standalone`
// process and running the real `ledgerkvctl` binary as a subprocess.
#pragma once

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "tests/process_util.h"

namespace ledgerkv::client {

// A `ledgerkv standalone` on 127.0.0.1 with its own data dir; Restart()
// brings it back on the same address and data.
class StandaloneServer {
 public:
  static absl::StatusOr<std::unique_ptr<StandaloneServer>> Start() {
    std::unique_ptr<StandaloneServer> s(new StandaloneServer());
    s->listen_ = absl::StrCat("127.0.0.1:", testing::FreePort());
    if (auto st = s->Launch(); !st.ok()) return st;
    return s;
  }

  // The address parsed from the "serving on <addr>" line.
  const std::string& address() const { return address_; }
  testing::Process& process() { return *process_; }

  // SIGTERM, wait for exit; returns the exit status (-1 if it had to be
  // killed).
  int Terminate() { return process_->Terminate(absl::Seconds(20)); }
  void Kill() { process_->Kill(); }
  absl::Status Restart() {
    process_.reset();
    return Launch();
  }

 private:
  StandaloneServer() = default;

  absl::Status Launch() {
    static constexpr char kMarker[] = "ledgerkv standalone serving on ";
    auto p = testing::Process::Start(
        {testing::BinaryPath("kv_server/ledgerkv"), "standalone", "--data-dir", dir_.path(),
         "--listen", listen_},
        kMarker, absl::Seconds(60));
    if (!p.ok()) return p.status();
    process_ = std::move(*p);
    const std::string& line = process_->ready_line();
    address_ = line.substr(line.find(kMarker) + sizeof(kMarker) - 1);
    while (!address_.empty() && (address_.back() == '\r' || address_.back() == ' ')) {
      address_.pop_back();
    }
    return absl::OkStatus();
  }

  testing::TempDir dir_;
  std::string listen_;
  std::string address_;
  std::unique_ptr<testing::Process> process_;
};

struct CtlResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

// Runs the ledgerkvctl binary with `args`, feeding `stdin_text`.
inline CtlResult RunCtlBinary(const std::vector<std::string>& args,
                              const std::string& stdin_text = "") {
  testing::TempDir dir;
  const std::string in_path = dir.path() + "/stdin";
  const std::string out_path = dir.path() + "/stdout";
  const std::string err_path = dir.path() + "/stderr";
  {
    std::ofstream in(in_path);
    in << stdin_text;
  }
  std::vector<std::string> argv = {testing::BinaryPath("client/ledgerkvctl")};
  argv.insert(argv.end(), args.begin(), args.end());
  // Everything the child needs is allocated before the fork: the test
  // process has gRPC threads, and one of them may hold an allocator lock at
  // the fork, which the child would then wait for for ever (seen once under
  // ASan as a test that hung until ctest's timeout).
  std::vector<char*> cargs;
  for (auto& a : argv) cargs.push_back(a.data());
  cargs.push_back(nullptr);
  CtlResult r;
  pid_t pid = fork();
  if (pid == 0) {
    int in = open(in_path.c_str(), O_RDONLY);
    int out = open(out_path.c_str(), O_CREAT | O_TRUNC | O_WRONLY, 0644);
    int err = open(err_path.c_str(), O_CREAT | O_TRUNC | O_WRONLY, 0644);
    if (in < 0 || out < 0 || err < 0) _exit(126);
    dup2(in, STDIN_FILENO);
    dup2(out, STDOUT_FILENO);
    dup2(err, STDERR_FILENO);
    execv(cargs[0], cargs.data());
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  auto slurp = [](const std::string& path) {
    std::ifstream f(path);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  };
  r.out = slurp(out_path);
  r.err = slurp(err_path);
  return r;
}

}  // namespace ledgerkv::client
