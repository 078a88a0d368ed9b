// The routing seam and the retry convention, with a stand-in for a server
// that no longer owns a range (cluster mode is not built yet, so nothing
// real sends `ledgerkv-owner`): it answers UNAVAILABLE with the trailing
// metadata of docs/kv-api.md and counts what it received. Reads and
// retry-safe writes follow the owner to a real `ledgerkv standalone`; a
// write without the retry-safe mark is never sent twice.
#include <atomic>
#include <memory>
#include <string>

#include "client/client_test_util.h"
#include "client/kv_client.h"
#include "grpcpp/server.h"
#include "grpcpp/server_builder.h"
#include "gtest/gtest.h"
#include "proto/kv.grpc.pb.h"

namespace ledgerkv::client {
namespace {

// Answers every Get/Put/Increment with UNAVAILABLE naming `owner`; Put is
// marked retry-safe (never reached a log), Increment is not (its outcome
// would be unknown).
class MovedService final : public v1::KV::CallbackService {
 public:
  explicit MovedService(std::string owner) : owner_(std::move(owner)) {}
  std::atomic<int> gets{0}, puts{0}, increments{0};

  grpc::ServerUnaryReactor* Get(grpc::CallbackServerContext* ctx, const v1::GetRequest*,
                                v1::GetResponse*) override {
    ++gets;
    return Moved(ctx, /*retry_safe=*/true);
  }
  grpc::ServerUnaryReactor* Put(grpc::CallbackServerContext* ctx, const v1::PutRequest*,
                                v1::PutResponse*) override {
    ++puts;
    return Moved(ctx, /*retry_safe=*/true);
  }
  grpc::ServerUnaryReactor* Increment(grpc::CallbackServerContext* ctx,
                                      const v1::IncrementRequest*,
                                      v1::IncrementResponse*) override {
    ++increments;
    return Moved(ctx, /*retry_safe=*/false);
  }

 private:
  grpc::ServerUnaryReactor* Moved(grpc::CallbackServerContext* ctx, bool retry_safe) {
    ctx->AddTrailingMetadata(kOwnerMetadata, owner_);
    if (retry_safe) ctx->AddTrailingMetadata(kRetrySafeMetadata, "1");
    auto* reactor = ctx->DefaultReactor();
    reactor->Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "range moved"));
    return reactor;
  }
  const std::string owner_;
};

class KvClientRoutingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto s = StandaloneServer::Start();
    ASSERT_TRUE(s.ok()) << s.status();
    owner_ = std::move(*s);
    moved_ = std::make_unique<MovedService>(owner_->address());
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(moved_.get());
    old_owner_ = builder.BuildAndStart();
    ASSERT_NE(old_owner_, nullptr);
    old_address_ = absl::StrCat("127.0.0.1:", port);

    ClientOptions o;
    o.endpoint = old_address_;  // the seed no longer owns anything
    auto c = KvClient::Create(o);
    ASSERT_TRUE(c.ok());
    client_ = std::move(*c);

    // The table lives on the real server (created there directly).
    ClientOptions direct;
    direct.endpoint = owner_->address();
    auto admin = KvClient::Create(direct);
    ASSERT_TRUE(admin.ok());
    v1::CreateTableRequest create;
    create.set_name("moved");
    ASSERT_TRUE((*admin)->CreateTable(create).ok());
  }
  void TearDown() override {
    if (old_owner_ != nullptr) old_owner_->Shutdown();
  }

  std::unique_ptr<StandaloneServer> owner_;
  std::unique_ptr<MovedService> moved_;
  std::unique_ptr<grpc::Server> old_owner_;
  std::string old_address_;
  std::unique_ptr<KvClient> client_;
};

TEST_F(KvClientRoutingTest, RetrySafeWriteAndReadFollowOwnerOnce) {
  v1::PutRequest put;
  put.set_table("moved");
  put.set_key("k");
  put.set_value("v");
  auto put_result = client_->Put(put);
  ASSERT_TRUE(put_result.ok()) << put_result.status();
  EXPECT_EQ(moved_->puts.load(), 1);
  // The owner is remembered: the next request for the table goes there
  // directly, without asking the old owner again.
  EXPECT_EQ(client_->range_map().OwnerOf("moved", "k"), owner_->address());
  v1::GetRequest get;
  get.set_table("moved");
  get.set_key("k");
  auto got = client_->Get(get);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->kv().value(), "v");
  EXPECT_EQ(got->kv().version(), 1);  // applied once
  EXPECT_EQ(moved_->gets.load(), 0);
}

TEST_F(KvClientRoutingTest, WriteWithoutRetrySafeMarkIsNotResent) {
  v1::IncrementRequest incr;
  incr.set_table("moved");
  incr.set_key("n");
  incr.set_delta(1);
  auto r = client_->Increment(incr);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(r.status().message(), "range moved");  // code and message as sent
  EXPECT_EQ(moved_->increments.load(), 1);
  EXPECT_EQ(client_->retries(), 0);
  // The hint is still learned: the caller's own retry goes to the owner.
  auto again = client_->Increment(incr);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->value(), 1);
  EXPECT_EQ(moved_->increments.load(), 1);
}

TEST_F(KvClientRoutingTest, UnreachableCachedOwnerFallsBackToSeed) {
  // A cached owner that is down is forgotten; the read goes back to the seed,
  // which redirects to the live owner again.
  client_->range_map().LearnOwner("moved", "k", absl::StrCat("127.0.0.1:", testing::FreePort()));
  v1::GetRequest get;
  get.set_table("moved");
  get.set_key("k");
  auto got = client_->Get(get);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_FALSE(got->found());
  EXPECT_EQ(moved_->gets.load(), 1);
  EXPECT_EQ(client_->range_map().OwnerOf("moved", "k"), owner_->address());
}

}  // namespace
}  // namespace ledgerkv::client
