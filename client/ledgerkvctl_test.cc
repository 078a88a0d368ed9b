// The client/README.md tour, run with the real ledgerkvctl binary against a
// real `ledgerkv standalone` process: what a user types, what they see, and
// the exit codes scripts rely on.
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "client/client_test_util.h"
#include "client/ctl_output.h"
#include "client/ctl_run.h"
#include "client/json.h"
#include "client/kv_client.h"
#include "gmock/gmock.h"
#include "grpcpp/server.h"
#include "grpcpp/server_builder.h"
#include "gtest/gtest.h"
#include "proto/kv.grpc.pb.h"

namespace ledgerkv::client {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

class LedgerkvctlTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto s = StandaloneServer::Start();
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = s->release();
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }

  // ledgerkvctl --endpoint <server> --table <table> args...
  CtlResult Ctl(const std::string& table, std::vector<std::string> args,
                const std::string& stdin_text = "") {
    std::vector<std::string> all = {"--endpoint", server_->address(), "--table", table};
    all.insert(all.end(), args.begin(), args.end());
    return RunCtlBinary(all, stdin_text);
  }
  void TearDown() override {
    if (HasFailure()) std::cerr << "server log tail:\n" << server_->process().LogTail(2000) << "\n";
  }

  // Like Ctl, but the command must succeed.
  std::string Ok(const std::string& table, std::vector<std::string> args,
                 const std::string& stdin_text = "") {
    CtlResult r = Ctl(table, args, stdin_text);
    EXPECT_EQ(r.exit_code, kExitOk) << absl::StrJoin(args, " ") << "\nstderr: " << r.err;
    return r.out;
  }

  static StandaloneServer* server_;
};
StandaloneServer* LedgerkvctlTest::server_ = nullptr;

std::vector<std::string> Lines(const std::string& s) {
  return absl::StrSplit(s, '\n', absl::SkipEmpty());
}

TEST_F(LedgerkvctlTest, TableCreateWithSplitsListDescribe) {
  std::string created = Ok("", {"table", "create", "tour_tables", "--split", "g,p"});
  EXPECT_EQ(Lines(created).size(), 4u) << created;  // "table ..." + 3 ranges
  EXPECT_THAT(Ok("", {"table", "list"}), HasSubstr("tour_tables\n"));
  std::string described = Ok("", {"table", "describe", "tour_tables"});
  auto lines = Lines(described);
  ASSERT_EQ(lines.size(), 4u) << described;
  EXPECT_EQ(lines[0], "table tour_tables");
  EXPECT_THAT(lines[1], HasSubstr("[\"\", \"g\")"));
  EXPECT_THAT(lines[2], HasSubstr("[\"g\", \"p\")"));
  EXPECT_THAT(lines[3], HasSubstr("[\"p\", \"\")"));
  std::string json = Ok("", {"table", "describe", "tour_tables", "-o", "json"});
  EXPECT_THAT(json, HasSubstr("\"name\":\"tour_tables\""));
  EXPECT_THAT(json, HasSubstr("\"start\":\"g\",\"end\":\"p\""));

  CtlResult dup = Ctl("", {"table", "create", "tour_tables"});
  EXPECT_EQ(dup.exit_code, kExitServerError);
  EXPECT_THAT(dup.err, HasSubstr("ALREADY_EXISTS"));
}

