// The Admin service and the Standalone lifecycle through real gRPC: table
// creation and description, every bad table request, dropping (everything
// of the dropped ranges is deleted and the name starts empty again), and
// the data-dir lock.
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "gtest/gtest.h"
#include "kv_server/admin_service.h"
#include "kv_server/kv_server_test_util.h"
#include "ledger/ledger_client.h"
#include "metadata/metadata_store.h"
#include "proto/metadata.pb.h"
#include "wal/log_metadata.h"

namespace ledgerkv::kv::testing {
namespace {

namespace meta = ::ledgerkv::meta::v1;

TEST_F(KvServerTest, DefaultTableExistsAndCreatedTablesAreDescribed) {
  EXPECT_EQ(ListTables(), std::vector<std::string>{"default"});
  v1::CreateTableResponse created;
  ASSERT_TRUE(CreateTable("orders", {"g", "p"}, &created).ok());
  ASSERT_EQ(created.ranges_size(), 3);
  EXPECT_EQ(created.ranges(1).start(), "g");
  EXPECT_EQ(created.ranges(1).end(), "p");
  EXPECT_EQ(created.ranges(0).owner(), server_->address());
  EXPECT_EQ(ListTables(), (std::vector<std::string>{"default", "orders"}));

  ASSERT_TRUE(Put("orders", "a", "12345").ok());
  ASSERT_TRUE(Put("orders", "b", "1").ok());
  ASSERT_TRUE(Put("orders", "q", "1").ok());
  v1::DescribeTableResponse d;
  ASSERT_TRUE(Describe("orders", &d).ok());
  EXPECT_EQ(d.name(), "orders");
  ASSERT_EQ(d.ranges_size(), 3);
  const v1::RangeInfo& r0 = d.ranges(0);
  EXPECT_EQ(r0.range_id(), created.ranges(0).range_id());
  EXPECT_EQ(r0.start(), "");
  EXPECT_EQ(r0.end(), "g");
  EXPECT_EQ(r0.owner(), server_->address());
  EXPECT_EQ(r0.revision(), 2);
  EXPECT_EQ(r0.key_count(), 2);
  EXPECT_EQ(r0.bytes(), 1 + 5 + 1 + 1);
  EXPECT_GE(r0.log_last_seqno(), 2u);
  EXPECT_GE(r0.epoch(), 1u);
  EXPECT_EQ(d.ranges(1).revision(), 0);
  EXPECT_EQ(d.ranges(1).key_count(), 0);
  EXPECT_EQ(d.ranges(2).revision(), 1);
  EXPECT_EQ(d.ranges(2).key_count(), 1);
}

TEST_F(KvServerTest, BadTableRequestsAreRefusedWithTheRightCode) {
  ASSERT_TRUE(CreateTable("t", {}).ok());
  struct Case {
    std::string name;
    std::vector<std::string> splits;
    grpc::StatusCode code;
  };
  std::vector<std::string> too_many;
  for (int i = 0; i < 1000; ++i) too_many.push_back(absl::StrFormat("%04d", i));
  const std::vector<Case> cases = {
      {"t", {}, grpc::StatusCode::ALREADY_EXISTS},
      {"", {}, grpc::StatusCode::INVALID_ARGUMENT},
      {"no spaces", {}, grpc::StatusCode::INVALID_ARGUMENT},
      {std::string(129, 'n'), {}, grpc::StatusCode::INVALID_ARGUMENT},
      {"u", {"b", "a"}, grpc::StatusCode::INVALID_ARGUMENT},
      {"u", {"a", "a"}, grpc::StatusCode::INVALID_ARGUMENT},
      {"u", {""}, grpc::StatusCode::INVALID_ARGUMENT},
      {"u", {std::string(limits_.max_key_bytes + 1, 'k')}, grpc::StatusCode::INVALID_ARGUMENT},
      {"u", too_many, grpc::StatusCode::INVALID_ARGUMENT},
  };
  for (const Case& c : cases) {
    grpc::Status s = CreateTable(c.name, c.splits);
    EXPECT_EQ(s.error_code(), c.code) << c.name << ": " << s.error_message();
  }
  EXPECT_EQ(ListTables(), (std::vector<std::string>{"default", "t"}));

  EXPECT_EQ(DropTable("nope").error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(DropTable("bad/name").error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  grpc::Status drop_default = DropTable("default");
  EXPECT_EQ(drop_default.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(drop_default.error_message().find("default"), std::string::npos);
  v1::DescribeTableResponse d;
  EXPECT_EQ(Describe("nope", &d).error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(Describe("", &d).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(ListTables(), (std::vector<std::string>{"default", "t"}));
}

TEST_F(KvServerTest, DroppedTableLeavesNothingBehindAndItsNameStartsEmpty) {
  v1::CreateTableResponse created;
  ASSERT_TRUE(CreateTable("gone", {"m"}, &created).ok());
  for (char c = 'a'; c <= 'z'; ++c) ASSERT_TRUE(Put("gone", std::string(1, c), "v").ok());
  // A snapshot too, so that dropping must delete snapshot ledgers.
  auto range = server_->host()->Lookup("gone", "a");
  ASSERT_TRUE(range.ok()) << range.status();
  ASSERT_TRUE((*range)->SnapshotNow().ok());
  range->reset();

  metadata::MetadataStore* store = server_->metadata();
  metadata::Keys keys("default");
  std::vector<uint64_t> ledgers;
  for (const auto& r : created.ranges()) {
    auto log = wal::LoadLog(*store, keys.Log(absl::StrCat("range-", r.range_id())),
                            absl::StrCat("range-", r.range_id()));
    ASSERT_TRUE(log.ok()) << log.status();
    for (const auto& seg : log->metadata.segments()) ledgers.push_back(seg.ledger_id());
  }
  auto snapshots = store->List(keys.Root() + "snapshots/");
  ASSERT_TRUE(snapshots.ok());
  ASSERT_FALSE(snapshots->empty());
  for (const auto& kv : *snapshots) {
    meta::SnapshotManifest m;
    ASSERT_TRUE(m.ParseFromString(kv.value));
    for (const auto& s : m.snapshots()) ledgers.push_back(s.ledger_id());
  }
  ASSERT_GE(ledgers.size(), 3u);

  grpc::Status dropped = DropTable("gone");
  ASSERT_TRUE(dropped.ok()) << dropped.error_message();
  EXPECT_EQ(ListTables(), std::vector<std::string>{"default"});
  EXPECT_EQ(Put("gone", "a", "v").error_code(), grpc::StatusCode::NOT_FOUND);
  for (const auto& r : created.ranges()) {
    EXPECT_TRUE(absl::IsNotFound(store->Get(keys.Range(r.range_id())).status()));
    EXPECT_TRUE(
        absl::IsNotFound(store->Get(keys.Log(absl::StrCat("range-", r.range_id()))).status()));
    EXPECT_FALSE(std::filesystem::exists(absl::StrCat(dir_.path(), "/ranges/", r.range_id())));
  }
  for (uint64_t id : ledgers) {
    EXPECT_TRUE(absl::IsNotFound(server_->ledger_client()->GetLedgerMetadata(id).status()))
        << "ledger " << id;
  }
  snapshots = store->List(keys.Root() + "snapshots/");
  ASSERT_TRUE(snapshots.ok());
  EXPECT_TRUE(snapshots->empty());

  v1::CreateTableResponse again;
  ASSERT_TRUE(CreateTable("gone", {"m"}, &again).ok());
  EXPECT_NE(again.ranges(0).range_id(), created.ranges(0).range_id());
  v1::RangeRequest scan;
  scan.set_table("gone");
  scan.set_count_only(true);
  v1::RangeResponse resp;
  ASSERT_TRUE(Scan(scan, &resp).ok());
  EXPECT_EQ(resp.count(), 0);
  EXPECT_EQ(GetValue("gone", "a"), "<absent>");
  // Survives a restart without resurrecting anything.
  ASSERT_NO_FATAL_FAILURE(RestartServer());
  EXPECT_EQ(GetValue("gone", "a"), "<absent>");
  ASSERT_TRUE(Put("gone", "a", "new").ok());
  EXPECT_EQ(GetValue("gone", "a"), "new");
}

// A drop interrupted by a crash after the range records went but before
// the directory was removed: the next start removes the directory of the
// range no table references, and leaves every live range's data alone.
TEST_F(KvServerTest, StartRemovesLocalDirsOfRangesNoTableReferences) {
  v1::CreateTableResponse created;
  ASSERT_TRUE(CreateTable("kept", {"m"}, &created).ok());
  ASSERT_TRUE(Put("kept", "a", "1").ok());
  ASSERT_TRUE(Put("kept", "z", "2").ok());
  StopServer();
  const std::string leftover = absl::StrCat(dir_.path(), "/ranges/987654");
  ASSERT_TRUE(std::filesystem::create_directories(leftover + "/db"));
  ASSERT_TRUE(std::filesystem::create_directories(leftover + ".restore"));
  const std::string not_a_range = absl::StrCat(dir_.path(), "/ranges/notes");
  ASSERT_TRUE(std::filesystem::create_directories(not_a_range));

  ASSERT_NO_FATAL_FAILURE(StartServer());
  EXPECT_FALSE(std::filesystem::exists(leftover));
  EXPECT_FALSE(std::filesystem::exists(leftover + ".restore"));
  EXPECT_TRUE(std::filesystem::exists(not_a_range));
  for (const auto& r : created.ranges()) {
    EXPECT_TRUE(std::filesystem::exists(absl::StrCat(dir_.path(), "/ranges/", r.range_id())));
  }
  EXPECT_EQ(GetValue("kept", "a"), "1");
  EXPECT_EQ(GetValue("kept", "z"), "2");
}

TEST_F(KvServerTest, SecondProcessOnTheSameDataDirFailsClearly) {
  ASSERT_TRUE(Put("default", "k", "v").ok());
  auto second = Standalone::Start(Options());
  ASSERT_FALSE(second.ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(second.status())) << second.status();
  EXPECT_NE(second.status().message().find("in use"), std::string::npos) << second.status();
  // The first one is unharmed.
  EXPECT_EQ(GetValue("default", "k"), "v");
  ASSERT_TRUE(Put("default", "k", "w").ok());
  EXPECT_EQ(GetValue("default", "k"), "w");
}

TEST_F(KvServerTest, MoreBookiesKeepOldDataAndFewerAreRefused) {
  ASSERT_TRUE(Put("default", "k", "v").ok());
  bookies_ = 3;
  ASSERT_NO_FATAL_FAILURE(RestartServer());
  EXPECT_EQ(GetValue("default", "k"), "v");
  ASSERT_TRUE(Put("default", "k2", "v2").ok());
  StopServer();
  bookies_ = 2;
  auto refused = Standalone::Start(Options());
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(refused.status())) << refused.status();
  EXPECT_NE(refused.status().message().find("--bookies 3"), std::string::npos) << refused.status();
  bookies_ = 3;
  ASSERT_NO_FATAL_FAILURE(StartServer());
  EXPECT_EQ(GetValue("default", "k2"), "v2");
}

}  // namespace
}  // namespace ledgerkv::kv::testing
