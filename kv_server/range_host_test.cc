// RangeHost against real parts (in-process bookies, the embedded store, a
// real RocksDB per range):
//  - SweepLocalDirs: the local directory of a range no table references is
//    removed, and nothing else is (a range open here, a referenced range's
//    warm cache, entries not named like a range dir, files and symlinks);
//  - reopening: a range whose log cannot be written keeps answering reads
//    until its log opens again, then takes writes again by itself.
#include "kv_server/range_host.h"

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "base/status_macros.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kv_server/catalog.h"
#include "kv_server/range/local_store.h"
#include "kv_server/range/range_test_util.h"
#include "kv_server/retry.h"
#include "ledger/ledger_test_util.h"
#include "wal/log_metadata.h"

namespace ledgerkv::kv {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::IsEmpty;

class RangeHostSweepTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto cluster = ledger::testing::TestCluster::Start({.bookies = 1});
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = std::move(*cluster);
    auto client = cluster_->NewClient();
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = std::move(*client);
    catalog_ = std::make_unique<TableCatalog>(cluster_->store(), "default", Limits());
    ASSERT_TRUE(catalog_->Load().ok());
    ranges_ = dir_.path() + "/ranges";
  }

  void TearDown() override {
    host_.reset();  // closes its ranges before the bookies stop
    client_.reset();
    cluster_.reset();
  }

  void StartHost(std::function<bool(uint64_t)> may_open = nullptr) {
    RangeHostOptions o;
    o.ranges_dir = ranges_;
    o.may_open = std::move(may_open);
    o.range.log.client = client_.get();
    o.range.log.metadata = cluster_->store();
    o.range.log.ensemble_size = o.range.log.write_quorum = o.range.log.ack_quorum = 1;
    o.range.snapshot.client = client_.get();
    o.range.snapshot.metadata = cluster_->store();
    o.range.snapshot.ensemble_size = o.range.snapshot.write_quorum =
        o.range.snapshot.ack_quorum = 1;
    auto host = RangeHost::Create(catalog_.get(), std::move(o));
    ASSERT_TRUE(host.ok()) << host.status();
    host_ = std::move(*host);
  }

  // Creates table `name` (one range) and opens it here; returns the range id.
  uint64_t OpenNewTable(const std::string& name) {
    auto table = catalog_->CreateTable(name, {});
    EXPECT_TRUE(table.ok()) << table.status();
    if (!table.ok()) return 0;
    absl::Status opened = host_->OpenTable(*table);
    EXPECT_TRUE(opened.ok()) << opened;
    return table->ranges(0).range_id();
  }

  std::string Dir(uint64_t id, const std::string& suffix = "") {
    return absl::StrCat(ranges_, "/", id, suffix);
  }

  // A directory holding one file (so removal must be recursive).
  static void MakeDir(const std::string& path) {
    fs::create_directories(path);
    std::ofstream(path + "/data") << "x";
  }

  static bool Exists(const std::string& path) {
    std::error_code ec;
    return fs::exists(fs::symlink_status(path, ec));
  }

  ledger::testing::TempDir dir_;
  std::string ranges_;
  std::unique_ptr<ledger::testing::TestCluster> cluster_;
  std::unique_ptr<ledger::LedgerClient> client_;
  std::unique_ptr<TableCatalog> catalog_;
  std::unique_ptr<RangeHost> host_;
};

