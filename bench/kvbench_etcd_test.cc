// Smoke test of ledgerkv-bench against a real single-member etcd: the bench
// must run each workload with no errors, and what it claims to have written
// must be in etcd afterwards (checked here through etcd's own API).
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "bench/kv_load.h"
#include "gtest/gtest.h"
#include "proto/etcd/rpc.grpc.pb.h"
#include "bench/kvbench_test_util.h"
#include "tests/process_util.h"

namespace ledgerkv::bench {
namespace {

using ::ledgerkv::testing::FreePort;
using ::ledgerkv::testing::TempDir;

constexpr char kEtcd[] = "/usr/bin/etcd";

// A single-member etcd on free loopback ports with a temporary data dir,
// killed (and reaped) by the destructor, so also when a test fails.
class EtcdServer {
 public:
  ~EtcdServer() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }

  // Starts etcd and waits until it answers a Range. Fails the test otherwise.
  void Start() {
    ASSERT_EQ(access(kEtcd, X_OK), 0) << kEtcd << " missing: apt-get install etcd-server";
    const int client_port = FreePort();
    int peer_port = FreePort();
    while (peer_port == client_port) peer_port = FreePort();
    endpoint_ = absl::StrCat("127.0.0.1:", client_port);
    const std::string client_url = absl::StrCat("http://", endpoint_);
    const std::string peer_url = absl::StrCat("http://127.0.0.1:", peer_port);
    log_path_ = dir_.path() + "/etcd.log";
    std::vector<std::string> args = {kEtcd,
                                     "--name=default",
                                     "--data-dir=" + dir_.path() + "/data",
                                     "--listen-client-urls=" + client_url,
                                     "--advertise-client-urls=" + client_url,
                                     "--listen-peer-urls=" + peer_url,
                                     "--initial-advertise-peer-urls=" + peer_url,
                                     "--initial-cluster=default=" + peer_url};
    // The child may only make async-signal-safe calls (gRPC threads may hold
    // locks at fork time): everything is prepared before fork.
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    const int log = open(log_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    ASSERT_GE(log, 0) << log_path_;
    pid_ = fork();
    ASSERT_GE(pid_, 0);
    if (pid_ == 0) {
      dup2(log, STDOUT_FILENO);
      dup2(log, STDERR_FILENO);
      execv(argv[0], argv.data());
      _exit(127);
    }
    close(log);
    // Wait for etcd to listen before connecting: a channel that failed to
    // connect retries only after gRPC's reconnect backoff (seconds).
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    while (ReadLog().find("ready to serve client requests") == std::string::npos) {
      ASSERT_LT(absl::Now(), deadline) << "etcd did not serve in 30 s:\n" << LogTail();
      ASSERT_EQ(waitpid(pid_, nullptr, WNOHANG), 0) << "etcd exited:\n" << LogTail();
      absl::SleepFor(absl::Milliseconds(20));
    }
    stub_ = etcdserverpb::KV::NewStub(
        grpc::CreateChannel(endpoint_, grpc::InsecureChannelCredentials()));
    while (absl::Now() < deadline) {
      if (Revision() > 0) return;
      absl::SleepFor(absl::Milliseconds(100));
    }
    FAIL() << "etcd did not serve in 30 s:\n" << LogTail();
  }

  const std::string& endpoint() const { return endpoint_; }
  pid_t pid() const { return pid_; }

  // Keys in [start, end) (count_only Range); -1 on error.
  int64_t Count(const std::string& start, const std::string& end) {
    etcdserverpb::RangeResponse response;
    return RangeCall(start, end, &response) ? response.count() : -1;
  }

  // The store's current revision; -1 on error.
  int64_t Revision() {
    etcdserverpb::RangeResponse response;
    return RangeCall("x", "", &response) ? response.header().revision() : -1;
  }

  std::string LogTail() const {
    const std::string text = ReadLog();
    return text.size() > 3000 ? text.substr(text.size() - 3000) : text;
  }

 private:
  std::string ReadLog() const {
    FILE* f = fopen(log_path_.c_str(), "r");
    if (f == nullptr) return "";
    std::string text;
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof(buf), f)) > 0) text.append(buf, n);
    fclose(f);
    return text;
  }

  bool RangeCall(const std::string& start, const std::string& end,
                 etcdserverpb::RangeResponse* response) {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(2)));
    etcdserverpb::RangeRequest request;
    request.set_key(start);
    request.set_range_end(end);
    request.set_count_only(true);
    return stub_->Range(&context, request, response).ok();
  }

  TempDir dir_;
  std::string log_path_;
  std::string endpoint_;
  pid_t pid_ = -1;
  std::unique_ptr<etcdserverpb::KV::Stub> stub_;
};

class KvBenchEtcdTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_NO_FATAL_FAILURE(etcd_.Start()); }

  std::vector<std::string> Args(const std::string& workload) {
    return {"--endpoint", etcd_.endpoint(), "--target", "etcd", workload, "--clients", "16",
            "--conns", "2", "--keys", "1000", "--total", "2000", "--value-size", "64",
            "--server-pid", std::to_string(etcd_.pid())};
  }

  EtcdServer etcd_;
};

