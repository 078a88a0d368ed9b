// The routing seam and the retry convention, with a stand-in for a server
// that does not own a range (it injects the routing answers of
// docs/cluster.md "Requests" without a cluster): it answers UNAVAILABLE with
// the trailing metadata of docs/kv-api.md and counts what it received.
// Reads and retry-safe writes follow the owner to a real `ledgerkv
// standalone`; a write without the retry-safe mark is never sent twice;
// dead seeds are skipped and dead owners forgotten.
#include <atomic>
#include <memory>
#include <string>

#include "absl/synchronization/mutex.h"
#include "client/client_test_util.h"
#include "client/kv_client.h"
#include "grpcpp/server.h"
#include "grpcpp/server_builder.h"
#include "gtest/gtest.h"
#include "proto/kv.grpc.pb.h"

namespace ledgerkv::client {
namespace {

// Answers every Get/Put/Increment with UNAVAILABLE naming `owner` (no
// owner trailer while the owner is ""); Get and Put are marked retry-safe
// (never reached a log), Increment is not (its outcome would be unknown).
class MovedService final : public v1::KV::CallbackService {
 public:
  explicit MovedService(std::string owner) : owner_(std::move(owner)) {}
  std::atomic<int> gets{0}, puts{0}, increments{0};

  void set_owner(std::string owner) {
    absl::MutexLock l(&mu_);
    owner_ = std::move(owner);
  }

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
    std::string owner;
    {
      absl::MutexLock l(&mu_);
      owner = owner_;
    }
    if (!owner.empty()) ctx->AddTrailingMetadata(kOwnerMetadata, owner);
    if (retry_safe) ctx->AddTrailingMetadata(kRetrySafeMetadata, "1");
    auto* reactor = ctx->DefaultReactor();
    reactor->Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "range moved"));
    return reactor;
  }
  absl::Mutex mu_;
  std::string owner_ ABSL_GUARDED_BY(mu_);
};

// An owner that serves every Get with one fixed value (a stand-in for an
// owner that later dies: shutting a real process down would be slower and
// prove nothing more about the client).
class FixedValueService final : public v1::KV::CallbackService {
 public:
  explicit FixedValueService(std::string value) : value_(std::move(value)) {}
  std::atomic<int> gets{0};

  grpc::ServerUnaryReactor* Get(grpc::CallbackServerContext* ctx, const v1::GetRequest* request,
                                v1::GetResponse* response) override {
    ++gets;
    response->set_found(true);
    response->mutable_kv()->set_key(request->key());
    response->mutable_kv()->set_value(value_);
    auto* reactor = ctx->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

 private:
  const std::string value_;
};

// Starts `service` on a free loopback port; sets `address`.
std::unique_ptr<grpc::Server> Serve(grpc::Service* service, std::string* address) {
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(service);
  auto server = builder.BuildAndStart();
  *address = absl::StrCat("127.0.0.1:", port);
  return server;
}

class KvClientRoutingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto s = StandaloneServer::Start();
    ASSERT_TRUE(s.ok()) << s.status();
    owner_ = std::move(*s);
    moved_ = std::make_unique<MovedService>(owner_->address());
    old_owner_ = Serve(moved_.get(), &old_address_);
    ASSERT_NE(old_owner_, nullptr);

    client_ = NewClient(old_address_);  // the seed no longer owns anything
    ASSERT_NE(client_, nullptr);

    // The table lives on the real server (created there directly).
    direct_ = NewClient(owner_->address());
    ASSERT_NE(direct_, nullptr);
    v1::CreateTableRequest create;
    create.set_name("moved");
    ASSERT_TRUE(direct_->CreateTable(create).ok());
  }

  static std::unique_ptr<KvClient> NewClient(const std::string& endpoint) {
    ClientOptions o;
    o.endpoint = endpoint;
    o.backoff.initial = absl::Milliseconds(10);
    auto c = KvClient::Create(o);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? std::move(*c) : nullptr;
  }
  void TearDown() override {
    if (old_owner_ != nullptr) old_owner_->Shutdown();
  }

  std::unique_ptr<StandaloneServer> owner_;
  std::unique_ptr<MovedService> moved_;
  std::unique_ptr<grpc::Server> old_owner_;
  std::string old_address_;
  std::unique_ptr<KvClient> client_;  // seed: the stand-in
  std::unique_ptr<KvClient> direct_;  // seed: the real server
};

