// EtcdProcess: a real single-member etcd (Debian's /usr/bin/etcd, package
// etcd-server, installed by scripts/deps) for tests, on free loopback ports
// with a temporary data directory. The destructor kills it (SIGKILL) and
// removes the directory, also when a test fails.
//
// Stop/Restart keep the data directory and the ports, so a client sees the
// same etcd go away and come back; Pause/Resume (SIGSTOP/SIGCONT) make it
// hang instead of refusing connections.
//
// The child is also killed if the thread that started it exits
// (PR_SET_PDEATHSIG), so a crashed test leaves no etcd behind: start and
// restart it from the test's main thread.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace ledgerkv::metadata::testing {

class EtcdProcess {
 public:
  // Starts etcd and waits until it answers a read. FAILED_PRECONDITION if
  // /usr/bin/etcd is missing; DEADLINE_EXCEEDED / INTERNAL (with the log
  // tail) if it does not come up within `timeout`.
  static absl::StatusOr<std::unique_ptr<EtcdProcess>> Start(
      absl::Duration timeout = absl::Seconds(30));

  // Starts an n-member cluster (members "m0".."m<n-1>", each on its own
  // ports and data directory) and waits until every member answers a
  // linearizable read, i.e. the cluster has elected a leader.
  static absl::StatusOr<std::vector<std::unique_ptr<EtcdProcess>>> StartCluster(
      int n, absl::Duration timeout = absl::Seconds(30));

  ~EtcdProcess();
  EtcdProcess(const EtcdProcess&) = delete;
  EtcdProcess& operator=(const EtcdProcess&) = delete;

  // "127.0.0.1:<client port>".
  const std::string& endpoint() const { return endpoint_; }
  // "etcd://127.0.0.1:<client port>" (+ `key_prefix`).
  std::string Uri(const std::string& key_prefix = "") const;
  pid_t pid() const { return pid_; }

  // SIGKILL and reap (the data directory stays). No-op when not running.
  void Stop();
  // Starts it again on the same ports and data, and waits until it answers.
  absl::Status Restart(absl::Duration timeout = absl::Seconds(30));
  void Pause();   // SIGSTOP: connections hang
  void Resume();  // SIGCONT

  // The last `bytes` of etcd's log (stdout and stderr).
  std::string LogTail(size_t bytes = 3000) const;

 private:
  EtcdProcess() = default;
  // A member with fresh ports and data directory, not started yet.
  static absl::StatusOr<std::unique_ptr<EtcdProcess>> Prepare(std::string name);
  absl::Status Launch(absl::Duration timeout);
  absl::Status Spawn();
  absl::Status WaitServing(absl::Duration timeout);

  std::string dir_;  // removed by the destructor
  std::string name_;
  std::string endpoint_;
  std::string peer_url_;
  std::string initial_cluster_;  // name=peer_url,...
  pid_t pid_ = -1;
};

}  // namespace ledgerkv::metadata::testing
