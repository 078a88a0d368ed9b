// The MetadataStore contract suite: every implementation (embedded, etcd)
// must pass it. An implementation's test file supplies a harness and
// instantiates the suite:
//
//   INSTANTIATE_TEST_SUITE_P(Embedded, MetadataStoreContractTest,
//       ::testing::Values(MetadataContractParam{"embedded", [] {
//         return std::make_unique<MyHarness>(); }}),
//       MetadataContractParamName);
//
// or, when per-test resources need no cleanup, from two functions:
//   ::testing::Values(MakeContractParam("etcd", create_fresh, reopen))
//
// Include this header in exactly one .cc file per test binary (it defines
// the tests). Waits for things that must happen allow 10 s (etcd rounds TTLs
// up); checks that something does not happen wait a short quiet period.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/status_macros.h"
#include "gtest/gtest.h"
#include "metadata/metadata_store.h"

namespace ledgerkv::metadata::contract {

// One test's backing for an implementation. Owns the per-test resources
// (a temp dir, an etcd key namespace) and releases them when destroyed,
// after every store it made is gone.
class StoreHarness {
 public:
  virtual ~StoreHarness() = default;
  // Called once at the start of each test: returns a fresh, empty store.
  virtual absl::StatusOr<std::unique_ptr<MetadataStore>> Create() = 0;
  // Destroys `store` and opens a new instance over the same data, as after
  // a process restart. UNIMPLEMENTED: the durability tests are skipped.
  virtual absl::StatusOr<std::unique_ptr<MetadataStore>> Reopen(
      std::unique_ptr<MetadataStore> store) {
    return absl::UnimplementedError("this implementation has no reopen hook");
  }
};

struct MetadataContractParam {
  std::string name;  // test name suffix: letters, digits, '_'
  std::function<std::unique_ptr<StoreHarness>()> make_harness;
};

inline std::string MetadataContractParamName(
    const ::testing::TestParamInfo<MetadataContractParam>& info) {
  return info.param.name;
}

using StoreFactory = std::function<absl::StatusOr<std::unique_ptr<MetadataStore>>()>;
using ReopenHook =
    std::function<absl::StatusOr<std::unique_ptr<MetadataStore>>(std::unique_ptr<MetadataStore>)>;

// A harness from a fresh-store factory and an optional reopen hook.
inline MetadataContractParam MakeContractParam(std::string name, StoreFactory create,
                                               ReopenHook reopen = nullptr) {
  class FunctionHarness : public StoreHarness {
   public:
    FunctionHarness(StoreFactory create, ReopenHook reopen)
        : create_(std::move(create)), reopen_(std::move(reopen)) {}
    absl::StatusOr<std::unique_ptr<MetadataStore>> Create() override { return create_(); }
    absl::StatusOr<std::unique_ptr<MetadataStore>> Reopen(
        std::unique_ptr<MetadataStore> store) override {
      if (!reopen_) return StoreHarness::Reopen(std::move(store));
      return reopen_(std::move(store));
    }

   private:
    StoreFactory create_;
    ReopenHook reopen_;
  };
  return MetadataContractParam{
      std::move(name), [create = std::move(create), reopen = std::move(reopen)] {
        return std::unique_ptr<StoreHarness>(std::make_unique<FunctionHarness>(create, reopen));
      }};
}

inline absl::Status StatusOf(const absl::Status& s) { return s; }
template <typename T>
absl::Status StatusOf(const absl::StatusOr<T>& s) {
  return s.status();
}

#define METADATA_ASSERT_OK(expr)                                                      \
  do {                                                                                \
    const ::absl::Status _md_status = ::ledgerkv::metadata::contract::StatusOf(expr); \
    ASSERT_TRUE(_md_status.ok()) << #expr << ": " << _md_status;                      \
  } while (0)
#define METADATA_ASSERT_OK_AND_ASSIGN(lhs, expr) \
  METADATA_ASSERT_OK_AND_ASSIGN_IMPL(LEDGERKV_CONCAT(_md_statusor_, __LINE__), lhs, expr)
#define METADATA_ASSERT_OK_AND_ASSIGN_IMPL(so, lhs, expr) \
  auto so = (expr);                                       \
  ASSERT_TRUE(so.ok()) << #expr << ": " << so.status();   \
  lhs = std::move(so).value()
#define METADATA_EXPECT_CODE(expr, want)                                                   \
  do {                                                                                     \
    const ::absl::Status _md_status = ::ledgerkv::metadata::contract::StatusOf(expr);      \
    EXPECT_EQ(_md_status.code(), ::absl::StatusCode::want) << #expr << ": " << _md_status; \
  } while (0)

// Generous: a thing that must happen (a watch event, a TTL expiry).
inline constexpr absl::Duration kMustHappenWithin = absl::Seconds(10);
// A thing that must not happen is checked for this long.
inline constexpr absl::Duration kQuietPeriod = absl::Milliseconds(300);

// Polls `pred` until it holds or `timeout` passes; returns its last value.
inline bool WaitUntil(const std::function<bool()>& pred,
                      absl::Duration timeout = kMustHappenWithin) {
  const absl::Time deadline = absl::Now() + timeout;
  while (!pred()) {
    if (absl::Now() >= deadline) return pred();
    absl::SleepFor(absl::Milliseconds(10));
  }
  return true;
}

// Records watch deliveries. Declare it before the WatchHandle that feeds it.
class EventCollector {
 public:
  WatchCallback Callback() {
    return [this](const std::vector<WatchEvent>& events) {
      absl::MutexLock lock(&mu_);
      ++calls_;
      events_.insert(events_.end(), events.begin(), events.end());
    };
  }
  bool WaitForEvents(size_t n, absl::Duration timeout = kMustHappenWithin) {
    return WaitUntil([&] { return Events().size() >= n; }, timeout);
  }
  std::vector<WatchEvent> Events() {
    absl::MutexLock lock(&mu_);
    return events_;
  }
  int calls() {
    absl::MutexLock lock(&mu_);
    return calls_;
  }

