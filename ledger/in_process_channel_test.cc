// The ledger client reaching a bookie of its own process through gRPC's
// in-process transport (ClientOptions::local_channel, as `ledgerkv
// standalone` does): the channel is used instead of TCP, and durability is
// unchanged - an add is acknowledged only after the bookie's fdatasync
// succeeded (ARCHITECTURE.md 4; docs/performance.md).
#include <atomic>
#include <memory>
#include <string>

#include "base/fault_env.h"
#include "base/file.h"
#include "grpcpp/channel.h"
#include "grpcpp/support/channel_arguments.h"
#include "gtest/gtest.h"
#include "ledger/bookie/bookie_server.h"
#include "ledger/ledger_client.h"
#include "ledger/ledger_test_util.h"
#include "metadata/embedded_store.h"

namespace ledgerkv::ledger {
namespace {

using testing::PayloadFor;
using testing::Quorums;
using testing::TempDir;

// One bookie writing through a fault-injecting Env, and a client that talks
// to it in-process.
struct InProcessSetup {
  explicit InProcessSetup(bool sync) : env(Env::Default()) {
    auto opened = metadata::EmbeddedStore::Open(dir.path() + "/metadata");
    EXPECT_TRUE(opened.ok()) << opened.status();
    if (!opened.ok()) return;
    store = *std::move(opened);
    bookie::BookieOptions bo;
    bo.data_dir = dir.path() + "/bookie";
    bo.sync = sync;
    bo.env = &env;
    bo.metadata = store.get();
    auto started = bookie::BookieServer::Start(bo);
    EXPECT_TRUE(started.ok()) << started.status();
    if (!started.ok()) return;
    server = *std::move(started);
    ClientOptions co;
    co.metadata = store.get();
    co.rpc_timeout = absl::Seconds(2);
    co.metadata_retries = 1;
    co.local_channel = [this](const std::string& address, const grpc::ChannelArguments& args)
        -> std::shared_ptr<grpc::Channel> {
      if (address != server->address()) return nullptr;
      in_process_channels.fetch_add(1);
      return server->InProcessChannel(args);
    };
    auto created = LedgerClient::Create(co);
    EXPECT_TRUE(created.ok()) << created.status();
    if (created.ok()) client = *std::move(created);
  }
  ~InProcessSetup() {
    client.reset();
    server.reset();
  }

  TempDir dir;
  FaultInjectionEnv env;
  std::unique_ptr<metadata::EmbeddedStore> store;
  std::unique_ptr<bookie::BookieServer> server;
  std::atomic<int> in_process_channels{0};
  std::unique_ptr<LedgerClient> client;
};

TEST(InProcessChannelTest, EveryAckFollowsAnFdatasyncAndAFailedSyncIsNeverAcked) {
  InProcessSetup s(/*sync=*/true);
  ASSERT_NE(s.client, nullptr);
  LKV_ASSIGN_OR_FAIL(auto writer, s.client->CreateLedger(Quorums(1, 1, 1)));
  for (int i = 0; i < 20; ++i) {
    const int64_t syncs_before = s.env.sync_count();
    auto id = writer->Append(PayloadFor(i));
    ASSERT_TRUE(id.ok()) << id.status();
    EXPECT_EQ(*id, i);
    // One append at a time: its ack cannot come from an earlier sync.
    EXPECT_GT(s.env.sync_count(), syncs_before) << "entry " << i << " acked without fdatasync";
  }
  // The client used the in-process channel (once, cached), not TCP.
  EXPECT_EQ(s.in_process_channels.load(), 1);

  // The disk stops syncing: the add must fail, never be acknowledged.
  s.env.FailAllSyncs(true);
  auto failed = writer->Append(PayloadFor(20));
  EXPECT_FALSE(failed.ok()) << "entry acknowledged although its fdatasync failed";
}

// The control that shows the test above can fail: a bookie in relaxed mode
// (sync off) acknowledges through the same channel while every sync fails.
TEST(InProcessChannelTest, RelaxedBookieAcksWithoutSyncThroughTheSameChannel) {
  InProcessSetup s(/*sync=*/false);
  ASSERT_NE(s.client, nullptr);
  LKV_ASSIGN_OR_FAIL(auto writer, s.client->CreateLedger(Quorums(1, 1, 1)));
  s.env.FailAllSyncs(true);
  auto id = writer->Append(PayloadFor(0));
  EXPECT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(s.in_process_channels.load(), 1);
}

}  // namespace
}  // namespace ledgerkv::ledger
