// BookieServer with a metadata store: cookie (instance id) check,
// registration, garbage collection.
#include <atomic>
#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/synchronization/mutex.h"
#include "base/entry_checksum.h"
#include "base/fault_env.h"
#include "base/small_tmpfs.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "ledger/bookie/bookie_server.h"
#include "ledger/bookie/test_util.h"
#include "metadata/embedded_store.h"
#include "proto/bookie.grpc.pb.h"
#include "proto/metadata.pb.h"

namespace ledgerkv::bookie {
namespace {

using testing::NewTempDir;

// The embedded store, with List failing on demand (a metadata outage),
// sessions that end on demand as if their TTL ran out (a bookie cut off
// from etcd), and a hook before each Txn.
class FlakyListStore final : public metadata::MetadataStore {
 public:
  explicit FlakyListStore(metadata::MetadataStore* base) : base_(base) {}
  void FailList(bool fail) { fail_list_ = fail; }
  // Runs once, before the next Txn.
  std::function<void()> before_txn;

  // Ends every live session (its ephemeral keys go), runs `meanwhile`,
  // then tells the sessions' owners (on_expired), as a lapsed lease does.
  void ExpireSessions(const std::function<void()>& meanwhile) {
    std::vector<std::pair<metadata::SessionId, std::function<void()>>> ended;
    {
      absl::MutexLock l(&mu_);
      ended.swap(sessions_);
    }
    for (const auto& [id, on_expired] : ended) EXPECT_TRUE(base_->CloseSession(id).ok());
    meanwhile();
    for (const auto& [id, on_expired] : ended) {
      if (on_expired) on_expired();
    }
  }

  absl::StatusOr<metadata::VersionedValue> Get(std::string_view key) override {
    return base_->Get(key);
  }
  absl::StatusOr<metadata::Version> Put(std::string_view key, std::string_view value,
                                        metadata::Version expected,
                                        metadata::SessionId session = metadata::kNoSession) override {
    return base_->Put(key, value, expected, session);
  }
  absl::Status Delete(std::string_view key, metadata::Version expected) override {
    return base_->Delete(key, expected);
  }
  absl::StatusOr<std::vector<metadata::KeyValue>> List(std::string_view prefix) override {
    if (fail_list_) return absl::UnavailableError("injected: metadata store unreachable");
    return base_->List(prefix);
  }
  absl::StatusOr<metadata::TxnResult> Txn(const std::vector<metadata::TxnCompare>& c,
                                          const std::vector<metadata::TxnOp>& o) override {
    // Taken out first: a hook may set the next one (or none).
    if (auto hook = std::exchange(before_txn, nullptr)) hook();
    return base_->Txn(c, o);
  }
  absl::StatusOr<std::unique_ptr<metadata::WatchHandle>> Watch(
      std::string_view prefix, metadata::Version from, metadata::WatchCallback cb) override {
    return base_->Watch(prefix, from, std::move(cb));
  }
  absl::StatusOr<metadata::SessionId> CreateSession(const metadata::SessionOptions& o) override {
    absl::StatusOr<metadata::SessionId> id = base_->CreateSession(o);
    if (id.ok()) {
      absl::MutexLock l(&mu_);
      sessions_.emplace_back(*id, o.on_expired);
    }
    return id;
  }
  absl::Status KeepAlive(metadata::SessionId s) override { return base_->KeepAlive(s); }
  absl::Status CloseSession(metadata::SessionId s) override { return base_->CloseSession(s); }
  absl::StatusOr<metadata::Version> CurrentRevision() override {
    return base_->CurrentRevision();
  }

 private:
  metadata::MetadataStore* const base_;
  std::atomic<bool> fail_list_{false};
  absl::Mutex mu_;
  std::vector<std::pair<metadata::SessionId, std::function<void()>>> sessions_
      ABSL_GUARDED_BY(mu_);
};

class BookieServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto store = metadata::EmbeddedStore::Open(NewTempDir("meta"));
    ASSERT_TRUE(store.ok()) << store.status();
    embedded_ = std::move(*store);
    store_ = std::make_unique<FlakyListStore>(embedded_.get());
    data_dir_ = NewTempDir("bookie");
  }