 private:
  absl::Mutex mu_;
  std::vector<WatchEvent> events_ ABSL_GUARDED_BY(mu_);
  int calls_ ABSL_GUARDED_BY(mu_) = 0;
};

class MetadataStoreContractTest : public ::testing::TestWithParam<MetadataContractParam> {
 protected:
  void SetUp() override {
    harness_ = GetParam().make_harness();
    METADATA_ASSERT_OK_AND_ASSIGN(store_, harness_->Create());
  }
  void TearDown() override {
    store_.reset();
    harness_.reset();
  }

  MetadataStore& store() { return *store_; }

  // Replaces store_ with a reopened instance; false (test skipped) if the
  // implementation cannot reopen.
  bool Reopen() {
    absl::StatusOr<std::unique_ptr<MetadataStore>> reopened = harness_->Reopen(std::move(store_));
    if (absl::IsUnimplemented(reopened.status())) return false;
    EXPECT_TRUE(reopened.ok()) << reopened.status();
    if (!reopened.ok()) return false;
    store_ = std::move(reopened).value();
    return true;
  }

  Version Revision() {
    absl::StatusOr<Version> r = store().CurrentRevision();
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : -1;
  }

  std::unique_ptr<StoreHarness> harness_;
  std::unique_ptr<MetadataStore> store_;
};

// ---- Get / Put / Delete --------------------------------------------------

TEST_P(MetadataStoreContractTest, GetOfMissingKeyIsNotFound) {
  METADATA_EXPECT_CODE(store().Get("basic/missing"), kNotFound);
}

TEST_P(MetadataStoreContractTest, PutThenGetReturnsValueAndVersion) {
  METADATA_ASSERT_OK_AND_ASSIGN(Version v1, store().Put("basic/k", "one", kAnyVersion));
  EXPECT_GT(v1, 0);
  METADATA_ASSERT_OK_AND_ASSIGN(VersionedValue got, store().Get("basic/k"));
  EXPECT_EQ(got.value, "one");
  EXPECT_EQ(got.version, v1);

  METADATA_ASSERT_OK_AND_ASSIGN(Version v2, store().Put("basic/k", "two", kAnyVersion));
  EXPECT_GT(v2, v1);
  METADATA_ASSERT_OK_AND_ASSIGN(got, store().Get("basic/k"));
  EXPECT_EQ(got.value, "two");
  EXPECT_EQ(got.version, v2);

  // Binary values and empty values round-trip.
  const std::string binary("\0\xff\x01 z", 5);
  METADATA_ASSERT_OK(store().Put("basic/bin", binary, kAnyVersion));
  METADATA_ASSERT_OK(store().Put("basic/empty", "", kAnyVersion));
  METADATA_ASSERT_OK_AND_ASSIGN(got, store().Get("basic/bin"));
  EXPECT_EQ(got.value, binary);
  METADATA_ASSERT_OK_AND_ASSIGN(got, store().Get("basic/empty"));
  EXPECT_EQ(got.value, "");
}

TEST_P(MetadataStoreContractTest, DeleteRemovesKeyAndDeletingMissingKeyIsNotFound) {
  METADATA_ASSERT_OK(store().Put("basic/d", "x", kAnyVersion));
  METADATA_ASSERT_OK(store().Delete("basic/d", kAnyVersion));
  METADATA_EXPECT_CODE(store().Get("basic/d"), kNotFound);
  METADATA_EXPECT_CODE(store().Delete("basic/d", kAnyVersion), kNotFound);
  METADATA_EXPECT_CODE(store().Delete("basic/never", kAnyVersion), kNotFound);
}

TEST_P(MetadataStoreContractTest, EmptyKeyIsInvalidArgument) {
  METADATA_EXPECT_CODE(store().Put("", "v", kAnyVersion), kInvalidArgument);
  METADATA_EXPECT_CODE(store().Get(""), kInvalidArgument);
  METADATA_EXPECT_CODE(store().Delete("", kAnyVersion), kInvalidArgument);
  METADATA_EXPECT_CODE(store().Txn({}, {TxnOp{TxnOp::Type::kPut, "", "v"}}), kInvalidArgument);
  METADATA_EXPECT_CODE(store().Txn({TxnCompare{"", kMustNotExist}}, {}), kInvalidArgument);
}

// ---- CAS -----------------------------------------------------------------

TEST_P(MetadataStoreContractTest, PutMustNotExistOnExistingKeyIsAbortedAndWritesNothing) {
  METADATA_ASSERT_OK_AND_ASSIGN(Version v1, store().Put("cas/k", "first", kMustNotExist));
  const Version revision = Revision();
  METADATA_EXPECT_CODE(store().Put("cas/k", "second", kMustNotExist), kAborted);
  METADATA_ASSERT_OK_AND_ASSIGN(VersionedValue got, store().Get("cas/k"));
  EXPECT_EQ(got.value, "first");
  EXPECT_EQ(got.version, v1);
  EXPECT_EQ(Revision(), revision);
}

TEST_P(MetadataStoreContractTest, PutWithCurrentVersionSucceeds) {
  METADATA_ASSERT_OK_AND_ASSIGN(Version v1, store().Put("cas/k", "1", kMustNotExist));
  METADATA_ASSERT_OK_AND_ASSIGN(Version v2, store().Put("cas/k", "2", v1));
  EXPECT_GT(v2, v1);
  METADATA_ASSERT_OK_AND_ASSIGN(VersionedValue got, store().Get("cas/k"));
  EXPECT_EQ(got.value, "2");
  EXPECT_EQ(got.version, v2);
}

TEST_P(MetadataStoreContractTest, PutWithStaleVersionIsAbortedAndWritesNothing) {
  METADATA_ASSERT_OK_AND_ASSIGN(Version v1, store().Put("cas/k", "1", kMustNotExist));
  METADATA_ASSERT_OK_AND_ASSIGN(Version v2, store().Put("cas/k", "2", v1));
  const Version revision = Revision();
  METADATA_EXPECT_CODE(store().Put("cas/k", "3", v1), kAborted);
  METADATA_ASSERT_OK_AND_ASSIGN(VersionedValue got, store().Get("cas/k"));
  EXPECT_EQ(got.value, "2");
  EXPECT_EQ(got.version, v2);
  EXPECT_EQ(Revision(), revision);
}

TEST_P(MetadataStoreContractTest, PutWithVersionOnMissingKeyIsAbortedAndCreatesNothing) {
  METADATA_ASSERT_OK_AND_ASSIGN(Version v, store().Put("cas/other", "x", kAnyVersion));
  METADATA_EXPECT_CODE(store().Put("cas/missing", "x", v), kAborted);
  METADATA_EXPECT_CODE(store().Get("cas/missing"), kNotFound);
}

TEST_P(MetadataStoreContractTest, DeleteWithStaleVersionIsAbortedAndKeepsKey) {
  METADATA_ASSERT_OK_AND_ASSIGN(Version v1, store().Put("cas/d", "1", kAnyVersion));
  METADATA_ASSERT_OK_AND_ASSIGN(Version v2, store().Put("cas/d", "2", kAnyVersion));
  METADATA_EXPECT_CODE(store().Delete("cas/d", v1), kAborted);
  METADATA_ASSERT_OK_AND_ASSIGN(VersionedValue got, store().Get("cas/d"));
  EXPECT_EQ(got.version, v2);
  METADATA_ASSERT_OK(store().Delete("cas/d", v2));
  METADATA_EXPECT_CODE(store().Get("cas/d"), kNotFound);
}

TEST_P(MetadataStoreContractTest, VersionsStrictlyIncreaseAcrossKeys) {
  Version last = Revision();
  auto expect_newer = [&](absl::StatusOr<Version> v) {
    ASSERT_TRUE(v.ok()) << v.status();
    EXPECT_GT(*v, last);
    last = *v;
  };
  expect_newer(store().Put("ver/a", "1", kAnyVersion));
  expect_newer(store().Put("ver/b", "1", kAnyVersion));
  expect_newer(store().Put("ver/a", "2", kAnyVersion));
  expect_newer(store().Put("other/c", "1", kAnyVersion));
  EXPECT_GE(Revision(), last);
  // A delete is a mutation too: it raises the revision.
  METADATA_ASSERT_OK(store().Delete("ver/b", kAnyVersion));
  EXPECT_GT(Revision(), last);
  last = Revision();
  expect_newer(store().Put("ver/b", "again", kMustNotExist));
}

// ---- List ----------------------------------------------------------------

TEST_P(MetadataStoreContractTest, ListReturnsPrefixInKeyOrderWithVersions) {
  for (const char* key : {"list/b", "list/a", "list/c/x", "list/", "lisu", "lis", "k/zz"}) {
    METADATA_ASSERT_OK(store().Put(key, std::string("v-") + key, kAnyVersion));
  }
  METADATA_ASSERT_OK_AND_ASSIGN(std::vector<KeyValue> listed, store().List("list/"));
  std::vector<std::string> keys;
  for (const KeyValue& kv : listed) {
    keys.push_back(kv.key);
    EXPECT_EQ(kv.value, "v-" + kv.key);
    METADATA_ASSERT_OK_AND_ASSIGN(VersionedValue got, store().Get(kv.key));
    EXPECT_EQ(kv.version, got.version) << kv.key;
  }
  EXPECT_EQ(keys, (std::vector<std::string>{"list/", "list/a", "list/b", "list/c/x"}));
}

TEST_P(MetadataStoreContractTest, ListPrefixIsExact) {
  for (const char* key : {"a/1", "a/2", "ab", "a", "a0"}) {
    METADATA_ASSERT_OK(store().Put(key, "v", kAnyVersion));
  }
  METADATA_ASSERT_OK_AND_ASSIGN(std::vector<KeyValue> listed, store().List("a/"));
  ASSERT_EQ(listed.size(), 2u);
  EXPECT_EQ(listed[0].key, "a/1");
  EXPECT_EQ(listed[1].key, "a/2");
  METADATA_ASSERT_OK_AND_ASSIGN(listed, store().List("nothing/"));
  EXPECT_TRUE(listed.empty());
}

TEST_P(MetadataStoreContractTest, ListOrdersLedgerKeysById) {
  Keys keys("contract");
  for (uint64_t id : {10u, 2u, 100u, 9u}) {
    METADATA_ASSERT_OK(store().Put(keys.Ledger(id), "m", kMustNotExist));
  }
  METADATA_ASSERT_OK_AND_ASSIGN(std::vector<KeyValue> listed, store().List(keys.LedgersPrefix()));
  std::vector<uint64_t> ids;
  for (const KeyValue& kv : listed) {
    uint64_t id = 0;
    ASSERT_TRUE(keys.ParseLedgerKey(kv.key, &id)) << kv.key;
    ids.push_back(id);
  }
  EXPECT_EQ(ids, (std::vector<uint64_t>{2, 9, 10, 100}));
}

// ---- Txn -----------------------------------------------------------------

TEST_P(MetadataStoreContractTest, TxnAppliesEveryOpAtOneRevisionWhenComparesHold) {
  METADATA_ASSERT_OK_AND_ASSIGN(Version vx, store().Put("txn/x", "x", kAnyVersion));
  METADATA_ASSERT_OK_AND_ASSIGN(
      TxnResult result,
      store().Txn({TxnCompare{"txn/x", vx}, TxnCompare{"txn/y", kMustNotExist}},
                  {TxnOp{TxnOp::Type::kPut, "txn/y", "y"}, TxnOp{TxnOp::Type::kPut, "txn/z", "z"},
                   TxnOp{TxnOp::Type::kDelete, "txn/x", ""}}));
  ASSERT_TRUE(result.succeeded);
  EXPECT_GT(result.revision, vx);
  METADATA_ASSERT_OK_AND_ASSIGN(VersionedValue y, store().Get("txn/y"));
  METADATA_ASSERT_OK_AND_ASSIGN(VersionedValue z, store().Get("txn/z"));
  EXPECT_EQ(y.value, "y");
  EXPECT_EQ(z.value, "z");
  EXPECT_EQ(y.version, result.revision);
  EXPECT_EQ(z.version, result.revision);
  METADATA_EXPECT_CODE(store().Get("txn/x"), kNotFound);
}

TEST_P(MetadataStoreContractTest, TxnWithFailingCompareChangesNothing) {
  METADATA_ASSERT_OK_AND_ASSIGN(Version vx, store().Put("txn/x", "x", kAnyVersion));
  METADATA_ASSERT_OK_AND_ASSIGN(Version vy, store().Put("txn/y", "y", kAnyVersion));
  const Version revision = Revision();
  // The first compare holds, the second does not: no op may be applied.
  METADATA_ASSERT_OK_AND_ASSIGN(
      TxnResult result, store().Txn({TxnCompare{"txn/x", vx}, TxnCompare{"txn/y", kMustNotExist}},
                                    {TxnOp{TxnOp::Type::kPut, "txn/x", "changed"},
                                     TxnOp{TxnOp::Type::kPut, "txn/new", "n"},
                                     TxnOp{TxnOp::Type::kDelete, "txn/y", ""}}));
  EXPECT_FALSE(result.succeeded);
  METADATA_ASSERT_OK_AND_ASSIGN(VersionedValue x, store().Get("txn/x"));
  EXPECT_EQ(x.value, "x");
  EXPECT_EQ(x.version, vx);
  METADATA_ASSERT_OK_AND_ASSIGN(VersionedValue y, store().Get("txn/y"));
  EXPECT_EQ(y.version, vy);
  METADATA_EXPECT_CODE(store().Get("txn/new"), kNotFound);
  EXPECT_EQ(Revision(), revision);
}

TEST_P(MetadataStoreContractTest, TxnWithEndedSessionIsNotFoundAndAppliesNothing) {
  METADATA_ASSERT_OK_AND_ASSIGN(SessionId session, store().CreateSession(SessionOptions{}));
  METADATA_ASSERT_OK(store().CloseSession(session));
  TxnOp ephemeral{TxnOp::Type::kPut, "txn/eph", "e", session};
  METADATA_EXPECT_CODE(store().Txn({}, {TxnOp{TxnOp::Type::kPut, "txn/plain", "p"}, ephemeral}),
                       kNotFound);
  METADATA_EXPECT_CODE(store().Get("txn/plain"), kNotFound);
  METADATA_EXPECT_CODE(store().Get("txn/eph"), kNotFound);
}

// A bookie registers this way (an ephemeral key, on condition of its
// cookie): the key must go with the session like one put outside a txn.
TEST_P(MetadataStoreContractTest, AnEphemeralPutInATxnGoesWithItsSession) {
  METADATA_ASSERT_OK_AND_ASSIGN(Version guard, store().Put("txn/guard", "g", kMustNotExist));
  METADATA_ASSERT_OK_AND_ASSIGN(SessionId session, store().CreateSession(SessionOptions{}));
  METADATA_ASSERT_OK_AND_ASSIGN(
      TxnResult lost, store().Txn({TxnCompare{"txn/guard", guard + 1}},
                                  {TxnOp{TxnOp::Type::kPut, "txn/eph", "e", session}}));
  EXPECT_FALSE(lost.succeeded);
  METADATA_EXPECT_CODE(store().Get("txn/eph"), kNotFound);
  METADATA_ASSERT_OK_AND_ASSIGN(
      TxnResult won, store().Txn({TxnCompare{"txn/guard", guard}},
                                 {TxnOp{TxnOp::Type::kPut, "txn/eph", "e", session}}));
  EXPECT_TRUE(won.succeeded);
  METADATA_ASSERT_OK(store().Get("txn/eph"));
  METADATA_ASSERT_OK(store().CloseSession(session));
  METADATA_EXPECT_CODE(store().Get("txn/eph"), kNotFound);
  METADATA_ASSERT_OK(store().Get("txn/guard"));
}

TEST_P(MetadataStoreContractTest, TxnWithTwoOpsOnOneKeyIsInvalidArgument) {
  METADATA_EXPECT_CODE(store().Txn({}, {TxnOp{TxnOp::Type::kPut, "txn/dup", "1"},
                                        TxnOp{TxnOp::Type::kPut, "txn/dup", "2"}}),
                       kInvalidArgument);
  METADATA_EXPECT_CODE(store().Get("txn/dup"), kNotFound);
}

// ---- Sessions --------------------------------------------------------------

TEST_P(MetadataStoreContractTest, EphemeralKeyIsDeletedWhenSessionCloses) {
  std::atomic<int> expired{0};
  SessionOptions options;
  options.on_expired = [&] { ++expired; };
  METADATA_ASSERT_OK_AND_ASSIGN(SessionId session, store().CreateSession(options));
  EXPECT_GT(session, 0);
  METADATA_ASSERT_OK_AND_ASSIGN(Version put, store().Put("sess/eph", "e", kMustNotExist, session));
  METADATA_ASSERT_OK(store().Put("sess/keep", "k", kMustNotExist));
  EventCollector collector;
  METADATA_ASSERT_OK_AND_ASSIGN(auto watch, store().Watch("sess/", 0, collector.Callback()));

  METADATA_ASSERT_OK(store().CloseSession(session));
  METADATA_EXPECT_CODE(store().Get("sess/eph"), kNotFound);
  METADATA_ASSERT_OK(store().Get("sess/keep"));
  // The deletion is a revision like any other: watchers see it.
  ASSERT_TRUE(collector.WaitForEvents(1));
  const WatchEvent e = collector.Events()[0];
  EXPECT_EQ(e.type, WatchEvent::Type::kDelete);
  EXPECT_EQ(e.key, "sess/eph");
  EXPECT_GT(e.version, put);

  METADATA_EXPECT_CODE(store().CloseSession(session), kNotFound);
  absl::SleepFor(kQuietPeriod);
  EXPECT_EQ(expired.load(), 0) << "on_expired must not run for CloseSession";
}

TEST_P(MetadataStoreContractTest, EphemeralKeyIsDeletedWhenSessionExpires) {
  std::atomic<int> expired{0};
  SessionOptions options;
  options.ttl = absl::Seconds(1);
  options.auto_keepalive = false;
  options.on_expired = [&] { ++expired; };
  METADATA_ASSERT_OK_AND_ASSIGN(SessionId session, store().CreateSession(options));
  METADATA_ASSERT_OK(store().Put("sess/eph", "e", kMustNotExist, session));
  METADATA_ASSERT_OK(store().Put("sess/keep", "k", kMustNotExist));

  EXPECT_TRUE(WaitUntil([&] { return absl::IsNotFound(store().Get("sess/eph").status()); }));
  EXPECT_TRUE(WaitUntil([&] { return expired.load() > 0; }));
  absl::SleepFor(kQuietPeriod);
  EXPECT_EQ(expired.load(), 1) << "on_expired must run exactly once";
  METADATA_ASSERT_OK(store().Get("sess/keep"));
  METADATA_EXPECT_CODE(store().KeepAlive(session), kNotFound);
  METADATA_EXPECT_CODE(store().Put("sess/late", "x", kAnyVersion, session), kNotFound);
  METADATA_EXPECT_CODE(store().Get("sess/late"), kNotFound);
}

TEST_P(MetadataStoreContractTest, KeepAliveExtendsSessionAndAutoKeepaliveNeverExpires) {
  std::atomic<int> expired_manual{0};
  std::atomic<int> expired_auto{0};
  SessionOptions manual;
  manual.ttl = absl::Seconds(1);
  manual.auto_keepalive = false;
  manual.on_expired = [&] { ++expired_manual; };
  SessionOptions automatic;
  automatic.ttl = absl::Seconds(1);
  automatic.on_expired = [&] { ++expired_auto; };
  METADATA_ASSERT_OK_AND_ASSIGN(SessionId s_manual, store().CreateSession(manual));
  METADATA_ASSERT_OK_AND_ASSIGN(SessionId s_auto, store().CreateSession(automatic));
  METADATA_ASSERT_OK(store().Put("sess/manual", "m", kMustNotExist, s_manual));
  METADATA_ASSERT_OK(store().Put("sess/auto", "a", kMustNotExist, s_auto));

  // Well past the TTL, refreshing the manual session every 200 ms.
  const absl::Time until = absl::Now() + absl::Milliseconds(2500);
  while (absl::Now() < until) {
    METADATA_ASSERT_OK(store().KeepAlive(s_manual));
    absl::SleepFor(absl::Milliseconds(200));
  }
  METADATA_ASSERT_OK(store().Get("sess/manual"));
  METADATA_ASSERT_OK(store().Get("sess/auto"));
  EXPECT_EQ(expired_manual.load(), 0);

  // Without keepalives the manual session ends; the automatic one does not.
  EXPECT_TRUE(WaitUntil([&] { return absl::IsNotFound(store().Get("sess/manual").status()); }));
  EXPECT_TRUE(WaitUntil([&] { return expired_manual.load() == 1; }));
  METADATA_ASSERT_OK(store().Get("sess/auto"));
  METADATA_ASSERT_OK(store().KeepAlive(s_auto));
  EXPECT_EQ(expired_auto.load(), 0);
  METADATA_ASSERT_OK(store().CloseSession(s_auto));
  METADATA_EXPECT_CODE(store().Get("sess/auto"), kNotFound);
}

TEST_P(MetadataStoreContractTest, PutWithEndedOrUnknownSessionIsNotFound) {
  METADATA_ASSERT_OK_AND_ASSIGN(SessionId session, store().CreateSession(SessionOptions{}));
  METADATA_ASSERT_OK(store().CloseSession(session));
  METADATA_EXPECT_CODE(store().Put("sess/k", "v", kAnyVersion, session), kNotFound);
  METADATA_EXPECT_CODE(store().Put("sess/k", "v", kAnyVersion, 987654321), kNotFound);
  METADATA_EXPECT_CODE(store().Get("sess/k"), kNotFound);
  METADATA_EXPECT_CODE(store().KeepAlive(987654321), kNotFound);
  METADATA_EXPECT_CODE(store().CloseSession(987654321), kNotFound);
}

TEST_P(MetadataStoreContractTest, OverwritingEphemeralKeyWithoutSessionMakesItPersistent) {
  METADATA_ASSERT_OK_AND_ASSIGN(SessionId session, store().CreateSession(SessionOptions{}));
  METADATA_ASSERT_OK(store().Put("sess/k", "ephemeral", kMustNotExist, session));
  METADATA_ASSERT_OK(store().Put("sess/k", "persistent", kAnyVersion));
  METADATA_ASSERT_OK(store().CloseSession(session));
  METADATA_ASSERT_OK_AND_ASSIGN(VersionedValue got, store().Get("sess/k"));
  EXPECT_EQ(got.value, "persistent");
}

// ---- Watch -----------------------------------------------------------------

TEST_P(MetadataStoreContractTest, WatchFromZeroSeesLaterPutsAndDeletesInOrder) {
  METADATA_ASSERT_OK(store().Put("w/before", "old", kAnyVersion));
  EventCollector collector;
  METADATA_ASSERT_OK_AND_ASSIGN(auto watch, store().Watch("w/", 0, collector.Callback()));
  METADATA_ASSERT_OK_AND_ASSIGN(Version va, store().Put("w/a", "1", kAnyVersion));
  METADATA_ASSERT_OK(store().Put("x/elsewhere", "no", kAnyVersion));
  METADATA_ASSERT_OK_AND_ASSIGN(Version vb, store().Put("w/b", "2", kAnyVersion));
  METADATA_ASSERT_OK(store().Delete("w/a", kAnyVersion));
  const Version vdel = Revision();

  ASSERT_TRUE(collector.WaitForEvents(3));
  absl::SleepFor(kQuietPeriod);
  const std::vector<WatchEvent> events = collector.Events();
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0].type, WatchEvent::Type::kPut);
  EXPECT_EQ(events[0].key, "w/a");
  EXPECT_EQ(events[0].value, "1");
  EXPECT_EQ(events[0].version, va);
  EXPECT_EQ(events[1].type, WatchEvent::Type::kPut);
  EXPECT_EQ(events[1].key, "w/b");
  EXPECT_EQ(events[1].value, "2");
  EXPECT_EQ(events[1].version, vb);
  EXPECT_EQ(events[2].type, WatchEvent::Type::kDelete);
  EXPECT_EQ(events[2].key, "w/a");
  EXPECT_EQ(events[2].version, vdel);
}

