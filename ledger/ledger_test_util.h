// Test fixture for the ledger client: N real bookies (BookieServer, gRPC on
// 127.0.0.1, real fsync) registered in an embedded metadata store, all in a
// temporary directory, with stop/restart of single bookies. Test-only.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "base/status_macros.h"
#include "base/test_port.h"
#include "ledger/bookie/bookie_server.h"
#include "ledger/ledger_client.h"
#include "metadata/embedded_store.h"
#include "metadata/metadata_store.h"
#include "proto/bookie.grpc.pb.h"
#include "proto/metadata.pb.h"

namespace ledgerkv::ledger::testing {

// A fresh directory under $TEST_TMPDIR (or /tmp), removed on destruction.
class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TEST_TMPDIR");
    std::string pattern = absl::StrCat(base != nullptr ? base : "/tmp", "/ledger_test.XXXXXX");
    std::vector<char> buf(pattern.begin(), pattern.end());
    buf.push_back('\0');
    const char* made = ::mkdtemp(buf.data());
    path_ = made != nullptr ? made : "";
  }
  ~TempDir() {
    std::error_code ignored;
    if (!path_.empty()) std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

class TestCluster {
 public:
  struct Options {
    int bookies = 3;
    bool sync = true;
    // BookieOptions::add_listen of every bookie ("off": no add port).
    std::string add_listen;
    // BookieOptions::add_port_max_connections, add_port_hello_timeout and
    // add_port_max_in_flight_bytes.
    size_t add_port_max_connections = 1024;
    absl::Duration add_port_hello_timeout = absl::Seconds(10);
    int64_t add_port_max_in_flight_bytes = int64_t{256} << 20;
  };

  // Opens the metadata store and starts `options.bookies` bookies.
  static absl::StatusOr<std::unique_ptr<TestCluster>> Start(Options options) {
    std::unique_ptr<TestCluster> cluster(new TestCluster(options));
    if (cluster->dir_.path().empty()) return absl::InternalError("mkdtemp failed");
    ASSIGN_OR_RETURN(cluster->store_,
                     metadata::EmbeddedStore::Open(cluster->dir_.path() + "/metadata"));
    for (int i = 0; i < options.bookies; ++i) RETURN_IF_ERROR(cluster->AddBookie());
    return cluster;
  }

  ~TestCluster() {
    // Bookies first: they hold sessions in the store.
    for (auto& b : bookies_) b.server.reset();
  }

  metadata::MetadataStore* store() { return store_.get(); }
  int size() const { return static_cast<int>(bookies_.size()); }

  // Starts one more bookie (a spare, for ensemble changes).
  absl::Status AddBookie() {
    Bookie b;
    b.data_dir = absl::StrCat(dir_.path(), "/bookie", bookies_.size());
    bookie::BookieOptions bo;
    bo.data_dir = b.data_dir;
    bo.sync = options_.sync;
    bo.add_listen = options_.add_listen;
    bo.add_port_max_connections = options_.add_port_max_connections;
    bo.add_port_hello_timeout = options_.add_port_hello_timeout;
    bo.add_port_max_in_flight_bytes = options_.add_port_max_in_flight_bytes;
    bo.metadata = store_.get();
    // RestartBookie binds this address again: a port outside the kernel's
    // ephemeral range stays free meanwhile (base/test_port.h). Another
    // test process may pick the same port first: then pick again.
    absl::Status last;
    for (int attempt = 0; attempt < 5; ++attempt) {
      bo.listen = absl::StrCat("127.0.0.1:", PickRestartablePort());
      auto started = bookie::BookieServer::Start(bo);
      if (started.ok()) {
        b.server = *std::move(started);
        break;
      }
      last = started.status();
    }
    if (b.server == nullptr) return last;
    b.address = b.server->address();
    b.id = b.server->bookie_id();
    bookies_.push_back(std::move(b));
    return absl::OkStatus();
  }

  // nullptr while stopped.
  bookie::BookieServer* bookie(int i) { return bookies_[i].server.get(); }
  const std::string& bookie_id(int i) const { return bookies_[i].id; }
  const std::string& data_dir(int i) const { return bookies_[i].data_dir; }
  // Index of the bookie with this id, or -1.
  int IndexOf(const std::string& id) const {
    for (int i = 0; i < size(); ++i) {
      if (bookies_[i].id == id) return i;
    }
    return -1;
  }

  // Stops bookie i (deregisters it; its data stays on disk).
  void StopBookie(int i) { bookies_[i].server.reset(); }

  // Rewrites bookie i's registration with read_only = `read_only`, as a
  // bookie over its disk watermark publishes it: placement then skips it
  // for new ledgers, while it still serves reads, fences and recovery. The
  // bookie republishes its own state only when that changes.
  absl::Status SetRegisteredReadOnly(int i, bool read_only) {
    const std::string key = metadata::Keys("default").Bookie(bookies_[i].id);
    ASSIGN_OR_RETURN(metadata::VersionedValue got, store_->Get(key));
    meta::v1::BookieRegistration reg;
    if (!reg.ParseFromString(got.value)) return absl::DataLossError("bad registration " + key);
    reg.set_read_only(read_only);
    return store_->Put(key, reg.SerializeAsString(), got.version).status();
  }

  // Starts bookie i again on the same address, id and data directory.
  absl::Status RestartBookie(int i) {
    Bookie& b = bookies_[i];
    bookie::BookieOptions bo;
    bo.data_dir = b.data_dir;
    bo.listen = b.address;
    bo.bookie_id = b.id;
    bo.sync = options_.sync;
    bo.add_listen = options_.add_listen;
    bo.add_port_max_connections = options_.add_port_max_connections;
    bo.add_port_hello_timeout = options_.add_port_hello_timeout;
    bo.add_port_max_in_flight_bytes = options_.add_port_max_in_flight_bytes;
    bo.metadata = store_.get();
    absl::Status last;
    // The port may linger briefly after the previous server let go of it.
    for (int attempt = 0; attempt < 50; ++attempt) {
      auto started = bookie::BookieServer::Start(bo);
      if (started.ok()) {
        b.server = *std::move(started);
        return absl::OkStatus();
      }
      last = started.status();
      absl::SleepFor(absl::Milliseconds(50));
    }
    return last;
  }

  // Re-provisions bookie i as an operator replacing its disk would: stops
  // it, wipes its data directory, deletes its cookie by hand, and starts it
  // again under the same id and address: a new instance, holding nothing.
  absl::Status ReprovisionBookie(int i) {
    RETURN_IF_ERROR(WipeBookie(i));
    return RestartBookie(i);
  }

  // The first half of ReprovisionBookie: stopped, wiped, its cookie gone.
  absl::Status WipeBookie(int i) {
    StopBookie(i);
    std::error_code error;
    std::filesystem::remove_all(bookies_[i].data_dir, error);
    if (error) {
      return absl::InternalError("wiping " + bookies_[i].data_dir + ": " + error.message());
    }
    const std::string cookie = metadata::Keys("default").Cookie(bookies_[i].id);
    ASSIGN_OR_RETURN(metadata::VersionedValue got, store_->Get(cookie));
    return store_->Delete(cookie, got.version);
  }

  // Starts bookie i again with its id and data directory but on a new port:
  // it re-registers at another address (clients must resolve it again).
  absl::Status RestartBookieElsewhere(int i) {
    Bookie& b = bookies_[i];
    bookie::BookieOptions bo;
    bo.data_dir = b.data_dir;
    bo.listen = "127.0.0.1:0";
    bo.bookie_id = b.id;
    bo.sync = options_.sync;
    bo.add_listen = options_.add_listen;
    bo.add_port_max_connections = options_.add_port_max_connections;
    bo.add_port_hello_timeout = options_.add_port_hello_timeout;
    bo.add_port_max_in_flight_bytes = options_.add_port_max_in_flight_bytes;
    bo.metadata = store_.get();
    ASSIGN_OR_RETURN(b.server, bookie::BookieServer::Start(bo));
    b.address = b.server->address();
    return absl::OkStatus();
  }

  const std::string& address(int i) const { return bookies_[i].address; }

  absl::StatusOr<std::unique_ptr<LedgerClient>> NewClient(
      absl::Duration rpc_timeout = absl::Seconds(2)) {
    ClientOptions options;
    options.rpc_timeout = rpc_timeout;
    return NewClient(std::move(options));
  }

  // A client with `options`, on this cluster's metadata store.
  absl::StatusOr<std::unique_ptr<LedgerClient>> NewClient(ClientOptions options) {
    options.metadata = store_.get();
    return LedgerClient::Create(options);
  }

  // A client whose writers never write their LAC explicitly: readers then
  // see the LAC only as the next entry carries it (tests of that rule).
  absl::StatusOr<std::unique_ptr<LedgerClient>> NewClientWithoutExplicitLac() {
    ClientOptions options;
    options.rpc_timeout = absl::Seconds(2);
    options.explicit_lac_delay = absl::InfiniteDuration();
    return NewClient(std::move(options));
  }

 private:
  struct Bookie {
    std::string data_dir;
    std::string address;
    std::string id;
    std::unique_ptr<bookie::BookieServer> server;
  };

  explicit TestCluster(Options options) : options_(options) {}

  const Options options_;
  TempDir dir_;
  std::unique_ptr<metadata::EmbeddedStore> store_;
  std::vector<Bookie> bookies_;
};

}  // namespace ledgerkv::ledger::testing

