// TableCatalog against a real EmbeddedStore: validation of table requests,
// the metadata layout (range records, table record, never-reused ids), and
// crash garbage being swept.
#include "kv_server/catalog.h"

#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/synchronization/notification.h"
#include "base/fault_point.h"
#include "gtest/gtest.h"
#include "ledger/ledger_test_util.h"
#include "metadata/embedded_store.h"

namespace ledgerkv::kv {
namespace {

namespace meta = ::ledgerkv::meta::v1;

class CatalogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto store = metadata::EmbeddedStore::Open(dir_.path() + "/metadata");
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
    catalog_ = std::make_unique<TableCatalog>(store_.get(), "default", Limits());
    ASSERT_TRUE(catalog_->Load().ok());
  }

  static TableCatalog::RangeCleanup Record(std::vector<uint64_t>* cleaned) {
    return [cleaned](const meta::RangeMetadata& r) {
      cleaned->push_back(r.range_id());
      return absl::OkStatus();
    };
  }

  bool RangeRecordExists(uint64_t id) { return store_->Get(keys_.Range(id)).ok(); }

  ledger::testing::TempDir dir_;
  metadata::Keys keys_{"default"};
  std::unique_ptr<metadata::EmbeddedStore> store_;
  std::unique_ptr<TableCatalog> catalog_;
};

TEST(TableRequestValidation, BadTableNamesAreInvalidArgument) {
  EXPECT_TRUE(CheckTableName("orders-2024_v1.x").ok());
  EXPECT_TRUE(CheckTableName(std::string(128, 'a')).ok());
  for (const std::string& bad :
       {std::string(), std::string(129, 'a'), std::string("a b"), std::string("a/b"),
        std::string("t\xff"), std::string("a\0b", 3)}) {
    absl::Status s = CheckTableName(bad);
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << "name of " << bad.size() << " bytes: " << s;
  }
}

TEST(TableRequestValidation, SplitKeysMustBeNonEmptyIncreasingAndWithinLimits) {
  Limits limits;
  EXPECT_TRUE(CheckSplitKeys({}, limits).ok());
  EXPECT_TRUE(CheckSplitKeys({"a", "b", "ba"}, limits).ok());
  EXPECT_TRUE(absl::IsInvalidArgument(CheckSplitKeys({"a", ""}, limits)));
  EXPECT_TRUE(absl::IsInvalidArgument(CheckSplitKeys({"b", "a"}, limits)));
  EXPECT_TRUE(absl::IsInvalidArgument(CheckSplitKeys({"a", "a"}, limits)));
  absl::Status big = CheckSplitKeys({std::string(limits.max_key_bytes + 1, 'k')}, limits);
  EXPECT_TRUE(absl::IsInvalidArgument(big));
  EXPECT_NE(big.message().find("max_key_bytes"), std::string::npos) << big;

  std::vector<std::string> splits;
  for (int i = 0; i < kMaxRangesPerTable - 1; ++i) splits.push_back(absl::StrFormat("k%05d", i));
  EXPECT_TRUE(CheckSplitKeys(splits, limits).ok());
  splits.push_back("z");
  absl::Status too_many = CheckSplitKeys(splits, limits);
  EXPECT_TRUE(absl::IsInvalidArgument(too_many));
  EXPECT_NE(too_many.message().find("1000"), std::string::npos) << too_many;
}