TEST_P(MetadataStoreContractTest, WatchFromOlderVersionReplaysHistoryThenLiveChanges) {
  METADATA_ASSERT_OK(store().Put("w/a", "1", kAnyVersion));
  METADATA_ASSERT_OK_AND_ASSIGN(Version vb, store().Put("w/b", "2", kAnyVersion));
  METADATA_ASSERT_OK(store().Put("x/elsewhere", "no", kAnyVersion));
  METADATA_ASSERT_OK(store().Delete("w/a", kAnyVersion));
  const Version vdel = Revision();

  EventCollector collector;
  METADATA_ASSERT_OK_AND_ASSIGN(auto watch, store().Watch("w/", vb, collector.Callback()));
  ASSERT_TRUE(collector.WaitForEvents(2));
  METADATA_ASSERT_OK_AND_ASSIGN(Version vc, store().Put("w/c", "3", kAnyVersion));
  ASSERT_TRUE(collector.WaitForEvents(3));
  absl::SleepFor(kQuietPeriod);

  const std::vector<WatchEvent> events = collector.Events();
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0].key, "w/b");
  EXPECT_EQ(events[0].type, WatchEvent::Type::kPut);
  EXPECT_EQ(events[0].version, vb);
  EXPECT_EQ(events[1].key, "w/a");
  EXPECT_EQ(events[1].type, WatchEvent::Type::kDelete);
  EXPECT_EQ(events[1].version, vdel);
  EXPECT_EQ(events[2].key, "w/c");
  EXPECT_EQ(events[2].version, vc);
}