namespace ledgerkv::ledger::testing {

inline absl::Status ToStatus(const absl::Status& s) { return s; }
template <typename T>
absl::Status ToStatus(const absl::StatusOr<T>& s) {
  return s.status();
}

// A recognisable payload of about `size` bytes for entry i of a test.
// Flips one payload byte of every stored copy of `marker` in the journal
// files under `dir`. Returns how many copies it corrupted.
inline int CorruptJournal(const std::string& dir, const std::string& marker) {
  int hits = 0;
  for (const auto& file : std::filesystem::recursive_directory_iterator(dir)) {
    if (!file.is_regular_file() ||
        file.path().filename().string().find("journal") == std::string::npos) {
      continue;
    }
    std::string bytes;
    {
      std::ifstream in(file.path(), std::ios::binary);
      bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
    bool changed = false;
    for (size_t pos = bytes.find(marker); pos != std::string::npos;
         pos = bytes.find(marker, pos + 1)) {
      bytes[pos + marker.size()] ^= 0x20;
      changed = true;
      ++hits;
    }
    if (changed) {
      std::ofstream out(file.path(), std::ios::binary | std::ios::trunc);
      out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    }
  }
  return hits;
}

inline std::string PayloadFor(int64_t i, size_t size = 100) {
  std::string p = absl::StrCat("payload-", i, "-");
  while (p.size() < size) p += static_cast<char>('a' + (p.size() + i) % 26);
  return p;
}

// Appends payloads first..last asynchronously, at most `window` in flight,
// and waits for every callback. Returns the callbacks' results in call order.
inline std::vector<absl::StatusOr<int64_t>> AppendRange(LedgerWriter& writer, int64_t first, int64_t last,
                                                 int window) {
  absl::Mutex mu;
  std::vector<absl::StatusOr<int64_t>> results;
  int in_flight = 0;
  for (int64_t i = first; i <= last; ++i) {
    {
      absl::MutexLock l(&mu);
      auto below = [&]() { return in_flight < window; };
      mu.Await(absl::Condition(&below));
      ++in_flight;
    }
    writer.AppendAsync(PayloadFor(i), [&](absl::StatusOr<int64_t> r) {
      absl::MutexLock l(&mu);
      results.push_back(std::move(r));
      --in_flight;
    });
  }
  absl::MutexLock l(&mu);
  auto all = [&]() { return static_cast<int64_t>(results.size()) == last - first + 1; };
  mu.Await(absl::Condition(&all));
  return results;
}

inline void ExpectReadable(LedgerReader& reader, int64_t first, int64_t last) {
  auto entries = reader.Read(first, last);
  ASSERT_TRUE(entries.ok()) << entries.status();
  ASSERT_EQ(entries->size(), static_cast<size_t>(last - first + 1));
  for (int64_t i = first; i <= last; ++i) {
    EXPECT_EQ((*entries)[i - first].entry_id, i);
    EXPECT_EQ((*entries)[i - first].payload, PayloadFor(i)) << "entry " << i;
  }
}

// GetInfo of the bookie at `address` (counters: entries added, syncs), or
// an empty response if it does not answer.
inline bookie::v1::GetInfoResponse BookieInfo(const std::string& address) {
  auto stub = bookie::v1::Bookie::NewStub(
      grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
  bookie::v1::GetInfoResponse response;
  if (!stub->GetInfo(&ctx, bookie::v1::GetInfoRequest(), &response).ok()) response.Clear();
  return response;
}

// Each of `addresses`' entries_added now (a baseline for WaitForStored).
inline std::vector<uint64_t> EntriesAdded(const std::vector<std::string>& addresses) {
  std::vector<uint64_t> added;
  for (const std::string& a : addresses) added.push_back(BookieInfo(a).entries_added());
  return added;
}

// Waits (up to 10 s) until each of `addresses` has stored `n` entries more
// than `before` (EntriesAdded). With Qa < Qw an append is acknowledged
// before its last copies are stored: a test that then stops a bookie, or
// arms a fault point for its next request, waits here first, or a late
// copy of an earlier entry meets the fault instead. True when all did.
inline bool WaitForStored(const std::vector<std::string>& addresses,
                          const std::vector<uint64_t>& before, uint64_t n) {
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  for (size_t i = 0; i < addresses.size(); ++i) {
    while (BookieInfo(addresses[i]).entries_added() < before[i] + n) {
      if (absl::Now() >= deadline) return false;
      absl::SleepFor(absl::Milliseconds(2));
    }
  }
  return true;
}

// Appends in the background, `window` adds in flight, until stopped or an
// append fails; remembers every acknowledged id and the first error.
class Appender {
 public:
  Appender(LedgerWriter* writer, int window) : writer_(writer), window_(window) {
    thread_ = std::thread([this] { Run(); });
  }
  ~Appender() { Stop(); }

  void Stop() {
    {
      absl::MutexLock l(&mu_);
      stop_ = true;
    }
    if (thread_.joinable()) thread_.join();
  }
  // Stops issuing appends (those in flight stay in flight) and returns once
  // the writer is no longer touched by this thread, so it may be destroyed.
  void Halt() {
    absl::MutexLock l(&mu_);
    stop_ = true;
    auto halted = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return halted_; };
    mu_.Await(absl::Condition(&halted));
  }
  void WaitForAcks(int64_t n) {
    absl::MutexLock l(&mu_);
    auto enough = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return static_cast<int64_t>(acked_.size()) >= n || !first_error_.ok();
    };
    mu_.Await(absl::Condition(&enough));
  }
  // Waits until the writer has failed (or `stop` was called and all
  // callbacks returned).
  void WaitForError() {
    absl::MutexLock l(&mu_);
    auto failed = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !first_error_.ok(); };
    mu_.Await(absl::Condition(&failed));
  }
  std::vector<int64_t> acked() {
    absl::MutexLock l(&mu_);
    return acked_;
  }
  absl::Status first_error() {
    absl::MutexLock l(&mu_);
    return first_error_;
  }

