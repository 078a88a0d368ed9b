// KvClient against a real `ledgerkv standalone` process: the API round
// trip, continuation following, the routing cache, and the retry rules
// (reads ride through a restart; a write is never applied twice).
#include "client/kv_client.h"

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/client_test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ledgerkv::client {
namespace {

using ::testing::HasSubstr;

TEST(KvClientOptionsTest, CreateRefusesBadOptions) {
  EXPECT_EQ(KvClient::Create({}).status().code(), absl::StatusCode::kInvalidArgument);
  ClientOptions o;
  o.endpoint = "127.0.0.1:1";
  o.max_attempts = 0;
  EXPECT_EQ(KvClient::Create(o).status().code(), absl::StatusCode::kInvalidArgument);
  o.max_attempts = 1;
  o.default_deadline = absl::ZeroDuration();
  EXPECT_EQ(KvClient::Create(o).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(KvClientOptionsTest, EndpointListParsesIntoSeeds) {
  for (const char* bad : {",", "a:1,", ",a:1", "a:1,,b:2", "a:1, ,b:2", " "}) {
    ClientOptions o;
    o.endpoint = bad;
    auto c = KvClient::Create(o);
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument) << "\"" << bad << "\"";
    if (!c.ok()) {
      EXPECT_THAT(c.status().message(), HasSubstr("empty server")) << bad;
    }
  }
  ClientOptions o;
  o.endpoint = "a:1, b:2 ,c:3";
  auto c = KvClient::Create(o);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_THAT((*c)->seeds(), ::testing::ElementsAre("a:1", "b:2", "c:3"));
  EXPECT_EQ((*c)->endpoint(), "a:1, b:2 ,c:3");  // as given
  EXPECT_EQ((*c)->current_seed(), "a:1");
  o.endpoint = "h:7070";
  c = KvClient::Create(o);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_THAT((*c)->seeds(), ::testing::ElementsAre("h:7070"));
}

// Several seeds, none listening: a call tries each (the attempt budget
// grows to seeds + 2 over max_attempts = 1), round robin, then fails
// UNAVAILABLE marked retry-safe since nothing was sent.
TEST(KvClientRetryTest, AllSeedsDeadTriesEachThenFails) {
  ClientOptions o;
  o.endpoint = absl::StrCat("127.0.0.1:", testing::FreePort(), ",127.0.0.1:", testing::FreePort(),
                            ",127.0.0.1:", testing::FreePort());
  o.max_attempts = 1;
  o.backoff.initial = absl::Milliseconds(5);
  auto client = KvClient::Create(o);
  ASSERT_TRUE(client.ok());
  const std::string first = (*client)->current_seed();
  v1::PutRequest put;
  put.set_table("t");
  put.set_key("k");
  auto r = (*client)->Put(put);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(IsRetrySafe(r.status())) << r.status();
  EXPECT_THAT(r.status().message(), HasSubstr("not sent"));
  EXPECT_EQ((*client)->retries(), 4);  // 5 attempts: 3 seeds + 2
  // 5 failures moved the seed 5 times around 3 seeds.
  EXPECT_EQ((*client)->current_seed(), (*client)->seeds()[5 % 3]);
  EXPECT_NE((*client)->current_seed(), first);
}

// No server at the endpoint: nothing can be sent (the channel never
// connects), so both reads and writes are retried up to max_attempts, and
// the error says that the call had no effect.
TEST(KvClientRetryTest, NoServerRetriesReadsAndWritesNothingSent) {
  ClientOptions o;
  o.endpoint = absl::StrCat("127.0.0.1:", testing::FreePort());
  o.max_attempts = 3;
  o.backoff.initial = absl::Milliseconds(10);
  auto client = KvClient::Create(o);
  ASSERT_TRUE(client.ok());
  v1::GetRequest get;
  get.set_table("t");
  get.set_key("k");
  EXPECT_EQ((*client)->Get(get).status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ((*client)->retries(), 2);

  v1::IncrementRequest incr;
  incr.set_table("t");
  incr.set_key("k");
  incr.set_delta(1);
  auto r = (*client)->Increment(incr);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(IsRetrySafe(r.status())) << r.status();
  EXPECT_EQ((*client)->retries(), 4);
  v1::PutRequest put;
  put.set_table("t");
  put.set_key("k");
  EXPECT_EQ((*client)->Put(put).status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ((*client)->retries(), 6);
  // (A write whose UNAVAILABLE came from a server without the retry-safe
  // mark is not resent: kv_client_routing_test.cc.)
}

// A caller that passes its time left, already run out, gets
// DEADLINE_EXCEEDED at once with nothing sent, not a call that runs on for
// the client's 10 s default deadline.
TEST(KvClientRetryTest, ANegativeDeadlineFailsAtOnceAndSendsNothing) {
  ClientOptions o;
  o.endpoint = absl::StrCat("127.0.0.1:", testing::FreePort());
  o.max_attempts = 1000;
  o.backoff.initial = absl::Milliseconds(10);
  auto client = KvClient::Create(o);
  ASSERT_TRUE(client.ok());
  const CallOptions late{.deadline = -absl::Milliseconds(1)};
  v1::GetRequest get;
  get.set_table("t");
  get.set_key("k");
  const absl::Time start = absl::Now();
  EXPECT_EQ((*client)->Get(get, late).status().code(), absl::StatusCode::kDeadlineExceeded);
  v1::RangeRequest scan;
  scan.set_table("t");
  scan.set_reverse(true);
  EXPECT_EQ((*client)->Range(scan, late).status().code(), absl::StatusCode::kDeadlineExceeded);
  v1::IncrementRequest incr;
  incr.set_table("t");
  incr.set_key("k");
  EXPECT_EQ((*client)->Increment(incr, late).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_LT(absl::Now() - start, absl::Seconds(1));
  EXPECT_EQ((*client)->retries(), 0);
}

class KvClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto s = StandaloneServer::Start();
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = std::move(*s);
  }
  void TearDown() override {
    if (HasFailure() && server_ != nullptr) {
      std::cerr << "server log tail:\n" << server_->process().LogTail() << "\n";
    }
  }

  std::unique_ptr<KvClient> NewClient(ClientOptions o = {}) {
    o.endpoint = server_->address();
    auto c = KvClient::Create(o);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? std::move(*c) : nullptr;
  }

  void CreateTable(KvClient& c, const std::string& name, std::vector<std::string> splits) {
    v1::CreateTableRequest req;
    req.set_name(name);
    for (auto& s : splits) req.add_split_keys(s);
    auto r = c.CreateTable(req);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(r->ranges_size(), static_cast<int>(splits.size()) + 1);
  }

  std::unique_ptr<StandaloneServer> server_;
};

TEST_F(KvClientTest, RoundTripAndScanAllFollowsContinuationAcrossRanges) {
  auto c = NewClient();
  CreateTable(*c, "scan", {"k10", "k20"});
  for (int i = 0; i < 30; ++i) {
    v1::PutRequest put;
    put.set_table("scan");
    put.set_key(absl::StrFormat("k%02d", i));
    put.set_value(absl::StrCat("v", i));
    ASSERT_TRUE(c->Put(put).ok());
  }
  v1::GetRequest get;
  get.set_table("scan");
  get.set_key("k17");
  auto got = c->Get(get);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(got->found());
  EXPECT_EQ(got->kv().value(), "v17");
  EXPECT_EQ(got->kv().version(), 1);

  v1::RangeRequest scan;
  scan.set_table("scan");
  auto all = c->ScanAll(scan);
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(all->size(), 30u);
  for (int i = 0; i < 30; ++i) EXPECT_EQ((*all)[i].key(), absl::StrFormat("k%02d", i));

  // A limit that ends inside the second range, starting in the first.
  scan.set_start("k05");
  scan.set_limit(12);
  auto some = c->ScanAll(scan);
  ASSERT_TRUE(some.ok()) << some.status();
  ASSERT_EQ(some->size(), 12u);
  EXPECT_EQ(some->front().key(), "k05");
  EXPECT_EQ(some->back().key(), "k16");

  v1::RangeRequest none;
  none.set_table("no_such_table");
  auto missing = c->ScanAll(none);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("no_such_table"));
}

// A write whose answer is large (an increment in a Txn with 20 gets of
// 1 MiB values: ~20 MiB) is answered, not refused by the client's receive
// limit after the server applied it: RESOURCE_EXHAUSTED means "refused, not
// applied" to callers (ledgerkvctl exits 1), so a retry would increment
// twice.
TEST_F(KvClientTest, AWriteWithAnAnswerLargerThanAScanPageIsAnsweredNotRefused) {
  auto c = NewClient();
  ASSERT_NE(c, nullptr);
  const std::string big(1 << 20, 'x');
  v1::TxnRequest txn;
  txn.set_table("default");
  v1::IncrementRequest* incr = txn.add_success()->mutable_increment();
  incr->set_key("counter");
  incr->set_delta(1);
  for (int i = 0; i < 20; ++i) {
    v1::PutRequest put;
    put.set_table("default");
    put.set_key(absl::StrCat("big", i));
    put.set_value(big);
    ASSERT_TRUE(c->Put(put).ok()) << i;
    txn.add_success()->mutable_get()->set_key(put.key());
  }
  auto r = c->Txn(txn);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_GT(r->ByteSizeLong(), size_t{16} << 20);
  ASSERT_EQ(r->results_size(), 21);
  EXPECT_EQ(r->results(0).increment().value(), 1);
  EXPECT_EQ(r->results(20).get().kv().value().size(), big.size());
}

TEST_F(KvClientTest, DescribeTableFillsRangeMap) {
  auto c = NewClient();
  CreateTable(*c, "routes", {"m"});
  v1::DescribeTableRequest d;
  d.set_name("routes");
  auto described = c->DescribeTable(d);
  ASSERT_TRUE(described.ok()) << described.status();
  auto routes = c->range_map().Routes("routes");
  ASSERT_EQ(routes.size(), 2u);
  EXPECT_EQ(routes[0].start, "");
  EXPECT_EQ(routes[0].end, "m");
  EXPECT_EQ(routes[1].start, "m");
  EXPECT_EQ(routes[1].range_id, described->ranges(1).range_id());
  // Requests still work when routed by the map (owner may be the server
  // itself or unknown).
  v1::PutRequest put;
  put.set_table("routes");
  put.set_key("z");
  put.set_value("1");
  EXPECT_TRUE(c->Put(put).ok());
  v1::DropTableRequest drop;
  drop.set_name("routes");
  ASSERT_TRUE(c->DropTable(drop).ok());
  EXPECT_TRUE(c->range_map().Routes("routes").empty());
}

TEST_F(KvClientTest, ReadRidesThroughServerRestart) {
  ClientOptions o;
  o.max_attempts = 200;
  o.backoff.max = absl::Milliseconds(100);
  o.default_deadline = absl::Seconds(60);
  auto c = NewClient(o);
  CreateTable(*c, "restart_read", {});
  v1::PutRequest put;
  put.set_table("restart_read");
  put.set_key("k");
  put.set_value("before");
  ASSERT_TRUE(c->Put(put).ok());

  ASSERT_EQ(server_->Terminate(), 0);
  absl::StatusOr<v1::GetResponse> got;
  std::thread reader([&] {
    v1::GetRequest get;
    get.set_table("restart_read");
    get.set_key("k");
    got = c->Get(get);
  });
  absl::SleepFor(absl::Milliseconds(200));
  ASSERT_TRUE(server_->Restart().ok());
  reader.join();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->kv().value(), "before");
  EXPECT_GT(c->retries(), 0);
}

// An Increment is not idempotent: whatever the retries do around a server
// stop (SIGTERM, then kill -9), every increment is applied at most once, and
// every acknowledged one exactly once: final == acked + k, 0 <= k <= failed.
TEST_F(KvClientTest, IncrementUnderRestartAppliesAtMostOnce) {
  ClientOptions o;
  o.default_deadline = absl::Seconds(3);
  o.backoff.initial = absl::Milliseconds(20);
  auto c = NewClient(o);
  CreateTable(*c, "counter", {});

  std::atomic<bool> stop{false};
  int64_t acked = 0, failed = 0, last_value = 0;
  bool monotonic = true;
  std::thread writer([&] {
    v1::IncrementRequest incr;
    incr.set_table("counter");
    incr.set_key("n");
    incr.set_delta(1);
    for (int i = 0; i < 100000 && !stop.load(); ++i) {
      auto r = c->Increment(incr);
      if (r.ok()) {
        ++acked;
        monotonic = monotonic && r->value() > last_value;
        last_value = r->value();
      } else {
        ++failed;
        absl::SleepFor(absl::Milliseconds(10));
      }
    }
  });
  for (int round = 0; round < 2; ++round) {
    absl::SleepFor(absl::Milliseconds(400));
    if (round == 0) {
      server_->Terminate();
    } else {
      server_->Kill();
    }
    absl::SleepFor(absl::Milliseconds(100));
    ASSERT_TRUE(server_->Restart().ok());
  }
  absl::SleepFor(absl::Milliseconds(400));
  stop = true;
  writer.join();

  v1::GetRequest get;
  get.set_table("counter");
  get.set_key("n");
  auto final_value = c->Get(get);
  ASSERT_TRUE(final_value.ok()) << final_value.status();
  int64_t final_count = 0;
  ASSERT_TRUE(absl::SimpleAtoi(final_value->kv().value(), &final_count));
  EXPECT_TRUE(monotonic);
  EXPECT_GT(acked, 0);
  EXPECT_GE(final_count, acked) << "an acknowledged increment was lost";
  EXPECT_LE(final_count, acked + failed) << "an increment was applied twice";
  EXPECT_GE(final_count, last_value);
  std::cerr << "acked=" << acked << " failed=" << failed << " final=" << final_count
            << " retries=" << c->retries() << "\n";
}

// wait_for_ready: a write issued while the server is down (kill -9) waits
// for it instead of failing, and is applied exactly once. The writer's
// channel is new: on a connection that died unnoticed the request could be
// sent into the dead socket (UNAVAILABLE, outcome unknown; README).
TEST_F(KvClientTest, WaitForReadyWriteWaitsForRestartAndAppliesOnce) {
  auto setup = NewClient();
  CreateTable(*setup, "wfr", {});
  v1::IncrementRequest incr;
  incr.set_table("wfr");
  incr.set_key("n");
  incr.set_delta(5);
  ASSERT_TRUE(setup->Increment(incr).ok());

  server_->Kill();
  ClientOptions o;
  o.wait_for_ready = true;
  o.default_deadline = absl::Seconds(60);
  auto c = NewClient(o);
  absl::StatusOr<v1::IncrementResponse> r;
  std::thread writer([&] { r = c->Increment(incr); });
  absl::SleepFor(absl::Milliseconds(300));
  ASSERT_TRUE(server_->Restart().ok());
  writer.join();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->value(), 10);
}

}  // namespace
}  // namespace ledgerkv::client
