// The KV service through real gRPC against a Standalone: routing across
// ranges, scans with limits and continuation across range boundaries, the
// one-range rules of Txn and ranged Delete, limits, unknown tables.
#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "gtest/gtest.h"
#include "kv_server/kv_server_test_util.h"
#include "kv_server/range_host.h"
#include "kv_server/retry.h"
#include "kv_server/table_scan.h"
#include "wal/log_writer.h"

namespace ledgerkv::kv::testing {
namespace {

// Keys a0..z2 (78 keys) over ranges ["", g), [g, p), [p, "").
class ScanTest : public KvServerTest {
 protected:
  void SetUp() override {
    KvServerTest::SetUp();
    ASSERT_TRUE(CreateTable("t", {"g", "p"}).ok());
    for (char c = 'a'; c <= 'z'; ++c) {
      for (int i = 0; i < 3; ++i) {
        std::string key = absl::StrFormat("%c%d", c, i);
        ASSERT_TRUE(Put("t", key, "v-" + key).ok()) << key;
        all_.push_back(key);
      }
    }
  }

  // Pages through the scan; returns the keys in the order received.
  std::vector<std::string> Collect(v1::RangeRequest req, int* pages) {
    std::vector<std::string> keys;
    *pages = 0;
    for (;;) {
      v1::RangeResponse resp;
      grpc::Status s = Scan(req, &resp);
      EXPECT_TRUE(s.ok()) << s.error_message();
      if (!s.ok()) break;
      ++*pages;
      for (const auto& kv : resp.kvs()) {
        keys.push_back(kv.key());
        if (!req.keys_only()) {
          EXPECT_EQ(kv.value(), "v-" + kv.key());
        }
      }
      if (req.limit() > 0) {
        EXPECT_LE(resp.kvs_size(), req.limit());
      }
      if (resp.continuation().empty()) break;
      req.set_continuation(resp.continuation());
      if (*pages > 1000) break;
    }
    return keys;
  }

  std::vector<std::string> Expected(const std::string& start, const std::string& end,
                                    bool reverse) {
    std::vector<std::string> out;
    for (const auto& k : all_) {
      if (k >= start && (end.empty() || k < end)) out.push_back(k);
    }
    if (reverse) std::reverse(out.begin(), out.end());
    return out;
  }

  std::vector<std::string> all_;
};

TEST_F(ScanTest, PagesAcrossThreeRangesForwardAndReverseReturnEveryKeyOnceInOrder) {
  for (bool reverse : {false, true}) {
    for (int limit : {1, 4, 7, 26, 77, 78, 100}) {
      for (auto [start, end] : std::vector<std::pair<std::string, std::string>>{
               {"", ""}, {"c", "r1"}, {"g0", "p"}, {"f2", "g1"}}) {
        v1::RangeRequest req;
        req.set_table("t");
        req.set_start(start);
        req.set_end(end);
        req.set_limit(limit);
        req.set_reverse(reverse);
        int pages = 0;
        std::vector<std::string> got = Collect(req, &pages);
        std::vector<std::string> want = Expected(start, end, reverse);
        EXPECT_EQ(got, want) << "reverse=" << reverse << " limit=" << limit << " [" << start << ", "
                             << end << ")";
        // Exact continuation: no empty trailing page.
        EXPECT_EQ(pages, std::max<int>(1, (want.size() + limit - 1) / limit))
            << "reverse=" << reverse << " limit=" << limit << " [" << start << ", " << end << ")";
      }
    }
  }
}

TEST_F(ScanTest, CountIsExactAcrossRangesWhateverTheLimit) {
  v1::RangeRequest req;
  req.set_table("t");
  req.set_count_only(true);
  v1::RangeResponse resp;
  ASSERT_TRUE(Scan(req, &resp).ok());
  EXPECT_EQ(resp.count(), 78);
  EXPECT_EQ(resp.kvs_size(), 0);
  EXPECT_TRUE(resp.continuation().empty());

  req.set_start("f");
  req.set_end("q");  // f0..p2: 11 letters
  resp.Clear();
  ASSERT_TRUE(Scan(req, &resp).ok());
  EXPECT_EQ(resp.count(), 33);

  req.set_count_only(false);
  req.set_limit(5);
  resp.Clear();
  ASSERT_TRUE(Scan(req, &resp).ok());
  EXPECT_EQ(resp.count(), 33);
  EXPECT_EQ(resp.kvs_size(), 5);
  EXPECT_FALSE(resp.continuation().empty());
}

// Cluster mode: a scan's ranges may belong to different servers. A page
// ends before the first range this server does not serve, with a
// continuation at that range's boundary, so that the caller can go on at
// the owner (KvClient routes each page by it); before, the whole scan
// failed at every server. This locator serves the ranges of `t` except
// [g, p), which it answers as another server's, as RangeHost does in
// cluster mode.
class ElsewhereLocator : public RangeLocator {
 public:
  ElsewhereLocator(RangeLocator& host, std::string elsewhere_start,
                   std::string owner = "other:1")
      : host_(host), elsewhere_start_(std::move(elsewhere_start)), owner_(std::move(owner)) {}
  absl::StatusOr<std::shared_ptr<const meta::v1::TableMetadata>> Table(
      std::string_view table) override {
    return host_.Table(table);
  }
  absl::StatusOr<std::shared_ptr<Range>> Serving(const meta::v1::TableMetadata& table,
                                                 const meta::v1::RangeSpec& spec) override {
    if (spec.start() == elsewhere_start_) {
      return RetrySafe(absl::UnavailableError("range is not served here"), owner_);
    }
    return host_.Serving(table, spec);
  }
  std::string owner() const override { return host_.owner(); }