// Every put is one etcd revision: the store must have advanced by exactly
// the number of puts the bench reports, and hold only keys of its key space.
TEST_F(KvBenchEtcdTest, PutWritesEveryReportedOperation) {
  const int64_t before = etcd_.Revision();
  BenchRun run = RunBench(Args("put"));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_EQ(run.Number("ops"), 2000);
  EXPECT_EQ(run.Number("errors"), 0);
  EXPECT_GT(run.Number("ops_per_sec"), 0);
  EXPECT_GT(run.Number("p50"), 0);
  EXPECT_GE(run.Number("p999"), run.Number("p50"));
  EXPECT_GT(run.Number("server_vm_hwm_kb"), 0);
  EXPECT_GT(run.Number("server_max_rss_kb"), 0);
  EXPECT_EQ(etcd_.Revision() - before, 2000);
  const int64_t keys = etcd_.Count(kKeyPrefix, kKeyPrefixEnd);
  EXPECT_GT(keys, 500);  // 2000 random puts over 1000 keys touch ~865
  EXPECT_LE(keys, 1000);
  const std::string all(1, '\0');  // key "\0", range_end "\0": every key
  EXPECT_EQ(etcd_.Count(all, all), keys) << "keys outside the bench's key space";
}

// Reads follow an untimed preload of the whole key space: every read finds
// its key, and the preload left exactly the key space in etcd.
TEST_F(KvBenchEtcdTest, GetAfterPreloadFindsEveryKey) {
  for (const char* workload : {"get", "get-serializable"}) {
    BenchRun run = RunBench(Args(workload));
    ASSERT_EQ(run.exit_code, 0) << run.output;
    EXPECT_EQ(run.Number("preloaded"), 1000) << workload;
    EXPECT_EQ(run.Number("ops"), 2000) << workload;
    EXPECT_EQ(run.Number("errors"), 0) << workload;
    EXPECT_EQ(run.Number("misses"), 0) << workload;
  }
  EXPECT_EQ(etcd_.Count(BenchKey(0, 16), BenchKey(999, 16) + "\x01"), 1000);
}

// Compare-and-set: each successful txn is exactly one write, each lost race
// (compare failed) none.
TEST_F(KvBenchEtcdTest, TxnWritesOncePerSuccessfulCompare) {
  const int64_t before = etcd_.Revision();
  BenchRun run = RunBench(Args("txn"));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_EQ(run.Number("ops"), 2000);
  EXPECT_EQ(run.Number("errors"), 0);
  EXPECT_EQ(run.Number("misses"), 0);
  const int64_t successful = 2000 - static_cast<int64_t>(run.Number("cas_failed"));
  EXPECT_GT(successful, 1000);
  EXPECT_EQ(etcd_.Revision() - before, 1000 + successful);  // preload + CAS writes
}

TEST_F(KvBenchEtcdTest, ScanReturnsFullPages) {
  BenchRun run = RunBench(Args("scan"));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_EQ(run.Number("errors"), 0);
  EXPECT_EQ(run.Number("scanned_keys"), 2000 * kScanLimit);
}

// A run whose operations fail must not look like a result: etcd rejects
// requests over its 1.5 MiB limit, and the bench must exit 1 and say why.
TEST_F(KvBenchEtcdTest, ErrorRateAboveOnePercentExitsNonZero) {
  BenchRun run = RunBench({"--endpoint", etcd_.endpoint(), "--target", "etcd", "put",
                           "--clients", "2", "--total", "20", "--value-size", "2000000"});
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_EQ(run.Number("errors"), 20);
  EXPECT_EQ(run.Number("ops"), 0);
}