TEST_F(LedgerkvctlTest, PutGetIncrScanDelete) {
  const std::string t = "tour_kv";
  Ok("", {"table", "create", t, "--split", "m"});

  EXPECT_EQ(Ok(t, {"put", "user/1", "alice"}), "OK\n");
  Ok(t, {"put", "user/2", "bob"});
  Ok(t, {"put", "user/3", "carol"});
  Ok(t, {"put", "zeta", "last"});
  // Revisions are per range: user/* and zeta share the range ["m", "").
  EXPECT_EQ(Ok(t, {"get", "user/1"}), "alice\n");
  Ok(t, {"put", "user/1", "alicia"});
  std::string json = Ok(t, {"get", "user/1", "-o", "json"});
  EXPECT_THAT(json, HasSubstr("\"found\":true"));
  EXPECT_THAT(json, HasSubstr("\"key\":\"user/1\",\"value\":\"alicia\""));
  EXPECT_THAT(json, HasSubstr("\"version\":2"));
  EXPECT_THAT(json, HasSubstr("\"create_revision\":1,\"mod_revision\":5"));

  CtlResult missing = Ctl(t, {"get", "user/9"});
  EXPECT_EQ(missing.exit_code, kExitKeyNotFound);
  EXPECT_EQ(missing.out, "");
  EXPECT_THAT(missing.err, HasSubstr("not found"));

  EXPECT_EQ(Ok(t, {"incr", "counter"}), "1\n");
  EXPECT_EQ(Ok(t, {"incr", "counter", "5"}), "6\n");
  EXPECT_EQ(Ok(t, {"incr", "counter", "-2"}), "4\n");
  CtlResult not_number = Ctl(t, {"incr", "user/2"});
  EXPECT_EQ(not_number.exit_code, kExitServerError);
  EXPECT_THAT(not_number.err, HasSubstr("FAILED_PRECONDITION"));

  EXPECT_EQ(Ok(t, {"scan", "--prefix", "user/"}), "user/1\talicia\nuser/2\tbob\nuser/3\tcarol\n");
  EXPECT_EQ(Ok(t, {"scan", "--prefix", "user/", "--limit", "2"}), "user/1\talicia\nuser/2\tbob\n");
  // The whole table, across the split at "m", in key order.
  EXPECT_EQ(Ok(t, {"scan", "--keys-only"}), "counter\nuser/1\nuser/2\nuser/3\nzeta\n");
  EXPECT_EQ(Ok(t, {"scan", "user/2", "zz", "--keys-only"}), "user/2\nuser/3\nzeta\n");
  EXPECT_THAT(Ok(t, {"scan", "--prefix", "user/", "-o", "json"}), HasSubstr("\"count\":3"));

  EXPECT_EQ(Ok(t, {"del", "user/", "--prefix"}), "deleted: 3\n");
  EXPECT_EQ(Ok(t, {"scan", "--prefix", "user/"}), "");
  EXPECT_EQ(Ok(t, {"del", "zeta"}), "deleted: 1\n");
  EXPECT_EQ(Ok(t, {"del", "zeta"}), "deleted: 0\n");
  EXPECT_EQ(Ok(t, {"scan", "--keys-only"}), "counter\n");
}

TEST_F(LedgerkvctlTest, TxnSuccessAndFailedComparesBothExitZero) {
  const std::string t = "tour_txn";
  Ok("", {"table", "create", t});
  Ok(t, {"put", "stock", "10"});
  const std::string txn_ok = R"({
    "compare": [{"key": "stock", "target": "value", "result": "=", "value": "10"}],
    "success": [{"put": {"key": "stock", "value": "9"}}, {"incr": {"key": "sold"}},
                {"get": {"key": "stock"}}],
    "failure": [{"get": {"key": "stock"}}]
  })";
  EXPECT_EQ(Ok(t, {"txn"}, txn_ok), "succeeded: true\nput: OK\nincr: 1\nget: 9\n");
  // Same compare again: stock is now 9, so the failure branch runs.
  EXPECT_EQ(Ok(t, {"txn"}, txn_ok), "succeeded: false\nget: 9\n");
  std::string json = Ok(t, {"txn", "-o", "json"}, txn_ok);
  EXPECT_THAT(json, HasSubstr("{\"succeeded\":false,"));
  EXPECT_THAT(json, HasSubstr("\"value\":\"9\""));
  EXPECT_EQ(Ok(t, {"get", "sold"}), "1\n");

  const std::string version_txn = R"({
    "compare": [{"key": "fresh", "target": "version", "result": "=", "number": 0}],
    "success": [{"put": {"key": "fresh", "value": "created"}}]})";
  EXPECT_EQ(Ok(t, {"txn"}, version_txn), "succeeded: true\nput: OK\n");
  EXPECT_EQ(Ok(t, {"txn"}, version_txn), "succeeded: false\n");
}