TEST_F(RangeHostSweepTest, RemovesOnlyDirsOfUnreferencedRangesNotKnownHere) {
  ASSERT_NO_FATAL_FAILURE(StartHost());
  const uint64_t live = OpenNewTable("live");
  ASSERT_NE(live, 0u);
  ASSERT_TRUE(Exists(Dir(live))) << "Range::Open should create " << Dir(live);

  const uint64_t dropped = live + 1000;   // dir and restore dir left behind
  const uint64_t warm = live + 1001;      // referenced, owned elsewhere now
  const uint64_t restore_only = live + 1002;
  const uint64_t wiped_only = live + 1005;  // a wipe a crash cut short
  MakeDir(Dir(dropped));
  MakeDir(Dir(dropped, ".restore"));
  MakeDir(Dir(wiped_only, ".wiped"));
  MakeDir(Dir(warm));
  MakeDir(Dir(restore_only, ".restore"));
  // Not named like a range directory, or not a directory: never touched.
  const std::vector<std::string> foreign = {
      ranges_ + "/notes",
      ranges_ + "/0" + std::to_string(dropped),
      Dir(dropped, ".old"),
      Dir(dropped, "x"),
      ranges_ + "/18446744073709551616",  // above UINT64_MAX
      ranges_ + "/0",
  };
  for (const std::string& path : foreign) MakeDir(path);
  const uint64_t file_id = live + 1003;
  std::ofstream(Dir(file_id)) << "a file, not a range dir";
  const uint64_t link_id = live + 1004;
  MakeDir(dir_.path() + "/elsewhere");
  fs::create_directory_symlink(dir_.path() + "/elsewhere", Dir(link_id));

  // `live` is not referenced in this listing, but it is open here: kept.
  auto swept = host_->SweepLocalDirs({warm});
  ASSERT_TRUE(swept.ok()) << swept.status();
  EXPECT_THAT(*swept, ElementsAre(dropped, restore_only, wiped_only));

  EXPECT_FALSE(Exists(Dir(dropped)));
  EXPECT_FALSE(Exists(Dir(wiped_only, ".wiped")));
  EXPECT_FALSE(Exists(Dir(dropped, ".restore")));
  EXPECT_FALSE(Exists(Dir(restore_only, ".restore")));
  EXPECT_TRUE(Exists(Dir(live) + "/CURRENT")) << "the RocksDB of a range open here was touched";
  EXPECT_TRUE(Exists(Dir(warm) + "/data")) << "a referenced range's warm cache was removed";
  for (const std::string& path : foreign) EXPECT_TRUE(Exists(path + "/data")) << path;
  EXPECT_TRUE(Exists(Dir(file_id)));
  EXPECT_TRUE(Exists(Dir(link_id)));
  EXPECT_TRUE(Exists(dir_.path() + "/elsewhere/data")) << "followed a symlink";
  EXPECT_TRUE(host_->Stats(live).ok()) << "the open range stopped serving";

  // Nothing left to do: a second sweep removes nothing.
  swept = host_->SweepLocalDirs({warm});
  ASSERT_TRUE(swept.ok()) << swept.status();
  EXPECT_THAT(*swept, IsEmpty());
}

TEST_F(RangeHostSweepTest, ReleasedRangeKeepsItsDirWhileReferencedAndLosesItOnceNot) {
  ASSERT_NO_FATAL_FAILURE(StartHost());
  const uint64_t id = OpenNewTable("moved");
  ASSERT_NE(id, 0u);
  {
    auto range = host_->Lookup("moved", "k");
    ASSERT_TRUE(range.ok()) << range.status();
    ledgerkv::v1::PutRequest put;
    put.set_table("moved");
    put.set_key("k");
    put.set_value("v");
    absl::Notification done;
    absl::Status put_status;
    (*range)->Put(put, [&](absl::StatusOr<ledgerkv::v1::PutResponse> r) {
      put_status = r.status();
      done.Notify();
    });
    done.WaitForNotification();
    ASSERT_TRUE(put_status.ok()) << put_status;
  }
  host_->Release(id);  // e.g. moved to another server: its dir stays
  ASSERT_TRUE(Exists(Dir(id)));

  auto swept = host_->SweepLocalDirs({id});
  ASSERT_TRUE(swept.ok()) << swept.status();
  EXPECT_THAT(*swept, IsEmpty());
  EXPECT_TRUE(Exists(Dir(id))) << "the warm cache of a referenced range was removed";

  // Its table was dropped elsewhere: the next listing does not name it.
  swept = host_->SweepLocalDirs({});
  ASSERT_TRUE(swept.ok()) << swept.status();
  EXPECT_THAT(*swept, ElementsAre(id));
  EXPECT_FALSE(Exists(Dir(id)));

  // Adopting a range again after its dir was swept recovers it from its
  // log: the local dir was only a cache.
  auto table = catalog_->Get("moved");
  ASSERT_TRUE(table.ok());
  ASSERT_TRUE(host_->OpenTable(**table).ok());
  auto range = host_->Lookup("moved", "k");
  ASSERT_TRUE(range.ok()) << range.status();
  ledgerkv::v1::GetRequest get;
  get.set_table("moved");
  get.set_key("k");
  auto got = (*range)->Get(get);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(got->found() && got->kv().value() == "v") << "lost a write with the swept dir";
}

