// EtcdStore against a real etcd (Debian's etcd-server): the whole contract
// suite, plus what only a networked store has to promise: an unreachable or
// hung etcd is UNAVAILABLE within the op timeout (never a hang), sessions end
// when etcd is lost and work again when it returns, watches resume without
// losing or repeating a change, listings are one point in time, compaction
// is reported, multiple endpoints fail over, and the URI factory.
#include "metadata/etcd_store.h"

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "metadata/etcd_connection.h"
#include "metadata/etcd_test_util.h"
#include "metadata/metadata_contract_test.h"
#include "metadata/open_store.h"
#include "proto/etcd/rpc.grpc.pb.h"

namespace ledgerkv::metadata {
namespace {

using contract::EventCollector;
using contract::MetadataContractParam;
using contract::MetadataStoreContractTest;
using contract::StoreHarness;
using contract::WaitUntil;
using EtcdProcess = ::ledgerkv::metadata::testing::EtcdProcess;

// One etcd for every test that does not stop it; tests keep apart by key
// prefix (EtcdOptions::key_prefix), and run one at a time, so revision
// checks within a test still hold.
class SharedEtcd : public ::testing::Environment {
 public:
  static EtcdProcess* Get() { return etcd_.get(); }
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<EtcdProcess>> etcd = EtcdProcess::Start();
    ASSERT_TRUE(etcd.ok()) << etcd.status();
    etcd_ = std::move(etcd).value();
  }
  void TearDown() override { etcd_.reset(); }

 private:
  static inline std::unique_ptr<EtcdProcess> etcd_;
};
::testing::Environment* const kSharedEtcd =
    ::testing::AddGlobalTestEnvironment(new SharedEtcd);

std::string UniquePrefix(std::string_view what) {
  static std::atomic<int> counter{0};
  return absl::StrCat("/", std::string(what), "/", getpid(), "-", counter++, "/");
}

EtcdOptions SharedOptions(const std::string& key_prefix) {
  EtcdOptions options;
  if (SharedEtcd::Get() != nullptr) options.endpoints = {SharedEtcd::Get()->endpoint()};
  options.key_prefix = key_prefix;
  return options;
}

std::unique_ptr<EtcdStore> MustCreate(EtcdOptions options) {
  absl::StatusOr<std::unique_ptr<EtcdStore>> store = EtcdStore::Create(std::move(options));
  EXPECT_TRUE(store.ok()) << store.status();
  return store.ok() ? std::move(store).value() : nullptr;
}

// A fresh key namespace per test on the shared etcd; Reopen makes a new
// client over the same namespace (as after a process restart). Small pages,
// so every List in the suite pages.
class EtcdHarness : public StoreHarness {
 public:
  absl::StatusOr<std::unique_ptr<MetadataStore>> Create() override {
    if (SharedEtcd::Get() == nullptr) return absl::FailedPreconditionError("no etcd");
    EtcdOptions options = SharedOptions(prefix_);
    options.list_page_size = 3;
    ASSIGN_OR_RETURN(std::unique_ptr<EtcdStore> store, EtcdStore::Create(std::move(options)));
    return std::unique_ptr<MetadataStore>(std::move(store));
  }
  absl::StatusOr<std::unique_ptr<MetadataStore>> Reopen(
      std::unique_ptr<MetadataStore> store) override {
    store.reset();
    return Create();
  }