  BookieOptions Options() {
    BookieOptions o;
    o.data_dir = data_dir_;
    o.bookie_id = "bookie-1";
    o.metadata = store_.get();
    o.cluster = "test";
    o.gc_interval = absl::Hours(1);
    return o;
  }

  std::unique_ptr<BookieServer> Start(BookieOptions o) {
    auto s = BookieServer::Start(std::move(o));
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? std::move(*s) : nullptr;
  }

  // GetInfo of `server` over gRPC into *out; whether the call succeeded.
  bool GetInfo(BookieServer& server, v1::GetInfoResponse* out) {
    auto stub = v1::Bookie::NewStub(
        grpc::CreateChannel(server.address(), grpc::InsecureChannelCredentials()));
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    return stub->GetInfo(&ctx, v1::GetInfoRequest(), out).ok();
  }

  // The code the bookie answers an add of (ledger, entry) with.
  v1::Code AddCode(BookieServer& server, uint64_t ledger, int64_t entry) {
    auto stub = v1::Bookie::NewStub(
        grpc::CreateChannel(server.address(), grpc::InsecureChannelCredentials()));
    v1::AddRequest req;
    v1::Entry* e = req.add_entries();
    e->set_ledger_id(ledger);
    e->set_entry_id(entry);
    e->set_lac(-1);
    e->set_payload("data");
    e->set_checksum(EntryChecksum(ledger, entry, -1, "data"));
    v1::AddResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    if (!stub->Add(&ctx, req, &resp).ok() || resp.results_size() == 0) {
      return v1::CODE_UNSPECIFIED;
    }
    return resp.results(0).code();
  }

  void AddEntry(BookieServer& server, uint64_t ledger, int64_t entry) {
    ASSERT_EQ(AddCode(server, ledger, entry), v1::OK);
  }

  v1::Code ReadCode(BookieServer& server, uint64_t ledger) {
    auto stub = v1::Bookie::NewStub(
        grpc::CreateChannel(server.address(), grpc::InsecureChannelCredentials()));
    v1::ReadRequest req;
    req.set_ledger_id(ledger);
    req.set_count(1);
    v1::ReadResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    EXPECT_TRUE(stub->Read(&ctx, req, &resp).ok());
    if (resp.code() != v1::OK) return resp.code();
    return resp.results_size() > 0 ? resp.results(0).code() : v1::CODE_UNSPECIFIED;
  }

  absl::StatusOr<meta::v1::BookieRegistration> Registration(const std::string& key) {
    auto got = store_->Get(key);
    if (!got.ok()) return got.status();
    meta::v1::BookieRegistration reg;
    if (!reg.ParseFromString(got->value)) return absl::DataLossError("unparseable");
    return reg;
  }

  metadata::Keys keys_{"test"};
  std::unique_ptr<metadata::EmbeddedStore> embedded_;
  std::unique_ptr<FlakyListStore> store_;
  std::string data_dir_;
};

// Shutdown from two threads at once (a signal thread and the destructor's)
// shuts down once: the second waits for the first and returns; nothing is
// joined or freed twice (ASan in CI), and the data stays readable after.
TEST_F(BookieServerTest, ConcurrentShutdownsShutDownOnce) {
  for (int round = 0; round < 5; ++round) {
    auto server = Start(Options());
    ASSERT_NE(server, nullptr);
    AddEntry(*server, 1, round);
    std::thread other([&] { server->Shutdown(); });
    server->Shutdown();
    other.join();
    server.reset();
  }
  auto server = Start(Options());
  ASSERT_NE(server, nullptr);
  EXPECT_EQ(ReadCode(*server, 1), v1::OK);
}

