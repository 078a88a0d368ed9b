// Semantics of the Range write and read paths (docs/kv-api.md) over real
// bookies, the embedded store and a real local RocksDB.
#include <algorithm>
#include <atomic>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"
#include "kv_server/range/range_test_util.h"

namespace ledgerkv::kv::testing {
namespace {

using ::absl::StatusCode;

#define EXPECT_CODE(expr, want)                           \
  do {                                                    \
    auto _st = (expr);                                    \
    EXPECT_EQ(_st.status().code(), want) << _st.status(); \
  } while (0)

v1::Compare Cmp(const std::string& key, v1::Compare::Target target, v1::Compare::Result result) {
  v1::Compare c;
  c.set_key(key);
  c.set_target(target);
  c.set_result(result);
  return c;
}
v1::Compare CmpValue(const std::string& key, v1::Compare::Result result, const std::string& v) {
  v1::Compare c = Cmp(key, v1::Compare::VALUE, result);
  c.set_value(v);
  return c;
}
v1::Compare CmpNumber(const std::string& key, v1::Compare::Target target,
                      v1::Compare::Result result, int64_t n) {
  v1::Compare c = Cmp(key, target, result);
  c.set_number(n);
  return c;
}

TEST_F(RangeTest, PutAndGetTrackVersionsAndRevisions) {
  LKV_ASSIGN_OR_FAIL(auto range, Open(Options()));
  LKV_ASSIGN_OR_FAIL(auto p1, Put(*range, "a", "1"));
  EXPECT_EQ(p1.header().revision(), 1);
  EXPECT_EQ(p1.header().range_id(), 7u);
  EXPECT_FALSE(p1.has_prev_kv());
  v1::PutRequest again = PutReq("a", "22");
  again.set_prev_kv(true);
  LKV_ASSIGN_OR_FAIL(auto p2, Put(*range, again));
  EXPECT_EQ(p2.header().revision(), 2);
  EXPECT_EQ(p2.prev_kv().value(), "1");
  EXPECT_EQ(p2.prev_kv().version(), 1);
  LKV_ASSIGN_OR_FAIL(auto p3, Put(*range, "b", "333"));
  EXPECT_EQ(p3.header().revision(), 3);

  v1::GetRequest get;
  get.set_key("a");
  LKV_ASSIGN_OR_FAIL(auto a, range->Get(get));
  EXPECT_TRUE(a.found());
  EXPECT_EQ(a.kv().value(), "22");
  EXPECT_EQ(a.kv().create_revision(), 1);
  EXPECT_EQ(a.kv().mod_revision(), 2);
  EXPECT_EQ(a.kv().version(), 2);
  EXPECT_EQ(a.header().revision(), 3);
  EXPECT_EQ(a.header().range_id(), 7u);
  get.set_key("zz");
  LKV_ASSIGN_OR_FAIL(auto missing, range->Get(get));
  EXPECT_FALSE(missing.found());

  const RangeStats stats = range->stats();
  EXPECT_EQ(stats.revision, 3);
  EXPECT_EQ(stats.key_count, 2);
  EXPECT_EQ(stats.bytes, 1 + 2 + 1 + 3);
  EXPECT_EQ(stats.applied_seqno, 3u);
  EXPECT_TRUE(stats.serving);
  EXPECT_EQ(stats.recovered_from, "empty");
  LKV_ASSERT_OK(range->Close());
}

TEST_F(RangeTest, PutConditionsFailWithExpectedAndActualAndChangeNothing) {
  LKV_ASSIGN_OR_FAIL(auto range, Open(Options()));
  v1::PutRequest create = PutReq("k", "v1");
  create.set_expected_version(0);
  LKV_ASSIGN_OR_FAIL(auto created, Put(*range, create));
  EXPECT_EQ(created.header().revision(), 1);

  auto again = Put(*range, create);
  ASSERT_EQ(again.status().code(), StatusCode::kFailedPrecondition) << again.status();
  EXPECT_TRUE(absl::StrContains(again.status().message(), "expected version 0, actual version 1"))
      << again.status();

  v1::PutRequest by_version = PutReq("k", "v2");
  by_version.set_expected_version(1);
  LKV_ASSIGN_OR_FAIL(auto second, Put(*range, by_version));
  EXPECT_EQ(second.header().revision(), 2);

  v1::PutRequest by_mod = PutReq("k", "v3");
  by_mod.set_expected_mod_revision(1);
  auto stale = Put(*range, by_mod);
  ASSERT_EQ(stale.status().code(), StatusCode::kFailedPrecondition) << stale.status();
  EXPECT_TRUE(
      absl::StrContains(stale.status().message(), "expected mod_revision 1, actual mod_revision 2"))
      << stale.status();
  by_mod.set_expected_mod_revision(2);
  LKV_ASSIGN_OR_FAIL(auto third, Put(*range, by_mod));
  EXPECT_EQ(third.header().revision(), 3);

  v1::PutRequest absent = PutReq("nope", "x");
  absent.set_expected_version(3);
  auto refused = Put(*range, absent);
  EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(refused.status().message(), "does not exist"));

