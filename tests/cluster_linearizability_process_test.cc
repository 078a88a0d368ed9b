// Linearizability under faults, with real processes (Debian's etcd, four
// `ledgerkv bookie`, two `ledgerkv server`): concurrent clients read, write
// and compare-and-set a handful of keys on two ranges (owned by different
// servers) through the client library, while the owner of one range is
// killed (-9) and restarted, the owner of the other is paused past its
// lease (SIGSTOP) and resumed, a bookie of a log's ensemble is killed (-9),
// and etcd is stopped for a lease and restarted. The recorded history
// (invocation and completion times, results; errors that leave the outcome
// open as unknown) must be linearizable per key (tests/linearizability.h).
#include <atomic>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/kv_client.h"
#include "gtest/gtest.h"
#include "tests/cluster_util.h"
#include "tests/linearizability.h"

namespace ledgerkv {
namespace {

namespace v1 = ::ledgerkv::v1;
using testing::ClusterFlags;
using testing::HistoryRecorder;
using testing::Outcome;
using testing::TestCluster;
using testing::Value;

constexpr int kLeaseTtlS = 3;
constexpr char kTable[] = "lin";
// Two keys on each side of the split "m": two ranges.
const char* const kKeys[] = {"k0", "k1", "n0", "n1"};

// Outcome of a write that returned `status`: kFailed only when the client
// library proves it had no effect.
Outcome WriteOutcome(const absl::Status& status) {
  if (status.ok()) return Outcome::kOk;
  if (client::IsRetrySafe(status)) return Outcome::kFailed;
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kFailedPrecondition:
      return Outcome::kFailed;  // refused before anything was applied
    default:
      return Outcome::kUnknown;
  }
}

void RunClient(int id, const std::string& endpoints, HistoryRecorder* history,
               std::atomic<bool>* stop, std::atomic<int>* ok_ops) {
  // Seeds rotated per client; like an application, a client that timed
  // out starts over with a fresh client from the next seed (a paused
  // server holds no connection hostage then).
  const std::vector<std::string> seeds = absl::StrSplit(endpoints, ',');
  int rotation = id;
  auto make_client = [&]() {
    client::ClientOptions o;
    std::vector<std::string> order;
    for (size_t i = 0; i < seeds.size(); ++i) order.push_back(seeds[(rotation + i) % seeds.size()]);
    ++rotation;
    o.endpoint = absl::StrJoin(order, ",");
    o.default_deadline = absl::Seconds(2);
    o.max_attempts = 10;
    return client::KvClient::Create(o);
  };
  auto c = make_client();
  ASSERT_TRUE(c.ok()) << c.status();
  auto restart_if_timed_out = [&](const absl::Status& s) {
    if (absl::IsDeadlineExceeded(s)) c = make_client();
  };
  std::mt19937 rng(1000 + id);
  int seq = 0;
  std::vector<Value> last_seen(std::size(kKeys));
  while (!stop->load()) {
    const size_t k = rng() % std::size(kKeys);
    const std::string key = kKeys[k];
    const int dice = static_cast<int>(rng() % 10);
    if (dice < 4) {
      v1::GetRequest get;
      get.set_table(kTable);
      get.set_key(key);
      const int64_t op = history->InvokeRead(id, key);
      auto got = (*c)->Get(get);
      if (got.ok()) {
        Value observed;
        if (got->found()) observed = got->kv().value();
        history->Complete(op, Outcome::kOk, observed);
        last_seen[k] = observed;
        ++*ok_ops;
      } else {
        history->Complete(op, Outcome::kUnknown);  // reads that fail are dropped
        restart_if_timed_out(got.status());
      }
    } else if (dice < 7) {
      const std::string value = absl::StrCat("c", id, "-", ++seq);
      v1::PutRequest put;
      put.set_table(kTable);
      put.set_key(key);
      put.set_value(value);
      const int64_t op = history->InvokeWrite(id, key, value);
      absl::Status s = (*c)->Put(put).status();
      history->Complete(op, WriteOutcome(s));
      if (s.ok()) ++*ok_ops;
      restart_if_timed_out(s);
    } else {
      // CAS from the value this client saw last (absent: create).
      const std::string value = absl::StrCat("c", id, "-", ++seq);
      v1::TxnRequest txn;
      txn.set_table(kTable);
      v1::Compare* cmp = txn.add_compares();
      cmp->set_key(key);
      if (last_seen[k].has_value()) {
        cmp->set_target(v1::Compare::VALUE);
        cmp->set_value(*last_seen[k]);
      } else {
        cmp->set_target(v1::Compare::VERSION);
        cmp->set_number(0);
      }
      cmp->set_result(v1::Compare::EQUAL);
      v1::PutRequest* put = txn.add_success()->mutable_put();
      put->set_key(key);
      put->set_value(value);
      const int64_t op = history->InvokeCas(id, key, last_seen[k], value);
      auto r = (*c)->Txn(txn);
      if (r.ok()) {
        history->Complete(op, Outcome::kOk, std::nullopt, r->succeeded());
        if (r->succeeded()) last_seen[k] = value;
        ++*ok_ops;
      } else {
        history->Complete(op, WriteOutcome(r.status()));
        restart_if_timed_out(r.status());
      }
    }
  }
}

TEST(ClusterLinearizabilityProcessTest, HistoryUnderOwnerKillAndPauseIsLinearizable) {
  ClusterFlags flags;
  flags.lease_ttl_s = kLeaseTtlS;
  flags.bookies = 4;  // E=3: a spare to replace the bookie killed below
  auto started = TestCluster::Start(flags);
  if (!started.ok() && absl::IsFailedPrecondition(started.status())) GTEST_SKIP();
  ASSERT_TRUE(started.ok()) << started.status();
  std::unique_ptr<TestCluster> cluster = std::move(*started);

  client::ClientOptions o;
  o.endpoint = cluster->Endpoints();
  o.max_attempts = 20;
  auto admin = client::KvClient::Create(o);
  ASSERT_TRUE(admin.ok());
  v1::CreateTableRequest create;
  create.set_name(kTable);
  create.add_split_keys("m");
  auto created = (*admin)->CreateTable(create);
  ASSERT_TRUE(created.ok()) << created.status();
  ASSERT_EQ(created->ranges_size(), 2);
  const uint64_t range_k = created->ranges(0).range_id();
  const uint64_t range_n = created->ranges(1).range_id();
  ASSERT_TRUE(cluster->WaitForOwner(range_k, "", absl::Seconds(30)).ok());
  ASSERT_TRUE(cluster->WaitForOwner(range_n, "", absl::Seconds(30)).ok());

  HistoryRecorder history;
  std::atomic<bool> stop{false};
  std::atomic<int> ok_ops{0};
  std::vector<std::thread> clients;
  for (int i = 0; i < 5; ++i) {
    clients.emplace_back(
        [&, i] { RunClient(i, cluster->Endpoints(), &history, &stop, &ok_ops); });
  }

  // Fault 1: kill -9 the owner of range k, wait for the takeover, restart it
  // (it rejoins, and may get a range handed back by the rebalancer).
  absl::SleepFor(absl::Seconds(3));
  auto owner_k = cluster->Assignment(range_k);
  ASSERT_TRUE(owner_k.ok()) << owner_k.status();
  const int killed = cluster->ServerIndex(owner_k->server_id());
  ASSERT_GE(killed, 0);
  cluster->KillServer(killed);
  EXPECT_TRUE(cluster->WaitForOwner(range_k, owner_k->server_id(), absl::Seconds(20)).ok());
  absl::SleepFor(absl::Seconds(1));
  ASSERT_TRUE(cluster->StartServer(killed).ok());
  absl::SleepFor(absl::Seconds(3));

  // Fault 2: pause the owner of range n past its lease, then resume it.
  auto owner_n = cluster->Assignment(range_n);
  ASSERT_TRUE(owner_n.ok()) << owner_n.status();
  const int paused = cluster->ServerIndex(owner_n->server_id());
  ASSERT_GE(paused, 0);
  cluster->StopServer(paused);
  EXPECT_TRUE(cluster->WaitForOwner(range_n, owner_n->server_id(), absl::Seconds(20)).ok());
  // Once the new owner took writes, reads sent straight to the paused old
  // owner (answered when it resumes) must not return what it had.
  absl::SleepFor(absl::Milliseconds(1500));
  std::vector<std::thread> probes;
  for (int i = 0; i < 4; ++i) {
    probes.emplace_back([&, i] {
      client::ClientOptions po;
      po.endpoint = cluster->server_address(paused);
      po.default_deadline = absl::Seconds(15);
      auto pc = client::KvClient::Create(po);
      ASSERT_TRUE(pc.ok());
      v1::GetRequest get;
      get.set_table(kTable);
      get.set_key(kKeys[2 + i % 2]);
      const int64_t op = history.InvokeRead(100 + i, get.key());
      auto got = (*pc)->Get(get);
      if (!got.ok()) {
        history.Complete(op, Outcome::kUnknown);
        return;
      }
      Value observed;
      if (got->found()) observed = got->kv().value();
      history.Complete(op, Outcome::kOk, observed);
    });
  }
  absl::SleepFor(absl::Seconds(1));
  cluster->ContinueServer(paused);
  for (auto& t : probes) t.join();
  absl::SleepFor(absl::Seconds(3));

  // Fault 3: kill -9 a bookie of the ensemble of range k's log.
  auto ensemble = cluster->CurrentLogEnsemble(range_k);
  ASSERT_TRUE(ensemble.ok()) << ensemble.status();
  for (int i = 0; i < flags.bookies; ++i) {
    if (cluster->bookie_id(i) == ensemble->front()) cluster->KillBookie(i);
  }
  absl::SleepFor(absl::Seconds(3));

  // Fault 4: etcd down for about a lease, then back.
  cluster->etcd().Stop();
  absl::SleepFor(absl::Seconds(kLeaseTtlS));
  ASSERT_TRUE(cluster->etcd().Restart().ok());
  absl::SleepFor(absl::Seconds(5));

  const int ok_before_stop = ok_ops.load();
  stop = true;
  for (auto& t : clients) t.join();
  const std::vector<testing::Operation> ops = history.History();
  std::printf("history: %zu operations, %d completed ok\n", ops.size(), ok_before_stop);
  // The check is only as strong as the history: demand real traffic.
  EXPECT_GE(ok_before_stop, 200) << cluster->LogTails();

  testing::CheckResult result = testing::CheckHistory(ops, absl::Seconds(120));
  EXPECT_FALSE(result.timed_out) << "checker budget ran out";
  EXPECT_TRUE(result.linearizable) << "key " << result.key << ":\n"
                                   << result.explanation << cluster->LogTails();
}

}  // namespace
}  // namespace ledgerkv
