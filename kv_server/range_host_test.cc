// RangeHost::SweepLocalDirs against real parts (in-process bookies, the
// embedded store, a real RocksDB per range): the local directory of a range
// no table references is removed, and nothing else is (a range open here,
// a referenced range's warm cache, entries not named like a range dir,
// files and symlinks).
#include "kv_server/range_host.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kv_server/catalog.h"
#include "ledger/ledger_test_util.h"

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

  void StartHost() {
    RangeHostOptions o;
    o.ranges_dir = ranges_;
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
  MakeDir(Dir(dropped));
  MakeDir(Dir(dropped, ".restore"));
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
  EXPECT_THAT(*swept, ElementsAre(dropped, restore_only));

  EXPECT_FALSE(Exists(Dir(dropped)));
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

}  // namespace
}  // namespace ledgerkv::kv
