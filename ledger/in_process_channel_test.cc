// The ledger client reaching a bookie of its own process through gRPC's
// in-process transport (ClientOptions::local_channel) and, for adds, by a
// direct call into the bookie (ClientOptions::local_add), as `ledgerkv
// standalone` does: neither goes over TCP, and durability is unchanged - an
// add is acknowledged only after the bookie's fdatasync succeeded
// (ARCHITECTURE.md 4; docs/performance.md).
#include <atomic>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/fault_env.h"
#include "base/file.h"
#include "grpcpp/channel.h"
#include "grpcpp/support/channel_arguments.h"
#include "grpcpp/support/status.h"
#include "gtest/gtest.h"
#include "ledger/bookie/bookie_server.h"
#include "ledger/ledger_client.h"
#include "ledger/ledger_test_util.h"
#include "metadata/embedded_store.h"
#include "proto/bookie.pb.h"

namespace ledgerkv::ledger {
namespace {

using testing::PayloadFor;
using testing::Quorums;
using testing::TempDir;

// One bookie writing through a fault-injecting Env, and a client that talks
// to it in-process.
struct InProcessSetup {
  explicit InProcessSetup(bool sync, bool direct_add = false,
                          absl::Duration explicit_lac_delay = ClientOptions{}.explicit_lac_delay)
      : env(Env::Default()) {
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
    co.explicit_lac_delay = explicit_lac_delay;
    co.local_channel = [this](const std::string& address,
                              const grpc::ChannelArguments& args) -> LocalChannel {
      if (address != server->address()) return {};
      in_process_channels.fetch_add(1);
      return {server->InProcessChannel(args), server->InProcessCallGate()};
    };
    if (direct_add) {
      co.local_add = [this](const std::string& address) -> LocalAddFn {
        if (address != server->address()) return nullptr;
        bookie::LocalAddFunction add = server->LocalAdd();
        return [this, add](const bookie::v1::AddRequest& request, bookie::v1::AddResponse* response,
                           std::function<void(const grpc::Status&)> done) {
          direct_adds.fetch_add(1);
          add(request, response, std::move(done));
        };
      };
    }
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
  std::atomic<int> direct_adds{0};
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

// The same guarantee on the direct add path: the ack comes from the
// storage's journal thread after its fdatasync, with no gRPC in between.
TEST(InProcessChannelTest, DirectAddsAreAckedOnlyAfterAnFdatasyncAndNeverAfterAFailedOne) {
  InProcessSetup s(/*sync=*/true, /*direct_add=*/true);
  ASSERT_NE(s.client, nullptr);
  LKV_ASSIGN_OR_FAIL(auto writer, s.client->CreateLedger(Quorums(1, 1, 1)));
  for (int i = 0; i < 20; ++i) {
    const int64_t syncs_before = s.env.sync_count();
    const int adds_before = s.direct_adds.load();
    auto id = writer->Append(PayloadFor(i));
    ASSERT_TRUE(id.ok()) << id.status();
    EXPECT_EQ(*id, i);
    EXPECT_GT(s.direct_adds.load(), adds_before) << "entry " << i << " did not take the direct path";
    EXPECT_GT(s.env.sync_count(), syncs_before) << "entry " << i << " acked without fdatasync";
  }
  // What was acknowledged reads back (through the channel).
  LKV_ASSERT_OK(writer->Close());
  LKV_ASSIGN_OR_FAIL(auto reader, s.client->OpenLedger(writer->id(), OpenMode::kNoRecovery));
  LKV_ASSIGN_OR_FAIL(auto entries, reader->Read(0, 19));
  ASSERT_EQ(entries.size(), 20u);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(entries[i].payload, PayloadFor(i));

  // The disk stops syncing: the add must fail, never be acknowledged.
  LKV_ASSIGN_OR_FAIL(auto second, s.client->CreateLedger(Quorums(1, 1, 1)));
  s.env.FailAllSyncs(true);
  auto failed = second->Append(PayloadFor(0));
  EXPECT_FALSE(failed.ok()) << "entry acknowledged although its fdatasync failed";
}

// A bookie that shut down answers direct adds UNAVAILABLE instead of
// touching its closed storage; the writer fails, never acks.
TEST(InProcessChannelTest, DirectAddToAShutDownBookieFailsTheAdd) {
  InProcessSetup s(/*sync=*/true, /*direct_add=*/true);
  ASSERT_NE(s.client, nullptr);
  LKV_ASSIGN_OR_FAIL(auto writer, s.client->CreateLedger(Quorums(1, 1, 1)));
  LKV_ASSERT_OK(writer->Append(PayloadFor(0)).status());
  s.server->Shutdown();
  auto after = writer->Append(PayloadFor(1));
  EXPECT_FALSE(after.ok()) << "acknowledged by a bookie that shut down";

  // A function taken after Shutdown (a client reconnecting) stays closed.
  bookie::LocalAddFunction late = s.server->LocalAdd();
  bookie::v1::AddRequest request;
  bookie::v1::AddResponse response;
  grpc::Status status;
  late(request, &response, [&](const grpc::Status& s) { status = s; });
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE) << status.error_message();
}

// gRPC's in-process transport hands a starting call to the server's side of
// the channel, which the server's shutdown leaves closed: a call started
// after that crashed the process (seen in CI: a writer's explicit LAC write,
// due while its bookie was shutting down). Every call through the channel of
// a bookie that shut down - reads, the writer's LAC writes and adds - fails
// UNAVAILABLE instead, never acknowledged and never a crash.
TEST(InProcessChannelTest, CallsThroughTheChannelOfAShutDownBookieFailUnavailable) {
  // The idle writer's explicit LAC write falls due well after Shutdown.
  constexpr absl::Duration kLacDelay = absl::Seconds(1);
  InProcessSetup s(/*sync=*/true, /*direct_add=*/false, kLacDelay);
  ASSERT_NE(s.client, nullptr);
  LKV_ASSIGN_OR_FAIL(auto closed, s.client->CreateLedger(Quorums(1, 1, 1)));
  LKV_ASSERT_OK(closed->Append(PayloadFor(0)).status());
  LKV_ASSERT_OK(closed->Close());
  LKV_ASSIGN_OR_FAIL(auto reader, s.client->OpenLedger(closed->id(), OpenMode::kNoRecovery));
  LKV_ASSIGN_OR_FAIL(auto writer, s.client->CreateLedger(Quorums(1, 1, 1)));
  LKV_ASSERT_OK(writer->Append(PayloadFor(0)).status());
  const absl::Time appended = absl::Now();
  s.server->Shutdown();
  // (On a machine so slow that it was due already, only the rest is checked.)
  const bool lac_due_after_shutdown = absl::Now() - appended < kLacDelay / 2;
  const int64_t lac_writes_before = writer->stats().lac_writes;

  auto read = reader->Read(0, 0);
  ASSERT_FALSE(read.ok()) << "read from a bookie that shut down";
  EXPECT_TRUE(absl::IsUnavailable(read.status())) << read.status();

  // The idle writer's explicit LAC write goes out through the closed
  // channel and fails quietly.
  absl::SleepFor(kLacDelay + absl::Milliseconds(500));
  if (lac_due_after_shutdown) {
    EXPECT_GT(writer->stats().lac_writes, lac_writes_before) << "no LAC write was attempted";
  }

  auto after = writer->Append(PayloadFor(1));
  EXPECT_FALSE(after.ok()) << "acknowledged by a bookie that shut down";
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

// And for the direct add path: a relaxed bookie acks through it while every
// sync fails, so the sync checks of the direct test above can fail.
TEST(InProcessChannelTest, RelaxedBookieAcksWithoutSyncThroughTheDirectPath) {
  InProcessSetup s(/*sync=*/false, /*direct_add=*/true);
  ASSERT_NE(s.client, nullptr);
  LKV_ASSIGN_OR_FAIL(auto writer, s.client->CreateLedger(Quorums(1, 1, 1)));
  s.env.FailAllSyncs(true);
  auto id = writer->Append(PayloadFor(0));
  EXPECT_TRUE(id.ok()) << id.status();
  EXPECT_GT(s.direct_adds.load(), 0);
}

}  // namespace
}  // namespace ledgerkv::ledger