TEST_P(MetadataStoreContractTest, TxnChangesReachWatchersWithOneRevision) {
  EventCollector collector;
  METADATA_ASSERT_OK_AND_ASSIGN(auto watch, store().Watch("w/", 0, collector.Callback()));
  METADATA_ASSERT_OK_AND_ASSIGN(TxnResult result,
                                store().Txn({}, {TxnOp{TxnOp::Type::kPut, "w/1", "a"},
                                                 TxnOp{TxnOp::Type::kPut, "w/2", "b"}}));
  ASSERT_TRUE(result.succeeded);
  ASSERT_TRUE(collector.WaitForEvents(2));
  for (const WatchEvent& e : collector.Events()) EXPECT_EQ(e.version, result.revision) << e.key;
}

TEST_P(MetadataStoreContractTest, CancelStopsCallbacks) {
  EventCollector cancelled;
  EventCollector destroyed;
  EventCollector alive;
  METADATA_ASSERT_OK_AND_ASSIGN(auto w1, store().Watch("c/", 0, cancelled.Callback()));
  METADATA_ASSERT_OK_AND_ASSIGN(auto w2, store().Watch("c/", 0, destroyed.Callback()));
  METADATA_ASSERT_OK_AND_ASSIGN(auto w3, store().Watch("c/", 0, alive.Callback()));
  METADATA_ASSERT_OK(store().Put("c/1", "1", kAnyVersion));
  ASSERT_TRUE(cancelled.WaitForEvents(1));
  ASSERT_TRUE(destroyed.WaitForEvents(1));
  w1->Cancel();
  w2.reset();
  METADATA_ASSERT_OK(store().Put("c/2", "2", kAnyVersion));
  ASSERT_TRUE(alive.WaitForEvents(2));
  absl::SleepFor(kQuietPeriod);
  EXPECT_EQ(cancelled.Events().size(), 1u);
  EXPECT_EQ(destroyed.Events().size(), 1u);
  w1->Cancel();  // idempotent
}