v1::GetRequest GetOf(const std::string& key) {
  v1::GetRequest get;
  get.set_table("moved");
  get.set_key(key);
  return get;
}

v1::PutRequest PutOf(const std::string& key, const std::string& value) {
  v1::PutRequest put;
  put.set_table("moved");
  put.set_key(key);
  put.set_value(value);
  return put;
}

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

// A cached layout that a redirect contradicts is learned again: here the
// client holds a stale one (a range id the table no longer has, owned by the
// stand-in, as after the table was dropped and created again). The
// redirect to the real owner makes the call fetch the table's layout, so
// the next requests go straight to the owners of the current ranges.
TEST_F(KvClientRoutingTest, ARedirectRefreshesAStaleLayout) {
  google::protobuf::RepeatedPtrField<v1::RangeInfo> stale;
  v1::RangeInfo* r = stale.Add();
  r->set_range_id(999999);
  r->set_owner(old_address_);
  client_->range_map().Update("moved", stale);
  ASSERT_TRUE(client_->range_map().HasLayout("moved"));

  auto put = client_->Put(PutOf("k", "v"));
  ASSERT_TRUE(put.ok()) << put.status();
  EXPECT_EQ(moved_->puts.load(), 1);
  const std::vector<RangeRoute> routes = client_->range_map().Routes("moved");
  ASSERT_EQ(routes.size(), 1u);
  EXPECT_NE(routes[0].range_id, 999999u) << "the stale layout was kept";
  EXPECT_EQ(routes[0].owner, owner_->address());
  auto got = client_->Get(GetOf("z"));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(moved_->gets.load(), 0);
}

// A call that finds its table gone (dropped by another client) forgets the
// table's layout: a table created again under the name is learned afresh.
TEST_F(KvClientRoutingTest, ATableFoundGoneIsForgotten) {
  ASSERT_TRUE(direct_->Put(PutOf("k", "v")).ok());
  v1::DescribeTableRequest describe;
  describe.set_name("moved");
  ASSERT_TRUE(direct_->DescribeTable(describe).ok());
  ASSERT_TRUE(direct_->range_map().HasLayout("moved"));
  auto other = NewClient(owner_->address());
  ASSERT_NE(other, nullptr);
  v1::DropTableRequest drop;
  drop.set_name("moved");
  ASSERT_TRUE(other->DropTable(drop).ok());
  EXPECT_EQ(direct_->Get(GetOf("k")).status().code(), absl::StatusCode::kNotFound);
  EXPECT_FALSE(direct_->range_map().HasLayout("moved"));
}

TEST_F(KvClientRoutingTest, WriteWithoutRetrySafeMarkIsNotResent) {
  v1::IncrementRequest incr;
  incr.set_table("moved");
  incr.set_key("n");
  incr.set_delta(1);
  auto r = client_->Increment(incr);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(r.status().message(), "range moved");  // code and message as sent
  EXPECT_FALSE(IsRetrySafe(r.status()));          // its outcome is unknown
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

// Seeds: the first has no listener at all. Its attempt is never sent (no
// connection), so the write too moves on to the next seed, which stays
// current for later calls.
TEST_F(KvClientRoutingTest, DeadFirstSeedIsSkippedForReadsAndWrites) {
  const std::string dead = absl::StrCat("127.0.0.1:", testing::FreePort());
  auto c = NewClient(absl::StrCat(dead, ",", owner_->address()));
  ASSERT_NE(c, nullptr);
  ASSERT_EQ(c->seeds().size(), 2u);
  EXPECT_EQ(c->current_seed(), dead);
  auto put = c->Put(PutOf("a", "1"));
  ASSERT_TRUE(put.ok()) << put.status();
  EXPECT_EQ(c->retries(), 1);  // the dead seed, once
  EXPECT_EQ(c->current_seed(), owner_->address());
  auto got = c->Get(GetOf("a"));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->kv().value(), "1");
  EXPECT_EQ(got->kv().version(), 1);  // applied once
  EXPECT_EQ(c->retries(), 1);         // went straight to the live seed

  // A read on a fresh client takes the same path.
  auto reader = NewClient(absl::StrCat(dead, ",", owner_->address()));
  ASSERT_NE(reader, nullptr);
  auto again = reader->Get(GetOf("a"));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->kv().value(), "1");
  EXPECT_EQ(reader->retries(), 1);
}

