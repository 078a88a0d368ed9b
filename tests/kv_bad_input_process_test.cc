// Bad input through a real `ledgerkv standalone` (docs/kv-api.md, "Errors
// and limits"): every refusal has the documented code, its message names
// the limit (and the size) or the table, the boundary value itself is
// accepted, and a scan afterwards shows that nothing changed.
#include <initializer_list>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "tests/kv_process_util.h"

namespace ledgerkv {
namespace {

namespace v1 = ::ledgerkv::v1;
using testing::StandaloneServer;
using testing::TempDir;

constexpr char kTable[] = "input";
constexpr int64_t kMaxKey = 4 << 10;
constexpr int64_t kMaxValue = 1 << 20;
constexpr int64_t kMaxTxnOps = 128;
constexpr int64_t kMaxRequest = 4 << 20;

// Alternatives for one thing a message must name ("4096" or "4 KiB").
using Mention = std::vector<std::string>;

class KvBadInputProcessTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    auto server = std::make_unique<StandaloneServer>(dir_->path() + "/data");
    absl::Status s = server->Start();
    ASSERT_TRUE(s.ok()) << s << server->LogTail();
    s = testing::CreateTable(server->admin(), kTable);
    ASSERT_TRUE(s.ok()) << s;
    s = testing::CreateTable(server->admin(), "split", {"m"});
    ASSERT_TRUE(s.ok()) << s;
    server_ = server.release();
  }
  static void TearDownTestSuite() {
    if (server_ != nullptr) {
      EXPECT_EQ(server_->Terminate(), 0) << server_->LogTail();
    }
    delete server_;
    delete dir_;
    server_ = nullptr;
    dir_ = nullptr;
  }

  void SetUp() override {
    ASSERT_NE(server_, nullptr) << "the server did not start";
    // Something to lose: a few keys, so "nothing changed" means something.
    for (int i = 0; i < 3; ++i) {
      ASSERT_TRUE(Put(absl::StrCat("base", i), "v").ok());
    }
    auto scan = testing::ScanAll(server_->kv(), kTable);
    ASSERT_TRUE(scan.ok()) << scan.status();
    before_ = std::move(*scan);
  }

  void TearDown() override {
    if (HasFailure()) std::cout << server_->LogTail() << "\n";
  }

  // The table is exactly as SetUp left it (keys, values, revisions).
  void ExpectNothingChanged() {
    auto scan = testing::ScanAll(server_->kv(), kTable);
    ASSERT_TRUE(scan.ok()) << scan.status();
    EXPECT_EQ(scan->revision, before_.revision) << "a refused request took a revision";
    ASSERT_EQ(scan->kvs.size(), before_.kvs.size());
    for (size_t i = 0; i < scan->kvs.size(); ++i) {
      EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(scan->kvs[i], before_.kvs[i]))
          << testing::KvString(scan->kvs[i]) << " vs " << testing::KvString(before_.kvs[i]);
    }
  }

  static void ExpectRefused(const grpc::Status& s, grpc::StatusCode code,
                            std::initializer_list<Mention> mentions, const std::string& what) {
    EXPECT_EQ(s.error_code(), code) << what << ": " << s.error_message();
    for (const Mention& m : mentions) {
      bool found = false;
      for (const auto& alt : m) found = found || absl::StrContains(s.error_message(), alt);
      EXPECT_TRUE(found) << what << ": message '" << s.error_message() << "' names none of "
                         << absl::StrJoin(m, " / ");
    }
  }

  static grpc::Status Put(const std::string& key, const std::string& value,
                          const std::string& table = kTable) {
    v1::PutRequest req;
    req.set_table(table);
    req.set_key(key);
    req.set_value(value);
    v1::PutResponse resp;
    grpc::ClientContext ctx;
    testing::SetDeadline(&ctx);
    return server_->kv().Put(&ctx, req, &resp);
  }
  static grpc::Status Get(const std::string& key, const std::string& table = kTable) {
    v1::GetRequest req;
    req.set_table(table);
    req.set_key(key);
    v1::GetResponse resp;
    grpc::ClientContext ctx;
    testing::SetDeadline(&ctx);
    return server_->kv().Get(&ctx, req, &resp);
  }
  static grpc::Status Delete(const std::string& key, const std::string& end = "",
                             const std::string& table = kTable) {
    v1::DeleteRequest req;
    req.set_table(table);
    req.set_key(key);
    req.set_end(end);
    v1::DeleteResponse resp;
    grpc::ClientContext ctx;
    testing::SetDeadline(&ctx);
    return server_->kv().Delete(&ctx, req, &resp);
  }
  static grpc::Status Increment(const std::string& key, int64_t delta,
                                const std::string& table = kTable) {
    v1::IncrementRequest req;
    req.set_table(table);
    req.set_key(key);
    req.set_delta(delta);
    v1::IncrementResponse resp;
    grpc::ClientContext ctx;
    testing::SetDeadline(&ctx);
    return server_->kv().Increment(&ctx, req, &resp);
  }
  static grpc::Status Txn(v1::TxnRequest req, v1::TxnResponse* resp = nullptr) {
    if (req.table().empty()) req.set_table(kTable);
    v1::TxnResponse ignored;
    grpc::ClientContext ctx;
    testing::SetDeadline(&ctx, absl::Seconds(30));
    return server_->kv().Txn(&ctx, req, resp != nullptr ? resp : &ignored);
  }
  static v1::TxnRequest TxnOfPuts(const std::vector<std::pair<std::string, std::string>>& kvs) {
    v1::TxnRequest req;
    for (const auto& [k, v] : kvs) {
      v1::PutRequest* p = req.add_success()->mutable_put();
      p->set_key(k);
      p->set_value(v);
    }
    return req;
  }

  static TempDir* dir_;
  static StandaloneServer* server_;
  testing::ScanAllResult before_;
};