TEST_F(CatalogTest, CreateTableWritesRangesThatTileTheKeySpace) {
  auto t = catalog_->CreateTable("orders", {"g", "p"});
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_EQ(t->ranges_size(), 3);
  EXPECT_EQ(t->ranges(0).start(), "");
  EXPECT_EQ(t->ranges(0).end(), "g");
  EXPECT_EQ(t->ranges(1).start(), "g");
  EXPECT_EQ(t->ranges(1).end(), "p");
  EXPECT_EQ(t->ranges(2).start(), "p");
  EXPECT_EQ(t->ranges(2).end(), "");
  for (const meta::RangeSpec& spec : t->ranges()) {
    auto record = store_->Get(keys_.Range(spec.range_id()));
    ASSERT_TRUE(record.ok()) << record.status();
    meta::RangeMetadata r;
    ASSERT_TRUE(r.ParseFromString(record->value));
    EXPECT_EQ(r.table(), "orders");
    EXPECT_EQ(r.start(), spec.start());
    EXPECT_EQ(r.end(), spec.end());
  }
  EXPECT_EQ(RangeForKey(*t, "").range_id(), t->ranges(0).range_id());
  EXPECT_EQ(RangeForKey(*t, "f\xff").range_id(), t->ranges(0).range_id());
  EXPECT_EQ(RangeForKey(*t, "g").range_id(), t->ranges(1).range_id());
  EXPECT_EQ(RangeForKey(*t, "p").range_id(), t->ranges(2).range_id());
  EXPECT_EQ(RangeForKey(*t, "zzz").range_id(), t->ranges(2).range_id());

  // A second catalog over the same store (a restart) sees the table.
  TableCatalog reloaded(store_.get(), "default", Limits());
  ASSERT_TRUE(reloaded.Load().ok());
  auto got = reloaded.Get("orders");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ((*got)->table_id(), t->table_id());
  EXPECT_EQ((*got)->ranges_size(), 3);
}