 private:
  const std::string prefix_ = UniquePrefix("contract");
};

INSTANTIATE_TEST_SUITE_P(Etcd, MetadataStoreContractTest,
                         ::testing::Values(MetadataContractParam{
                             "etcd", [] { return std::make_unique<EtcdHarness>(); }}),
                         contract::MetadataContractParamName);

// ---- Error mapping ---------------------------------------------------------

// The store's callers read UNAVAILABLE from a mutation as "its outcome is
// unknown": the WAL then keeps a ledger its log may name, and re-reads
// before it deletes anything. A gRPC call that broke off on the way (a
// stream reset gives INTERNAL, UNKNOWN or CANCELLED) may have reached etcd,
// so it must be UNAVAILABLE too, not a definite failure; etcd's own answers
// keep their codes.
TEST(EtcdErrorTest, ACallThatBrokeOffIsAnUnknownOutcomeAndEtcdsAnswersKeepTheirCodes) {
  using internal::EtcdConnection;
  for (grpc::StatusCode code :
       {grpc::StatusCode::UNAVAILABLE, grpc::StatusCode::DEADLINE_EXCEEDED,
        grpc::StatusCode::CANCELLED, grpc::StatusCode::UNKNOWN, grpc::StatusCode::INTERNAL}) {
    const absl::Status s = EtcdConnection::ToStatus(
        grpc::Status(code, "Received RST_STREAM with error code 2"), "127.0.0.1:2379", "Txn");
    EXPECT_TRUE(absl::IsUnavailable(s)) << code << ": " << s;
    EXPECT_TRUE(absl::StrContains(s.message(), "127.0.0.1:2379")) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), "Txn")) << s;
  }
  for (grpc::StatusCode code :
       {grpc::StatusCode::INVALID_ARGUMENT, grpc::StatusCode::NOT_FOUND,
        grpc::StatusCode::FAILED_PRECONDITION, grpc::StatusCode::RESOURCE_EXHAUSTED,
        grpc::StatusCode::PERMISSION_DENIED, grpc::StatusCode::OUT_OF_RANGE}) {
    const absl::Status s =
        EtcdConnection::ToStatus(grpc::Status(code, "etcdserver: an answer"), "a:1", "Txn");
    EXPECT_EQ(static_cast<int>(s.code()), static_cast<int>(code)) << s;
  }
}

// ---- URIs ------------------------------------------------------------------

TEST(OpenMetadataStoreTest, MalformedUrisAreInvalidArgument) {
  for (const char* uri : {"", "zk://h:1", "etcd://", "etcd:///prefix", "etcd://host",
                          "etcd://h:port", "etcd://h:0", "etcd://h:70000", "etcd://h:1,",
                          "etcd://:1", "embedded://", "/just/a/path"}) {
    absl::StatusOr<std::unique_ptr<MetadataStore>> store = OpenMetadataStore(uri);
    EXPECT_TRUE(absl::IsInvalidArgument(store.status())) << uri << ": " << store.status();
  }
}

TEST(OpenMetadataStoreTest, EtcdUriGivesEndpointsAndKeyPrefix) {
  absl::StatusOr<EtcdOptions> options = ParseEtcdUri("etcd://a:1,10.0.0.2:2379/ns/x");
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->endpoints, (std::vector<std::string>{"a:1", "10.0.0.2:2379"}));
  EXPECT_EQ(options->key_prefix, "/ns/x");
  options = ParseEtcdUri("etcd://a:1/");
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->key_prefix, "");
}

TEST(OpenMetadataStoreTest, OpensEtcdWithIsolatedPrefixesAndEmbedded) {
  ASSERT_NE(SharedEtcd::Get(), nullptr);
  const std::string prefix = UniquePrefix("uri");
  absl::StatusOr<std::unique_ptr<MetadataStore>> a =
      OpenMetadataStore(SharedEtcd::Get()->Uri(prefix + "a"));
  absl::StatusOr<std::unique_ptr<MetadataStore>> b =
      OpenMetadataStore(SharedEtcd::Get()->Uri(prefix + "b"));
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  METADATA_ASSERT_OK((*a)->Put("k", "from a", kMustNotExist));
  METADATA_ASSERT_OK((*b)->Put("k", "from b", kMustNotExist));
  METADATA_ASSERT_OK_AND_ASSIGN(VersionedValue got, (*a)->Get("k"));
  EXPECT_EQ(got.value, "from a");
  METADATA_ASSERT_OK_AND_ASSIGN(std::vector<KeyValue> listed, (*b)->List(""));
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0].key, "k");
  EXPECT_EQ(listed[0].value, "from b");

  std::string dir = ::testing::TempDir() + "ledgerkv_open_store_" + std::to_string(getpid());
  absl::StatusOr<std::unique_ptr<MetadataStore>> embedded = OpenMetadataStore("embedded://" + dir);
  ASSERT_TRUE(embedded.ok()) << embedded.status();
  METADATA_ASSERT_OK((*embedded)->Put("k", "v", kAnyVersion));
  embedded->reset();
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