TEST_F(BookieServerTest, RegistersCookieAndEphemeralKey) {
  auto server = Start(Options());
  auto cookie = Registration(keys_.Cookie("bookie-1"));
  ASSERT_TRUE(cookie.ok()) << cookie.status();
  EXPECT_EQ(cookie->instance_id(), server->instance_id());
  auto reg = Registration(keys_.Bookie("bookie-1"));
  ASSERT_TRUE(reg.ok()) << reg.status();
  EXPECT_EQ(reg->address(), server->address());
  EXPECT_EQ(reg->instance_id(), server->instance_id());
  EXPECT_FALSE(reg->read_only());
  server->Shutdown();
  EXPECT_TRUE(absl::IsNotFound(store_->Get(keys_.Bookie("bookie-1")).status()));
  // Restarting on the same data dir matches the cookie.
  server = Start(Options());
  EXPECT_EQ(server->instance_id(), cookie->instance_id());
}

// `ledgerkv cluster delete-cookie` deletes the cookie in one transaction
// on "not registered": a bookie that read its cookie and has yet to
// register must then not register over the delete (two instances would
// run under one id once a new disk joins). Its start fails instead.
TEST_F(BookieServerTest, ACookieDeletedBeforeTheBookieRegistersKeepsItFromStarting) {
  store_->before_txn = [this] {  // once: the registration's at start
    auto cookie = embedded_->Get(keys_.Cookie("bookie-1"));
    ASSERT_TRUE(cookie.ok()) << cookie.status();
    ASSERT_TRUE(embedded_->Delete(keys_.Cookie("bookie-1"), cookie->version).ok());
  };
  auto started = BookieServer::Start(Options());
  ASSERT_FALSE(started.ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(started.status())) << started.status();
  EXPECT_TRUE(absl::StrContains(started.status().message(), "delete-cookie"))
      << started.status();
  EXPECT_TRUE(absl::IsNotFound(store_->Get(keys_.Bookie("bookie-1")).status()));
}

// A bookie cut off from etcd runs on while its session lapses; meanwhile
// an operator, seeing it unregistered, deletes its cookie to replace its
// disk. When it reaches etcd again it must not register (the new disk's
// instance is about to), and it must not acknowledge adds onto a disk
// about to be wiped; what it holds stays readable.
TEST_F(BookieServerTest, ABookieWhoseCookieWasDeletedWhileItsSessionLapsedNeverRegistersAgain) {
  auto server = Start(Options());
  ASSERT_NE(server, nullptr);
  AddEntry(*server, 7, 0);
  store_->ExpireSessions([this] {
    // As `ledgerkv cluster delete-cookie bookie-1` does it.
    auto cookie = embedded_->Get(keys_.Cookie("bookie-1"));
    ASSERT_TRUE(cookie.ok()) << cookie.status();
    auto deleted = embedded_->Txn(
        {{keys_.Bookie("bookie-1"), metadata::kMustNotExist},
         {keys_.Cookie("bookie-1"), cookie->version}},
        {{metadata::TxnOp::Type::kDelete, keys_.Cookie("bookie-1")}});
    ASSERT_TRUE(deleted.ok() && deleted->succeeded);
  });
  v1::GetInfoResponse info;
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (absl::Now() < deadline &&
         !(GetInfo(*server, &info) && info.state() == v1::READ_ONLY_STATE)) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  ASSERT_EQ(info.state(), v1::READ_ONLY_STATE);
  EXPECT_TRUE(absl::StrContains(info.read_only_reason(), "cookie")) << info.read_only_reason();
  absl::SleepFor(absl::Milliseconds(1500));  // a retry would have registered by now
  EXPECT_TRUE(absl::IsNotFound(store_->Get(keys_.Bookie("bookie-1")).status()));
  EXPECT_TRUE(absl::IsNotFound(store_->Get(keys_.Cookie("bookie-1")).status()));
  EXPECT_EQ(AddCode(*server, 7, 1), v1::READ_ONLY);
  EXPECT_EQ(ReadCode(*server, 7), v1::OK);
}

