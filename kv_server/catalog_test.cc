// TableCatalog against a real EmbeddedStore: validation of table requests,
// the metadata layout (range records, table record, never-reused ids), and
// crash garbage being swept.
#include "kv_server/catalog.h"

#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
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

}  // namespace
}  // namespace ledgerkv::kv