// ---- etcd specifics on the shared etcd ---------------------------------------

// A listing in pages must still be one point in time: a writer moves keys
// from a/ to b/ (one txn each), so at every revision exactly kKeys exist.
// Pages read at different revisions would see a moved key twice or never.
TEST(EtcdStoreTest, PagedListIsOnePointInTime) {
  constexpr int kKeys = 30;
  EtcdOptions options = SharedOptions(UniquePrefix("paged"));
  options.list_page_size = 2;
  std::unique_ptr<EtcdStore> store = MustCreate(options);
  ASSERT_NE(store, nullptr);
  std::vector<TxnOp> create;
  for (int i = 0; i < kKeys; ++i) {
    create.push_back(TxnOp{TxnOp::Type::kPut, absl::StrCat("p/a", 100 + i), "v"});
  }
  METADATA_ASSERT_OK(store->Txn({}, create));

  std::atomic<bool> stop{false};
  std::atomic<int> rounds{0};
  absl::Status writer_status;
  std::thread writer([&] {
    for (int round = 0; !stop.load(); ++round) {
      ++rounds;
      const int i = round % kKeys;
      const bool to_b = (round / kKeys) % 2 == 0;
      const std::string from = absl::StrCat("p/", to_b ? "a" : "b", 100 + i);
      const std::string to = absl::StrCat("p/", to_b ? "b" : "a", 100 + i);
      absl::StatusOr<TxnResult> r = store->Txn(
          {}, {TxnOp{TxnOp::Type::kDelete, from, ""}, TxnOp{TxnOp::Type::kPut, to, "v"}});
      if (!r.ok()) {
        writer_status = r.status();
        return;
      }
    }
  });
  for (int listing = 0; listing < 15; ++listing) {
    absl::StatusOr<std::vector<KeyValue>> listed = store->List("p/");
    ASSERT_TRUE(listed.ok()) << listed.status();
    EXPECT_EQ(listed->size(), static_cast<size_t>(kKeys)) << "listing " << listing;
    for (size_t i = 1; i < listed->size(); ++i) EXPECT_LT((*listed)[i - 1].key, (*listed)[i].key);
  }
  stop = true;
  writer.join();
  EXPECT_GT(rounds.load(), 1) << "the writer never ran alongside the listings";
  EXPECT_TRUE(writer_status.ok()) << writer_status;
}

std::unique_ptr<etcdserverpb::KV::Stub> RawKv(const std::string& endpoint) {
  return etcdserverpb::KV::NewStub(
      grpc::CreateChannel(endpoint, grpc::InsecureChannelCredentials()));
}

TEST(EtcdStoreTest, WatchFromCompactedRevisionIsOutOfRange) {
  std::unique_ptr<EtcdStore> store = MustCreate(SharedOptions(UniquePrefix("compact")));
  ASSERT_NE(store, nullptr);
  METADATA_ASSERT_OK_AND_ASSIGN(Version v1, store->Put("w/k", "1", kAnyVersion));
  METADATA_ASSERT_OK(store->Put("w/k", "2", kAnyVersion));
  METADATA_ASSERT_OK_AND_ASSIGN(Version v3, store->Put("w/k", "3", kAnyVersion));

  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
  etcdserverpb::CompactionRequest request;
  request.set_revision(v3);
  request.set_physical(true);
  etcdserverpb::CompactionResponse response;
  ASSERT_TRUE(RawKv(SharedEtcd::Get()->endpoint())->Compact(&context, request, &response).ok());

  EventCollector collector;
  absl::StatusOr<std::unique_ptr<WatchHandle>> old =
      store->Watch("w/", v1, collector.Callback());
  EXPECT_TRUE(absl::IsOutOfRange(old.status())) << old.status();
  // From the compaction revision on, history is still there.
  METADATA_ASSERT_OK_AND_ASSIGN(auto watch, store->Watch("w/", v3, collector.Callback()));
  ASSERT_TRUE(collector.WaitForEvents(1));
  EXPECT_EQ(collector.Events()[0].version, v3);
  EXPECT_EQ(collector.Events()[0].value, "3");
}