TEST_F(RangeHostSweepTest, MissingRangesDirIsNotAnErrorAndShutDownHostRefuses) {
  ASSERT_NO_FATAL_FAILURE(StartHost());
  ASSERT_FALSE(Exists(ranges_));
  auto swept = host_->SweepLocalDirs({});
  ASSERT_TRUE(swept.ok()) << swept.status();
  EXPECT_THAT(*swept, IsEmpty());

  MakeDir(Dir(12345));
  host_->Shutdown();
  swept = host_->SweepLocalDirs({});
  EXPECT_TRUE(absl::IsUnavailable(swept.status())) << swept.status();
  EXPECT_TRUE(Exists(Dir(12345))) << "a shut-down host removed a directory";
}

class RangeHostReopenTest : public RangeHostSweepTest {
 protected:
  absl::StatusOr<ledgerkv::v1::PutResponse> PutVia(const std::string& key,
                                                   const std::string& value) {
    ASSIGN_OR_RETURN(std::shared_ptr<Range> range, host_->Lookup("t", key));
    return testing::Put(*range, key, value);
  }
  absl::StatusOr<std::string> GetVia(const std::string& key) {
    ASSIGN_OR_RETURN(std::shared_ptr<Range> range, host_->Lookup("t", key));
    ledgerkv::v1::GetRequest get;
    get.set_table("t");
    get.set_key(key);
    ASSIGN_OR_RETURN(ledgerkv::v1::GetResponse got, range->Get(get));
    return got.found() ? got.kv().value() : std::string("<absent>");
  }
};

// Cluster mode: the range's lease (or assignment) is gone by the time its
// open has fenced the log (a pause or an etcd outage during the open). The
// check before the open passed; the host checks again after it, closes the
// instance and does not serve it: another server may own the range now.
TEST_F(RangeHostReopenTest, ARangeWhoseLeaseWentDuringItsOpenIsClosedNotServed) {
  // The first check passes; the lease goes while Range::Open runs.
  std::atomic<int> checks{0};
  ASSERT_NO_FATAL_FAILURE(StartHost([&](uint64_t) { return checks++ == 0; }));
  auto table = catalog_->CreateTable("t", {});
  ASSERT_TRUE(table.ok()) << table.status();
  const uint64_t id = table->ranges(0).range_id();
  absl::Status opened = host_->OpenTable(*table);
  EXPECT_TRUE(absl::IsUnavailable(opened)) << opened;
  EXPECT_TRUE(IsRetrySafe(opened)) << opened;
  EXPECT_GE(checks.load(), 2) << "checked only before the open";
  EXPECT_FALSE(host_->Lookup("t", "k").ok()) << "a range whose lease went is served";
  EXPECT_FALSE(host_->Stats(id).ok());
  // The open did fence the log (the second check came after it)...
  wal::LogOptions log;
  log.client = client_.get();
  log.metadata = cluster_->store();
  auto meta = wal::GetLogMetadata(log, absl::StrCat("range-", id));
  ASSERT_TRUE(meta.ok()) << meta.status();
  EXPECT_GE(meta->epoch(), 1u);
  // ...and the instance was closed: its local DB opens (RocksDB's lock is free).
  auto local = LocalStore::Open(Dir(id));
  EXPECT_TRUE(local.ok()) << local.status();
}