// Seed -> owner A (serves) -> A dies -> the next read is not stuck on A:
// the client forgets it, asks the seed again and follows it to the new
// owner.
TEST_F(KvClientRoutingTest, DeadOwnerIsForgottenAndSeedNamesTheNewOwner) {
  FixedValueService a_service("from-a");
  std::string a_address;
  auto a = Serve(&a_service, &a_address);
  ASSERT_NE(a, nullptr);
  moved_->set_owner(a_address);
  ASSERT_TRUE(direct_->Put(PutOf("k", "from-new-owner")).ok());

  auto first = client_->Get(GetOf("k"));
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->kv().value(), "from-a");
  EXPECT_EQ(client_->range_map().OwnerOf("moved", "k"), a_address);
  EXPECT_EQ(moved_->gets.load(), 1);

  a->Shutdown();
  a.reset();
  moved_->set_owner(owner_->address());  // the range moved on
  auto second = client_->Get(GetOf("k"));
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->kv().value(), "from-new-owner");
  EXPECT_EQ(a_service.gets.load(), 1);
  EXPECT_EQ(moved_->gets.load(), 2);  // asked again after A failed
  EXPECT_EQ(client_->range_map().OwnerOf("moved", "k"), owner_->address());
}

// A cached owner with no listener: the write is not sent there, so it is
// retried through the seed (retry-safe redirect) and applied once.
TEST_F(KvClientRoutingTest, WriteToUnreachableOwnerIsRetriedBecauseNotSent) {
  client_->range_map().LearnOwner("moved", "w", absl::StrCat("127.0.0.1:", testing::FreePort()));
  auto put = client_->Put(PutOf("w", "v"));
  ASSERT_TRUE(put.ok()) << put.status();
  EXPECT_EQ(moved_->puts.load(), 1);
  EXPECT_EQ(client_->range_map().OwnerOf("moved", "w"), owner_->address());
  auto got = direct_->Get(GetOf("w"));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->kv().version(), 1);
}

// A live seed answering UNAVAILABLE without the retry-safe mark (and with
// no owner): the write is returned, not resent to the next seed, although
// the current seed moves on; a read in the same situation goes on to the
// next seed.
TEST_F(KvClientRoutingTest, UnmarkedUnavailableWriteIsNotResentToNextSeed) {
  moved_->set_owner("");
  auto c = NewClient(absl::StrCat(old_address_, ",", owner_->address()));
  ASSERT_NE(c, nullptr);
  v1::IncrementRequest incr;
  incr.set_table("moved");
  incr.set_key("n");
  incr.set_delta(1);
  auto r = c->Increment(incr);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable) << r.status();
  EXPECT_FALSE(IsRetrySafe(r.status()));
  EXPECT_EQ(moved_->increments.load(), 1);
  EXPECT_EQ(c->retries(), 0);
  EXPECT_EQ(c->current_seed(), owner_->address());
  auto applied = direct_->Get(GetOf("n"));
  ASSERT_TRUE(applied.ok()) << applied.status();
  EXPECT_FALSE(applied->found());  // not resent to the live seed

  auto reader = NewClient(absl::StrCat(old_address_, ",", owner_->address()));
  ASSERT_NE(reader, nullptr);
  auto got = reader->Get(GetOf("n"));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(moved_->gets.load(), 1);
  EXPECT_EQ(reader->retries(), 1);
}

}  // namespace
}  // namespace ledgerkv::client
