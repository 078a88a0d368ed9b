// ledgerkvctl's command line: each documented form parses to the intended
// request, and usage errors are refused before anything is sent.
#include "client/ctl_args.h"

#include <sstream>
#include <string>
#include <vector>

#include "client/ctl_run.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ledgerkv::client {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using Kind = CtlCommand::Kind;

CtlCommand Parse(std::vector<std::string> args) {
  auto c = ParseCtlArgs(args);
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *c : CtlCommand{};
}

std::string ErrorOf(std::vector<std::string> args) {
  auto c = ParseCtlArgs(args);
  EXPECT_FALSE(c.ok());
  return c.ok() ? "" : std::string(c.status().message());
}

TEST(CtlArgsTest, GlobalFlagsAnywhereWithDefaults) {
  CtlCommand d = Parse({"get", "k"});
  EXPECT_EQ(d.endpoint, "127.0.0.1:7070");
  EXPECT_EQ(d.table, "default");
  EXPECT_EQ(d.output, OutputFormat::kText);
  EXPECT_EQ(d.timeout, absl::Seconds(10));

  CtlCommand c = Parse({"--endpoint", "h:1", "get", "-o", "json", "k", "--table=t", "--timeout",
                        "500ms"});
  EXPECT_EQ(c.kind, Kind::kGet);
  EXPECT_EQ(c.key, "k");
  EXPECT_EQ(c.endpoint, "h:1");
  EXPECT_EQ(c.table, "t");
  EXPECT_EQ(c.output, OutputFormat::kJson);
  EXPECT_EQ(c.timeout, absl::Milliseconds(500));
}

TEST(CtlArgsTest, PutGetIncr) {
  CtlCommand put = Parse({"put", "k", "v w"});
  EXPECT_EQ(put.kind, Kind::kPut);
  EXPECT_EQ(put.value, "v w");
  CtlCommand incr = Parse({"incr", "n"});
  EXPECT_EQ(incr.kind, Kind::kIncr);
  EXPECT_EQ(incr.delta, 1);
  // A negative delta is an operand, not a flag.
  EXPECT_EQ(Parse({"incr", "n", "-5"}).delta, -5);
  // After "--" everything is an operand, even a value that looks like a flag.
  EXPECT_EQ(Parse({"put", "--", "k", "--table"}).value, "--table");
}

TEST(CtlArgsTest, DeletePrefixAndToResolveTheRange) {
  CtlCommand one = Parse({"del", "k"});
  EXPECT_EQ(one.kind, Kind::kDelete);
  EXPECT_EQ(one.end, "");
  CtlCommand prefix = Parse({"del", "user/", "--prefix"});
  EXPECT_EQ(prefix.key, "user/");
  EXPECT_EQ(prefix.end, "user0");
  CtlCommand to = Parse({"del", "a", "--to", "m"});
  EXPECT_EQ(to.end, "m");
  EXPECT_THAT(ErrorOf({"del", "a", "--prefix", "--to", "m"}), HasSubstr("not both"));
  EXPECT_THAT(ErrorOf({"del", "", "--prefix"}), HasSubstr("non-empty prefix"));
  EXPECT_THAT(ErrorOf({"del", "\xFF\xFF", "--prefix"}), HasSubstr("no end key"));
}

TEST(CtlArgsTest, ScanForms) {
  CtlCommand all = Parse({"scan"});
  EXPECT_EQ(all.kind, Kind::kScan);
  EXPECT_EQ(all.key, "");
  EXPECT_EQ(all.end, "");
  EXPECT_EQ(all.limit, 0);
  CtlCommand range = Parse({"scan", "a", "c", "--limit", "7", "--keys-only"});
  EXPECT_EQ(range.key, "a");
  EXPECT_EQ(range.end, "c");
  EXPECT_EQ(range.limit, 7);
  EXPECT_TRUE(range.keys_only);
  CtlCommand prefix = Parse({"scan", "--prefix", "ab"});
  EXPECT_EQ(prefix.key, "ab");
  EXPECT_EQ(prefix.end, "ac");
  EXPECT_THAT(ErrorOf({"scan", "a", "--prefix", "p"}), HasSubstr("not both"));
  EXPECT_THAT(ErrorOf({"scan", "--limit", "x"}), HasSubstr("--limit must be an integer"));
  EXPECT_THAT(ErrorOf({"scan", "--limit", "-1"}), HasSubstr("--limit must be >= 0"));
}