TEST_F(LedgerkvctlTest, ErrorsExitNonZeroWithCodeAndMessage) {
  const std::string t = "tour_errors";
  Ok("", {"table", "create", t});

  CtlResult unknown = Ctl("no_such_table", {"get", "k"});
  EXPECT_EQ(unknown.exit_code, kExitServerError);
  EXPECT_THAT(unknown.err, HasSubstr("NOT_FOUND"));
  EXPECT_THAT(unknown.err, HasSubstr("no_such_table"));

  CtlResult empty = Ctl(t, {"put", "", "v"});
  EXPECT_EQ(empty.exit_code, kExitServerError);
  EXPECT_THAT(empty.err, HasSubstr("INVALID_ARGUMENT"));
  CtlResult empty_get = Ctl(t, {"get", ""});
  EXPECT_EQ(empty_get.exit_code, kExitServerError);
  EXPECT_THAT(empty_get.err, HasSubstr("INVALID_ARGUMENT"));

  // Malformed JSON: refused locally, nothing sent (the put never happens).
  CtlResult bad = Ctl(t, {"txn"}, R"({"success": [{"put": {"key": "sneaky", "value": "x"}}],})");
  EXPECT_EQ(bad.exit_code, kExitUsage);
  EXPECT_THAT(bad.err, HasSubstr("invalid JSON at line 1"));
  EXPECT_THAT(bad.err, HasSubstr("trailing comma"));
  EXPECT_EQ(bad.out, "");
  CtlResult schema = Ctl(t, {"txn"}, R"({"success": [{"put": {"key": "sneaky"}}]})");
  EXPECT_EQ(schema.exit_code, kExitUsage);
  EXPECT_THAT(schema.err, HasSubstr("success[0].put: missing \"value\""));
  EXPECT_EQ(Ctl(t, {"get", "sneaky"}).exit_code, kExitKeyNotFound);

  CtlResult usage = Ctl(t, {"get"});
  EXPECT_EQ(usage.exit_code, kExitUsage);
  EXPECT_THAT(usage.err, HasSubstr("usage: ledgerkvctl get KEY"));

  CtlResult drop_unknown = Ctl("", {"table", "describe", "no_such_table"});
  EXPECT_EQ(drop_unknown.exit_code, kExitServerError);
  EXPECT_THAT(drop_unknown.err, Not(HasSubstr("OK")));
  EXPECT_THAT(drop_unknown.err, HasSubstr("no_such_table"));
}

// A KV server that takes requests and never answers them (until the test
// ends): what a client sees when a server hangs or the connection dies
// after the request left. Real servers do not do this on demand.
class SilentKv final : public v1::KV::CallbackService {
 public:
  ~SilentKv() override { FinishAll(); }
  // Answers the held requests, and from now on every request at once. A
  // handler can run after its client gave up (a loaded machine, a sanitizer
  // build): held after this point, it would keep Server::Shutdown waiting
  // for ever.
  void FinishAll() {
    absl::MutexLock l(&mu_);
    finishing_ = true;
    for (grpc::ServerUnaryReactor* r : held_) r->Finish(grpc::Status::CANCELLED);
    held_.clear();
  }
  grpc::ServerUnaryReactor* Put(grpc::CallbackServerContext* ctx, const v1::PutRequest*,
                                v1::PutResponse*) override {
    return Hold(ctx);
  }
  grpc::ServerUnaryReactor* Get(grpc::CallbackServerContext* ctx, const v1::GetRequest*,
                                v1::GetResponse*) override {
    return Hold(ctx);
  }
  grpc::ServerUnaryReactor* Increment(grpc::CallbackServerContext* ctx,
                                      const v1::IncrementRequest*,
                                      v1::IncrementResponse*) override {
    return Hold(ctx);
  }

 private:
  grpc::ServerUnaryReactor* Hold(grpc::CallbackServerContext* ctx) {
    grpc::ServerUnaryReactor* r = ctx->DefaultReactor();
    absl::MutexLock l(&mu_);
    if (finishing_) {
      r->Finish(grpc::Status::CANCELLED);
    } else {
      held_.push_back(r);
    }
    return r;
  }
  absl::Mutex mu_;
  bool finishing_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<grpc::ServerUnaryReactor*> held_ ABSL_GUARDED_BY(mu_);
};

// Scripts must be able to tell "not applied" from "may have been applied":
// rerunning an incr whose outcome is unknown counts it twice.
TEST(LedgerkvctlExitTest, AWriteWithAnUnknownOutcomeExitsFourAndSaysSo) {
  SilentKv kv;
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&kv);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  const std::string address = absl::StrCat("127.0.0.1:", port);

  for (const std::vector<std::string>& write :
       {std::vector<std::string>{"put", "k", "v"}, std::vector<std::string>{"incr", "n"}}) {
    std::vector<std::string> args = {"--endpoint", address, "--timeout", "1s"};
    args.insert(args.end(), write.begin(), write.end());
    CtlResult r = RunCtlBinary(args);
    EXPECT_EQ(r.exit_code, kExitWriteOutcomeUnknown) << write[0] << ": " << r.err;
    EXPECT_THAT(r.err, HasSubstr("DEADLINE_EXCEEDED"));
    EXPECT_THAT(r.err, HasSubstr("may or may not have been applied"));
  }
  // A read that times out is just an error.
  CtlResult get = RunCtlBinary({"--endpoint", address, "--timeout", "1s", "get", "k"});
  EXPECT_EQ(get.exit_code, kExitServerError) << get.err;
  // A write that certainly was not sent (nothing listens) is an error too.
  kv.FinishAll();
  server->Shutdown();
  CtlResult unsent = RunCtlBinary({"--endpoint", address, "--timeout", "3s", "put", "k", "v"});
  EXPECT_EQ(unsent.exit_code, kExitServerError) << unsent.err;
  EXPECT_THAT(unsent.err, HasSubstr("UNAVAILABLE"));
  kv.FinishAll();
}