TEST(EtcdStoreTest, SessionEndsWhenEtcdDropsItsLease) {
  std::unique_ptr<EtcdStore> store = MustCreate(SharedOptions(UniquePrefix("drop")));
  ASSERT_NE(store, nullptr);
  std::atomic<int> expired{0};
  SessionOptions options;
  options.ttl = absl::Seconds(2);
  options.on_expired = [&] { ++expired; };
  METADATA_ASSERT_OK_AND_ASSIGN(SessionId session, store->CreateSession(options));
  METADATA_ASSERT_OK(store->Put("owner", "me", kMustNotExist, session));

  // Someone else (an operator, etcdctl lease revoke) ends the lease.
  auto lease = etcdserverpb::Lease::NewStub(
      grpc::CreateChannel(SharedEtcd::Get()->endpoint(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
  etcdserverpb::LeaseRevokeRequest request;
  request.set_id(session);
  etcdserverpb::LeaseRevokeResponse response;
  ASSERT_TRUE(lease->LeaseRevoke(&context, request, &response).ok());

  // The next keepalive (every TTL/3) learns it: the owner is told.
  EXPECT_TRUE(WaitUntil([&] { return expired.load() == 1; }, absl::Seconds(3)));
  METADATA_EXPECT_CODE(store->Get("owner"), kNotFound);
  METADATA_EXPECT_CODE(store->Put("owner", "me", kAnyVersion, session), kNotFound);
  METADATA_EXPECT_CODE(store->KeepAlive(session), kNotFound);
}

TEST(EtcdStoreTest, TriesTheNextEndpointWhenOneIsDown) {
  ASSERT_NE(SharedEtcd::Get(), nullptr);
  // Nothing listens on a port that was just free.
  absl::StatusOr<std::unique_ptr<EtcdProcess>> spare = EtcdProcess::Start();
  ASSERT_TRUE(spare.ok()) << spare.status();
  const std::string dead = (*spare)->endpoint();
  (*spare)->Stop();

  EtcdOptions options = SharedOptions(UniquePrefix("failover"));
  options.endpoints = {dead, SharedEtcd::Get()->endpoint()};
  options.op_timeout = absl::Seconds(2);
  std::unique_ptr<EtcdStore> store = MustCreate(options);
  ASSERT_NE(store, nullptr);
  EventCollector collector;
  METADATA_ASSERT_OK_AND_ASSIGN(auto watch, store->Watch("", 0, collector.Callback()));
  METADATA_ASSERT_OK_AND_ASSIGN(SessionId session, store->CreateSession(SessionOptions{}));
  METADATA_ASSERT_OK(store->Put("e", "1", kMustNotExist, session));
  METADATA_ASSERT_OK(store->Get("e"));
  METADATA_ASSERT_OK(store->List(""));
  ASSERT_TRUE(collector.WaitForEvents(1));
  METADATA_ASSERT_OK(store->CloseSession(session));

  // The dead endpoint alone: Create says so, naming etcd and the endpoint.
  options.endpoints = {dead};
  options.dial_timeout = absl::Milliseconds(500);
  const absl::Time start = absl::Now();
  absl::StatusOr<std::unique_ptr<EtcdStore>> none = EtcdStore::Create(options);
  EXPECT_TRUE(absl::IsUnavailable(none.status())) << none.status();
  EXPECT_TRUE(absl::StrContains(none.status().message(), dead)) << none.status();
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));
}

// ---- Outages (an etcd of their own) --------------------------------------------

class EtcdOutageTest : public ::testing::Test {
 protected:
  static constexpr absl::Duration kOpTimeout = absl::Seconds(1);
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<EtcdProcess>> etcd = EtcdProcess::Start();
    ASSERT_TRUE(etcd.ok()) << etcd.status();
    etcd_ = std::move(etcd).value();
    EtcdOptions options;
    options.endpoints = {etcd_->endpoint()};
    options.op_timeout = kOpTimeout;
    store_ = MustCreate(options);
    ASSERT_NE(store_, nullptr);
  }
  void TearDown() override {
    store_.reset();
    etcd_.reset();
  }
  // Restarts etcd and waits until the store reaches it again.
  void RestartAndReconnect() {
    absl::Status s = etcd_->Restart();
    ASSERT_TRUE(s.ok()) << s;
    EXPECT_TRUE(WaitUntil([&] { return store_->CurrentRevision().ok(); }))
        << store_->CurrentRevision().status();
  }
  // `status` is UNAVAILABLE, names etcd and its endpoint, and came within
  // the op timeout (plus scheduling slack) of `start`.
  void ExpectUnavailable(const absl::Status& status, absl::Time start, const char* what) {
    EXPECT_TRUE(absl::IsUnavailable(status)) << what << ": " << status;
    EXPECT_TRUE(absl::StrContains(status.message(), "etcd")) << what << ": " << status;
    EXPECT_TRUE(absl::StrContains(status.message(), etcd_->endpoint())) << what << ": " << status;
    EXPECT_LT(absl::Now() - start, kOpTimeout + absl::Seconds(1)) << what;
  }

  std::unique_ptr<EtcdProcess> etcd_;
  std::unique_ptr<EtcdStore> store_;
};