 private:
  void Run() {
    for (int64_t i = 0;; ++i) {
      {
        absl::MutexLock l(&mu_);
        auto ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
          return stop_ || !first_error_.ok() || in_flight_ < window_;
        };
        mu_.Await(absl::Condition(&ready));
        if (stop_ || !first_error_.ok()) break;
        ++in_flight_;
      }
      writer_->AppendAsync(PayloadFor(i), [this](absl::StatusOr<int64_t> r) {
        absl::MutexLock l(&mu_);
        --in_flight_;
        if (r.ok()) {
          acked_.push_back(*r);
        } else if (first_error_.ok()) {
          first_error_ = r.status();
        }
      });
    }
    absl::MutexLock l(&mu_);
    halted_ = true;
    auto drained = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return in_flight_ == 0; };
    mu_.Await(absl::Condition(&drained));
  }

  LedgerWriter* const writer_;
  const int window_;
  absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool halted_ ABSL_GUARDED_BY(mu_) = false;
  int in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<int64_t> acked_ ABSL_GUARDED_BY(mu_);
  absl::Status first_error_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

inline int64_t MaxOf(const std::vector<int64_t>& ids) {
  int64_t m = -1;
  for (int64_t id : ids) m = std::max(m, id);
  return m;
}

inline void ExpectFenced(const absl::Status& status) {
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
  EXPECT_NE(status.message().find("fenced"), std::string::npos) << status;
}