// docs/cluster.md, "Addresses: listen and advertise": a registering bookie
// that binds every interface must be told the address others dial. Without
// it, it refuses to start before it touches its data directory or the
// metadata; with it, it registers (and is named) there.
TEST_F(BookieServerTest, AWildcardListenNeedsAnAdvertisedAddress) {
  BookieOptions o = Options();
  o.bookie_id.clear();
  o.listen = "0.0.0.0:0";
  auto refused = BookieServer::Start(o);
  ASSERT_TRUE(absl::IsInvalidArgument(refused.status())) << refused.status();
  EXPECT_NE(refused.status().message().find("--advertise"), absl::string_view::npos)
      << refused.status();
  o.advertise = "0.0.0.0";
  refused = BookieServer::Start(o);
  ASSERT_TRUE(absl::IsInvalidArgument(refused.status())) << refused.status();
  EXPECT_TRUE(std::filesystem::is_empty(data_dir_)) << "the refused bookie wrote to its data dir";
  auto listed = store_->List(keys_.BookiesPrefix());
  ASSERT_TRUE(listed.ok()) << listed.status();
  EXPECT_TRUE(listed->empty()) << "the refused bookie registered";
  auto cookies = store_->List(metadata::Keys("test").Cookie(""));
  ASSERT_TRUE(cookies.ok()) << cookies.status();
  EXPECT_TRUE(cookies->empty()) << "the refused bookie wrote a cookie";

  o.advertise = "127.0.0.1";
  auto server = Start(o);
  ASSERT_NE(server, nullptr);
  EXPECT_TRUE(absl::StartsWith(server->address(), "127.0.0.1:")) << server->address();
  EXPECT_EQ(server->bookie_id(), server->address());
  auto reg = Registration(keys_.Bookie(server->bookie_id()));
  ASSERT_TRUE(reg.ok()) << reg.status();
  EXPECT_EQ(reg->address(), server->address());
  // Dialled at the published address, it answers.
  AddEntry(*server, 7, 0);
  EXPECT_EQ(ReadCode(*server, 7), v1::OK);
}

// A wiped data directory gets a new instance id; the cookie still names the
// old one, so the bookie must not silently rejoin.
TEST_F(BookieServerTest, WipedDataDirIsRefusedByTheCookie) {
  auto server = Start(Options());
  server.reset();
  data_dir_ = NewTempDir("wiped");
  auto again = BookieServer::Start(Options());
  ASSERT_FALSE(again.ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(again.status())) << again.status();
  EXPECT_NE(again.status().message().find("wiped"), std::string::npos) << again.status();
}

// A data dir remembers where it was registered. Restarted under another
// cluster name, or against a metadata store that never saw it, the bookie
// would find none of its ledgers listed and garbage-collect them all: it
// must refuse to start instead, and its data must still be there when it
// is started the right way again.
TEST_F(BookieServerTest, DataDirRefusesAnotherClusterOrMetadataStoreInsteadOfCollectingIt) {
  auto server = Start(Options());
  AddEntry(*server, 7, 0);
  ASSERT_TRUE(store_->Put(keys_.Ledger(7), "meta", metadata::kMustNotExist).ok());
  server.reset();

  BookieOptions other_cluster = Options();
  other_cluster.cluster = "another";
  auto refused = BookieServer::Start(other_cluster);
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(refused.status())) << refused.status();
  EXPECT_NE(refused.status().message().find("garbage-collect"), std::string::npos)
      << refused.status();

  auto empty = metadata::EmbeddedStore::Open(NewTempDir("other-meta"));
  ASSERT_TRUE(empty.ok()) << empty.status();
  BookieOptions other_store = Options();
  other_store.metadata = empty->get();
  refused = BookieServer::Start(other_store);
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(refused.status())) << refused.status();
  EXPECT_NE(refused.status().message().find("no cookie"), std::string::npos) << refused.status();
  // Neither attempt left a cookie behind in the wrong place.
  EXPECT_TRUE(absl::IsNotFound((*empty)->Get(keys_.Cookie("bookie-1")).status()));
  EXPECT_TRUE(absl::IsNotFound(
      store_->Get(metadata::Keys("another").Cookie("bookie-1")).status()));

  server = Start(Options());
  ASSERT_NE(server, nullptr);
  ASSERT_TRUE(server->RunGcOnce().ok());
  EXPECT_EQ(ReadCode(*server, 7), v1::OK);
}