TEST_F(EtcdOutageTest, StoppedEtcdIsUnavailableWithinOpTimeoutAndServesAgainAfterRestart) {
  METADATA_ASSERT_OK_AND_ASSIGN(Version v, store_->Put("k", "before", kMustNotExist));
  etcd_->Stop();
  absl::Time start = absl::Now();
  ExpectUnavailable(store_->Get("k").status(), start, "Get");
  start = absl::Now();
  ExpectUnavailable(store_->Put("k", "x", v).status(), start, "Put");
  start = absl::Now();
  ExpectUnavailable(store_->Delete("k", v), start, "Delete");
  start = absl::Now();
  ExpectUnavailable(store_->List("").status(), start, "List");
  start = absl::Now();
  ExpectUnavailable(store_->Txn({}, {TxnOp{TxnOp::Type::kPut, "t", "x"}}).status(), start, "Txn");
  start = absl::Now();
  ExpectUnavailable(store_->CurrentRevision().status(), start, "CurrentRevision");
  start = absl::Now();
  ExpectUnavailable(store_->CreateSession(SessionOptions{}).status(), start, "CreateSession");
  start = absl::Now();
  EventCollector collector;
  ExpectUnavailable(store_->Watch("", 0, collector.Callback()).status(), start, "Watch");

  ASSERT_NO_FATAL_FAILURE(RestartAndReconnect());
  METADATA_ASSERT_OK_AND_ASSIGN(VersionedValue got, store_->Get("k"));
  EXPECT_EQ(got.value, "before");
  EXPECT_EQ(got.version, v);
  METADATA_ASSERT_OK(store_->Put("k", "after", v));
}

TEST_F(EtcdOutageTest, HungEtcdIsUnavailableAfterOpTimeoutNotAHang) {
  METADATA_ASSERT_OK(store_->Put("k", "v", kAnyVersion));
  etcd_->Pause();
  absl::Time start = absl::Now();
  ExpectUnavailable(store_->Get("k").status(), start, "Get");
  EXPECT_GE(absl::Now() - start, kOpTimeout - absl::Milliseconds(100));
  start = absl::Now();
  ExpectUnavailable(store_->Put("k", "w", kAnyVersion).status(), start, "Put");
  etcd_->Resume();
  EXPECT_TRUE(WaitUntil([&] { return store_->Get("k").ok(); }));
}