TEST(CtlArgsTest, TableCommands) {
  CtlCommand create = Parse({"table", "create", "orders", "--split", "g,p", "--split", "x"});
  EXPECT_EQ(create.kind, Kind::kTableCreate);
  EXPECT_EQ(create.name, "orders");
  EXPECT_THAT(create.split_keys, ElementsAre("g", "p", "x"));
  EXPECT_EQ(Parse({"table", "list"}).kind, Kind::kTableList);
  EXPECT_EQ(Parse({"table", "describe", "orders"}).kind, Kind::kTableDescribe);
  EXPECT_EQ(Parse({"table", "drop", "orders"}).kind, Kind::kTableDrop);
  EXPECT_THAT(ErrorOf({"table", "rename", "a"}), HasSubstr("unknown table command \"rename\""));
  EXPECT_THAT(ErrorOf({"table", "describe"}), HasSubstr("table describe NAME"));
}

TEST(CtlArgsTest, UsageErrorsAreRefused) {
  EXPECT_THAT(ErrorOf({}), HasSubstr("missing command"));
  EXPECT_THAT(ErrorOf({"frobnicate"}), HasSubstr("unknown command \"frobnicate\""));
  EXPECT_THAT(ErrorOf({"get"}), HasSubstr("usage: ledgerkvctl get KEY (got 0 operands)"));
  EXPECT_THAT(ErrorOf({"get", "a", "b"}), HasSubstr("(got 2 operands)"));
  EXPECT_THAT(ErrorOf({"put", "k"}), HasSubstr("put KEY VALUE"));
  EXPECT_THAT(ErrorOf({"get", "k", "--bogus"}), HasSubstr("unknown flag --bogus"));
  EXPECT_THAT(ErrorOf({"get", "k", "--table"}), HasSubstr("flag --table needs a value"));
  EXPECT_THAT(ErrorOf({"get", "k", "-o", "yaml"}), HasSubstr("-o must be text or json"));
  EXPECT_THAT(ErrorOf({"get", "k", "--timeout", "soon"}), HasSubstr("--timeout must be"));
  EXPECT_THAT(ErrorOf({"get", "k", "--limit", "3"}), HasSubstr("--limit does not apply to get"));
  EXPECT_THAT(ErrorOf({"put", "k", "v", "--split", "a"}), HasSubstr("--split does not apply"));
  EXPECT_THAT(ErrorOf({"--prefix", "scan"}), HasSubstr("--prefix goes after"));
  EXPECT_THAT(ErrorOf({"incr", "n", "x"}), HasSubstr("DELTA must be an integer"));
  EXPECT_THAT(ErrorOf({"txn", "extra"}), HasSubstr("txn < transaction.json"));
}

TEST(CtlArgsTest, PrefixEnd) {
  EXPECT_EQ(PrefixEnd("a"), "b");
  EXPECT_EQ(PrefixEnd("a\xFF"), "b");
  EXPECT_EQ(PrefixEnd(std::string("a\x00", 2)), std::string("a\x01", 2));
  EXPECT_EQ(PrefixEnd("\xFF"), "");
  EXPECT_EQ(PrefixEnd(""), "");
}

// RunCtl refuses bad input with exit 2 before connecting: the endpoint here
// has no server, so any attempt to send would show as exit 1 instead.
TEST(CtlRunTest, MalformedTxnExitsTwoAndSendsNothing) {
  std::istringstream in(R"({"success": [{"put": {"key": "k"}}]})");
  std::ostringstream out, err;
  int rc = RunCtl({"--endpoint", "127.0.0.1:1", "txn"}, in, out, err);
  EXPECT_EQ(rc, kExitUsage);
  EXPECT_EQ(out.str(), "");
  EXPECT_THAT(err.str(), HasSubstr("success[0].put: missing \"value\""));
}

TEST(CtlRunTest, EndpointListIsPassedOnAndAnEmptyItemIsAUsageError) {
  auto c = ParseCtlArgs({"--endpoint", "h:1,h:2", "get", "k"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->endpoint, "h:1,h:2");
  std::istringstream in;
  std::ostringstream out, err;
  int rc = RunCtl({"--endpoint", "127.0.0.1:1,,127.0.0.1:2", "get", "k"}, in, out, err);
  EXPECT_EQ(rc, kExitUsage);
  EXPECT_THAT(err.str(), HasSubstr("empty server in endpoint list"));
  std::ostringstream help;
  EXPECT_EQ(RunCtl({"--help"}, in, help, err), kExitOk);
  EXPECT_THAT(help.str(), HasSubstr("--endpoint HOST:PORT[,HOST:PORT...]"));
}

TEST(CtlRunTest, UnreachableServerExitsOneWithCodeName) {
  std::istringstream in;
  std::ostringstream out, err;
  int rc = RunCtl({"--endpoint", "127.0.0.1:1", "--timeout", "2s", "get", "k"}, in, out, err);
  EXPECT_EQ(rc, kExitServerError);
  EXPECT_THAT(err.str(), HasSubstr("UNAVAILABLE: "));
}

}  // namespace
}  // namespace ledgerkv::client
