// Keys (the key layout) and NextId's error handling. NextId's concurrency
// and restart behaviour is in the contract suite.
#include "metadata/metadata_store.h"

#include <cstdint>
#include <string>

#include "gtest/gtest.h"

namespace ledgerkv::metadata {
namespace {

TEST(KeysTest, KeyLayoutMatchesDocs) {
  Keys keys("prod");
  EXPECT_EQ(keys.Root(), "/ledgerkv/prod/");
  EXPECT_EQ(keys.Bookie("b1"), "/ledgerkv/prod/bookies/b1");
  EXPECT_EQ(keys.Cookie("b1"), "/ledgerkv/prod/cookies/b1");
  EXPECT_EQ(keys.Ledger(42), "/ledgerkv/prod/ledgers/00000000000000000042");
  EXPECT_EQ(keys.IdGen("ledger"), "/ledgerkv/prod/idgen/ledger");
  EXPECT_EQ(keys.Log("r7"), "/ledgerkv/prod/logs/r7");
  EXPECT_EQ(keys.Table("users"), "/ledgerkv/prod/tables/users");
  EXPECT_EQ(keys.Range(7), "/ledgerkv/prod/ranges/00000000000000000007");
  EXPECT_EQ(keys.Server("s1"), "/ledgerkv/prod/servers/s1");
  EXPECT_EQ(keys.Assignment(7), "/ledgerkv/prod/assignments/00000000000000000007");
  EXPECT_EQ(keys.Controller(), "/ledgerkv/prod/controller");
}

TEST(KeysTest, LedgerKeysSortInIdOrder) {
  Keys keys("c");
  const uint64_t ids[] = {0, 1, 2, 9, 10, 99, 100, 1u << 31, UINT64_MAX - 1, UINT64_MAX};
  for (size_t i = 1; i < std::size(ids); ++i) {
    EXPECT_LT(keys.Ledger(ids[i - 1]), keys.Ledger(ids[i])) << ids[i];
    EXPECT_LT(keys.Range(ids[i - 1]), keys.Range(ids[i])) << ids[i];
    EXPECT_LT(keys.Assignment(ids[i - 1]), keys.Assignment(ids[i])) << ids[i];
  }
}

TEST(KeysTest, ParseLedgerKeyRoundTrips) {
  Keys keys("c");
  for (uint64_t id : {uint64_t{0}, uint64_t{1}, uint64_t{12345}, UINT64_MAX}) {
    uint64_t parsed = 7;
    ASSERT_TRUE(keys.ParseLedgerKey(keys.Ledger(id), &parsed)) << id;
    EXPECT_EQ(parsed, id);
  }
}

TEST(KeysTest, ParseLedgerKeyRejectsKeysLedgerNeverProduces) {
  Keys keys("c");
  const std::string prefix = keys.LedgersPrefix();
  uint64_t id = 7;
  for (const std::string& bad : {
           Keys("other").Ledger(1),           // another cluster
           prefix,                            // no id
           prefix + "1",                      // not padded
           prefix + "000000000000000000001",  // 21 digits
           prefix + "0000000000000000000x",   // not a digit
           prefix + "+0000000000000000001",   // sign
           prefix + "99999999999999999999",   // above UINT64_MAX
           keys.Ledger(1) + "/x",             // a child key
           keys.Range(1),                     // another kind
       }) {
    EXPECT_FALSE(keys.ParseLedgerKey(bad, &id)) << bad;
  }
  EXPECT_EQ(id, 7u) << "a rejected key must not change the output";
}

}  // namespace
}  // namespace ledgerkv::metadata