  EXPECT_EQ(range->stats().revision, 3);
  EXPECT_EQ(GetValue(*range, "k"), "v3");
  EXPECT_EQ(GetValue(*range, "nope"), std::nullopt);
}

TEST_F(RangeTest, TxnComparesEveryTargetAsEtcdDoes) {
  LKV_ASSIGN_OR_FAIL(auto range, Open(Options()));
  LKV_ASSERT_OK(Put(*range, "a", "m"));   // rev 1
  LKV_ASSERT_OK(Put(*range, "b", "x"));   // rev 2
  LKV_ASSERT_OK(Put(*range, "a", "m"));   // rev 3: a has version 2, create 1, mod 3
  using C = v1::Compare;
  struct Case {
    v1::Compare compare;
    bool holds;
  };
  const Case cases[] = {
      {CmpValue("a", C::EQUAL, "m"), true},
      {CmpValue("a", C::NOT_EQUAL, "m"), false},
      {CmpValue("a", C::LESS, "n"), true},
      {CmpValue("a", C::GREATER, "n"), false},
      {CmpValue("a", C::GREATER, "l"), true},
      {CmpNumber("a", C::VERSION, C::EQUAL, 2), true},
      {CmpNumber("a", C::VERSION, C::LESS, 2), false},
      {CmpNumber("a", C::CREATE_REVISION, C::EQUAL, 1), true},
      {CmpNumber("a", C::CREATE_REVISION, C::GREATER, 1), false},
      {CmpNumber("a", C::MOD_REVISION, C::EQUAL, 3), true},
      {CmpNumber("a", C::MOD_REVISION, C::NOT_EQUAL, 3), false},
      {CmpNumber("a", C::MOD_REVISION, C::GREATER, 2), true},
      // A missing key: every value compare fails, numbers are 0.
      {CmpValue("missing", C::EQUAL, ""), false},
      {CmpValue("missing", C::NOT_EQUAL, "x"), false},
      {CmpNumber("missing", C::VERSION, C::EQUAL, 0), true},
      {CmpNumber("missing", C::CREATE_REVISION, C::LESS, 1), true},
      {CmpNumber("missing", C::MOD_REVISION, C::GREATER, 0), false},
  };
  for (const Case& c : cases) {
    v1::TxnRequest txn;
    *txn.add_compares() = c.compare;
    txn.add_success()->mutable_get()->set_key("a");
    txn.add_failure()->mutable_get()->set_key("b");
    LKV_ASSIGN_OR_FAIL(auto r, Txn(*range, txn));
    EXPECT_EQ(r.succeeded(), c.holds) << c.compare.DebugString();
    ASSERT_EQ(r.results_size(), 1);
    EXPECT_EQ(r.results(0).get().kv().key(), c.holds ? "a" : "b");
    // A txn that only reads changes nothing.
    EXPECT_EQ(r.header().revision(), 3);
  }
  // Compares are ANDed.
  v1::TxnRequest both;
  *both.add_compares() = CmpValue("a", C::EQUAL, "m");
  *both.add_compares() = CmpValue("b", C::EQUAL, "nope");
  LKV_ASSIGN_OR_FAIL(auto r, Txn(*range, both));
  EXPECT_FALSE(r.succeeded());
  EXPECT_EQ(range->stats().revision, 3);
}

TEST_F(RangeTest, TxnAppliesItsBranchInOrderAsOneRevision) {
  LKV_ASSIGN_OR_FAIL(auto range, Open(Options()));
  LKV_ASSERT_OK(Put(*range, "c", "10"));  // rev 1
  LKV_ASSERT_OK(Put(*range, "d", "x"));   // rev 2
  v1::TxnRequest txn;
  *txn.add_compares() = CmpNumber("c", v1::Compare::VERSION, v1::Compare::EQUAL, 1);
  *txn.add_success()->mutable_put() = PutReq("e", "new");
  *txn.add_success()->mutable_increment() = IncReq("c", 5);
  txn.add_success()->mutable_get()->set_key("e");  // sees the put before it
  *txn.add_success()->mutable_delete_() = DelReq("d");
  LKV_ASSIGN_OR_FAIL(auto r, Txn(*range, txn));
  EXPECT_TRUE(r.succeeded());
  EXPECT_EQ(r.header().revision(), 3);
  ASSERT_EQ(r.results_size(), 4);
  EXPECT_EQ(r.results(1).increment().value(), 15);
  EXPECT_TRUE(r.results(2).get().found());
  EXPECT_EQ(r.results(2).get().kv().mod_revision(), 3);
  EXPECT_EQ(r.results(3).delete_().deleted(), 1);
  EXPECT_EQ(GetKv(*range, "e")->create_revision(), 3);
  EXPECT_EQ(GetKv(*range, "c")->mod_revision(), 3);
  EXPECT_EQ(GetValue(*range, "c"), "15");
  EXPECT_EQ(GetValue(*range, "d"), std::nullopt);

  // The else branch runs when a compare fails, and writes get a revision.
  v1::TxnRequest other;
  *other.add_compares() = CmpValue("c", v1::Compare::EQUAL, "10");
  *other.add_success()->mutable_put() = PutReq("s", "then");
  *other.add_failure()->mutable_put() = PutReq("f", "else");
  LKV_ASSIGN_OR_FAIL(auto r2, Txn(*range, other));
  EXPECT_FALSE(r2.succeeded());
  EXPECT_EQ(r2.header().revision(), 4);
  EXPECT_EQ(GetValue(*range, "f"), "else");
  EXPECT_EQ(GetValue(*range, "s"), std::nullopt);

  // A failing op fails the whole txn and changes nothing.
  LKV_ASSERT_OK(Put(*range, "text", "abc"));  // rev 5
  v1::TxnRequest bad;
  *bad.add_success()->mutable_put() = PutReq("g", "1");
  *bad.add_success()->mutable_increment() = IncReq("text", 1);
  EXPECT_CODE(Txn(*range, bad), StatusCode::kFailedPrecondition);
  EXPECT_EQ(GetValue(*range, "g"), std::nullopt);
  EXPECT_EQ(range->stats().revision, 5);
}

TEST_F(RangeTest, DeleteResetsVersionAndRecreatedKeyStartsOver) {
  LKV_ASSIGN_OR_FAIL(auto range, Open(Options()));
  LKV_ASSERT_OK(Put(*range, "k", "a"));  // rev 1
  LKV_ASSERT_OK(Put(*range, "k", "b"));  // rev 2
  EXPECT_EQ(GetKv(*range, "k")->version(), 2);
  v1::DeleteRequest del = DelReq("k");
  del.set_prev_kv(true);
  LKV_ASSIGN_OR_FAIL(auto d, Delete(*range, del));
  EXPECT_EQ(d.deleted(), 1);
  EXPECT_EQ(d.header().revision(), 3);
  ASSERT_EQ(d.prev_kvs_size(), 1);
  EXPECT_EQ(d.prev_kvs(0).value(), "b");
  LKV_ASSIGN_OR_FAIL(auto p, Put(*range, "k", "c"));  // rev 4
  const auto kv = GetKv(*range, "k");
  EXPECT_EQ(kv->version(), 1);
  EXPECT_EQ(kv->create_revision(), 4);
  EXPECT_EQ(kv->mod_revision(), 4);
  // Deleting an absent key changes nothing and takes no revision.
  LKV_ASSIGN_OR_FAIL(auto none, Delete(*range, DelReq("absent")));
  EXPECT_EQ(none.deleted(), 0);
  EXPECT_EQ(none.header().revision(), 4);
  EXPECT_EQ(range->stats().revision, 4);
  EXPECT_EQ(range->stats().key_count, 1);
}

TEST_F(RangeTest, IncrementCountsFromZeroAndRefusesNonNumbersAndOverflow) {
  LKV_ASSIGN_OR_FAIL(auto range, Open(Options()));
  LKV_ASSIGN_OR_FAIL(auto first, Increment(*range, "n", 5));
  EXPECT_EQ(first.value(), 5);
  LKV_ASSIGN_OR_FAIL(auto second, Increment(*range, "n", -7));
  EXPECT_EQ(second.value(), -2);
  EXPECT_EQ(GetValue(*range, "n"), "-2");
  EXPECT_EQ(GetKv(*range, "n")->version(), 2);

  LKV_ASSERT_OK(Put(*range, "text", "12abc"));
  auto not_number = Increment(*range, "text", 1);
  EXPECT_EQ(not_number.status().code(), StatusCode::kFailedPrecondition) << not_number.status();
  LKV_ASSERT_OK(Put(*range, "spaced", " 1"));
  EXPECT_CODE(Increment(*range, "spaced", 1), StatusCode::kFailedPrecondition);

  LKV_ASSERT_OK(Put(*range, "big", absl::StrCat(INT64_MAX - 1)));
  LKV_ASSIGN_OR_FAIL(auto max, Increment(*range, "big", 1));
  EXPECT_EQ(max.value(), INT64_MAX);
  const int64_t revision = range->stats().revision;
  auto overflow = Increment(*range, "big", 1);
  EXPECT_EQ(overflow.status().code(), StatusCode::kOutOfRange) << overflow.status();
  LKV_ASSERT_OK(Put(*range, "small", absl::StrCat(INT64_MIN)));
  EXPECT_CODE(Increment(*range, "small", -1), StatusCode::kOutOfRange);
  EXPECT_EQ(range->stats().revision, revision + 1);  // only the put of "small"
  EXPECT_EQ(GetValue(*range, "big"), absl::StrCat(INT64_MAX));
}

TEST_F(RangeTest, DeleteRangeCountsAndReturnsPrevKvsWithinTheLimit) {
  RangeOptions options = Options();
  options.limits.max_keys_per_request = 5;
  LKV_ASSIGN_OR_FAIL(auto range, Open(options));
  for (int i = 0; i < 9; ++i) LKV_ASSERT_OK(Put(*range, absl::StrCat("k", i), absl::StrCat(i)));
  v1::DeleteRequest del = DelReq("k2", "k6");
  del.set_prev_kv(true);
  LKV_ASSIGN_OR_FAIL(auto d, Delete(*range, del));
  EXPECT_EQ(d.deleted(), 4);
  ASSERT_EQ(d.prev_kvs_size(), 4);
  EXPECT_EQ(d.prev_kvs(0).key(), "k2");
  EXPECT_EQ(d.prev_kvs(3).key(), "k5");
  EXPECT_EQ(d.header().revision(), 10);
  EXPECT_EQ(GetValue(*range, "k1"), "1");
  EXPECT_EQ(GetValue(*range, "k2"), std::nullopt);
  EXPECT_EQ(GetValue(*range, "k6"), "6");
  EXPECT_EQ(range->stats().key_count, 5);

  // Five keys are left: [k, l) covers all of them, six would be refused.
  LKV_ASSERT_OK(Put(*range, "k9", "9"));
  auto too_many = Delete(*range, DelReq("k", "l"));
  ASSERT_EQ(too_many.status().code(), StatusCode::kResourceExhausted) << too_many.status();
  EXPECT_TRUE(absl::StrContains(too_many.status().message(), "max_keys_per_request is 5"));
  EXPECT_EQ(range->stats().key_count, 6);
  LKV_ASSIGN_OR_FAIL(auto rest, Delete(*range, DelReq("k", "k8")));
  EXPECT_EQ(rest.deleted(), 4);
  LKV_ASSIGN_OR_FAIL(auto empty, Delete(*range, DelReq("a", "b")));
  EXPECT_EQ(empty.deleted(), 0);
  EXPECT_EQ(empty.header().revision(), range->stats().revision);
}

// Issues every request before any answer arrives: conditions must see the
// writes still in flight (the pending view).
TEST_F(RangeTest, BackToBackConditionalWritesSeeEachOther) {
  LKV_ASSIGN_OR_FAIL(auto range, Open(Options()));
  constexpr int kCount = 100;
  absl::Mutex mu;
  std::vector<int64_t> values;
  std::vector<absl::Status> errors;
  for (int i = 0; i < kCount; ++i) {
    range->Increment(IncReq("counter", 1), [&](absl::StatusOr<v1::IncrementResponse> r) {
      absl::MutexLock l(&mu);
      if (r.ok()) {
        values.push_back(r->value());
      } else {
        errors.push_back(r.status());
      }
    });
  }
  // Versioned puts: each expects the version the previous one creates.
  std::vector<std::string> order;
  for (int i = 0; i < 20; ++i) {
    v1::PutRequest put = PutReq("cas", absl::StrCat("v", i));
    put.set_expected_version(i);
    range->Put(put, [&, i](absl::StatusOr<v1::PutResponse> r) {
      absl::MutexLock l(&mu);
      if (!r.ok()) errors.push_back(r.status());
      order.push_back(absl::StrCat("put", i));
    });
  }
  // A create-if-absent that conflicts with the pending puts: refused, and
  // answered only after them.
  v1::PutRequest create = PutReq("cas", "late");
  create.set_expected_version(0);
  absl::Status late;
  range->Put(create, [&](absl::StatusOr<v1::PutResponse> r) {
    absl::MutexLock l(&mu);
    late = r.status();
    order.push_back("late");
  });
  {
    absl::MutexLock l(&mu);
    auto all = [&]() { return values.size() + errors.size() == kCount && order.size() == 21; };
    mu.Await(absl::Condition(&all));
  }
  EXPECT_TRUE(errors.empty()) << errors.front();
  std::sort(values.begin(), values.end());
  for (int i = 0; i < kCount; ++i) EXPECT_EQ(values[i], i + 1);
  EXPECT_EQ(GetValue(*range, "counter"), absl::StrCat(kCount));
  EXPECT_EQ(GetValue(*range, "cas"), "v19");
  EXPECT_EQ(late.code(), StatusCode::kFailedPrecondition) << late;
  EXPECT_EQ(order.back(), "late");
  EXPECT_EQ(range->stats().revision, kCount + 20);
}

TEST_F(RangeTest, BadInputIsRefusedNamingTheLimitAndChangesNothing) {
  descriptor_.start = "b";
  descriptor_.end = "m";
  RangeOptions options = Options();
  options.limits.max_value_bytes = 100;
  options.limits.max_txn_ops = 3;
  options.limits.max_request_bytes = 10000;
  LKV_ASSIGN_OR_FAIL(auto range, Open(options));
  LKV_ASSERT_OK(Put(*range, "c", "x"));
  struct Bad {
    absl::Status status;
    std::string message;
  };
  std::vector<Bad> bad;
  bad.push_back({Put(*range, "", "x").status(), "key is empty"});
  bad.push_back({Put(*range, "c" + std::string(4999, 'k'), "x").status(),
                 "key is 5000 bytes; limit max_key_bytes is 4096"});
  bad.push_back({Put(*range, "c", std::string(101, 'v')).status(),
                 "value is 101 bytes; limit max_value_bytes is 100"});
  bad.push_back({Put(*range, "z", "x").status(), "outside range 7"});
  bad.push_back({Put(*range, "a", "x").status(), "outside range 7"});
  bad.push_back({Increment(*range, "m", 1).status(), "outside range 7"});
  bad.push_back({Delete(*range, DelReq("d", "c")).status(), "empty or reversed"});
  bad.push_back({Delete(*range, DelReq("d", "n")).status(), "beyond range 7"});
  v1::PutRequest both = PutReq("c", "y");
  both.set_expected_version(1);
  both.set_expected_mod_revision(1);
  bad.push_back({Put(*range, both).status(), "at most one"});
  v1::TxnRequest big_txn;
  for (int i = 0; i < 4; ++i) *big_txn.add_success()->mutable_put() = PutReq("c", "y");
  bad.push_back({Txn(*range, big_txn).status(), "txn has 4 success ops; limit max_txn_ops is 3"});
  v1::TxnRequest outside_txn;
  *outside_txn.add_success()->mutable_put() = PutReq("c", "y");
  *outside_txn.add_failure()->mutable_put() = PutReq("x", "y");
  bad.push_back({Txn(*range, outside_txn).status(), "outside range 7"});
  v1::TxnRequest bad_operand;
  *bad_operand.add_compares() = CmpNumber("c", v1::Compare::VALUE, v1::Compare::EQUAL, 1);
  bad.push_back({Txn(*range, bad_operand).status(), "number operand"});
  // An unknown compare result must not count as "false" and run the
  // failure branch.
  v1::TxnRequest unknown_result;
  *unknown_result.add_compares() = CmpNumber("c", v1::Compare::VERSION, v1::Compare::EQUAL, 1);
  unknown_result.mutable_compares(0)->set_result(static_cast<v1::Compare::Result>(7));
  *unknown_result.add_failure()->mutable_put() = PutReq("c", "failure branch");
  bad.push_back({Txn(*range, unknown_result).status(), "unknown result 7"});
  v1::TxnRequest unknown_target = unknown_result;
  unknown_target.mutable_compares(0)->set_result(v1::Compare::EQUAL);
  unknown_target.mutable_compares(0)->set_target(static_cast<v1::Compare::Target>(9));
  bad.push_back({Txn(*range, unknown_target).status(), "unknown target 9"});
  v1::TxnRequest huge;
  for (int i = 0; i < 3; ++i) *huge.add_success()->mutable_put() = PutReq("c", std::string(4000, 'k') );
  huge.mutable_success(0)->mutable_put()->set_key("c" + std::string(4000, 'k'));
  huge.mutable_success(1)->mutable_put()->set_key("d" + std::string(4000, 'k'));
  huge.mutable_success(2)->mutable_put()->set_key("e" + std::string(4000, 'k'));
  bad.push_back({Txn(*range, huge).status(), "limit max_request_bytes is 10000"});
  v1::GetRequest get;
  get.set_key("zz");
  bad.push_back({range->Get(get).status(), "outside range 7"});
  for (const Bad& b : bad) {
    EXPECT_EQ(b.status.code(), StatusCode::kInvalidArgument) << b.status;
    EXPECT_TRUE(absl::StrContains(b.status.message(), b.message))
        << b.status << " lacks: " << b.message;
  }
  EXPECT_EQ(range->stats().revision, 1);
  EXPECT_EQ(range->stats().key_count, 1);
  EXPECT_EQ(GetValue(*range, "c"), "x");
}

// A scan copies no more values than its byte budget: a page over large
// values costs memory for what it sends, not for the whole interval (a
// scan of 10 000 values of 1 MiB used to copy 10 GiB to send 4 MiB). The
// count stays exact and `more` says keys are left; at least one key comes.
TEST_F(RangeTest, ScanStopsCopyingAtItsByteBudgetAndStillCountsEveryKey) {
  LKV_ASSIGN_OR_FAIL(auto range, Open(Options()));
  const std::string big(64 << 10, 'x');
  for (int i = 0; i < 20; ++i) LKV_ASSERT_OK(Put(*range, absl::StrCat("b", i / 10, i % 10), big));
  ScanSpec spec{.start = "b", .end = "c", .max_bytes = 200 << 10};
  LKV_ASSIGN_OR_FAIL(ScanResult page, range->Scan(spec));
  EXPECT_EQ(page.kvs.size(), 3u);  // 3 x 64 KiB (and a little) fit in 200 KiB
  EXPECT_EQ(page.count, 20);
  EXPECT_TRUE(page.more);
  spec.max_bytes = 1;
  LKV_ASSIGN_OR_FAIL(ScanResult one, range->Scan(spec));
  ASSERT_EQ(one.kvs.size(), 1u);
  EXPECT_EQ(one.kvs[0].value(), big);
  spec.max_bytes = 0;
  LKV_ASSIGN_OR_FAIL(ScanResult all, range->Scan(spec));
  EXPECT_EQ(all.kvs.size(), 20u);
  EXPECT_FALSE(all.more);
}

TEST_F(RangeTest, ScanReadsForwardReverseWithLimitsAndCounts) {
  RangeOptions options = Options();
  options.limits.max_keys_per_request = 6;
  LKV_ASSIGN_OR_FAIL(auto range, Open(options));
  for (int i = 0; i < 10; ++i) LKV_ASSERT_OK(Put(*range, absl::StrCat("s", i), absl::StrCat("v", i)));
  LKV_ASSERT_OK(Put(*range, "t", "other"));

  ScanSpec spec{.start = "s2", .end = "s8"};
  LKV_ASSIGN_OR_FAIL(ScanResult all, range->Scan(spec));
  ASSERT_EQ(all.kvs.size(), 6u);
  EXPECT_EQ(all.count, 6);
  EXPECT_FALSE(all.more);
  EXPECT_EQ(all.kvs.front().key(), "s2");
  EXPECT_EQ(all.kvs.back().key(), "s7");
  EXPECT_EQ(all.kvs.front().value(), "v2");
  EXPECT_EQ(all.revision, 11);

  spec.limit = 2;
  spec.reverse = true;
  LKV_ASSIGN_OR_FAIL(ScanResult rev, range->Scan(spec));
  ASSERT_EQ(rev.kvs.size(), 2u);
  EXPECT_EQ(rev.kvs[0].key(), "s7");
  EXPECT_EQ(rev.kvs[1].key(), "s6");
  EXPECT_EQ(rev.count, 6);
  EXPECT_TRUE(rev.more);

  ScanSpec keys{.start = "s", .end = "t", .keys_only = true};
  LKV_ASSIGN_OR_FAIL(ScanResult capped, range->Scan(keys));
  EXPECT_EQ(capped.kvs.size(), 6u);  // max_keys_per_request
  EXPECT_EQ(capped.count, 10);
  EXPECT_TRUE(capped.more);
  EXPECT_TRUE(capped.kvs[0].value().empty());
  EXPECT_EQ(capped.kvs[0].version(), 1);

  ScanSpec count{.start = "", .end = "", .count_only = true};
  LKV_ASSIGN_OR_FAIL(ScanResult counted, range->Scan(count));
  EXPECT_TRUE(counted.kvs.empty());
  EXPECT_EQ(counted.count, 11);

  ScanSpec reverse_all{.reverse = true};
  LKV_ASSIGN_OR_FAIL(ScanResult last, range->Scan(reverse_all));
  EXPECT_EQ(last.kvs.front().key(), "t");
}

TEST_F(RangeTest, LinearizableReadsAskTheCheckSerializableReadsDoNot) {
  RangeOptions options = Options();
  int checks = 0;
  options.linearizable_read_check = [&checks]() {
    ++checks;
    return absl::UnavailableError("lease not certainly valid");
  };
  LKV_ASSIGN_OR_FAIL(auto range, Open(options));
  LKV_ASSERT_OK(Put(*range, "k", "v"));
  v1::GetRequest get;
  get.set_key("k");
  EXPECT_EQ(range->Get(get).status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(range->Scan(ScanSpec{}).status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(checks, 2);
  get.set_consistency(v1::SERIALIZABLE);
  LKV_ASSIGN_OR_FAIL(auto got, range->Get(get));
  EXPECT_EQ(got.kv().value(), "v");
  EXPECT_EQ(checks, 2);
}

TEST_F(RangeTest, WritesThatChangeNothingAnswerOnlyWhenALinearizableReadWould) {
  RangeOptions options = Options();
  std::atomic<bool> lease_valid{true};
  options.linearizable_read_check = [&lease_valid]() {
    return lease_valid ? absl::OkStatus() : absl::UnavailableError("lease not certainly valid");
  };
  LKV_ASSIGN_OR_FAIL(auto range, Open(options));
  LKV_ASSERT_OK(Put(*range, "k", "v"));

  // A deposed owner (its lease lapsed, another server may own the range)
  // must not answer from its state: these reach no log, so nothing else
  // would stop it.
  lease_valid = false;
  v1::PutRequest conditional = PutReq("k", "w");
  conditional.set_expected_version(5);
  v1::TxnRequest get_only;
  get_only.add_success()->mutable_get()->set_key("k");
  v1::TxnRequest failing_compare;
  *failing_compare.add_compares() = CmpNumber("k", v1::Compare::VERSION, v1::Compare::EQUAL, 9);
  failing_compare.add_failure()->mutable_get()->set_key("k");
  const absl::Status refused[] = {Put(*range, conditional).status(), Txn(*range, get_only).status(),
                                  Txn(*range, failing_compare).status(),
                                  Delete(*range, DelReq("absent")).status()};
  for (const absl::Status& s : refused) {
    EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), "lease not certainly valid")) << s;
  }
  // A write that changes something goes through the log, whose fencing
  // protects it: the lease is not asked.
  LKV_ASSERT_OK(Put(*range, "k", "x"));