// A MetadataStore that fails chosen calls with UNAVAILABLE, as a real store
// does during a leader election or a network blip. `lose_put_replies`
// applies the write and then reports UNAVAILABLE (a lost reply).
// `after_get`, if set before the store is used, runs after each successful
// Get with the key, before the value is returned (a test may block there
// to delay a reply that is already read).
class FlakyStore : public metadata::MetadataStore {
 public:
  explicit FlakyStore(metadata::MetadataStore* real) : real_(real) {}

  std::atomic<int> fail_gets{0};
  std::atomic<int> fail_lists{0};
  std::atomic<int> lose_put_replies{0};
  // Puts that fail UNAVAILABLE unapplied, kept to land later (as an etcd
  // request past its client's deadline may): ApplyDeferredPuts.
  std::atomic<int> defer_puts{0};
  std::function<void(std::string_view key)> after_get;
  // Runs once a Put has been applied, before its caller hears of it (and
  // before lose_put_replies is consulted).
  std::function<void(std::string_view key)> after_put;

  absl::StatusOr<metadata::VersionedValue> Get(std::string_view key) override {
    if (Take(fail_gets)) return absl::UnavailableError("flaky store: Get");
    auto got = real_->Get(key);
    if (got.ok() && after_get) after_get(key);
    return got;
  }
  absl::StatusOr<metadata::Version> Put(std::string_view key, std::string_view value,
                                        metadata::Version expected,
                                        metadata::SessionId session) override {
    if (Take(defer_puts)) {
      absl::MutexLock lock(&deferred_mu_);
      deferred_.push_back({std::string(key), std::string(value), expected, session});
      return absl::UnavailableError("flaky store: Put deferred");
    }
    auto put = real_->Put(key, value, expected, session);
    if (put.ok() && after_put) after_put(key);
    if (put.ok() && Take(lose_put_replies)) return absl::UnavailableError("flaky store: Put reply");
    return put;
  }
  absl::Status Delete(std::string_view key, metadata::Version expected) override {
    return real_->Delete(key, expected);
  }
  absl::StatusOr<std::vector<metadata::KeyValue>> List(std::string_view prefix) override {
    if (Take(fail_lists)) return absl::UnavailableError("flaky store: List");
    return real_->List(prefix);
  }
  absl::StatusOr<metadata::TxnResult> Txn(const std::vector<metadata::TxnCompare>& compares,
                                          const std::vector<metadata::TxnOp>& ops) override {
    return real_->Txn(compares, ops);
  }
  absl::StatusOr<std::unique_ptr<metadata::WatchHandle>> Watch(
      std::string_view prefix, metadata::Version from, metadata::WatchCallback cb) override {
    return real_->Watch(prefix, from, std::move(cb));
  }
  absl::StatusOr<metadata::SessionId> CreateSession(
      const metadata::SessionOptions& options) override {
    return real_->CreateSession(options);
  }
  absl::Status KeepAlive(metadata::SessionId session) override {
    return real_->KeepAlive(session);
  }
  absl::Status CloseSession(metadata::SessionId session) override {
    return real_->CloseSession(session);
  }
  absl::StatusOr<metadata::Version> CurrentRevision() override {
    return real_->CurrentRevision();
  }
  // Lets the deferred Puts arrive now, each with its original expected
  // version; returns their outcomes.
  std::vector<absl::Status> ApplyDeferredPuts() {
    std::vector<Deferred> deferred;
    {
      absl::MutexLock lock(&deferred_mu_);
      deferred.swap(deferred_);
    }
    std::vector<absl::Status> out;
    for (const Deferred& d : deferred) {
      out.push_back(real_->Put(d.key, d.value, d.expected, d.session).status());
    }
    return out;
  }