// A scan bigger than one response (~4 MiB each) is printed page by page
// and is still one well-formed document with -o json, every key once, in
// order; --limit cuts it exactly.
TEST_F(LedgerkvctlTest, AScanOfManyPagesPrintsEveryKeyOnceAndValidJson) {
  const std::string t = "tour_pages";
  Ok("", {"table", "create", t, "--split", "k100"});
  ClientOptions o;
  o.endpoint = server_->address();
  auto c = KvClient::Create(o);
  ASSERT_TRUE(c.ok());
  const std::string value(20 << 10, 'x');
  std::vector<std::string> keys;
  for (int i = 0; i < 300; ++i) {  // ~6 MB: at least two pages
    v1::PutRequest put;
    put.set_table(t);
    put.set_key(absl::StrFormat("k%03d", i));
    put.set_value(value);
    ASSERT_TRUE((*c)->Put(put).ok());
    keys.push_back(put.key());
  }

  CtlResult json = Ctl(t, {"-o", "json", "scan"});
  ASSERT_EQ(json.exit_code, kExitOk) << json.err;
  auto doc = ParseJson(json.out);
  ASSERT_TRUE(doc.ok()) << doc.status();
  const JsonValue* kvs = doc->Find("kvs");
  ASSERT_NE(kvs, nullptr);
  ASSERT_EQ(kvs->items().size(), keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    EXPECT_EQ(kvs->items()[i].Find("key")->string_value(), keys[i]);
  }
  EXPECT_EQ(*doc->Find("count")->AsInt64(), 300);

  std::vector<std::string> lines = Lines(Ok(t, {"scan", "--keys-only"}));
  EXPECT_EQ(lines, keys);
  EXPECT_EQ(Lines(Ok(t, {"scan", "--keys-only", "--limit", "250"})).size(), 250u);
  CtlResult limited = Ctl(t, {"-o", "json", "scan", "--keys-only", "--limit", "3"});
  ASSERT_EQ(limited.exit_code, kExitOk) << limited.err;
  auto small = ParseJson(limited.out);
  ASSERT_TRUE(small.ok()) << small.status() << limited.out;
  EXPECT_EQ(small->Find("kvs")->items().size(), 3u);
  EXPECT_EQ(*small->Find("count")->AsInt64(), 3);
}

TEST_F(LedgerkvctlTest, TableDropRemovesTable) {
  Ok("", {"table", "create", "tour_drop"});
  Ok("tour_drop", {"put", "k", "v"});
  EXPECT_EQ(Ok("", {"table", "drop", "tour_drop"}), "OK\n");
  EXPECT_THAT(Ok("", {"table", "list"}), Not(HasSubstr("tour_drop\n")));
  CtlResult gone = Ctl("tour_drop", {"get", "k"});
  EXPECT_EQ(gone.exit_code, kExitServerError);
  EXPECT_THAT(gone.err, HasSubstr("NOT_FOUND"));
}

