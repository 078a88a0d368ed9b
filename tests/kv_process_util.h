// A real `ledgerkv standalone` process for KV tests: start, SIGTERM, kill -9
// and restart on the same data directory and address, with generated gRPC
// stubs for ledgerkv.v1.KV and Admin (no client library on purpose: these
// tests check the server's wire behaviour).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "proto/kv.grpc.pb.h"
#include "tests/process_util.h"

namespace ledgerkv::testing {

// Flags of `ledgerkv standalone`; 0 leaves the binary's default.
struct StandaloneFlags {
  int bookies = 0;              // --bookies N
  int snapshot_log_mb = 0;      // --snapshot-log-mb M
  int snapshot_interval_s = 0;  // --snapshot-interval-s S
};

// One standalone server whose data directory and address stay the same
// across restarts. Not thread-safe (the stubs it hands out are).
class StandaloneServer {
 public:
  // Picks a free loopback port once; `data_dir` need not exist.
  explicit StandaloneServer(std::string data_dir);

  // Starts the process, waits for its ready line ("ledgerkv standalone
  // serving on <addr>") and connects fresh stubs.
  absl::Status Start(const StandaloneFlags& flags = {});
  // SIGTERM; the exit status (-1 if it had to be killed after `timeout`).
  int Terminate(absl::Duration timeout = absl::Seconds(30));
  // kill -9 and reap.
  void Kill();

  const std::string& address() const { return address_; }
  const std::string& data_dir() const { return data_dir_; }
  std::shared_ptr<grpc::Channel> channel() const { return channel_; }
  ledgerkv::v1::KV::Stub& kv() { return *kv_; }
  ledgerkv::v1::Admin::Stub& admin() { return *admin_; }
  // stderr of the current (or last) process, then of the one before it.
  std::string LogTail(size_t bytes = 3000) const;

 private:
  std::string data_dir_;
  std::string address_;
  std::unique_ptr<Process> process_;
  std::string previous_log_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<ledgerkv::v1::KV::Stub> kv_;
  std::unique_ptr<ledgerkv::v1::Admin::Stub> admin_;
};

// A channel to `address` that accepts large messages (whole-table scans).
std::shared_ptr<grpc::Channel> KvChannel(const std::string& address);

// Sets a deadline on `ctx` (clients always set one).
void SetDeadline(grpc::ClientContext* ctx, absl::Duration timeout = absl::Seconds(15));

absl::Status ToAbsl(const grpc::Status& s);

// Admin helpers.
absl::Status CreateTable(ledgerkv::v1::Admin::Stub& admin, const std::string& name,
                         const std::vector<std::string>& split_keys = {});
absl::StatusOr<ledgerkv::v1::DescribeTableResponse> DescribeTable(ledgerkv::v1::Admin::Stub& admin,
                                                                  const std::string& name);

// Every key of [start, end) in key order, following continuations with
// pages of `page_limit` keys (0: server default), and the header revision
// of the last page. Fails if a page repeats or reorders keys.
struct ScanAllResult {
  std::vector<ledgerkv::v1::KeyValue> kvs;
  int64_t revision = 0;
};
absl::StatusOr<ScanAllResult> ScanAll(ledgerkv::v1::KV::Stub& kv, const std::string& table,
                                      const std::string& start = "", const std::string& end = "",
                                      int64_t page_limit = 0);
std::map<std::string, ledgerkv::v1::KeyValue> ToMap(const std::vector<ledgerkv::v1::KeyValue>& kvs);

// "key=<first 40 bytes of value> c=.. m=.. v=.." for failure messages.
std::string KvString(const ledgerkv::v1::KeyValue& kv);

}  // namespace ledgerkv::testing