TempDir* KvBadInputProcessTest::dir_ = nullptr;
StandaloneServer* KvBadInputProcessTest::server_ = nullptr;

TEST_F(KvBadInputProcessTest, EmptyKeyIsInvalidArgumentAndChangesNothing) {
  const auto kInvalid = grpc::StatusCode::INVALID_ARGUMENT;
  ExpectRefused(Put("", "v"), kInvalid, {{"key"}}, "Put");
  ExpectRefused(Get(""), kInvalid, {{"key"}}, "Get");
  ExpectRefused(Delete(""), kInvalid, {{"key"}}, "Delete");
  ExpectRefused(Increment("", 1), kInvalid, {{"key"}}, "Increment");
  ExpectRefused(Txn(TxnOfPuts({{"ok", "v"}, {"", "v"}})), kInvalid, {{"key"}}, "Txn put");
  v1::TxnRequest cmp = TxnOfPuts({{"ok", "v"}});
  cmp.add_compares()->set_key("");
  ExpectRefused(Txn(cmp), kInvalid, {{"key"}}, "Txn compare");
  ExpectNothingChanged();
}

TEST_F(KvBadInputProcessTest, KeyOver4KiBIsInvalidArgumentNamingLimitAndSize) {
  const auto kInvalid = grpc::StatusCode::INVALID_ARGUMENT;
  const std::string big(kMaxKey + 1, 'k');
  const Mention limit = {"4096", "4 KiB", "4KiB"};
  const Mention size = {"4097"};
  ExpectRefused(Put(big, "v"), kInvalid, {limit, size}, "Put");
  ExpectRefused(Get(big), kInvalid, {limit, size}, "Get");
  ExpectRefused(Delete(big), kInvalid, {limit, size}, "Delete");
  ExpectRefused(Increment(big, 1), kInvalid, {limit, size}, "Increment");
  ExpectRefused(Txn(TxnOfPuts({{"ok", "v"}, {big, "v"}})), kInvalid, {limit, size}, "Txn");
  ExpectNothingChanged();

  // The limit itself is allowed.
  const std::string max(kMaxKey, 'k');
  ASSERT_TRUE(Put(max, "v").ok());
  ASSERT_TRUE(Get(max).ok());
  ASSERT_TRUE(Delete(max).ok());
}