  lease_valid = true;
  LKV_ASSIGN_OR_FAIL(v1::TxnResponse got, Txn(*range, get_only));
  ASSERT_EQ(got.results_size(), 1);
  EXPECT_EQ(got.results(0).get().kv().value(), "x");
  EXPECT_EQ(Put(*range, conditional).status().code(), StatusCode::kFailedPrecondition);
}

TEST_F(RangeTest, CloseWaitsForPendingWritesThenRefusesMore) {
  LKV_ASSIGN_OR_FAIL(auto range, Open(Options()));
  absl::Mutex mu;
  int ok = 0;
  for (int i = 0; i < 50; ++i) {
    range->Put(PutReq(absl::StrCat("k", i), "v"), [&](absl::StatusOr<v1::PutResponse> r) {
      absl::MutexLock l(&mu);
      if (r.ok()) ++ok;
    });
  }
  LKV_ASSERT_OK(range->Close());
  {
    absl::MutexLock l(&mu);
    EXPECT_EQ(ok, 50);
  }
  auto after = Put(*range, "late", "v");
  EXPECT_EQ(after.status().code(), StatusCode::kUnavailable);
  EXPECT_TRUE(absl::StrContains(after.status().message(), "range 7 is closing"));
  LKV_ASSERT_OK(range->Close());  // idempotent
  EXPECT_FALSE(range->stats().serving);
}

}  // namespace
}  // namespace ledgerkv::kv::testing