// A keepalive stuck on a hung etcd must not delay the news past the TTL,
// even when the op timeout is longer than the TTL.
TEST_F(EtcdOutageTest, SessionEndsWithinTtlWhenEtcdHangsDespiteLongOpTimeout) {
  constexpr absl::Duration kTtl = absl::Seconds(2);
  EtcdOptions options;
  options.endpoints = {etcd_->endpoint()};
  options.op_timeout = absl::Seconds(10);
  std::unique_ptr<EtcdStore> store = MustCreate(options);
  ASSERT_NE(store, nullptr);
  std::atomic<int> expired{0};
  SessionOptions session_options;
  session_options.ttl = kTtl;
  session_options.on_expired = [&] { ++expired; };
  METADATA_ASSERT_OK(store->CreateSession(session_options));

  etcd_->Pause();
  const absl::Time paused = absl::Now();
  EXPECT_TRUE(WaitUntil([&] { return expired.load() > 0; }, kTtl + absl::Seconds(3)));
  EXPECT_LE(absl::Now() - paused, kTtl + absl::Seconds(1));
  etcd_->Resume();
}

// Two sessions on a hung etcd with a long op timeout: the shorter one ends
// first and its lease is queued for revoking. Neither that revoke nor any
// other call of the keeper may hold the news of the longer one past its
// own TTL (another process could own its keys by then).
TEST_F(EtcdOutageTest, EachSessionEndsWithinItsTtlWhileAnotherOnesRevokeHangs) {
  constexpr absl::Duration kShortTtl = absl::Seconds(2);
  constexpr absl::Duration kLongTtl = absl::Seconds(4);
  EtcdOptions options;
  options.endpoints = {etcd_->endpoint()};
  options.op_timeout = absl::Seconds(10);
  std::unique_ptr<EtcdStore> store = MustCreate(options);
  ASSERT_NE(store, nullptr);
  std::atomic<int> short_expired{0}, long_expired{0};
  SessionOptions short_options;
  short_options.ttl = kShortTtl;
  short_options.on_expired = [&] { ++short_expired; };
  SessionOptions long_options;
  long_options.ttl = kLongTtl;
  long_options.on_expired = [&] { ++long_expired; };
  METADATA_ASSERT_OK(store->CreateSession(short_options));
  METADATA_ASSERT_OK(store->CreateSession(long_options));

  etcd_->Pause();
  const absl::Time paused = absl::Now();
  EXPECT_TRUE(WaitUntil([&] { return short_expired.load() > 0; }, kShortTtl + absl::Seconds(3)));
  EXPECT_LE(absl::Now() - paused, kShortTtl + absl::Seconds(1));
  EXPECT_TRUE(WaitUntil([&] { return long_expired.load() > 0; }, kLongTtl + absl::Seconds(12)));
  EXPECT_LE(absl::Now() - paused, kLongTtl + absl::Seconds(1))
      << "the loss of the longer session was reported late";
  etcd_->Resume();
}

// A session closed while etcd is down: the close is not confirmed, and
// etcd renews every lease when it restarts. The store keeps the revoke and
// sends it once etcd is back, so the closed owner's keys go at once instead
// of a TTL later.
TEST_F(EtcdOutageTest, ACloseThatEtcdMissedIsRevokedOnceEtcdIsBack) {
  SessionOptions options;
  options.ttl = absl::Seconds(20);
  METADATA_ASSERT_OK_AND_ASSIGN(SessionId session, store_->CreateSession(options));
  METADATA_ASSERT_OK(store_->Put("owner", "me", kMustNotExist, session));
  etcd_->Stop();
  EXPECT_TRUE(absl::IsUnavailable(store_->CloseSession(session)));
  METADATA_EXPECT_CODE(store_->CloseSession(session), kNotFound);  // closed here either way

  ASSERT_NO_FATAL_FAILURE(RestartAndReconnect());
  const absl::Time back = absl::Now();
  EXPECT_TRUE(WaitUntil([&] { return absl::IsNotFound(store_->Get("owner").status()); },
                        absl::Seconds(25)));
  EXPECT_LT(absl::Now() - back, absl::Seconds(5)) << "the closed session's key stayed for its TTL";
}