// proto/etcd/ is written from etcd's documented wire format for the etcd
// MetadataStore of cluster mode: Lease, Watch and Txn must interoperate with
// a real etcd, not only the KV calls the bench makes. A wrong field number
// shows up here as a missing lease, key or event.
TEST_F(KvBenchEtcdTest, EtcdProtoLeaseWatchAndTxnInteroperate) {
  auto channel = grpc::CreateChannel(etcd_.endpoint(), grpc::InsecureChannelCredentials());
  auto kv = etcdserverpb::KV::NewStub(channel);
  auto lease = etcdserverpb::Lease::NewStub(channel);
  auto watch = etcdserverpb::Watch::NewStub(channel);
  auto context = [] {
    auto c = std::make_unique<grpc::ClientContext>();
    c->set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
    return c;
  };

  etcdserverpb::LeaseGrantRequest grant;
  grant.set_ttl(30);
  etcdserverpb::LeaseGrantResponse granted;
  ASSERT_TRUE(lease->LeaseGrant(context().get(), grant, &granted).ok());
  ASSERT_NE(granted.id(), 0);
  EXPECT_EQ(granted.ttl(), 30);

  // Watch from now on the prefix "w/" ("w0" is the prefix end).
  auto watch_context = context();
  auto stream = watch->Watch(watch_context.get());
  etcdserverpb::WatchRequest create;
  create.mutable_create_request()->set_key("w/");
  create.mutable_create_request()->set_range_end("w0");
  create.mutable_create_request()->set_prev_kv(true);
  ASSERT_TRUE(stream->Write(create));
  etcdserverpb::WatchResponse created;
  ASSERT_TRUE(stream->Read(&created));
  EXPECT_TRUE(created.created());

  // Put with the lease only if the key does not exist yet (create revision 0).
  etcdserverpb::TxnRequest txn;
  etcdserverpb::Compare* absent = txn.add_compare();
  absent->set_key("w/a");
  absent->set_target(etcdserverpb::Compare::CREATE);
  absent->set_result(etcdserverpb::Compare::EQUAL);
  absent->set_create_revision(0);
  etcdserverpb::PutRequest* put = txn.add_success()->mutable_request_put();
  put->set_key("w/a");
  put->set_value("v1");
  put->set_lease(granted.id());
  txn.add_failure()->mutable_request_range()->set_key("w/a");
  etcdserverpb::TxnResponse txn_response;
  ASSERT_TRUE(kv->Txn(context().get(), txn, &txn_response).ok());
  EXPECT_TRUE(txn_response.succeeded());
  ASSERT_EQ(txn_response.responses_size(), 1);
  EXPECT_TRUE(txn_response.responses(0).has_response_put());
  ASSERT_TRUE(kv->Txn(context().get(), txn, &txn_response).ok());  // now it exists
  EXPECT_FALSE(txn_response.succeeded());
  ASSERT_EQ(txn_response.responses_size(), 1);
  ASSERT_EQ(txn_response.responses(0).response_range().kvs_size(), 1);
  const mvccpb::KeyValue& stored = txn_response.responses(0).response_range().kvs(0);
  EXPECT_EQ(stored.value(), "v1");
  EXPECT_EQ(stored.lease(), granted.id());
  EXPECT_EQ(stored.version(), 1);
  EXPECT_EQ(stored.create_revision(), stored.mod_revision());

  etcdserverpb::WatchResponse event;
  ASSERT_TRUE(stream->Read(&event));
  ASSERT_EQ(event.events_size(), 1);
  EXPECT_EQ(event.watch_id(), created.watch_id());
  EXPECT_EQ(event.events(0).type(), mvccpb::Event::PUT);
  EXPECT_EQ(event.events(0).kv().key(), "w/a");
  EXPECT_EQ(event.events(0).kv().mod_revision(), stored.mod_revision());

  etcdserverpb::LeaseTimeToLiveRequest ttl_request;
  ttl_request.set_id(granted.id());
  ttl_request.set_keys(true);
  etcdserverpb::LeaseTimeToLiveResponse ttl;
  ASSERT_TRUE(lease->LeaseTimeToLive(context().get(), ttl_request, &ttl).ok());
  EXPECT_EQ(ttl.grantedttl(), 30);
  EXPECT_GT(ttl.ttl(), 0);
  ASSERT_EQ(ttl.keys_size(), 1);
  EXPECT_EQ(ttl.keys(0), "w/a");

  auto keepalive_context = context();
  auto keepalive = lease->LeaseKeepAlive(keepalive_context.get());
  etcdserverpb::LeaseKeepAliveRequest ping;
  ping.set_id(granted.id());
  ASSERT_TRUE(keepalive->Write(ping));
  etcdserverpb::LeaseKeepAliveResponse pong;
  ASSERT_TRUE(keepalive->Read(&pong));
  EXPECT_EQ(pong.id(), granted.id());
  EXPECT_EQ(pong.ttl(), 30);
  keepalive->WritesDone();
  keepalive_context->TryCancel();

  // Revoking the lease deletes its key: a DELETE event with the previous value.
  etcdserverpb::LeaseRevokeRequest revoke;
  revoke.set_id(granted.id());
  etcdserverpb::LeaseRevokeResponse revoked;
  ASSERT_TRUE(lease->LeaseRevoke(context().get(), revoke, &revoked).ok());
  ASSERT_TRUE(stream->Read(&event));
  ASSERT_EQ(event.events_size(), 1);
  EXPECT_EQ(event.events(0).type(), mvccpb::Event::DELETE);
  EXPECT_EQ(event.events(0).kv().key(), "w/a");
  EXPECT_EQ(event.events(0).prev_kv().value(), "v1");
  EXPECT_EQ(etcd_.Count("w/", "w0"), 0);

  etcdserverpb::WatchRequest cancel;
  cancel.mutable_cancel_request()->set_watch_id(created.watch_id());
  ASSERT_TRUE(stream->Write(cancel));
  ASSERT_TRUE(stream->Read(&event));
  EXPECT_TRUE(event.canceled());
  stream->WritesDone();
  watch_context->TryCancel();
}

}  // namespace
}  // namespace ledgerkv::bench