TEST_P(MetadataStoreContractTest, CancelWaitsForRunningCallback) {
  std::atomic<bool> entered{false};
  std::atomic<bool> finished{false};
  METADATA_ASSERT_OK_AND_ASSIGN(auto watch,
                                store().Watch("c/", 0, [&](const std::vector<WatchEvent>&) {
                                  entered = true;
                                  absl::SleepFor(absl::Milliseconds(300));
                                  finished = true;
                                }));
  METADATA_ASSERT_OK(store().Put("c/1", "1", kAnyVersion));
  ASSERT_TRUE(WaitUntil([&] { return entered.load(); }));
  watch->Cancel();
  EXPECT_TRUE(finished.load()) << "Cancel returned while the callback was still running";
}

TEST_P(MetadataStoreContractTest, CallbackMayCancelItsWatchAndCallTheStore) {
  std::atomic<int> calls{0};
  std::atomic<bool> read_ok{false};
  WatchHandle* self = nullptr;
  absl::Mutex mu;
  METADATA_ASSERT_OK_AND_ASSIGN(auto watch,
                                store().Watch("c/", 0, [&](const std::vector<WatchEvent>& events) {
                                  ++calls;
                                  // Store calls from a callback must not deadlock.
                                  read_ok = store().Get(events[0].key).ok();
                                  absl::MutexLock lock(&mu);
                                  self->Cancel();  // from inside a callback: must return at once
                                }));
  {
    absl::MutexLock lock(&mu);
    self = watch.get();
  }
  METADATA_ASSERT_OK(store().Put("c/1", "1", kAnyVersion));
  ASSERT_TRUE(WaitUntil([&] { return calls.load() == 1; }));
  METADATA_ASSERT_OK(store().Put("c/2", "2", kAnyVersion));
  absl::SleepFor(kQuietPeriod);
  EXPECT_EQ(calls.load(), 1);
  EXPECT_TRUE(read_ok.load());
}