 private:
  struct Deferred {
    std::string key;
    std::string value;
    metadata::Version expected;
    metadata::SessionId session;
  };
  absl::Mutex deferred_mu_;
  std::vector<Deferred> deferred_ ABSL_GUARDED_BY(deferred_mu_);
  static bool Take(std::atomic<int>& n) {
    int left = n.load();
    while (left > 0 && !n.compare_exchange_weak(left, left - 1)) {
    }
    return left > 0;
  }
  metadata::MetadataStore* const real_;
};

inline CreateOptions Quorums(int e, int qw, int qa) {
  CreateOptions o;
  o.ensemble_size = e;
  o.write_quorum = qw;
  o.ack_quorum = qa;
  return o;
}

}  // namespace ledgerkv::ledger::testing

#define LKV_ASSERT_OK(expr)                                                  \
  do {                                                                       \
    const ::absl::Status _lkv_st = ::ledgerkv::ledger::testing::ToStatus(expr); \
    ASSERT_TRUE(_lkv_st.ok()) << _lkv_st;                                    \
  } while (0)

// LKV_ASSIGN_OR_FAIL(auto x, MakeX()); fails the test if not OK.
#define LKV_ASSIGN_OR_FAIL(lhs, rexpr) \
  LKV_ASSIGN_OR_FAIL_IMPL(LEDGERKV_CONCAT(_lkv_or_, __LINE__), lhs, rexpr)
#define LKV_ASSIGN_OR_FAIL_IMPL(var, lhs, rexpr) \
  auto var = (rexpr);                            \
  ASSERT_TRUE(var.ok()) << var.status();         \
  lhs = std::move(var).value()
