#include "metadata/etcd_test_util.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/test_port.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"
#include "proto/etcd/rpc.grpc.pb.h"

namespace ledgerkv::metadata::testing {
namespace {

constexpr char kEtcdBinary[] = "/usr/bin/etcd";

// A loopback port that was free a moment ago, outside the kernel's
// ephemeral range: etcd restarts on it (base/test_port.h).
absl::StatusOr<int> FreePort() {
  const int port = PickRestartablePort();
  if (port <= 0) return absl::UnavailableError("no free loopback port");
  return port;
}

}  // namespace

absl::StatusOr<std::unique_ptr<EtcdProcess>> EtcdProcess::Prepare(std::string name) {
  if (access(kEtcdBinary, X_OK) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(kEtcdBinary, " is missing: apt-get install etcd-server (scripts/deps)"));
  }
  std::unique_ptr<EtcdProcess> etcd(new EtcdProcess());
  std::string pattern = (std::filesystem::temp_directory_path() / "ledgerkv-etcd-XXXXXX").string();
  if (mkdtemp(pattern.data()) == nullptr) return absl::ErrnoToStatus(errno, "mkdtemp");
  etcd->dir_ = pattern;
  etcd->name_ = std::move(name);
  absl::StatusOr<int> client_port = FreePort();
  if (!client_port.ok()) return client_port.status();
  absl::StatusOr<int> peer_port = FreePort();
  while (peer_port.ok() && *peer_port == *client_port) peer_port = FreePort();
  if (!peer_port.ok()) return peer_port.status();
  etcd->endpoint_ = absl::StrCat("127.0.0.1:", *client_port);
  etcd->peer_url_ = absl::StrCat("http://127.0.0.1:", *peer_port);
  etcd->initial_cluster_ = absl::StrCat(etcd->name_, "=", etcd->peer_url_);
  return etcd;
}

absl::StatusOr<std::unique_ptr<EtcdProcess>> EtcdProcess::Start(absl::Duration timeout) {
  absl::StatusOr<std::unique_ptr<EtcdProcess>> etcd = Prepare("ledgerkv-test");
  if (!etcd.ok()) return etcd.status();
  if (absl::Status s = (*etcd)->Launch(timeout); !s.ok()) return s;
  return etcd;
}

absl::StatusOr<std::vector<std::unique_ptr<EtcdProcess>>> EtcdProcess::StartCluster(
    int n, absl::Duration timeout) {
  std::vector<std::unique_ptr<EtcdProcess>> members;
  std::vector<std::string> peers;
  for (int i = 0; i < n; ++i) {
    absl::StatusOr<std::unique_ptr<EtcdProcess>> member = Prepare(absl::StrCat("m", i));
    if (!member.ok()) return member.status();
    peers.push_back((*member)->initial_cluster_);
    members.push_back(std::move(member).value());
  }
  // Ports are picked one by one: two members could have drawn the same one.
  std::vector<std::string> ports;
  for (const auto& m : members) {
    ports.push_back(m->endpoint_);
    ports.push_back(m->peer_url_.substr(std::strlen("http://")));
  }
  std::sort(ports.begin(), ports.end());
  if (std::adjacent_find(ports.begin(), ports.end()) != ports.end()) {
    return absl::UnavailableError("two etcd members drew the same port; try again");
  }
  const std::string initial_cluster = absl::StrJoin(peers, ",");
  for (auto& m : members) {
    m->initial_cluster_ = initial_cluster;
    if (absl::Status s = m->Spawn(); !s.ok()) return s;
  }
  // Linearizable reads need a quorum: wait only once every member runs.
  for (auto& m : members) {
    if (absl::Status s = m->WaitServing(timeout); !s.ok()) return s;
  }
  return members;
}