TEST_F(KvBadInputProcessTest, ValueOver1MiBIsInvalidArgumentNamingLimitAndSize) {
  const auto kInvalid = grpc::StatusCode::INVALID_ARGUMENT;
  const std::string big(kMaxValue + 1, 'v');
  const Mention limit = {"1048576", "1 MiB", "1MiB"};
  const Mention size = {"1048577"};
  ExpectRefused(Put("k", big), kInvalid, {limit, size}, "Put");
  ExpectRefused(Txn(TxnOfPuts({{"ok", "v"}, {"k", big}})), kInvalid, {limit, size}, "Txn");
  ExpectNothingChanged();

  ASSERT_TRUE(Put("max-value", std::string(kMaxValue, 'v')).ok());
  ASSERT_TRUE(Delete("max-value").ok());
}

TEST_F(KvBadInputProcessTest, RequestOver4MiBIsInvalidArgumentNamingLimit) {
  // Five values under the value limit, 4.5 MiB together.
  std::vector<std::pair<std::string, std::string>> puts;
  for (int i = 0; i < 5; ++i)
    puts.emplace_back(absl::StrCat("big", i), std::string(900 << 10, 'x'));
  v1::TxnRequest req = TxnOfPuts(puts);
  req.set_table(kTable);
  ASSERT_GT(static_cast<int64_t>(req.ByteSizeLong()), kMaxRequest);
  ExpectRefused(Txn(req), grpc::StatusCode::INVALID_ARGUMENT, {{"4194304", "4 MiB", "4MiB"}},
                "Txn");
  ExpectNothingChanged();

  // Three of them (2.6 MiB) are fine.
  puts.resize(3);
  v1::TxnResponse resp;
  grpc::Status s = Txn(TxnOfPuts(puts), &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_TRUE(resp.succeeded());
  ASSERT_TRUE(Delete("big", "bih").ok());
}

TEST_F(KvBadInputProcessTest, TxnOver128OpsIsInvalidArgumentNamingLimitAndCount) {
  std::vector<std::pair<std::string, std::string>> puts;
  for (int i = 0; i <= kMaxTxnOps; ++i) puts.emplace_back(absl::StrCat("op", 1000 + i), "v");
  ExpectRefused(Txn(TxnOfPuts(puts)), grpc::StatusCode::INVALID_ARGUMENT, {{"128"}, {"129"}},
                "Txn success");
  v1::TxnRequest failure_branch;
  for (const auto& [k, v] : puts) failure_branch.add_failure()->mutable_get()->set_key(k);
  ExpectRefused(Txn(failure_branch), grpc::StatusCode::INVALID_ARGUMENT, {{"128"}, {"129"}},
                "Txn failure");
  ExpectNothingChanged();

  puts.pop_back();
  v1::TxnResponse resp;
  grpc::Status s = Txn(TxnOfPuts(puts), &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(resp.results_size(), kMaxTxnOps);
  ASSERT_TRUE(Delete("op", "oq").ok());
}

TEST_F(KvBadInputProcessTest, UnknownTableIsNotFoundNamingTheTable) {
  const auto kNotFound = grpc::StatusCode::NOT_FOUND;
  const std::string t = "no-such-table";
  ExpectRefused(Put("k", "v", t), kNotFound, {{t}}, "Put");
  ExpectRefused(Get("k", t), kNotFound, {{t}}, "Get");
  ExpectRefused(Delete("k", "", t), kNotFound, {{t}}, "Delete");
  ExpectRefused(Increment("k", 1, t), kNotFound, {{t}}, "Increment");
  v1::TxnRequest txn = TxnOfPuts({{"k", "v"}});
  txn.set_table(t);
  ExpectRefused(Txn(txn), kNotFound, {{t}}, "Txn");
  {
    v1::RangeRequest req;
    req.set_table(t);
    v1::RangeResponse resp;
    grpc::ClientContext ctx;
    testing::SetDeadline(&ctx);
    ExpectRefused(server_->kv().Range(&ctx, req, &resp), kNotFound, {{t}}, "Range");
  }
  {
    v1::DescribeTableRequest req;
    req.set_name(t);
    v1::DescribeTableResponse resp;
    grpc::ClientContext ctx;
    testing::SetDeadline(&ctx);
    ExpectRefused(server_->admin().DescribeTable(&ctx, req, &resp), kNotFound, {{t}},
                  "DescribeTable");
  }
  {
    v1::DropTableRequest req;
    req.set_name(t);
    v1::DropTableResponse resp;
    grpc::ClientContext ctx;
    testing::SetDeadline(&ctx);
    ExpectRefused(server_->admin().DropTable(&ctx, req, &resp), kNotFound, {{t}}, "DropTable");
  }
  ExpectNothingChanged();
}

TEST_F(KvBadInputProcessTest, BadRangeDeleteIsInvalidArgumentAndChangesNothing) {
  ExpectRefused(Delete("base2", "base0"), grpc::StatusCode::INVALID_ARGUMENT, {}, "end < key");
  ExpectNothingChanged();
}

TEST_F(KvBadInputProcessTest, TxnOrDeleteOverTwoRangesIsInvalidArgumentNamingTheRanges) {
  auto d = testing::DescribeTable(server_->admin(), "split");
  ASSERT_TRUE(d.ok()) << d.status();
  ASSERT_EQ(d->ranges_size(), 2);
  const std::string left = absl::StrCat(d->ranges(0).range_id());
  const std::string right = absl::StrCat(d->ranges(1).range_id());
  auto split_scan = testing::ScanAll(server_->kv(), "split");
  ASSERT_TRUE(split_scan.ok()) << split_scan.status();

  v1::TxnRequest txn = TxnOfPuts({{"a", "v"}, {"z", "v"}});
  txn.set_table("split");
  ExpectRefused(Txn(txn), grpc::StatusCode::INVALID_ARGUMENT, {{left}, {right}}, "Txn");
  ExpectRefused(Delete("a", "z", "split"), grpc::StatusCode::INVALID_ARGUMENT, {}, "Delete");
  auto after = testing::ScanAll(server_->kv(), "split");
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(after->kvs.size(), split_scan->kvs.size());

  // Each side alone is fine, and each range counts its own revisions.
  txn = TxnOfPuts({{"a", "v"}, {"b", "v"}});
  txn.set_table("split");
  v1::TxnResponse left_resp;
  ASSERT_TRUE(Txn(txn, &left_resp).ok());
  txn = TxnOfPuts({{"y", "v"}, {"z", "v"}});
  txn.set_table("split");
  v1::TxnResponse right_resp;
  ASSERT_TRUE(Txn(txn, &right_resp).ok());
  EXPECT_NE(left_resp.header().range_id(), right_resp.header().range_id());
  ExpectNothingChanged();
}

TEST_F(KvBadInputProcessTest, IncrementOfTextIsFailedPreconditionAndOverflowIsOutOfRange) {
  ExpectRefused(Increment("base0", 1), grpc::StatusCode::FAILED_PRECONDITION, {}, "text");
  ASSERT_TRUE(Put("counter", "9223372036854775800").ok());
  ASSERT_TRUE(Put("low", "-9223372036854775800").ok());
  auto scan = testing::ScanAll(server_->kv(), kTable);
  ASSERT_TRUE(scan.ok());
  before_ = *scan;
  ExpectRefused(Increment("counter", 8), grpc::StatusCode::OUT_OF_RANGE, {}, "overflow");
  ExpectRefused(Increment("low", -9), grpc::StatusCode::OUT_OF_RANGE, {}, "underflow");
  ExpectNothingChanged();
  EXPECT_TRUE(Increment("counter", 7).ok());
  ASSERT_TRUE(Delete("counter").ok());
  ASSERT_TRUE(Delete("low").ok());
}

TEST_F(KvBadInputProcessTest, CreateTableWithBadSplitKeysIsInvalidArgumentAndCreatesNothing) {
  EXPECT_EQ(testing::CreateTable(server_->admin(), "bad1", {"b", "a"}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(testing::CreateTable(server_->admin(), "bad2", {"a", "a"}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(testing::CreateTable(server_->admin(), "bad3", {""}).code(),
            absl::StatusCode::kInvalidArgument);
  v1::ListTablesResponse resp;
  grpc::ClientContext ctx;
  testing::SetDeadline(&ctx);
  ASSERT_TRUE(server_->admin().ListTables(&ctx, v1::ListTablesRequest(), &resp).ok());
  for (const auto& name : resp.names()) EXPECT_FALSE(absl::StartsWith(name, "bad")) << name;
  ExpectNothingChanged();
}

}  // namespace
}  // namespace ledgerkv