// ---- Concurrency and ids ---------------------------------------------------

TEST_P(MetadataStoreContractTest, NextIdCountsFromOne) {
  Keys keys("contract");
  for (uint64_t want = 1; want <= 3; ++want) {
    METADATA_ASSERT_OK_AND_ASSIGN(uint64_t id, NextId(store(), keys.IdGen("ledger")));
    EXPECT_EQ(id, want);
  }
  // Kinds count independently.
  METADATA_ASSERT_OK_AND_ASSIGN(uint64_t range_id, NextId(store(), keys.IdGen("range")));
  EXPECT_EQ(range_id, 1u);
}

TEST_P(MetadataStoreContractTest, NextIdNeverHandsOutAnIdTwiceToConcurrentCallers) {
  constexpr int kThreads = 4;
  constexpr int kIdsPerThread = 200;
  const std::string key = Keys("contract").IdGen("ledger");
  std::vector<std::vector<uint64_t>> got(kThreads);
  std::vector<absl::Status> errors(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kIdsPerThread; ++i) {
        absl::StatusOr<uint64_t> id = NextId(store(), key);
        if (!id.ok()) {
          errors[t] = id.status();
          return;
        }
        got[t].push_back(*id);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  absl::flat_hash_set<uint64_t> all;
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_TRUE(errors[t].ok()) << errors[t];
    for (size_t i = 1; i < got[t].size(); ++i) EXPECT_GT(got[t][i], got[t][i - 1]);
    all.insert(got[t].begin(), got[t].end());
  }
  EXPECT_EQ(all.size(), static_cast<size_t>(kThreads * kIdsPerThread));
}

