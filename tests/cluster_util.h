// A real cluster on loopback for cluster-mode tests (docs/cluster.md): a
// real etcd (Debian's etcd-server), `ledgerkv bookie` and `ledgerkv server`
// processes, and an etcd client for assertions about the metadata
// (assignments, registrations, ledgers).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "metadata/etcd_test_util.h"
#include "metadata/metadata_store.h"
#include "proto/metadata.pb.h"
#include "tests/process_util.h"

namespace ledgerkv::testing {

struct ClusterFlags {
  int bookies = 3;
  int servers = 2;
  int ensemble = 3;
  int write_quorum = 3;
  int ack_quorum = 2;
  int lease_ttl_s = 3;
};

class TestCluster {
 public:
  // Starts etcd, the bookies, then the servers, and waits until the range
  // of table `default` has an owner. FAILED_PRECONDITION if etcd is not
  // installed (tests skip).
  static absl::StatusOr<std::unique_ptr<TestCluster>> Start(const ClusterFlags& flags = {});
  ~TestCluster();

  metadata::testing::EtcdProcess& etcd() { return *etcd_; }
  metadata::MetadataStore& store() { return *store_; }
  const metadata::Keys& keys() const { return keys_; }
  std::string MetadataUri() const { return etcd_->Uri(); }

  int server_count() const { return static_cast<int>(servers_.size()); }
  // host:port of server i (also its server id).
  const std::string& server_address(int i) const { return servers_[i].address; }
  // Every server's address, comma-separated (client seeds).
  std::string Endpoints() const;
  // Index of the server whose id/address is `id`, or -1.
  int ServerIndex(const std::string& id) const;
  Process* server(int i) { return servers_[i].process.get(); }

  // (Re)starts server i on its address and data directory; waits for its
  // ready line.
  absl::Status StartServer(int i);
  void KillServer(int i);      // kill -9
  void StopServer(int i);      // SIGSTOP
  void ContinueServer(int i);  // SIGCONT
  int TerminateServer(int i);  // SIGTERM; exit status
  void KillBookie(int i);
  const std::string& bookie_id(int i) const { return bookies_[i].id; }

  // The id of the only range of table `default`.
  absl::StatusOr<uint64_t> DefaultRange();
  absl::StatusOr<meta::v1::RangeAssignment> Assignment(uint64_t range_id);
  // Waits until range_id is assigned to a server other than `not_owner`
  // ("" = any). DEADLINE_EXCEEDED after `timeout`.
  absl::StatusOr<meta::v1::RangeAssignment> WaitForOwner(uint64_t range_id,
                                                         const std::string& not_owner,
                                                         absl::Duration timeout);
  // Bookie ids of the ensemble of the last ledger of range_id's log.
  absl::StatusOr<std::vector<std::string>> CurrentLogEnsemble(uint64_t range_id);

  // Runs `ledgerkv <args...>` (e.g. {"cluster", "--metadata", uri, "status"})
  // to completion; returns its stdout, or INTERNAL with stderr on a
  // non-zero exit.
  absl::StatusOr<std::string> RunLedgerkv(const std::vector<std::string>& args);

  // The stderr tails of every process, for failure messages.
  std::string LogTails(size_t bytes = 2500) const;

 private:
  struct Node {
    std::string id;
    std::string address;
    std::string dir;
    std::unique_ptr<Process> process;
  };
  TestCluster() = default;
  absl::Status StartBookie(int i);

  ClusterFlags flags_;
  TempDir dir_;
  metadata::Keys keys_{"default"};
  std::unique_ptr<metadata::testing::EtcdProcess> etcd_;
  std::unique_ptr<metadata::MetadataStore> store_;
  std::vector<Node> bookies_;
  std::vector<Node> servers_;
};

}  // namespace ledgerkv::testing