TEST_F(BookieServerTest, GcDeletesOnlyLedgersWithoutMetadata) {
  auto server = Start(Options());
  for (uint64_t l : {1, 2, 3}) AddEntry(*server, l, 0);
  ASSERT_TRUE(store_->Put(keys_.Ledger(1), "meta", metadata::kMustNotExist).ok());
  ASSERT_TRUE(store_->Put(keys_.Ledger(3), "meta", metadata::kMustNotExist).ok());
  ASSERT_TRUE(server->RunGcOnce().ok());
  EXPECT_EQ(ReadCode(*server, 1), v1::OK);
  EXPECT_EQ(ReadCode(*server, 2), v1::NO_SUCH_LEDGER);
  EXPECT_EQ(ReadCode(*server, 3), v1::OK);
}

// Never delete on a failed listing: an unreachable store is not "no ledgers".
TEST_F(BookieServerTest, GcDoesNothingWhenListingFails) {
  auto server = Start(Options());
  for (uint64_t l : {1, 2}) AddEntry(*server, l, 0);
  store_->FailList(true);
  absl::Status s = server->RunGcOnce();
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  EXPECT_EQ(ReadCode(*server, 1), v1::OK);
  EXPECT_EQ(ReadCode(*server, 2), v1::OK);
  store_->FailList(false);
  ASSERT_TRUE(server->RunGcOnce().ok());
  EXPECT_EQ(ReadCode(*server, 1), v1::NO_SUCH_LEDGER);
}