TEST_F(CatalogTest, BadCreateRequestsChangeNothing) {
  ASSERT_TRUE(catalog_->CreateTable("t", {}).ok());
  auto before = store_->CurrentRevision();
  EXPECT_TRUE(absl::IsAlreadyExists(catalog_->CreateTable("t", {"a"}).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(catalog_->CreateTable("bad name", {}).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(catalog_->CreateTable("u", {"b", "a"}).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(catalog_->CreateTable("u", {""}).status()));
  EXPECT_TRUE(absl::IsNotFound(catalog_->Get("u").status()));
  EXPECT_EQ(*store_->CurrentRevision(), *before);
  EXPECT_EQ(catalog_->List().size(), 1u);
}

TEST_F(CatalogTest, DropCleansEveryRangeAndIdsAreNeverReused) {
  auto first = catalog_->CreateTable("t", {"m"});
  ASSERT_TRUE(first.ok());
  std::vector<uint64_t> cleaned;
  auto dropped = catalog_->DropTable("t", Record(&cleaned));
  ASSERT_TRUE(dropped.ok()) << dropped.status();
  EXPECT_EQ(cleaned,
            (std::vector<uint64_t>{first->ranges(0).range_id(), first->ranges(1).range_id()}));
  EXPECT_FALSE(RangeRecordExists(first->ranges(0).range_id()));
  EXPECT_FALSE(RangeRecordExists(first->ranges(1).range_id()));
  EXPECT_TRUE(absl::IsNotFound(store_->Get(keys_.Table("t")).status()));
  EXPECT_TRUE(absl::IsNotFound(catalog_->Get("t").status()));
  EXPECT_TRUE(absl::IsNotFound(catalog_->DropTable("t", Record(&cleaned)).status()));

  auto second = catalog_->CreateTable("t", {"m"});
  ASSERT_TRUE(second.ok());
  EXPECT_NE(second->table_id(), first->table_id());
  std::set<uint64_t> old_ids{first->ranges(0).range_id(), first->ranges(1).range_id()};
  for (const auto& spec : second->ranges()) EXPECT_FALSE(old_ids.contains(spec.range_id()));
}

// Two servers' catalogs over one store. One drops and re-creates `t`
// while the other's cache still holds the old `t`: a drop through the stale
// one removes the current table and cleans its ranges (before, it deleted
// the new record and cleaned the old ranges, leaking the new ones with
// their data). A create through a stale cache that loses the race leaves no
// range records behind.
TEST_F(CatalogTest, ACatalogWithAStaleCacheDropsTheTableTheStoreHolds) {
  TableCatalog other(store_.get(), "default", Limits());
  auto old_t = catalog_->CreateTable("t", {"m"});
  ASSERT_TRUE(old_t.ok());
  ASSERT_TRUE(other.Load().ok());
  std::vector<uint64_t> cleaned;
  ASSERT_TRUE(catalog_->DropTable("t", Record(&cleaned)).ok());
  auto new_t = catalog_->CreateTable("t", {"k", "p"});
  ASSERT_TRUE(new_t.ok());
  ASSERT_EQ((*other.Get("t"))->table_id(), old_t->table_id()) << "the other cache is not stale";

  cleaned.clear();
  auto dropped = other.DropTable("t", Record(&cleaned));
  ASSERT_TRUE(dropped.ok()) << dropped.status();
  EXPECT_EQ(dropped->table_id(), new_t->table_id());
  std::vector<uint64_t> new_ids;
  for (const auto& spec : new_t->ranges()) new_ids.push_back(spec.range_id());
  EXPECT_EQ(cleaned, new_ids);
  for (uint64_t id : new_ids) EXPECT_FALSE(RangeRecordExists(id)) << "range " << id << " leaked";
  EXPECT_TRUE(absl::IsNotFound(store_->Get(keys_.Table("t")).status()));
  EXPECT_TRUE(absl::IsNotFound(other.DropTable("t", Record(&cleaned)).status()));

  // A create that loses to another server's create of the same name.
  auto won = catalog_->CreateTable("u", {});
  ASSERT_TRUE(won.ok());
  auto before = store_->List(keys_.Root() + "ranges/");
  ASSERT_TRUE(before.ok());
  EXPECT_TRUE(absl::IsAlreadyExists(other.CreateTable("u", {"a", "b"}).status()));
  auto after = store_->List(keys_.Root() + "ranges/");
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->size(), before->size()) << "the losing create left range records behind";
}

// A drop whose table-record delete landed but whose reply was lost is
// retried by its caller: the retry finds no record, and must still clean
// the ranges (nothing else would in cluster mode). It answers NOT_FOUND.
TEST_F(CatalogTest, ARetriedDropWhoseRecordIsAlreadyGoneStillCleansItsRanges) {
  auto t = catalog_->CreateTable("t", {"m"});
  ASSERT_TRUE(t.ok());
  // What the lost-reply delete left: the record gone, the cache unchanged.
  ASSERT_TRUE(store_->Delete(keys_.Table("t"), metadata::kAnyVersion).ok());
  std::vector<uint64_t> cleaned;
  EXPECT_TRUE(absl::IsNotFound(catalog_->DropTable("t", Record(&cleaned)).status()));
  EXPECT_EQ(cleaned, (std::vector<uint64_t>{t->ranges(0).range_id(), t->ranges(1).range_id()}));
  for (const auto& spec : t->ranges()) EXPECT_FALSE(RangeRecordExists(spec.range_id()));
  EXPECT_TRUE(absl::IsNotFound(catalog_->Get("t").status()));
  // Nothing left: a third call cleans nothing.
  cleaned.clear();
  EXPECT_TRUE(absl::IsNotFound(catalog_->DropTable("t", Record(&cleaned)).status()));
  EXPECT_TRUE(cleaned.empty());
}

TEST_F(CatalogTest, FailedCleanupLeavesTheRangeForSweep) {
  auto t = catalog_->CreateTable("t", {});
  ASSERT_TRUE(t.ok());
  const uint64_t id = t->ranges(0).range_id();
  auto dropped = catalog_->DropTable(
      "t", [](const meta::RangeMetadata&) { return absl::UnavailableError("bookies down"); });
  ASSERT_TRUE(dropped.ok()) << dropped.status();  // the table is gone anyway
  EXPECT_TRUE(absl::IsNotFound(catalog_->Get("t").status()));
  EXPECT_TRUE(RangeRecordExists(id));

  std::vector<uint64_t> cleaned;
  auto swept = catalog_->Sweep(Record(&cleaned));
  ASSERT_TRUE(swept.ok()) << swept.status();
  EXPECT_EQ(*swept, 1);
  EXPECT_EQ(cleaned, std::vector<uint64_t>{id});
  EXPECT_FALSE(RangeRecordExists(id));
}

// With other processes creating tables (cluster mode), a young
// unreferenced range record may belong to a create in progress: Sweep with
// a minimum age leaves it, and takes old ones. Records of older builds (no
// table id, so no intent fences their create) are left to a sweep without
// a minimum age (standalone, at start). It reads the tables from the store,
// so a table this catalog has not loaded yet is never swept.
TEST_F(CatalogTest, SweepWithAMinimumAgeLeavesYoungRecordsAndTablesItHasNotLoaded) {
  auto put_orphan = [&](uint64_t id, int64_t created_ms, uint64_t table_id) {
    meta::RangeMetadata r;
    r.set_range_id(id);
    r.set_table("never-created");
    r.set_create_unix_ms(created_ms);
    r.set_table_id(table_id);
    ASSERT_TRUE(store_->Put(keys_.Range(id), r.SerializeAsString(), metadata::kMustNotExist).ok());
  };
  put_orphan(901, absl::ToUnixMillis(absl::Now() - absl::Minutes(30)), 9001);
  put_orphan(902, absl::ToUnixMillis(absl::Now()), 9002);
  put_orphan(903, 0, 0);  // an older build's record
  // Created through another catalog (another server): not in this cache.
  TableCatalog other(store_.get(), "default", Limits());
  ASSERT_TRUE(other.Load().ok());
  auto elsewhere = other.CreateTable("elsewhere", {"m"});
  ASSERT_TRUE(elsewhere.ok());
  ASSERT_TRUE(absl::IsNotFound(catalog_->Get("elsewhere").status()));

  std::vector<uint64_t> cleaned;
  auto swept = catalog_->Sweep(Record(&cleaned), absl::Minutes(10));
  ASSERT_TRUE(swept.ok()) << swept.status();
  EXPECT_EQ(cleaned, (std::vector<uint64_t>{901}));
  EXPECT_TRUE(RangeRecordExists(902));
  EXPECT_TRUE(RangeRecordExists(903));
  // New tables' range records carry their creation time and table id.
  auto r = store_->Get(keys_.Range(elsewhere->ranges(0).range_id()));
  ASSERT_TRUE(r.ok());
  meta::RangeMetadata record;
  ASSERT_TRUE(record.ParseFromString(r->value));
  EXPECT_GT(record.create_unix_ms(), 0);
  EXPECT_EQ(record.table_id(), elsewhere->table_id());

  // Without a minimum age everything unreferenced goes, but not the ranges
  // of the table this catalog has not loaded.
  cleaned.clear();
  swept = catalog_->Sweep(Record(&cleaned));
  ASSERT_TRUE(swept.ok()) << swept.status();
  EXPECT_EQ(cleaned, (std::vector<uint64_t>{902, 903}));
  for (const auto& spec : elsewhere->ranges()) EXPECT_TRUE(RangeRecordExists(spec.range_id()));
}

TEST_F(CatalogTest, SweepRemovesOrphansOfAnInterruptedCreateAndKeepsLiveRanges) {
  auto live = catalog_->CreateTable("live", {"k"});
  ASSERT_TRUE(live.ok());
  // What a crash between the range records and the table record leaves.
  meta::RangeMetadata orphan;
  orphan.set_range_id(999);
  orphan.set_table("never-created");
  ASSERT_TRUE(
      store_->Put(keys_.Range(999), orphan.SerializeAsString(), metadata::kMustNotExist).ok());
  std::vector<uint64_t> cleaned;
  auto swept = catalog_->Sweep(Record(&cleaned));
  ASSERT_TRUE(swept.ok()) << swept.status();
  EXPECT_EQ(cleaned, std::vector<uint64_t>{999});
  EXPECT_FALSE(RangeRecordExists(999));
  for (const auto& spec : live->ranges()) EXPECT_TRUE(RangeRecordExists(spec.range_id()));
}

// docs/cluster.md, "Leftovers": a create that stalls between its range
// records and its table record (past the grace period) and a sweep that
// takes those records for a crashed create's cannot both succeed. Here the
// sweep claims first: the create then fails, nothing was created, and the
// sweep cleaned exactly the create's ranges.
TEST_F(CatalogTest, ASweepDuringAStalledCreateMakesTheCreateFailAndNothingIsCreated) {
  ScopedFaultPoints faults;
  TableCatalog sweeper(store_.get(), "default", Limits());
  ASSERT_TRUE(sweeper.Load().ok());
  std::vector<uint64_t> cleaned;
  absl::StatusOr<int> swept;
  bool stalled = false;
  FaultPoints::Get().Arm("catalog.create.before_commit", [&](std::string_view) {
    stalled = true;
    swept = sweeper.Sweep(Record(&cleaned), absl::ZeroDuration());  // grace period over
    return false;
  });
  auto created = catalog_->CreateTable("slow", {"m"});
  FaultPoints::Get().DisarmAll();
  ASSERT_TRUE(stalled);
  ASSERT_TRUE(swept.ok()) << swept.status();
  EXPECT_EQ(*swept, 2);
  EXPECT_EQ(cleaned.size(), 2u);
  EXPECT_TRUE(absl::IsAborted(created.status())) << created.status();
  EXPECT_TRUE(absl::IsNotFound(store_->Get(keys_.Table("slow")).status()));
  EXPECT_TRUE(absl::IsNotFound(catalog_->Get("slow").status()));
  for (uint64_t id : cleaned) EXPECT_FALSE(RangeRecordExists(id));
  auto intents = store_->List(keys_.CreatingPrefix());
  ASSERT_TRUE(intents.ok());
  EXPECT_TRUE(intents->empty());
  // A retry creates the table.
  auto again = catalog_->CreateTable("slow", {"m"});
  ASSERT_TRUE(again.ok()) << again.status();
  for (const auto& spec : again->ranges()) EXPECT_TRUE(RangeRecordExists(spec.range_id()));
}

// The other order: the sweep lists the stalled create's range records as
// unreferenced, then the create commits, then the sweep tries to claim them.
// The claim fails (the table key changed) and the new table keeps its ranges.
TEST_F(CatalogTest, ACreateThatCommitsAfterTheSweepListedItsRangesKeepsThem) {
  ScopedFaultPoints faults;
  TableCatalog sweeper(store_.get(), "default", Limits());
  ASSERT_TRUE(sweeper.Load().ok());
  absl::Notification at_commit, listed, committed;
  // Bounded waits: a regression fails the test instead of hanging it.
  FaultPoints::Get().Arm("catalog.create.before_commit", [&](std::string_view) {
    at_commit.Notify();
    EXPECT_TRUE(listed.WaitForNotificationWithTimeout(absl::Seconds(10)));
    return false;
  });
  FaultPoints::Get().Arm("catalog.sweep.listed", [&](std::string_view) {
    listed.Notify();
    EXPECT_TRUE(committed.WaitForNotificationWithTimeout(absl::Seconds(10)));
    return false;
  });
  absl::StatusOr<meta::TableMetadata> created;
  std::thread creator([&] {
    created = catalog_->CreateTable("slow", {"m"});
    committed.Notify();
  });
  ASSERT_TRUE(at_commit.WaitForNotificationWithTimeout(absl::Seconds(10)));
  std::vector<uint64_t> cleaned;
  auto swept = sweeper.Sweep(Record(&cleaned), absl::ZeroDuration());
  creator.join();
  FaultPoints::Get().DisarmAll();
  ASSERT_TRUE(created.ok()) << created.status();
  ASSERT_TRUE(swept.ok()) << swept.status();
  EXPECT_EQ(*swept, 0);
  EXPECT_TRUE(cleaned.empty());
  for (const auto& spec : created->ranges()) {
    auto r = store_->Get(keys_.Range(spec.range_id()));
    ASSERT_TRUE(r.ok()) << r.status();
    meta::RangeMetadata record;
    ASSERT_TRUE(record.ParseFromString(r->value));
    EXPECT_FALSE(record.sweeping());
  }
  // And a later sweep leaves them too.
  swept = sweeper.Sweep(Record(&cleaned), absl::ZeroDuration());
  ASSERT_TRUE(swept.ok()) << swept.status();
  EXPECT_EQ(*swept, 0);
}

// The table key alone fences a claim too: a record whose create's intent is
// already gone, and a table record naming it written after the sweep's
// listing (here by hand), make the claim fail and the range stays.
TEST_F(CatalogTest, AClaimFailsWhenTheTableKeyChangedSinceTheListing) {
  ScopedFaultPoints faults;
  meta::RangeMetadata orphan;
  orphan.set_range_id(600);
  orphan.set_table("late");
  orphan.set_table_id(60);
  ASSERT_TRUE(
      store_->Put(keys_.Range(600), orphan.SerializeAsString(), metadata::kMustNotExist).ok());
  FaultPoints::Get().Arm("catalog.sweep.listed", [&](std::string_view) {
    meta::TableMetadata table;
    table.set_name("late");
    table.set_table_id(60);
    meta::RangeSpec* spec = table.add_ranges();
    spec->set_range_id(600);
    EXPECT_TRUE(store_->Put(keys_.Table("late"), table.SerializeAsString(),
                            metadata::kMustNotExist).ok());
    return false;
  });
  std::vector<uint64_t> cleaned;
  auto swept = catalog_->Sweep(Record(&cleaned));
  FaultPoints::Get().DisarmAll();
  ASSERT_TRUE(swept.ok()) << swept.status();
  EXPECT_EQ(*swept, 0);
  EXPECT_TRUE(cleaned.empty());
  auto r = store_->Get(keys_.Range(600));
  ASSERT_TRUE(r.ok()) << r.status();
  meta::RangeMetadata record;
  ASSERT_TRUE(record.ParseFromString(r->value));
  EXPECT_FALSE(record.sweeping());
}

// A create whose name is taken through another server while it runs
// answers ALREADY_EXISTS, not "collected by the sweep", and leaves neither
// range records nor its intent behind.
TEST_F(CatalogTest, ACreateThatLosesTheNameRaceSaysSoAndCleansUp) {
  ScopedFaultPoints faults;
  TableCatalog other(store_.get(), "default", Limits());
  ASSERT_TRUE(other.Load().ok());
  FaultPoints::Get().Arm("catalog.create.before_commit", [&](std::string_view) {
    FaultPoints::Get().Disarm("catalog.create.before_commit");
    EXPECT_TRUE(other.CreateTable("t", {}).ok());
    return false;
  });
  auto created = catalog_->CreateTable("t", {"m"});
  EXPECT_TRUE(absl::IsAlreadyExists(created.status())) << created.status();
  auto intents = store_->List(keys_.CreatingPrefix());
  ASSERT_TRUE(intents.ok());
  EXPECT_TRUE(intents->empty());
  auto records = store_->List(keys_.RangesPrefix());
  ASSERT_TRUE(records.ok());
  EXPECT_EQ(records->size(), 1u);  // the winner's one range
}

// A table dropped through another server whose cleanup failed: its ranges
// are unreferenced in the store, but while this catalog (the controller's)
// still has the table cached it may still assign them, so its sweep leaves
// them until a reload drops the table.
TEST_F(CatalogTest, ASweepLeavesTheRangesOfATableItStillHasCached) {
  auto t = catalog_->CreateTable("t", {});
  ASSERT_TRUE(t.ok());
  const uint64_t id = t->ranges(0).range_id();
  TableCatalog other(store_.get(), "default", Limits());
  ASSERT_TRUE(other.Load().ok());
  ASSERT_TRUE(other
                  .DropTable("t", [](const meta::RangeMetadata&) {
                    return absl::UnavailableError("bookies down");
                  })
                  .ok());
  ASSERT_TRUE(catalog_->Get("t").ok());  // stale: its watch has not fired
  std::vector<uint64_t> cleaned;
  auto swept = catalog_->Sweep(Record(&cleaned));
  ASSERT_TRUE(swept.ok()) << swept.status();
  EXPECT_TRUE(cleaned.empty());
  EXPECT_TRUE(RangeRecordExists(id));
  ASSERT_TRUE(catalog_->Load().ok());
  swept = catalog_->Sweep(Record(&cleaned));
  ASSERT_TRUE(swept.ok()) << swept.status();
  EXPECT_EQ(cleaned, std::vector<uint64_t>{id});
  EXPECT_FALSE(RangeRecordExists(id));
}

// Leftovers of a create that crashed before writing any range record (only
// its intent), and a claimed record whose cleanup failed: the next sweep
// deletes the intent and cleans the claimed record again.
TEST_F(CatalogTest, ASweepDeletesAStaleIntentAndRetriesAClaimedRecordWhoseCleanupFailed) {
  ASSERT_TRUE(store_->Put(keys_.Creating(77), "0", metadata::kMustNotExist).ok());
  meta::RangeMetadata orphan;
  orphan.set_range_id(555);
  orphan.set_table("gone");
  orphan.set_table_id(76);
  ASSERT_TRUE(
      store_->Put(keys_.Range(555), orphan.SerializeAsString(), metadata::kMustNotExist).ok());
  auto failed = catalog_->Sweep(
      [](const meta::RangeMetadata&) { return absl::UnavailableError("bookies down"); });
  EXPECT_TRUE(absl::IsUnavailable(failed.status())) << failed.status();
  auto intents = store_->List(keys_.CreatingPrefix());
  ASSERT_TRUE(intents.ok());
  EXPECT_TRUE(intents->empty());
  auto r = store_->Get(keys_.Range(555));
  ASSERT_TRUE(r.ok()) << r.status();
  meta::RangeMetadata record;
  ASSERT_TRUE(record.ParseFromString(r->value));
  EXPECT_TRUE(record.sweeping());
  // Claimed records are cleaned whatever their age.
  std::vector<uint64_t> cleaned;
  auto swept = catalog_->Sweep(Record(&cleaned), absl::Hours(1));
  ASSERT_TRUE(swept.ok()) << swept.status();
  EXPECT_EQ(cleaned, std::vector<uint64_t>{555});
  EXPECT_FALSE(RangeRecordExists(555));
}

// Keys under this cluster's prefixes that another cluster wrote (a cluster
// named "default/ranges" lists under "default/ranges/") are not swept.
TEST_F(CatalogTest, ASweepLeavesKeysThatOnlyShareItsPrefixes) {
  meta::RangeMetadata foreign;
  foreign.set_range_id(12);
  foreign.set_table("theirs");
  const std::string foreign_range = keys_.RangesPrefix() + "ranges/00000000000000000012";
  const std::string foreign_intent = keys_.CreatingPrefix() + "creating/00000000000000000012";
  const std::string foreign_table = keys_.TablesPrefix() + "tables/theirs";
  ASSERT_TRUE(store_->Put(foreign_table, "not a table of ours", metadata::kMustNotExist).ok());
  ASSERT_TRUE(store_->Put(foreign_range, foreign.SerializeAsString(), metadata::kMustNotExist).ok());
  ASSERT_TRUE(store_->Put(foreign_intent, "0", metadata::kMustNotExist).ok());
  std::vector<uint64_t> cleaned;
  auto swept = catalog_->Sweep(Record(&cleaned));
  ASSERT_TRUE(swept.ok()) << swept.status();
  EXPECT_TRUE(cleaned.empty());
  EXPECT_TRUE(store_->Get(foreign_range).ok());
  EXPECT_TRUE(store_->Get(foreign_intent).ok());
  EXPECT_TRUE(store_->Get(foreign_table).ok());
}

}  // namespace
}  // namespace ledgerkv::kv