TEST_F(EtcdOutageTest, SessionEndsWhenEtcdIsLostAndSessionsWorkAgainAfterRestart) {
  constexpr absl::Duration kTtl = absl::Seconds(4);
  std::atomic<int> expired{0};
  SessionOptions options;
  options.ttl = kTtl;
  options.on_expired = [&] { ++expired; };
  METADATA_ASSERT_OK_AND_ASSIGN(SessionId session, store_->CreateSession(options));
  METADATA_ASSERT_OK(store_->Put("owner", "me", kMustNotExist, session));

  etcd_->Stop();
  const absl::Time stopped = absl::Now();
  // Ownership is given up no later than a TTL after the last refresh etcd
  // answered, i.e. within a TTL of losing etcd (plus the keeper's tick).
  ASSERT_TRUE(WaitUntil([&] { return expired.load() > 0; }, kTtl + absl::Seconds(2)));
  EXPECT_LE(absl::Now() - stopped, kTtl + absl::Seconds(1));
  METADATA_EXPECT_CODE(store_->Put("owner", "again", kAnyVersion, session), kNotFound);

  ASSERT_NO_FATAL_FAILURE(RestartAndReconnect());
  // etcd renews every lease on restart; the store revokes the one it gave
  // up, so the old owner's key goes well before the lease's own TTL.
  const absl::Time back = absl::Now();
  EXPECT_TRUE(WaitUntil([&] { return absl::IsNotFound(store_->Get("owner").status()); },
                        absl::Seconds(10)));
  EXPECT_LT(absl::Now() - back, kTtl - absl::Seconds(1));

  METADATA_ASSERT_OK_AND_ASSIGN(SessionId fresh, store_->CreateSession(options));
  METADATA_ASSERT_OK(store_->Put("owner", "me again", kMustNotExist, fresh));
  absl::SleepFor(absl::Seconds(1));
  EXPECT_EQ(expired.load(), 1);
  METADATA_ASSERT_OK(store_->CloseSession(fresh));
  METADATA_EXPECT_CODE(store_->Get("owner"), kNotFound);
}

TEST_F(EtcdOutageTest, WatchResumesAfterRestartWithoutLosingOrRepeatingChanges) {
  EventCollector collector;
  METADATA_ASSERT_OK_AND_ASSIGN(auto watch, store_->Watch("w/", 0, collector.Callback()));
  METADATA_ASSERT_OK_AND_ASSIGN(Version v1, store_->Put("w/1", "a", kAnyVersion));
  ASSERT_TRUE(collector.WaitForEvents(1));

  etcd_->Stop();
  ASSERT_NO_FATAL_FAILURE(RestartAndReconnect());
  // Committed while the watch may still be reconnecting: replayed from
  // the revision after the last one it delivered.
  METADATA_ASSERT_OK_AND_ASSIGN(Version v2, store_->Put("w/2", "b", kAnyVersion));
  METADATA_ASSERT_OK(store_->Delete("w/1", v1));
  const Version v3 = store_->CurrentRevision().value_or(-1);
  ASSERT_TRUE(collector.WaitForEvents(3));
  absl::SleepFor(contract::kQuietPeriod);

  const std::vector<WatchEvent> events = collector.Events();
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0].key, "w/1");
  EXPECT_EQ(events[0].version, v1);
  EXPECT_EQ(events[1].key, "w/2");
  EXPECT_EQ(events[1].value, "b");
  EXPECT_EQ(events[1].version, v2);
  EXPECT_EQ(events[2].key, "w/1");
  EXPECT_EQ(events[2].type, WatchEvent::Type::kDelete);
  EXPECT_EQ(events[2].version, v3);
}