TEST_F(BookieServerTest, GcRunsPeriodically) {
  BookieOptions o = Options();
  o.gc_interval = absl::Milliseconds(100);
  auto server = Start(o);
  AddEntry(*server, 5, 0);
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (ReadCode(*server, 5) != v1::NO_SUCH_LEDGER && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_EQ(ReadCode(*server, 5), v1::NO_SUCH_LEDGER);
}

TEST_F(BookieServerTest, ReadOnlyIsPublishedInTheRegistration) {
  FaultInjectionEnv env(Env::Default());
  BookieOptions o = Options();
  o.env = &env;
  auto server = Start(o);
  env.FailAllSyncs(true);
  auto stub = v1::Bookie::NewStub(
      grpc::CreateChannel(server->address(), grpc::InsecureChannelCredentials()));
  v1::AddRequest req;
  v1::Entry* e = req.add_entries();
  e->set_ledger_id(1);
  e->set_lac(-1);
  e->set_payload("x");
  e->set_checksum(EntryChecksum(1, 0, -1, "x"));
  v1::AddResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  ASSERT_TRUE(stub->Add(&ctx, req, &resp).ok());
  EXPECT_EQ(resp.results(0).code(), v1::READ_ONLY);
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  bool published = false;
  while (!published && absl::Now() < deadline) {
    auto reg = Registration(keys_.Bookie("bookie-1"));
    published = reg.ok() && reg->read_only();
    if (!published) absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_TRUE(published);
  server.reset();
}

// GetInfo tells an operator whether the bookie acknowledges adds only
// after their fdatasync (the default) or runs relaxed (--no-sync).
TEST_F(BookieServerTest, GetInfoSaysWhetherAddsWaitForFdatasync) {
  for (const bool sync : {true, false}) {
    data_dir_ = NewTempDir(sync ? "sync" : "nosync");
    BookieOptions o = Options();
    o.bookie_id = sync ? "bookie-sync" : "bookie-nosync";
    o.sync = sync;
    auto server = Start(o);
    ASSERT_NE(server, nullptr);
    v1::GetInfoResponse resp;
    ASSERT_TRUE(GetInfo(*server, &resp));
    EXPECT_EQ(resp.no_sync(), !sync);
  }
}

// The registration follows the disk watermark both ways, so placement
// avoids a full bookie and uses it again once space is freed (real tmpfs);
// GetInfo says why, with the usage.
TEST_F(BookieServerTest, RegistrationFollowsTheDiskWatermarkBothWays) {
  const std::string mnt = NewTempDir("watermark");
  SmallTmpfs fs;
  if (absl::Status m = fs.Mount(mnt, 64); !m.ok()) {
    GTEST_SKIP() << m << " (needs CAP_SYS_ADMIN, as root in CI)";
  }
  data_dir_ = mnt + "/bookie";
  BookieOptions o = Options();
  o.disk_check_interval = absl::Milliseconds(10);
  auto server = Start(o);
  ASSERT_NE(server, nullptr);
  AddEntry(*server, 1, 0);
  auto published = [&](bool read_only) {
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (absl::Now() < deadline) {
      auto reg = Registration(keys_.Bookie("bookie-1"));
      if (reg.ok() && reg->read_only() == read_only) return true;
      absl::SleepFor(absl::Milliseconds(10));
    }
    return false;
  };
  auto info = [&] {
    v1::GetInfoResponse resp;
    EXPECT_TRUE(GetInfo(*server, &resp));
    return resp;
  };
  ASSERT_TRUE(published(false));
  EXPECT_EQ(info().state(), v1::WRITABLE);

  fs.WaitForQuiet();  // the journal filler is done
  ASSERT_TRUE(fs.FillLeaving(1 << 20).ok());  // 97-98% in use
  ASSERT_TRUE(published(true)) << "the full bookie still registers as writable";
  v1::GetInfoResponse full = info();
  EXPECT_EQ(full.state(), v1::READ_ONLY_STATE);
  EXPECT_GE(full.disk_usage_percent(), 95.0);
  EXPECT_NE(full.read_only_reason().find("high watermark"), std::string::npos)
      << full.read_only_reason();

  ASSERT_TRUE(fs.Free().ok());
  ASSERT_TRUE(published(false)) << "the bookie stayed read-only after space was freed";
  v1::GetInfoResponse healed = info();
  EXPECT_EQ(healed.state(), v1::WRITABLE);
  EXPECT_LT(healed.disk_usage_percent(), 90.0);
  AddEntry(*server, 1, 1);
  server.reset();
}

// The group commit wait is on by default and an operator can turn it off
// (ledgerkv bookie --no-group-commit-wait): after batches of 64 entries,
// one entry alone waits for the rest of its group (GetInfo counts it);
// with the wait off, the same adds never wait.
TEST_F(BookieServerTest, GroupCommitWaitIsOnByDefaultAndCanBeTurnedOff) {
  for (const bool off : {false, true}) {
    BookieOptions o = Options();
    o.metadata = nullptr;
    o.data_dir = NewTempDir(off ? "no-wait" : "wait");
    if (off) o.group_commit_wait_max = absl::ZeroDuration();
    // The adds come one RPC round trip apart, which a slow run can stretch
    // past the default idle reset.
    o.group_commit_forget_after_idle = absl::Seconds(60);
    auto server = Start(o);
    ASSERT_NE(server, nullptr);
    auto stub = v1::Bookie::NewStub(
        grpc::CreateChannel(server->address(), grpc::InsecureChannelCredentials()));
    auto add = [&](uint64_t ledger, int64_t first, int count) {
      v1::AddRequest req;
      for (int64_t id = first; id < first + count; ++id) {
        v1::Entry* e = req.add_entries();
        e->set_ledger_id(ledger);
        e->set_entry_id(id);
        e->set_lac(-1);
        e->set_payload("data");
        e->set_checksum(EntryChecksum(ledger, id, -1, "data"));
      }
      v1::AddResponse resp;
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
      ASSERT_TRUE(stub->Add(&ctx, req, &resp).ok());
      for (const auto& r : resp.results()) ASSERT_EQ(r.code(), v1::OK);
    };
    for (int b = 0; b < 10; ++b) add(1, b * 64, 64);
    add(2, 0, 1);
    v1::GetInfoResponse info;
    ASSERT_TRUE(GetInfo(*server, &info));
    if (off) {
      EXPECT_EQ(info.group_commit_waits(), 0u);
    } else {
      EXPECT_GE(info.group_commit_waits(), 1u);
    }
  }
}

TEST_F(BookieServerTest, GcWithoutMetadataIsRefused) {
  BookieOptions o = Options();
  o.metadata = nullptr;
  auto server = Start(o);
  EXPECT_TRUE(absl::IsFailedPrecondition(server->RunGcOnce()));
}

}  // namespace
}  // namespace ledgerkv::bookie
