// The real `ledgerkv standalone` process: its ready line, kill -9 losing no
// acknowledged write, the data-dir lock against a second process, a clean
// exit on SIGTERM, and the start-up cleanup of orphan ledgers.
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "metadata/embedded_store.h"
#include "proto/metadata.pb.h"
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

// The start-up cleanup of orphan ledgers (docs/wal-format.md, "Orphan
// ledgers"): a ledger a crashed roll of a range's log left behind at the
// log's epoch goes once the restart's open has raised that epoch, and one
// whose log does not exist goes too; the range's own ledgers and data stay.
TEST(StandaloneBinary, ARestartDeletesOrphanLedgersAndKeepsTheData) {
  TempDir dir;
  const std::string data = dir.path() + "/data";
  {
    auto first = Process::Start(Argv(data), kReady);
    ASSERT_TRUE(first.ok()) << first.status();
    auto kv = Connect(AddressOf(**first));
    v1::PutRequest req;
    req.set_table("default");
    req.set_key("kept");
    req.set_value("yes");
    v1::PutResponse resp;
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    ASSERT_TRUE(kv->Put(&ctx, req, &resp).ok());
    ASSERT_EQ((*first)->Terminate(absl::Seconds(20)), 0) << (*first)->LogTail();
  }
  const metadata::Keys keys("default");
  auto orphan = [&](metadata::MetadataStore& store, uint64_t id, const std::string& log,
                    uint64_t epoch) {
    meta::v1::LedgerMetadata ledger;
    ledger.set_id(id);
    (*ledger.mutable_custom())["log"] = log;
    (*ledger.mutable_custom())["log_epoch"] = absl::StrCat(epoch);
    ASSERT_TRUE(store.Put(keys.Ledger(id), ledger.SerializeAsString(), metadata::kMustNotExist).ok());
  };
  {
    auto store = metadata::EmbeddedStore::Open(data + "/metadata");
    ASSERT_TRUE(store.ok()) << store.status();
    auto log = (*store)->Get(keys.Log("range-1"));
    ASSERT_TRUE(log.ok()) << log.status();
    meta::v1::LogMetadata parsed;
    ASSERT_TRUE(parsed.ParseFromString(log->value));
    orphan(**store, 900001, "range-1", parsed.epoch());
    orphan(**store, 900002, "range-424242", 1);
  }
  auto second = Process::Start(Argv(data), kReady);
  ASSERT_TRUE(second.ok()) << second.status();
  auto kv = Connect(AddressOf(**second));
  v1::GetRequest get;
  get.set_table("default");
  get.set_key("kept");
  v1::GetResponse got;
  grpc::ClientContext ctx;
  SetDeadline(&ctx);
  ASSERT_TRUE(kv->Get(&ctx, get, &got).ok());
  EXPECT_EQ(got.kv().value(), "yes");
  ASSERT_EQ((*second)->Terminate(absl::Seconds(20)), 0) << (*second)->LogTail();

  auto store = metadata::EmbeddedStore::Open(data + "/metadata");
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_TRUE(absl::IsNotFound((*store)->Get(keys.Ledger(900001)).status()));
  EXPECT_TRUE(absl::IsNotFound((*store)->Get(keys.Ledger(900002)).status()));
  auto log = (*store)->Get(keys.Log("range-1"));
  ASSERT_TRUE(log.ok()) << log.status();
  meta::v1::LogMetadata parsed;
  ASSERT_TRUE(parsed.ParseFromString(log->value));
  ASSERT_GT(parsed.segments_size(), 0);
  for (const auto& segment : parsed.segments()) {
    EXPECT_TRUE((*store)->Get(keys.Ledger(segment.ledger_id())).ok()) << segment.ledger_id();
  }
}

}  // namespace
}  // namespace ledgerkv::kv