// The watch delivered the put of w/1 at v1, then the put of w/2 at v2, and
// nothing else (no change lost, none repeated).
void ExpectPutsOfW1ThenW2(EventCollector& collector, Version v1, Version v2) {
  ASSERT_TRUE(collector.WaitForEvents(2));
  absl::SleepFor(contract::kQuietPeriod);
  const std::vector<WatchEvent> events = collector.Events();
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].key, "w/1");
  EXPECT_EQ(events[0].version, v1);
  EXPECT_EQ(events[1].key, "w/2");
  EXPECT_EQ(events[1].version, v2);
}

TEST_F(EtcdOutageTest, AWatchMovesPastADeadEndpointToOneThatCameBack) {
  // A second endpoint that nothing listens on.
  absl::StatusOr<std::unique_ptr<EtcdProcess>> spare = EtcdProcess::Start();
  ASSERT_TRUE(spare.ok()) << spare.status();
  const std::string dead = (*spare)->endpoint();
  (*spare)->Stop();
  EtcdOptions options;
  options.endpoints = {etcd_->endpoint(), dead};
  options.op_timeout = kOpTimeout;
  std::unique_ptr<EtcdStore> store = MustCreate(options);
  ASSERT_NE(store, nullptr);

  EventCollector collector;
  METADATA_ASSERT_OK_AND_ASSIGN(auto watch, store->Watch("w/", 0, collector.Callback()));
  METADATA_ASSERT_OK_AND_ASSIGN(Version v1, store_->Put("w/1", "a", kAnyVersion));
  ASSERT_TRUE(collector.WaitForEvents(1));

  // The stream breaks; the watch tries the dead endpoint next. It must not
  // wait there for good while the first one serves again.
  etcd_->Stop();
  ASSERT_NO_FATAL_FAILURE(RestartAndReconnect());
  METADATA_ASSERT_OK_AND_ASSIGN(Version v2, store_->Put("w/2", "b", kAnyVersion));
  ExpectPutsOfW1ThenW2(collector, v1, v2);
}

// ---- A three-member cluster -------------------------------------------------

TEST(EtcdClusterTest, AWatchIsNeverServedByAMemberThatHasLostItsLeader) {
  absl::StatusOr<std::vector<std::unique_ptr<EtcdProcess>>> cluster =
      EtcdProcess::StartCluster(3);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  std::vector<std::unique_ptr<EtcdProcess>>& members = *cluster;
  EtcdOptions options;
  options.endpoints = {members[0]->endpoint()};
  options.op_timeout = absl::Seconds(2);
  std::unique_ptr<EtcdStore> store = MustCreate(options);
  ASSERT_NE(store, nullptr);
  EventCollector collector;
  METADATA_ASSERT_OK_AND_ASSIGN(auto watch, store->Watch("w/", 0, collector.Callback()));
  METADATA_ASSERT_OK_AND_ASSIGN(Version v1, store->Put("w/1", "a", kAnyVersion));
  ASSERT_TRUE(collector.WaitForEvents(1));

  // m0 alone has no leader once its election timeout passes. It could not
  // learn of changes a majority commits without it (as when it is
  // partitioned away), so a watch there would stay open and silent: it is
  // refused instead, and the reason named.
  members[1]->Stop();
  members[2]->Stop();
  absl::Status refused;
  EXPECT_TRUE(WaitUntil(
      [&] {
        EventCollector unused;
        refused = store->Watch("w/", 0, unused.Callback()).status();
        return absl::IsUnavailable(refused) && absl::StrContains(refused.message(), "no leader");
      },
      absl::Seconds(15)))
      << "last: " << refused;

  // Once the cluster has a leader again, the first watch carries on from
  // where it was: the next change arrives once, nothing is repeated.
  for (int i : {1, 2}) {
    absl::Status s = members[i]->Restart();
    ASSERT_TRUE(s.ok()) << s;
  }
  METADATA_ASSERT_OK_AND_ASSIGN(Version v2, store->Put("w/2", "b", kAnyVersion));
  ExpectPutsOfW1ThenW2(collector, v1, v2);
  EventCollector later;
  const absl::Status again = store->Watch("w/", 0, later.Callback()).status();
  EXPECT_TRUE(again.ok()) << again;
}

}  // namespace
}  // namespace ledgerkv::metadata
