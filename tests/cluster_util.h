// A real cluster on loopback for cluster-mode tests (docs/cluster.md): a
// real etcd (Debian's etcd-server), `ledgerkv bookie` and `ledgerkv server`
// processes, and an etcd client for assertions about the metadata
// (assignments, registrations, ledgers).
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <thread>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/kv_client.h"
#include "gtest/gtest.h"
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
  // 0: the server's defaults (5 and 10 minutes).
  int orphan_sweep_period_s = 0;
  int orphan_min_age_s = 0;
  // 0: the server's default (5 minutes); -1: --no-rereplicate.
  int rereplicate_after_s = 0;
  // LEDGERKV_FAULTS of every server process (base/fault_point.h,
  // FaultPoints::ArmFromSpec); empty: none.
  std::string server_faults;
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
  // Data directory of server i (its ranges are under <dir>/ranges/<id>).
  const std::string& server_dir(int i) const { return servers_[i].dir; }
  // Every server's address, comma-separated (client seeds).
  std::string Endpoints() const;
  // Index of the server whose id/address is `id`, or -1.
  int ServerIndex(const std::string& id) const;
  Process* server(int i) { return servers_[i].process.get(); }

  // Starts one more server; returns its index.
  absl::StatusOr<int> AddServer();
  // (Re)starts server i on its address and data directory; waits for its
  // ready line.
  absl::Status StartServer(int i);
  void KillServer(int i);      // kill -9
  void StopServer(int i);      // SIGSTOP
  void ContinueServer(int i);  // SIGCONT
  int TerminateServer(int i);  // SIGTERM; exit status
  void KillBookie(int i);
  int bookie_count() const { return static_cast<int>(bookies_.size()); }
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
  // Id of the last ledger of range_id's log.
  absl::StatusOr<uint64_t> CurrentLogLedger(uint64_t range_id);

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

// Keys of `expected` that do not read back (linearizable Get through the
// client library, seeds `endpoints`) with their value; each is reported
// with ADD_FAILURE (the first few) — returns how many.
int CountUnreadable(const std::string& endpoints,
                    const std::map<std::string, std::string>& expected);

// Writes w<i> = v<i> through the client library until stopped, keeping
// the acknowledged ones and the time of each acknowledgement.
class AckedWriter {
 public:
  explicit AckedWriter(const std::string& endpoints) {
    client::ClientOptions o;
    o.endpoint = endpoints;
    o.default_deadline = absl::Seconds(3);
    o.max_attempts = 10;
    auto c = client::KvClient::Create(o);
    EXPECT_TRUE(c.ok()) << c.status();
    client_ = std::move(*c);
    thread_ = std::thread([this] { Run(); });
  }
  ~AckedWriter() { Stop(); }

  void Stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }

  int acked() {
    absl::MutexLock l(&mu_);
    return static_cast<int>(acked_.size());
  }
  std::map<std::string, std::string> Acked() {
    absl::MutexLock l(&mu_);
    return acked_;
  }
  absl::Time last_ack() {
    absl::MutexLock l(&mu_);
    return last_ack_;
  }
  // Waits until `n` more writes are acknowledged; false after `timeout`.
  bool WaitForMore(int n, absl::Duration timeout) {
    const int target = acked() + n;
    const absl::Time deadline = absl::Now() + timeout;
    while (absl::Now() < deadline) {
      if (acked() >= target) return true;
      absl::SleepFor(absl::Milliseconds(20));
    }
    return false;
  }

 private:
  void Run() {
    for (int i = 0; !stop_; ++i) {
      ledgerkv::v1::PutRequest put;
      put.set_table("default");
      put.set_key(absl::StrCat("w", i));
      put.set_value(absl::StrCat("v", i));
      if (client_->Put(put).ok()) {
        absl::MutexLock l(&mu_);
        acked_[put.key()] = put.value();
        last_ack_ = absl::Now();
      }
    }
  }

  std::unique_ptr<client::KvClient> client_;
  std::atomic<bool> stop_{false};
  absl::Mutex mu_;
  std::map<std::string, std::string> acked_ ABSL_GUARDED_BY(mu_);
  absl::Time last_ack_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  std::thread thread_;
};

}  // namespace ledgerkv::testing