 private:
  RangeLocator& host_;
  const std::string elsewhere_start_;
  const std::string owner_;  // "": recovering here, no other owner
};

TEST_F(ScanTest, APageEndsBeforeARangeServedElsewhereAndContinuesAtItsBoundary) {
  ElsewhereLocator here(*server_->host(), "g");
  const Limits limits;
  for (bool reverse : {false, true}) {
    SCOPED_TRACE(reverse ? "reverse" : "forward");
    v1::RangeRequest req;
    req.set_table("t");
    req.set_reverse(reverse);
    auto page = ScanTable(here, req, limits, 4 << 20);
    ASSERT_TRUE(page.ok()) << page.status();
    // Forward: [, g) here, then [g, p) elsewhere. Reverse: [p, ) here first.
    const std::vector<std::string> want =
        reverse ? Expected("p", "", true) : Expected("", "g", false);
    std::vector<std::string> got;
    for (const auto& kv : page->kvs()) got.push_back(kv.key());
    EXPECT_EQ(got, want);
    EXPECT_EQ(page->count(), static_cast<int64_t>(want.size()));
    ASSERT_FALSE(page->continuation().empty());
    auto c = DecodeContinuation(page->continuation());
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ(c->key, reverse ? "p" : "g") << "the continuation is the boundary itself";

    // The next page starts in the range served elsewhere: refused here,
    // naming its owner, and served in full by the owner (the real host).
    req.set_continuation(page->continuation());
    auto refused = ScanTable(here, req, limits, 4 << 20);
    EXPECT_TRUE(absl::IsUnavailable(refused.status())) << refused.status();
    EXPECT_TRUE(IsRetrySafe(refused.status()));
    std::vector<std::string> rest;
    for (;;) {
      auto more = ScanTable(*server_->host(), req, limits, 4 << 20);
      ASSERT_TRUE(more.ok()) << more.status();
      for (const auto& kv : more->kvs()) rest.push_back(kv.key());
      if (more->continuation().empty()) break;
      req.set_continuation(more->continuation());
    }
    got.insert(got.end(), rest.begin(), rest.end());
    EXPECT_EQ(got, Expected("", "", reverse)) << "every key once, in order";

    // count_only: the count of the part read, and a continuation to count on.
    v1::RangeRequest count;
    count.set_table("t");
    count.set_reverse(reverse);
    count.set_count_only(true);
    auto counted = ScanTable(here, count, limits, 4 << 20);
    ASSERT_TRUE(counted.ok()) << counted.status();
    EXPECT_EQ(counted->count(), static_cast<int64_t>(want.size()));
    EXPECT_EQ(counted->kvs_size(), 0);
    count.set_continuation(counted->continuation());
    auto counted_rest = ScanTable(*server_->host(), count, limits, 4 << 20);
    ASSERT_TRUE(counted_rest.ok()) << counted_rest.status();
    EXPECT_TRUE(counted_rest->continuation().empty());
    EXPECT_EQ(counted->count() + counted_rest->count(), 78);
  }
  // A page filled before the boundary keeps its continuation after its
  // last key.
  v1::RangeRequest limited;
  limited.set_table("t");
  limited.set_limit(5);
  auto page = ScanTable(here, limited, limits, 4 << 20);
  ASSERT_TRUE(page.ok()) << page.status();
  ASSERT_EQ(page->kvs_size(), 5);
  auto c = DecodeContinuation(page->continuation());
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->key, page->kvs(4).key() + std::string(1, '\0'));