// The full-disk case of a standalone server, with the bookie stopped
// instead: reads never stop while the host retries (each retry opens the
// log first and closes the readable instance only once that worked), and
// writes come back by themselves once the bookie does.
TEST_F(RangeHostReopenTest, ARangeWhoseLogCannotBeWrittenAnswersReadsUntilItsLogOpensAgain) {
  ASSERT_NO_FATAL_FAILURE(StartHost());
  const uint64_t id = OpenNewTable("t");
  ASSERT_NE(id, 0u);
  wal::LogOptions log;
  log.client = client_.get();
  log.metadata = cluster_->store();
  auto epoch = [&]() -> uint64_t {
    auto got = wal::GetLogMetadata(log, absl::StrCat("range-", id));
    EXPECT_TRUE(got.ok()) << got.status();
    return got.ok() ? got->epoch() : 0;
  };
  for (int i = 0; i < 10; ++i) {
    ASSERT_TRUE(PutVia(absl::StrCat("k", i), absl::StrCat(i)).ok()) << i;
  }
  auto before = host_->Lookup("t", "k");
  ASSERT_TRUE(before.ok()) << before.status();

  cluster_->StopBookie(0);
  auto lost = PutVia("late", "x");
  ASSERT_FALSE(lost.ok()) << "a put was acknowledged with its only bookie stopped";
  EXPECT_TRUE(absl::IsUnavailable(lost.status())) << lost.status();

  // ~2 s: the reopen thread tries again about 0.1, 0.3, 0.7 and 1.5 s after
  // the failure (backoff doubling from 100 ms), each time raising the log's
  // epoch and failing to recover it. Not one read may fail meanwhile.
  const uint64_t epoch_at_failure = epoch();
  int reads = 0;
  const absl::Time until = absl::Now() + absl::Seconds(2);
  while (absl::Now() < until) {
    const int i = reads % 10;
    auto got = GetVia(absl::StrCat("k", i));
    ASSERT_TRUE(got.ok()) << "read " << reads << " failed while the log was down: "
                          << got.status();
    ASSERT_EQ(*got, absl::StrCat(i));
    ++reads;
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_GE(epoch(), epoch_at_failure + 2) << "the host did not try to reopen the range";
  auto stats = host_->Stats(id);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_FALSE(stats->serving);
  EXPECT_TRUE(absl::StrContains(stats->writes_refused, "log failed")) << stats->writes_refused;
  auto absent = GetVia("late");
  ASSERT_TRUE(absent.ok()) << absent.status();
  EXPECT_EQ(*absent, "<absent>") << "an unacknowledged put is visible";
  auto refused = PutVia("k0", "y");
  EXPECT_TRUE(absl::IsUnavailable(refused.status())) << refused.status();
  EXPECT_TRUE(IsRetrySafe(refused.status())) << refused.status();

  // The bookie back: writes succeed again without a restart, on a new
  // instance over a new log, with every acknowledged write.
  ASSERT_TRUE(cluster_->RestartBookie(0).ok());
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  absl::StatusOr<ledgerkv::v1::PutResponse> again = PutVia("k10", "10");
  while (!again.ok() && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(100));
    again = PutVia("k10", "10");
  }
  ASSERT_TRUE(again.ok()) << again.status();
  auto after = host_->Lookup("t", "k");
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_NE(after->get(), before->get()) << "writes resumed without a reopen";
  for (int i = 0; i <= 10; ++i) {
    auto got = GetVia(absl::StrCat("k", i));
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(*got, absl::StrCat(i)) << i;
  }
}

}  // namespace
}  // namespace ledgerkv::kv
