// The real `ledgerkv standalone` process: its ready line, kill -9 losing no
// acknowledged write, the data-dir lock against a second process, and a
// clean exit on SIGTERM.
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/kv.grpc.pb.h"
#include "tests/process_util.h"

namespace ledgerkv::kv {
namespace {

namespace v1 = ::ledgerkv::v1;
using ::ledgerkv::testing::BinaryPath;
using ::ledgerkv::testing::Process;
using ::ledgerkv::testing::TempDir;

constexpr char kReady[] = "ledgerkv standalone serving on ";

std::vector<std::string> Argv(const std::string& data_dir) {
  return {BinaryPath("kv_server/ledgerkv"), "standalone", "--data-dir", data_dir, "--listen",
          "127.0.0.1:0"};
}

// The address in the ready line, which must be exactly the marker + host:port.
std::string AddressOf(const Process& p) {
  const std::string& line = p.ready_line();
  EXPECT_EQ(line.rfind(kReady, 0), 0u) << line;
  std::string address = line.substr(std::string(kReady).size());
  EXPECT_EQ(address.rfind("127.0.0.1:", 0), 0u) << line;
  EXPECT_EQ(address.find(' '), std::string::npos) << line;
  return address;
}

std::unique_ptr<v1::KV::Stub> Connect(const std::string& address) {
  return v1::KV::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
}

void SetDeadline(grpc::ClientContext* ctx) {
  ctx->set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(20)));
}

TEST(StandaloneBinary, AcknowledgedWritesSurviveKill9AndSigtermExitsCleanly) {
  TempDir dir;
  const std::string data = dir.path() + "/data";
  auto first = Process::Start(Argv(data), kReady);
  ASSERT_TRUE(first.ok()) << first.status();
  auto kv = Connect(AddressOf(**first));
  constexpr int kKeys = 40;
  for (int i = 0; i < kKeys; ++i) {
    v1::PutRequest req;
    req.set_table("default");
    req.set_key(absl::StrCat("key", i));
    req.set_value(absl::StrCat("value", i));
    v1::PutResponse resp;
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    grpc::Status s = kv->Put(&ctx, req, &resp);
    ASSERT_TRUE(s.ok()) << s.error_message() << "\n" << (*first)->LogTail();
  }
  (*first)->Kill();

  auto second = Process::Start(Argv(data), kReady);
  ASSERT_TRUE(second.ok()) << second.status();
  kv = Connect(AddressOf(**second));
  for (int i = 0; i < kKeys; ++i) {
    v1::GetRequest req;
    req.set_table("default");
    req.set_key(absl::StrCat("key", i));
    v1::GetResponse resp;
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    grpc::Status s = kv->Get(&ctx, req, &resp);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_TRUE(resp.found()) << req.key();
    EXPECT_EQ(resp.kv().value(), absl::StrCat("value", i));
  }

  // A second process on the same data dir refuses to start.
  auto intruder = Process::Start(Argv(data), kReady, absl::Seconds(20));
  ASSERT_FALSE(intruder.ok());
  EXPECT_NE(intruder.status().message().find("is in use by another ledgerkv process"),
            std::string::npos)
      << intruder.status();

  EXPECT_EQ((*second)->Terminate(absl::Seconds(20)), 0) << (*second)->LogTail();
}

}  // namespace
}  // namespace ledgerkv::kv