// An operator checks a bookie of a cluster: its identity, whether it takes
// writes (and if not, why), and its counters, as text or JSON; a bookie that
// does not answer is exit code 1 with the reason, bad usage exit code 2.
TEST(LedgerkvctlBookieTest, BookieInfoShowsIdentityStateAndCounters) {
  testing::TempDir dir;
  auto bookie = testing::Process::Start(
      {testing::BinaryPath("kv_server/ledgerkv"), "bookie", "--data-dir", dir.path(), "--listen",
       absl::StrCat("127.0.0.1:", testing::FreePort())},
      " listening on ", absl::Seconds(30));
  ASSERT_TRUE(bookie.ok()) << bookie.status();
  // "bookie <id> listening on <addr> instance <instance id>"
  const std::vector<std::string> words =
      absl::StrSplit((*bookie)->ready_line(), ' ', absl::SkipWhitespace());
  ASSERT_EQ(words.size(), 7u) << (*bookie)->ready_line();
  const std::string address = words[4];
  const std::string instance = words[6];

  CtlResult text = RunCtlBinary({"bookie", "info", address});
  ASSERT_EQ(text.exit_code, kExitOk) << text.err;
  const std::vector<std::string> lines = Lines(text.out);
  EXPECT_THAT(lines, ::testing::Contains(absl::StrCat("bookie_id: ", words[1])));
  EXPECT_THAT(lines, ::testing::Contains(absl::StrCat("instance_id: ", instance)));
  EXPECT_THAT(lines, ::testing::Contains("state: WRITABLE"));
  EXPECT_THAT(lines, ::testing::Contains("fsync: on"));
  EXPECT_THAT(text.out, Not(HasSubstr("read_only_reason")));
  EXPECT_THAT(text.out, HasSubstr("\nsyncs: "));
  EXPECT_THAT(text.out, HasSubstr("\ngroup_commit_waits: "));

  CtlResult json = RunCtlBinary({"-o", "json", "bookie", "info", address});
  ASSERT_EQ(json.exit_code, kExitOk) << json.err;
  EXPECT_THAT(json.out, HasSubstr(absl::StrCat("\"instance_id\":\"", instance, "\"")));
  EXPECT_THAT(json.out, HasSubstr("\"group_commit_waits\":"));
  EXPECT_THAT(json.out, HasSubstr("\"state\":\"WRITABLE\""));
  EXPECT_THAT(json.out, HasSubstr("\"no_sync\":false"));

  CtlResult down = RunCtlBinary(
      {"--timeout", "2s", "bookie", "info", absl::StrCat("127.0.0.1:", testing::FreePort())});
  EXPECT_EQ(down.exit_code, kExitServerError);
  EXPECT_THAT(down.err, HasSubstr("bookie 127.0.0.1:"));
  EXPECT_EQ(down.out, "");

  CtlResult usage = RunCtlBinary({"bookie", "info"});
  EXPECT_EQ(usage.exit_code, kExitUsage);
  EXPECT_THAT(usage.err, HasSubstr("usage: ledgerkvctl bookie info HOST:PORT"));
  EXPECT_EQ(RunCtlBinary({"bookie", "stats", address}).exit_code, kExitUsage);
}

// A read-only bookie says so, and why (the text an operator greps for).
TEST(LedgerkvctlBookieTest, BookieInfoOfAReadOnlyBookieNamesTheReason) {
  bookie::v1::GetInfoResponse info;
  info.set_bookie_id("b1");
  info.set_state(bookie::v1::READ_ONLY_STATE);
  info.set_read_only_reason("journal fdatasync failed: No space left on device");
  info.set_disk_usage_percent(96.4);
  const std::string text = FormatBookieInfo(info, OutputFormat::kText);
  EXPECT_THAT(Lines(text), ::testing::Contains("state: READ_ONLY"));
  EXPECT_THAT(Lines(text), ::testing::Contains("disk_usage_percent: 96.4"));
  EXPECT_THAT(Lines(text), ::testing::Contains(
                               "read_only_reason: journal fdatasync failed: No space left on device"));
  const std::string json = FormatBookieInfo(info, OutputFormat::kJson);
  EXPECT_THAT(json, HasSubstr("\"state\":\"READ_ONLY\""));
  EXPECT_THAT(json, HasSubstr("\"disk_usage_percent\":96.4"));
  EXPECT_THAT(json, HasSubstr("\"read_only_reason\":\"journal fdatasync failed: No space left on "
                              "device\""));
}

// A bookie in relaxed mode says so where an operator looks: its
// acknowledgements do not survive a power failure.
TEST(LedgerkvctlBookieTest, BookieInfoSaysWhenFsyncIsOff) {
  bookie::v1::GetInfoResponse info;
  info.set_bookie_id("b1");
  info.set_state(bookie::v1::WRITABLE);
  info.set_no_sync(true);
  EXPECT_THAT(Lines(FormatBookieInfo(info, OutputFormat::kText)),
              ::testing::Contains("fsync: OFF (--no-sync: acknowledged entries can be lost on "
                                  "power failure)"));
  EXPECT_THAT(FormatBookieInfo(info, OutputFormat::kJson), HasSubstr("\"no_sync\":true"));
  // A bookie older than the field cannot say: not "on".
  info.clear_no_sync();
  EXPECT_THAT(Lines(FormatBookieInfo(info, OutputFormat::kText)),
              ::testing::Contains("fsync: unknown (the bookie is too old to say)"));
  EXPECT_THAT(FormatBookieInfo(info, OutputFormat::kJson), HasSubstr("\"no_sync\":null"));
}

}  // namespace
}  // namespace ledgerkv::client