EtcdProcess::~EtcdProcess() {
  Stop();
  if (!dir_.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
}

std::string EtcdProcess::Uri(const std::string& key_prefix) const {
  return absl::StrCat("etcd://", endpoint_, key_prefix);
}

absl::Status EtcdProcess::Launch(absl::Duration timeout) {
  if (absl::Status s = Spawn(); !s.ok()) return s;
  return WaitServing(timeout);
}

absl::Status EtcdProcess::Spawn() {
  const std::string client_url = absl::StrCat("http://", endpoint_);
  // Short raft timers: a single member elects itself in well under a
  // second (also after Restart), and etcd's minimum lease TTL, 1.5
  // election timeouts, stays at 1 s. A restarted member ignores the
  // initial-cluster flags and rejoins with what its data directory holds.
  std::vector<std::string> args = {kEtcdBinary,
                                   "--name=" + name_,
                                   "--data-dir=" + dir_ + "/data",
                                   "--listen-client-urls=" + client_url,
                                   "--advertise-client-urls=" + client_url,
                                   "--listen-peer-urls=" + peer_url_,
                                   "--initial-advertise-peer-urls=" + peer_url_,
                                   "--initial-cluster=" + initial_cluster_,
                                   "--heartbeat-interval=50",
                                   "--election-timeout=500",
                                   "--logger=zap",
                                   "--log-outputs=stderr"};
  const std::string log_path = dir_ + "/etcd.log";
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) return absl::ErrnoToStatus(errno, "fork");
  if (pid == 0) {
    // Only async-signal-safe calls between fork and exec.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(126);
    int log = open(log_path.c_str(), O_CREAT | O_APPEND | O_WRONLY, 0644);
    if (log >= 0) {
      dup2(log, STDOUT_FILENO);
      dup2(log, STDERR_FILENO);
    }
    execv(argv[0], argv.data());
    _exit(127);
  }
  pid_ = pid;
  return absl::OkStatus();
}

absl::Status EtcdProcess::WaitServing(absl::Duration timeout) {
  // gRPC's default reconnect backoff grows to seconds while etcd is not
  // listening yet; poll with a short one on a channel of its own.
  grpc::ChannelArguments channel_args;
  channel_args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 50);
  channel_args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 100);
  channel_args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  std::shared_ptr<grpc::Channel> channel =
      grpc::CreateCustomChannel(endpoint_, grpc::InsecureChannelCredentials(), channel_args);
  auto stub = etcdserverpb::KV::NewStub(channel);
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Milliseconds(500)));
    // Wait for a connection (and keep asking for one) instead of failing
    // fast while the channel sits in TRANSIENT_FAILURE.
    context.set_wait_for_ready(true);
    etcdserverpb::RangeRequest request;
    request.set_key("ledgerkv-test-probe");
    etcdserverpb::RangeResponse response;
    if (stub->Range(&context, request, &response).ok()) return absl::OkStatus();
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return absl::InternalError(
          absl::StrCat("etcd exited (status ", status, ") before serving:\n", LogTail()));
    }
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("etcd did not serve within ", absl::FormatDuration(timeout), ":\n",
                       LogTail()));
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
}

void EtcdProcess::Stop() {
  if (pid_ <= 0) return;
  kill(pid_, SIGKILL);
  int status = 0;
  waitpid(pid_, &status, 0);
  pid_ = -1;
}

absl::Status EtcdProcess::Restart(absl::Duration timeout) {
  Stop();
  return Launch(timeout);
}

void EtcdProcess::Pause() {
  if (pid_ <= 0) return;
  kill(pid_, SIGSTOP);
  // kill() returns before the stop takes effect: wait until the kernel
  // reports the process stopped, so the caller's next request hangs.
  const absl::Time deadline = absl::Now() + absl::Seconds(2);
  while (absl::Now() < deadline) {
    std::ifstream in(absl::StrCat("/proc/", pid_, "/stat"));
    std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const size_t paren = stat.rfind(')');
    if (paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] == 'T') return;
    absl::SleepFor(absl::Milliseconds(5));
  }
}

void EtcdProcess::Resume() {
  if (pid_ > 0) kill(pid_, SIGCONT);
}

std::string EtcdProcess::LogTail(size_t bytes) const {
  std::ifstream in(dir_ + "/etcd.log");
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  return text.size() > bytes ? text.substr(text.size() - bytes) : text;
}

}  // namespace ledgerkv::metadata::testing
