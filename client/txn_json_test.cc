// The txn JSON schema of client/README.md: every documented form maps to
// the intended TxnRequest, and anything else is refused naming the path.
#include "client/txn_json.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ledgerkv::client {
namespace {

using ::testing::HasSubstr;

std::string ErrorOf(absl::string_view text) {
  auto t = ParseTxnJson(text, "t");
  EXPECT_FALSE(t.ok()) << "accepted: " << text;
  if (t.ok()) return "";
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(t.status().message());
}

TEST(TxnJsonTest, ReadmeExampleMapsToRequest) {
  auto t = ParseTxnJson(R"({
    "compare": [
      {"key": "k", "target": "value", "result": "=", "value": "v1"},
      {"key": "k", "target": "version", "result": "!=", "number": 0},
      {"key": "k", "target": "create", "result": "<", "number": 5},
      {"key": "k", "target": "mod", "result": ">", "number": -1}
    ],
    "success": [
      {"put": {"key": "k", "value": "v2"}},
      {"get": {"key": "k"}},
      {"delete": {"key": "a", "end": "b"}},
      {"incr": {"key": "n", "delta": 3}},
      {"incr": {"key": "m"}}
    ],
    "failure": [{"get": {"key": "k"}}]
  })", "orders");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->table(), "orders");
  ASSERT_EQ(t->compares_size(), 4);
  EXPECT_EQ(t->compares(0).target(), v1::Compare::VALUE);
  EXPECT_EQ(t->compares(0).result(), v1::Compare::EQUAL);
  EXPECT_EQ(t->compares(0).value(), "v1");
  EXPECT_EQ(t->compares(1).target(), v1::Compare::VERSION);
  EXPECT_EQ(t->compares(1).result(), v1::Compare::NOT_EQUAL);
  EXPECT_EQ(t->compares(1).operand_case(), v1::Compare::kNumber);
  EXPECT_EQ(t->compares(1).number(), 0);
  EXPECT_EQ(t->compares(2).target(), v1::Compare::CREATE_REVISION);
  EXPECT_EQ(t->compares(2).result(), v1::Compare::LESS);
  EXPECT_EQ(t->compares(3).target(), v1::Compare::MOD_REVISION);
  EXPECT_EQ(t->compares(3).result(), v1::Compare::GREATER);
  EXPECT_EQ(t->compares(3).number(), -1);
  ASSERT_EQ(t->success_size(), 5);
  EXPECT_EQ(t->success(0).put().key(), "k");
  EXPECT_EQ(t->success(0).put().value(), "v2");
  EXPECT_EQ(t->success(1).get().key(), "k");
  EXPECT_EQ(t->success(2).delete_().key(), "a");
  EXPECT_EQ(t->success(2).delete_().end(), "b");
  EXPECT_EQ(t->success(3).increment().delta(), 3);
  EXPECT_EQ(t->success(4).increment().delta(), 1);  // default
  ASSERT_EQ(t->failure_size(), 1);
  EXPECT_EQ(t->failure(0).get().key(), "k");
}

TEST(TxnJsonTest, AllSectionsAreOptional) {
  auto t = ParseTxnJson("{}", "t");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->compares_size() + t->success_size() + t->failure_size(), 0);
}

TEST(TxnJsonTest, RefusesMalformedJson) {
  EXPECT_THAT(ErrorOf(R"({"success": [)"), HasSubstr("invalid JSON at line 1"));
  EXPECT_THAT(ErrorOf(""), HasSubstr("empty input"));
}

TEST(TxnJsonTest, RefusesSchemaViolationsNamingThePath) {
  EXPECT_THAT(ErrorOf("[]"), HasSubstr("expected an object, got array"));
  EXPECT_THAT(ErrorOf(R"({"compares": []})"), HasSubstr("unknown member \"compares\""));
  EXPECT_THAT(ErrorOf(R"({"compare": {}})"), HasSubstr("compare: expected array, got object"));
  EXPECT_THAT(ErrorOf(R"({"compare": [{"target": "value", "result": "=", "value": "x"}]})"),
              HasSubstr("compare[0]: missing \"key\""));
  EXPECT_THAT(ErrorOf(R"({"compare": [{"key": 1, "target": "value", "result": "=", "value": "x"}]})"),
              HasSubstr("compare[0].key: expected string, got number"));
  EXPECT_THAT(ErrorOf(R"({"compare": [{"key": "k", "target": "val", "result": "=", "value": "x"}]})"),
              HasSubstr("compare[0].target: unknown target \"val\""));
  EXPECT_THAT(ErrorOf(R"({"compare": [{"key": "k", "target": "value", "result": "==", "value": "x"}]})"),
              HasSubstr("compare[0].result: unknown result \"==\""));
  EXPECT_THAT(ErrorOf(R"({"compare": [{"key": "k", "target": "value", "result": "="}]})"),
              HasSubstr("compare[0]: missing \"value\""));
  EXPECT_THAT(ErrorOf(R"({"compare": [{"key": "k", "target": "version", "result": "=", "value": "1"}]})"),
              HasSubstr("takes \"number\", not \"value\""));
  EXPECT_THAT(ErrorOf(R"({"compare": [{"key": "k", "target": "version", "result": "=", "number": 1.5}]})"),
              HasSubstr("compare[0].number: number 1.5 is not an integer"));
  EXPECT_THAT(ErrorOf(R"({"compare": [{"key": "k", "target": "mod", "result": "=", "number": "3"}]})"),
              HasSubstr("compare[0].number: expected number, got string"));
  EXPECT_THAT(ErrorOf(R"({"success": [{"put": {"key": "k"}}]})"),
              HasSubstr("success[0].put: missing \"value\""));
  EXPECT_THAT(ErrorOf(R"({"success": [{"put": {"key": "k", "value": "v", "lease": 1}}]})"),
              HasSubstr("success[0].put: unknown member \"lease\""));
  EXPECT_THAT(ErrorOf(R"({"success": [{"put": {"key": "k", "value": "v"}, "get": {"key": "k"}}]})"),
              HasSubstr("success[0]: an op is an object with exactly one of"));
  EXPECT_THAT(ErrorOf(R"({"failure": [{"range": {"key": "k"}}]})"),
              HasSubstr("failure[0]: unknown op \"range\""));
  EXPECT_THAT(ErrorOf(R"({"failure": [{"get": {"key": "k"}}, "x"]})"),
              HasSubstr("failure[1]: expected object, got string"));
  EXPECT_THAT(ErrorOf(R"({"success": [{"incr": {"key": "n", "delta": 99999999999999999999}}]})"),
              HasSubstr("success[0].incr.delta: number 99999999999999999999 does not fit in int64"));
  EXPECT_THAT(ErrorOf(R"({"success": [{"delete": {"key": "a", "end": null}}]})"),
              HasSubstr("success[0].delete.end: expected string, got null"));
  // An explicit empty end would silently delete only `key`.
  EXPECT_THAT(ErrorOf(R"({"success": [{"delete": {"key": "tmp/", "end": ""}}]})"),
              HasSubstr("success[0].delete.end: must not be empty"));
}

}  // namespace
}  // namespace ledgerkv::client