TEST_P(MetadataStoreContractTest, ConcurrentCasIncrementsNeverLoseAnUpdate) {
  constexpr int kThreads = 4;
  constexpr int kIncrements = 50;
  METADATA_ASSERT_OK(store().Put("cnt/c", "0", kMustNotExist));
  std::vector<absl::Status> errors(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kIncrements;) {
        absl::StatusOr<VersionedValue> cur = store().Get("cnt/c");
        if (!cur.ok()) {
          errors[t] = cur.status();
          return;
        }
        absl::StatusOr<Version> put =
            store().Put("cnt/c", std::to_string(std::stoi(cur->value) + 1), cur->version);
        if (put.ok()) {
          ++i;
        } else if (!absl::IsAborted(put.status())) {
          errors[t] = put.status();
          return;
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (const absl::Status& e : errors) EXPECT_TRUE(e.ok()) << e;
  METADATA_ASSERT_OK_AND_ASSIGN(VersionedValue final_value, store().Get("cnt/c"));
  EXPECT_EQ(final_value.value, std::to_string(kThreads * kIncrements));
}

// ---- Durability (implementations with a reopen hook) -------------------------

TEST_P(MetadataStoreContractTest, DataAndRevisionSurviveReopen) {
  METADATA_ASSERT_OK_AND_ASSIGN(Version va, store().Put("dur/a", "a", kAnyVersion));
  METADATA_ASSERT_OK(store().Put("dur/b", "b", kAnyVersion));
  METADATA_ASSERT_OK(store().Delete("dur/b", kAnyVersion));
  const Version revision = Revision();
  if (!Reopen()) GTEST_SKIP() << "no reopen hook";
  METADATA_ASSERT_OK_AND_ASSIGN(VersionedValue a, store().Get("dur/a"));
  EXPECT_EQ(a.value, "a");
  EXPECT_EQ(a.version, va);
  METADATA_EXPECT_CODE(store().Get("dur/b"), kNotFound);
  EXPECT_GE(Revision(), revision);
  METADATA_ASSERT_OK_AND_ASSIGN(Version vc, store().Put("dur/c", "c", kAnyVersion));
  EXPECT_GT(vc, revision);
  // Old versions still work as CAS tokens after the restart.
  METADATA_ASSERT_OK(store().Put("dur/a", "a2", va));
}

TEST_P(MetadataStoreContractTest, NextIdNeverRepeatsAcrossReopen) {
  const std::string key = Keys("contract").IdGen("ledger");
  for (int i = 0; i < 3; ++i) METADATA_ASSERT_OK(NextId(store(), key));
  if (!Reopen()) GTEST_SKIP() << "no reopen hook";
  METADATA_ASSERT_OK_AND_ASSIGN(uint64_t id, NextId(store(), key));
  EXPECT_EQ(id, 4u);
}

}  // namespace ledgerkv::metadata::contract
