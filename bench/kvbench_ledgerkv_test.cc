// Smoke test of ledgerkv-bench against a real `ledgerkv standalone`
// process: each workload runs with no errors, and the writes it reports are
// in the server afterwards (checked through the KV API).
#include <cctype>
#include <memory>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "bench/kv_load.h"
#include "bench/kvbench_test_util.h"
#include "gtest/gtest.h"
#include "proto/kv.grpc.pb.h"
#include "tests/process_util.h"

namespace ledgerkv::bench {
namespace {

using ::ledgerkv::testing::BinaryPath;
using ::ledgerkv::testing::Process;
using ::ledgerkv::testing::TempDir;

constexpr char kReady[] = "ledgerkv standalone serving on ";

class KvBenchLedgerkvTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<Process>> server = Process::Start(
        {BinaryPath("kv_server/ledgerkv"), "standalone", "--data-dir", dir_.path() + "/data",
         "--listen", "127.0.0.1:0"},
        kReady);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    const std::string& line = server_->ready_line();
    endpoint_ = line.substr(line.find(kReady) + sizeof(kReady) - 1);
    while (!endpoint_.empty() && isspace(static_cast<unsigned char>(endpoint_.back()))) {
      endpoint_.pop_back();
    }
    stub_ = ledgerkv::v1::KV::NewStub(
        grpc::CreateChannel(endpoint_, grpc::InsecureChannelCredentials()));
  }

  // Keys of the bench's key space in table "default" and the range's
  // revision (one range), by a count_only Range; {-1, -1} on error.
  std::pair<int64_t, int64_t> CountAndRevision() {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
    ledgerkv::v1::RangeRequest request;
    request.set_table("default");
    request.set_start(kKeyPrefix);
    request.set_end(kKeyPrefixEnd);
    request.set_count_only(true);
    ledgerkv::v1::RangeResponse response;
    grpc::Status status = stub_->Range(&context, request, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    if (!status.ok()) return {-1, -1};
    return {response.count(), response.header().revision()};
  }

  std::vector<std::string> Args(const std::string& workload) {
    return {"--endpoint", endpoint_, workload, "--clients", "16", "--conns", "2",
            "--keys", "1000", "--total", "2000", "--value-size", "64",
            "--server-pid", std::to_string(server_->pid())};
  }

  TempDir dir_;
  std::unique_ptr<Process> server_;
  std::string endpoint_;
  std::unique_ptr<ledgerkv::v1::KV::Stub> stub_;
};

// Every put is one range revision: the range must have advanced by exactly
// the number of puts the bench reports.
TEST_F(KvBenchLedgerkvTest, PutWritesEveryReportedOperation) {
  const auto [keys_before, revision_before] = CountAndRevision();
  ASSERT_EQ(keys_before, 0);
  BenchRun run = RunBench(Args("put"));
  ASSERT_EQ(run.exit_code, 0) << run.output << server_->LogTail();
  EXPECT_EQ(run.Number("ops"), 2000);
  EXPECT_EQ(run.Number("errors"), 0);
  EXPECT_GT(run.Number("p50"), 0);
  EXPECT_GT(run.Number("server_vm_hwm_kb"), 0);
  const auto [keys, revision] = CountAndRevision();
  EXPECT_EQ(revision - revision_before, 2000);
  EXPECT_GT(keys, 500);  // 2000 random puts over 1000 keys touch ~865
  EXPECT_LE(keys, 1000);
}

TEST_F(KvBenchLedgerkvTest, ReadsAfterPreloadFindEveryKey) {
  for (const char* workload : {"get", "get-serializable", "mixed90"}) {
    BenchRun run = RunBench(Args(workload));
    ASSERT_EQ(run.exit_code, 0) << run.output << server_->LogTail();
    EXPECT_EQ(run.Number("preloaded"), 1000) << workload;
    EXPECT_EQ(run.Number("ops"), 2000) << workload;
    EXPECT_EQ(run.Number("errors"), 0) << workload;
    EXPECT_EQ(run.Number("misses"), 0) << workload;
  }
  EXPECT_EQ(CountAndRevision().first, 1000);
}

// Compare-and-set: each successful txn is exactly one write, each lost race
// none.
TEST_F(KvBenchLedgerkvTest, TxnWritesOncePerSuccessfulCompare) {
  const int64_t before = CountAndRevision().second;
  BenchRun run = RunBench(Args("txn"));
  ASSERT_EQ(run.exit_code, 0) << run.output << server_->LogTail();
  EXPECT_EQ(run.Number("ops"), 2000);
  EXPECT_EQ(run.Number("errors"), 0);
  const int64_t successful = 2000 - static_cast<int64_t>(run.Number("cas_failed"));
  EXPECT_GT(successful, 1000);
  EXPECT_EQ(CountAndRevision().second - before, 1000 + successful);  // preload + CAS writes
}

TEST_F(KvBenchLedgerkvTest, ScanReturnsFullPages) {
  BenchRun run = RunBench(Args("scan"));
  ASSERT_EQ(run.exit_code, 0) << run.output << server_->LogTail();
  EXPECT_EQ(run.Number("errors"), 0);
  EXPECT_EQ(run.Number("scanned_keys"), 2000 * kScanLimit);
}

}  // namespace
}  // namespace ledgerkv::bench