  // A range that is merely not serving now (no other owner) fails the
  // request: a count is never silently short.
  ElsewhereLocator recovering(*server_->host(), "g", "");
  v1::RangeRequest count;
  count.set_table("t");
  count.set_count_only(true);
  auto failed = ScanTable(recovering, count, limits, 4 << 20);
  EXPECT_TRUE(absl::IsUnavailable(failed.status())) << failed.status();
  EXPECT_TRUE(IsRetrySafe(failed.status()));
}

TEST_F(ScanTest, KeysOnlyReturnsNoValues) {
  v1::RangeRequest req;
  req.set_table("t");
  req.set_keys_only(true);
  v1::RangeResponse resp;
  ASSERT_TRUE(Scan(req, &resp).ok());
  ASSERT_EQ(resp.kvs_size(), 78);
  for (const auto& kv : resp.kvs()) {
    EXPECT_TRUE(kv.value().empty()) << kv.key();
    EXPECT_GT(kv.mod_revision(), 0) << kv.key();
  }
}

TEST_F(ScanTest, ServerCapOnKeysPerResponseStillReturnsEverything) {
  limits_.max_keys_per_request = 10;
  ASSERT_NO_FATAL_FAILURE(RestartServer());
  for (bool reverse : {false, true}) {
    v1::RangeRequest req;
    req.set_table("t");
    req.set_reverse(reverse);
    int pages = 0;
    EXPECT_EQ(Collect(req, &pages), Expected("", "", reverse));
    EXPECT_EQ(pages, 8);
  }
}

TEST_F(ScanTest, ResponseByteBudgetSplitsPagesWithoutLosingKeys) {
  // The budget is on the key-values as encoded in the response (each of
  // these is 16 bytes, 22 with its framing): 100 bytes hold 4 of them.
  constexpr int64_t kBudget = 100;
  for (bool reverse : {false, true}) {
    v1::RangeRequest req;
    req.set_table("t");
    req.set_reverse(reverse);
    std::vector<std::string> got;
    int pages = 0;
    for (;;) {
      auto resp = ScanTable(*server_->host(), req, limits_, kBudget);
      ASSERT_TRUE(resp.ok()) << resp.status();
      ++pages;
      ASSERT_GE(resp->kvs_size(), 1);
      int64_t encoded = 0;
      for (const auto& kv : resp->kvs()) encoded += static_cast<int64_t>(kv.ByteSizeLong()) + 6;
      EXPECT_LE(encoded, kBudget);
      EXPECT_EQ(resp->count(), 78 - static_cast<int64_t>(got.size()));
      for (const auto& kv : resp->kvs()) got.push_back(kv.key());
      if (resp->continuation().empty()) break;
      req.set_continuation(resp->continuation());
      ASSERT_LT(pages, 100);
    }
    EXPECT_EQ(got, Expected("", "", reverse));
    EXPECT_GE(pages, 78 / 4);
    EXPECT_LE(pages, 78 / 2) << "pages far below the budget";
  }
}

// A page of many keys with mid-sized values stays within gRPC's default
// 4 MiB receive limit as encoded, not only as keys + values: 5000 keys of
// 6 + 819 bytes are 4 125 000 bytes of keys and values, inside the old
// key + value budget, but ~16 bytes more each as encoded (tags, lengths,
// revisions): over 4 MiB. A client with default limits (grpcurl, Python,
// Go) must read every page.
TEST_F(KvServerTest, EveryScanPageFitsTheDefaultReceiveLimitAsEncoded) {
  ASSERT_TRUE(CreateTable("wide", {}).ok());
  const std::string value(819, 'v');
  for (int i = 0; i < 5000; ++i) {
    ASSERT_TRUE(Put("wide", absl::StrFormat("k%05d", i), value).ok()) << i;
  }
  v1::RangeRequest req;
  req.set_table("wide");
  int64_t keys = 0;
  int pages = 0;
  for (;;) {
    v1::RangeResponse resp;
    grpc::Status s = Scan(req, &resp);
    ASSERT_TRUE(s.ok()) << s.error_message();
    ++pages;
    EXPECT_LE(resp.ByteSizeLong(), size_t{4} << 20) << "page " << pages;
    keys += resp.kvs_size();
    if (resp.continuation().empty()) break;
    req.set_continuation(resp.continuation());
    ASSERT_LT(pages, 10);
  }
  EXPECT_EQ(keys, 5000);
  EXPECT_EQ(pages, 2);
}

TEST_F(ScanTest, BadContinuationAndBoundsAreInvalidArgument) {
  v1::RangeRequest req;
  req.set_table("t");
  req.set_limit(5);
  v1::RangeResponse first;
  ASSERT_TRUE(Scan(req, &first).ok());
  ASSERT_FALSE(first.continuation().empty());

  for (const std::string& token : {std::string("x"),
                                   std::string("\x07"
                                               "Fabc"),
                                   std::string("\x01"
                                               "Xabc")}) {
    v1::RangeRequest bad = req;
    bad.set_continuation(token);
    v1::RangeResponse resp;
    EXPECT_EQ(Scan(bad, &resp).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  }
  v1::RangeRequest wrong_direction = req;
  wrong_direction.set_reverse(true);
  wrong_direction.set_continuation(first.continuation());
  v1::RangeResponse resp;
  EXPECT_EQ(Scan(wrong_direction, &resp).error_code(), grpc::StatusCode::INVALID_ARGUMENT);

  v1::RangeRequest inverted = req;
  inverted.set_start("q");
  inverted.set_end("b");
  EXPECT_EQ(Scan(inverted, &resp).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  v1::RangeRequest negative = req;
  negative.set_limit(-1);
  EXPECT_EQ(Scan(negative, &resp).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

TEST(ContinuationToken, RoundTripsAndRejectsGarbage) {
  for (bool reverse : {false, true}) {
    Continuation c{reverse, std::string("k\0\xff", 3)};
    auto back = DecodeContinuation(EncodeContinuation(c));
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(back->reverse, reverse);
    EXPECT_EQ(back->key, c.key);
  }
  EXPECT_TRUE(absl::IsInvalidArgument(DecodeContinuation("").status()));
  EXPECT_TRUE(absl::IsInvalidArgument(DecodeContinuation("\x01"
                                                         "F")
                                          .status()));
  EXPECT_TRUE(absl::IsInvalidArgument(DecodeContinuation("\x02"
                                                         "Fk")
                                          .status()));
}

TEST_F(ScanTest, TxnSpanningTwoRangesIsRefusedNamingBoth) {
  v1::DescribeTableResponse table;
  ASSERT_TRUE(Describe("t", &table).ok());
  const int64_t revision = TableRevision("t");
  v1::TxnRequest req;
  req.set_table("t");
  auto* cmp = req.add_compares();
  cmp->set_key("a0");
  cmp->set_target(v1::Compare::VERSION);
  cmp->set_number(1);
  auto* put = req.add_success()->mutable_put();
  put->set_key("h0");
  put->set_value("x");
  v1::TxnResponse resp;
  grpc::ClientContext ctx;
  SetDeadline(&ctx);
  grpc::Status s = kv_->Txn(&ctx, req, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  const std::string r0 = absl::StrCat(table.ranges(0).range_id(), " [, g)");
  const std::string r1 = absl::StrCat(table.ranges(1).range_id(), " [g, p)");
  EXPECT_NE(s.error_message().find(r0), std::string::npos) << s.error_message();
  EXPECT_NE(s.error_message().find(r1), std::string::npos) << s.error_message();
  EXPECT_NE(s.error_message().find("table t"), std::string::npos) << s.error_message();
  EXPECT_EQ(GetValue("t", "h0"), "v-h0");
  EXPECT_EQ(TableRevision("t"), revision);

  // The same txn inside one range commits.
  cmp->set_key("h1");
  grpc::ClientContext ctx2;
  SetDeadline(&ctx2);
  s = kv_->Txn(&ctx2, req, &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_TRUE(resp.succeeded());
  EXPECT_EQ(resp.header().range_id(), table.ranges(1).range_id());
  EXPECT_EQ(GetValue("t", "h0"), "x");
}

TEST_F(ScanTest, RangeDeleteMustStayInOneRange) {
  const int64_t revision = TableRevision("t");
  v1::DeleteRequest req;
  req.set_table("t");
  req.set_key("e");
  req.set_end("h");
  v1::DeleteResponse resp;
  {
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    grpc::Status s = kv_->Delete(&ctx, req, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(s.error_message().find("[, g)"), std::string::npos) << s.error_message();
    EXPECT_NE(s.error_message().find("[g, p)"), std::string::npos) << s.error_message();
  }
  EXPECT_EQ(TableRevision("t"), revision);
  EXPECT_EQ(GetValue("t", "e0"), "v-e0");

  req.set_key("g");
  req.set_end("i");  // g0..h2, all in [g, p)
  grpc::ClientContext ctx;
  SetDeadline(&ctx);
  grpc::Status s = kv_->Delete(&ctx, req, &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(resp.deleted(), 6);
  EXPECT_EQ(GetValue("t", "g0"), "<absent>");
  EXPECT_EQ(GetValue("t", "i0"), "v-i0");
}

TEST_F(KvServerTest, WritesAndReadsAreRoutedToTheRangeOfTheirKey) {
  v1::CreateTableResponse created;
  ASSERT_TRUE(CreateTable("t", {"m"}, &created).ok());
  v1::PutResponse put;
  ASSERT_TRUE(Put("t", "z", "1", &put).ok());
  EXPECT_EQ(put.header().range_id(), created.ranges(1).range_id());
  ASSERT_TRUE(Put("t", "a", "2", &put).ok());
  EXPECT_EQ(put.header().range_id(), created.ranges(0).range_id());
  EXPECT_EQ(GetValue("t", "z"), "1");
  EXPECT_EQ(GetValue("t", "a"), "2");

  v1::IncrementRequest inc;
  inc.set_table("t");
  inc.set_key("n");
  inc.set_delta(5);
  v1::IncrementResponse inc_resp;
  grpc::ClientContext ctx;
  SetDeadline(&ctx);
  ASSERT_TRUE(kv_->Increment(&ctx, inc, &inc_resp).ok());
  EXPECT_EQ(inc_resp.value(), 5);
  EXPECT_EQ(inc_resp.header().range_id(), created.ranges(1).range_id());
  // The default table is independent.
  EXPECT_EQ(GetValue("default", "z"), "<absent>");
}

TEST_F(KvServerTest, UnknownTableIsNotFoundForEveryCall) {
  grpc::Status s = Put("nope", "k", "v");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_NE(s.error_message().find("table nope not found"), std::string::npos) << s.error_message();
  EXPECT_EQ(GetValue("nope", "k"), "<error: table nope not found>");
  v1::RangeRequest range;
  range.set_table("nope");
  v1::RangeResponse range_resp;
  EXPECT_EQ(Scan(range, &range_resp).error_code(), grpc::StatusCode::NOT_FOUND);
  {
    v1::DeleteRequest req;
    req.set_table("nope");
    req.set_key("k");
    v1::DeleteResponse resp;
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    EXPECT_EQ(kv_->Delete(&ctx, req, &resp).error_code(), grpc::StatusCode::NOT_FOUND);
  }
  {
    v1::TxnRequest req;
    req.set_table("nope");
    v1::TxnResponse resp;
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    EXPECT_EQ(kv_->Txn(&ctx, req, &resp).error_code(), grpc::StatusCode::NOT_FOUND);
  }
  {
    v1::IncrementRequest req;
    req.set_table("nope");
    req.set_key("k");
    v1::IncrementResponse resp;
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    EXPECT_EQ(kv_->Increment(&ctx, req, &resp).error_code(), grpc::StatusCode::NOT_FOUND);
  }
}

TEST_F(KvServerTest, OversizedOrEmptyInputIsInvalidArgumentNamingTheLimitAndChangesNothing) {
  ASSERT_TRUE(Put("default", "k", "v").ok());
  const int64_t revision = TableRevision("default");
  struct Case {
    std::string key;
    std::string value;
    std::string limit;  // named in the message
  };
  const std::vector<Case> cases = {
      {"", "v", "empty"},
      {std::string(limits_.max_key_bytes + 1, 'k'), "v", "max_key_bytes"},
      {"k", std::string(limits_.max_value_bytes + 1, 'v'), "max_value_bytes"},
  };
  for (const Case& c : cases) {
    grpc::Status s = Put("default", c.key, c.value);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << c.limit;
    EXPECT_NE(s.error_message().find(c.limit), std::string::npos) << s.error_message();
  }
  // A request over max_request_bytes made of values that are each allowed.
  v1::TxnRequest txn;
  txn.set_table("default");
  for (int i = 0; i < 5; ++i) {
    auto* put = txn.add_success()->mutable_put();
    put->set_key(absl::StrCat("big", i));
    put->set_value(std::string(limits_.max_value_bytes * 9 / 10, 'x'));
  }
  v1::TxnResponse txn_resp;
  grpc::ClientContext ctx;
  SetDeadline(&ctx);
  grpc::Status s = kv_->Txn(&ctx, txn, &txn_resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("max_request_bytes"), std::string::npos) << s.error_message();

  EXPECT_EQ(GetValue("default", "k"), "v");
  EXPECT_EQ(GetValue("default", "big0"), "<absent>");
  EXPECT_EQ(TableRevision("default"), revision);
  // Get refuses the same keys.
  EXPECT_NE(GetValue("default", "").find("empty"), std::string::npos);
  EXPECT_NE(GetValue("default", std::string(limits_.max_key_bytes + 1, 'k')).find("max_key_bytes"),
            std::string::npos);
}

TEST_F(KvServerTest, UnservedRangeIsUnavailableAndMarkedRetrySafe) {
  server_->host()->Shutdown();
  v1::PutRequest req;
  req.set_table("default");
  req.set_key("k");
  req.set_value("v");
  v1::PutResponse resp;
  grpc::ClientContext ctx;
  SetDeadline(&ctx);
  grpc::Status s = kv_->Put(&ctx, req, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_NE(s.error_message().find("is not being served"), std::string::npos) << s.error_message();
  EXPECT_EQ(Trailer(ctx, kRetrySafeMetadata), "1");
}

TEST_F(KvServerTest, RangeFencedByAnotherWriterIsReopenedAndServesAgain) {
  ASSERT_TRUE(Put("default", "k", "1").ok());
  v1::DescribeTableResponse d;
  ASSERT_TRUE(Describe("default", &d).ok());
  const uint64_t epoch = d.ranges(0).epoch();
  wal::LogOptions lo;
  lo.client = server_->ledger_client();
  lo.metadata = server_->metadata();
  lo.ensemble_size = lo.write_quorum = lo.ack_quorum = 1;
  auto fencer = wal::LogWriter::Open(lo, absl::StrCat("range-", d.ranges(0).range_id()));
  ASSERT_TRUE(fencer.ok()) << fencer.status();

  // The write that meets the fence has an unknown outcome: not retry-safe.
  v1::PutRequest req;
  req.set_table("default");
  req.set_key("k");
  req.set_value("2");
  v1::PutResponse resp;
  grpc::ClientContext ctx;
  SetDeadline(&ctx);
  grpc::Status s = kv_->Put(&ctx, req, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();
  EXPECT_EQ(Trailer(ctx, kRetrySafeMetadata), "");
  fencer->reset();

  // The host reopens the range (fencing the other writer in turn).
  grpc::Status last;
  const absl::Time deadline = absl::Now() + absl::Seconds(15);
  while (absl::Now() < deadline) {
    last = Put("default", "k", "3");
    if (last.ok()) break;
    EXPECT_EQ(last.error_code(), grpc::StatusCode::UNAVAILABLE) << last.error_message();
    absl::SleepFor(absl::Milliseconds(50));
  }
  ASSERT_TRUE(last.ok()) << last.error_message();
  EXPECT_EQ(GetValue("default", "k"), "3");
  ASSERT_TRUE(Describe("default", &d).ok());
  EXPECT_GT(d.ranges(0).epoch(), epoch + 1);
}

TEST_F(KvServerTest, RestartKeepsDataAndTables) {
  ASSERT_TRUE(CreateTable("kept", {"m"}).ok());
  ASSERT_TRUE(Put("kept", "a", "1").ok());
  ASSERT_TRUE(Put("kept", "z", "2").ok());
  ASSERT_TRUE(Put("default", "d", "3").ok());
  const int64_t revision = TableRevision("kept");
  ASSERT_NO_FATAL_FAILURE(RestartServer());
  std::vector<std::string> tables = ListTables();
  EXPECT_EQ(tables, (std::vector<std::string>{"default", "kept"}));
  EXPECT_EQ(GetValue("kept", "a"), "1");
  EXPECT_EQ(GetValue("kept", "z"), "2");
  EXPECT_EQ(GetValue("default", "d"), "3");
  EXPECT_EQ(TableRevision("kept"), revision);
  ASSERT_TRUE(Put("kept", "a", "4").ok());
  EXPECT_EQ(GetValue("kept", "a"), "4");
}

}  // namespace
}  // namespace ledgerkv::kv::testing
