// `ledgerkv cluster status`: the operator sees, line by line, what the
// metadata store says about the cluster: which bookies and servers are up
// (ephemeral registrations), who owns each range and whether that owner is
// still registered. Real EmbeddedStore on a temp dir, records written as the
// bookies, servers and controller write them (ephemeral ones under
// sessions).
#include "kv_server/cluster_cli.h"

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/json.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "metadata/embedded_store.h"
#include "proto/metadata.pb.h"
#include "tests/process_util.h"

namespace ledgerkv::kv {
namespace {

namespace meta = ::ledgerkv::meta::v1;
using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr char kCluster[] = "c1";
// A split key with a NUL and a non-ASCII byte: shown escaped.
const std::string kSplit("m\x00\xff", 3);

struct Result {
  int code = -1;
  std::string out;
  std::string err;
};

Result Command(metadata::MetadataStore* store, std::vector<std::string> command,
               const std::string& cluster = kCluster) {
  Result r;
  r.code = RunClusterCommand(store, cluster, command, &r.out, &r.err);
  return r;
}

Result Cli(std::vector<std::string> args, const metadata::OpenStoreOptions& options = {}) {
  Result r;
  r.code = RunClusterCli(args, options, &r.out, &r.err);
  return r;
}

// The records of a small cluster, as its processes write them.
class ClusterCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto store = metadata::EmbeddedStore::Open(dir_.path());
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
    b1_ = NewSession();
    b2_ = NewSession();
    s1_ = NewSession();
    s2_ = NewSession();

    Bookie("b1", "127.0.0.1:4001", false, b1_);
    Bookie("b2", "127.0.0.1:4002", true, b2_);
    Bookie("b3", "127.0.0.1:4003", false, metadata::kNoSession);  // cookie only: down

    Server("s1", "127.0.0.1:7001", s1_);
    Server("s2", "127.0.0.1:7002", s2_);
    meta::ControllerRecord controller;
    controller.set_server_id("s1");
    controller.set_address("127.0.0.1:7001");
    Put(keys_.Controller(), controller.SerializeAsString(), s1_);

    Table("orders", 5, {{1, "", kSplit}, {2, kSplit, ""}});
    Table("users", 6, {{3, "", ""}});

    Assign(1, "orders", "s1", "127.0.0.1:7001", 3);
    Assign(2, "orders", "s3", "127.0.0.1:7003", 2);  // s3 is not registered
    Assign(9, "gone", "s2", "127.0.0.1:7002", 1);    // no table has range 9

    // b1 is named by both ledgers (twice by the first: counted once), b3 by
    // the closed one, b9 (no cookie, no registration) by the open one.
    Ledger(11, meta::CLOSED, {{"b1", "b3"}, {"b1", "b2"}});
    Ledger(12, meta::OPEN, {{"b1", "b9"}});
  }

  void Ledger(uint64_t id, meta::LedgerState state,
              const std::vector<std::vector<std::string>>& segments) {
    meta::LedgerMetadata ledger;
    ledger.set_id(id);
    ledger.set_state(state);
    for (const auto& bookies : segments) {
      meta::Segment* segment = ledger.add_segments();
      for (const std::string& b : bookies) segment->add_bookies(b);
    }
    Put(keys_.Ledger(id), ledger.SerializeAsString());
  }

  metadata::SessionId NewSession() {
    auto session = store_->CreateSession({.ttl = absl::Seconds(60)});
    EXPECT_TRUE(session.ok()) << session.status();
    return session.value_or(metadata::kNoSession);
  }

  void Put(const std::string& key, const std::string& value,
           metadata::SessionId session = metadata::kNoSession) {
    auto put = store_->Put(key, value, metadata::kAnyVersion, session);
    ASSERT_TRUE(put.ok()) << key << ": " << put.status();
  }

  // The cookie is durable; the registration lives as long as `session`.
  void Bookie(const std::string& id, const std::string& address, bool read_only,
              metadata::SessionId session) {
    meta::BookieRegistration reg;
    reg.set_bookie_id(id);
    reg.set_address(address);
    reg.set_instance_id("instance-" + id);
    Put(keys_.Cookie(id), reg.SerializeAsString());
    if (session == metadata::kNoSession) return;
    reg.set_read_only(read_only);
    Put(keys_.Bookie(id), reg.SerializeAsString(), session);
  }

  void Server(const std::string& id, const std::string& address, metadata::SessionId session) {
    meta::ServerRegistration reg;
    reg.set_server_id(id);
    reg.set_address(address);
    Put(keys_.Server(id), reg.SerializeAsString(), session);
  }

  struct Spec {
    uint64_t id;
    std::string start;
    std::string end;
  };
  void Table(const std::string& name, uint64_t table_id, const std::vector<Spec>& ranges) {
    meta::TableMetadata table;
    table.set_name(name);
    table.set_table_id(table_id);
    for (const Spec& spec : ranges) {
      meta::RangeSpec* range = table.add_ranges();
      range->set_range_id(spec.id);
      range->set_start(spec.start);
      range->set_end(spec.end);
    }
    Put(keys_.Table(name), table.SerializeAsString());
  }

  void Assign(uint64_t range_id, const std::string& table, const std::string& server,
              const std::string& address, uint64_t epoch) {
    meta::RangeAssignment a;
    a.set_range_id(range_id);
    a.set_table(table);
    a.set_server_id(server);
    a.set_address(address);
    a.set_epoch(epoch);
    Put(keys_.Assignment(range_id), a.SerializeAsString());
  }

  testing::TempDir dir_;
  const metadata::Keys keys_{kCluster};
  std::unique_ptr<metadata::EmbeddedStore> store_;
  metadata::SessionId b1_ = 0, b2_ = 0, s1_ = 0, s2_ = 0;
};

TEST_F(ClusterCliTest, StatusShowsEveryRecordOneLinePerItem) {
  Result r = Command(store_.get(), {"status"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  EXPECT_EQ(r.out,
            "controller: s1 127.0.0.1:7001\n"
            "bookies: 2 up, 2 down\n"
            "bookie b1 127.0.0.1:4001 up ledgers=2\n"
            "bookie b2 127.0.0.1:4002 read-only ledgers=1\n"
            "bookie b3 127.0.0.1:4003 down ledgers=1\n"
            "bookie b9 - down ledgers=1\n"
            "servers: 2\n"
            "server s1 127.0.0.1:7001 ranges=1\n"
            "server s2 127.0.0.1:7002 ranges=1\n"
            "tables: 2\n"
            "table orders id=5 ranges=2\n"
            "table users id=6 ranges=1\n"
            "range 1 table=orders [, m\\x00\\xff) owner=s1 address=127.0.0.1:7001 epoch=3 "
            "owner_live=yes\n"
            "range 2 table=orders [m\\x00\\xff, ) owner=s3 address=127.0.0.1:7003 epoch=2 "
            "owner_live=no\n"
            "range 3 table=users [, ) owner=none address=- epoch=- owner_live=no\n"
            "orphan assignment 9 table=gone owner=s2 address=127.0.0.1:7002 epoch=1 "
            "owner_live=yes\n");
  // -o text is the default.
  EXPECT_EQ(Command(store_.get(), {"-o", "text", "status"}).out, r.out);
}

TEST_F(ClusterCliTest, EndedSessionsShowAsDownBookieDeadOwnerAndNoController) {
  // b1's process and s1's (also the controller) stop: their sessions end.
  ASSERT_TRUE(store_->CloseSession(b1_).ok());
  ASSERT_TRUE(store_->CloseSession(s1_).ok());
  Result r = Command(store_.get(), {"status"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, StartsWith("controller: none\nbookies: 1 up, 3 down\n"));
  EXPECT_THAT(r.out, HasSubstr("bookie b1 127.0.0.1:4001 down ledgers=2\n"));
  EXPECT_THAT(r.out, HasSubstr("servers: 1\nserver s2 127.0.0.1:7002 ranges=1\ntables: 2\n"));
  EXPECT_THAT(r.out, HasSubstr("range 1 table=orders [, m\\x00\\xff) owner=s1 "
                               "address=127.0.0.1:7001 epoch=3 owner_live=no\n"));
}

TEST_F(ClusterCliTest, JsonHasTheSameFieldsAndParses) {
  Result r = Command(store_.get(), {"-o", "json", "status"});
  ASSERT_EQ(r.code, 0) << r.err;
  auto doc = client::ParseJson(r.out);
  ASSERT_TRUE(doc.ok()) << doc.status() << "\n" << r.out;
  ASSERT_TRUE(doc->is_object());
  auto str = [](const client::JsonValue* v) { return v && v->is_string() ? v->string_value() : "?"; };
  auto num = [](const client::JsonValue* v) {
    return v && v->is_number() ? v->AsInt64().value_or(-1) : -1;
  };

  const client::JsonValue* controller = doc->Find("controller");
  ASSERT_TRUE(controller && controller->is_object());
  EXPECT_EQ(str(controller->Find("server_id")), "s1");
  EXPECT_EQ(str(controller->Find("address")), "127.0.0.1:7001");

  const client::JsonValue* bookies = doc->Find("bookies");
  ASSERT_TRUE(bookies && bookies->is_array());
  ASSERT_EQ(bookies->items().size(), 4u);
  EXPECT_EQ(str(bookies->items()[0].Find("id")), "b1");
  EXPECT_EQ(str(bookies->items()[0].Find("state")), "up");
  EXPECT_EQ(num(bookies->items()[0].Find("ledgers")), 2);
  EXPECT_EQ(num(bookies->items()[2].Find("ledgers")), 1);
  EXPECT_EQ(str(bookies->items()[3].Find("id")), "b9");
  EXPECT_EQ(str(bookies->items()[3].Find("address")), "");
  EXPECT_EQ(str(bookies->items()[3].Find("state")), "down");
  EXPECT_EQ(str(bookies->items()[1].Find("state")), "read-only");
  EXPECT_EQ(str(bookies->items()[2].Find("address")), "127.0.0.1:4003");
  EXPECT_EQ(str(bookies->items()[2].Find("state")), "down");

  const client::JsonValue* servers = doc->Find("servers");
  ASSERT_TRUE(servers && servers->is_array());
  ASSERT_EQ(servers->items().size(), 2u);
  EXPECT_EQ(str(servers->items()[1].Find("id")), "s2");
  EXPECT_EQ(num(servers->items()[1].Find("ranges")), 1);

  const client::JsonValue* tables = doc->Find("tables");
  ASSERT_TRUE(tables && tables->is_array());
  ASSERT_EQ(tables->items().size(), 2u);
  EXPECT_EQ(str(tables->items()[0].Find("name")), "orders");
  EXPECT_EQ(num(tables->items()[0].Find("table_id")), 5);
  EXPECT_EQ(num(tables->items()[0].Find("ranges")), 2);

  const client::JsonValue* ranges = doc->Find("ranges");
  ASSERT_TRUE(ranges && ranges->is_array());
  ASSERT_EQ(ranges->items().size(), 3u);
  const client::JsonValue& r1 = ranges->items()[0];
  EXPECT_EQ(num(r1.Find("range_id")), 1);
  EXPECT_EQ(str(r1.Find("table")), "orders");
  EXPECT_EQ(str(r1.Find("start")), "");
  EXPECT_EQ(str(r1.Find("end")), "m\\x00\\xff");  // escaped as in the text output
  EXPECT_EQ(str(r1.Find("owner")), "s1");
  EXPECT_EQ(num(r1.Find("epoch")), 3);
  ASSERT_NE(r1.Find("owner_live"), nullptr);
  EXPECT_TRUE(r1.Find("owner_live")->bool_value());
  const client::JsonValue& r2 = ranges->items()[1];
  EXPECT_EQ(str(r2.Find("owner")), "s3");
  ASSERT_NE(r2.Find("owner_live"), nullptr);
  EXPECT_FALSE(r2.Find("owner_live")->bool_value());
  const client::JsonValue& r3 = ranges->items()[2];
  EXPECT_EQ(num(r3.Find("range_id")), 3);
  ASSERT_NE(r3.Find("owner"), nullptr);
  EXPECT_TRUE(r3.Find("owner")->is_null());
  ASSERT_NE(r3.Find("epoch"), nullptr);
  EXPECT_TRUE(r3.Find("epoch")->is_null());

  const client::JsonValue* orphans = doc->Find("orphan_assignments");
  ASSERT_TRUE(orphans && orphans->is_array());
  ASSERT_EQ(orphans->items().size(), 1u);
  EXPECT_EQ(num(orphans->items()[0].Find("range_id")), 9);
  EXPECT_EQ(str(orphans->items()[0].Find("table")), "gone");
  EXPECT_EQ(str(orphans->items()[0].Find("owner")), "s2");
}

TEST_F(ClusterCliTest, QuotesBackslashesAndControlBytesStayOnOneLineAndValidJson) {
  const std::string name = "a\"b\\c\nd\x01";
  Table(name, 7, {{4, "", ""}});
  Result text = Command(store_.get(), {"status"});
  ASSERT_EQ(text.code, 0) << text.err;
  EXPECT_THAT(text.out, HasSubstr("table a\\\"b\\\\c\\nd\\x01 id=7 ranges=1\n"));
  EXPECT_THAT(text.out, HasSubstr("range 4 table=a\\\"b\\\\c\\nd\\x01 [, ) owner=none"));

  Result json = Command(store_.get(), {"-o", "json", "status"});
  ASSERT_EQ(json.code, 0) << json.err;
  EXPECT_EQ(json.out.find('\n'), json.out.size() - 1) << "one line";
  auto doc = client::ParseJson(json.out);
  ASSERT_TRUE(doc.ok()) << doc.status() << "\n" << json.out;
  // Same escaped form as the text output.
  EXPECT_EQ(doc->Find("tables")->items()[0].Find("name")->string_value(),
            "a\\\"b\\\\c\\nd\\x01");
}

TEST_F(ClusterCliTest, OtherClusterNameSeesNothing) {
  Result r = Command(store_.get(), {"status"}, "other");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "controller: none\nbookies: 0 up, 0 down\nservers: 0\ntables: 0\n");
  Result json = Command(store_.get(), {"-o", "json", "status"}, "other");
  EXPECT_EQ(json.out,
            "{\"controller\":null,\"bookies\":[],\"servers\":[],\"tables\":[],\"ranges\":[],"
            "\"orphan_assignments\":[]}\n");
}

TEST_F(ClusterCliTest, UnparsableRecordIsReportedWithExitOneAndTheRestIsShown) {
  Put(keys_.Table("broken"), std::string("\xff", 1));
  Result r = Command(store_.get(), {"status"});
  EXPECT_EQ(r.code, kClusterCliExitFailure);
  EXPECT_THAT(r.err, HasSubstr("ledgerkv cluster: DATA_LOSS: /ledgerkv/c1/tables/broken"));
  EXPECT_THAT(r.out, HasSubstr("tables: 2\n"));
  EXPECT_THAT(r.out, HasSubstr("range 1 table=orders"));
}

// The whole entry point on a store URI: opening the embedded store in a new
// "process" drops the ephemeral keys the previous one left, so everything
// that was registered shows as gone while durable records remain.
TEST_F(ClusterCliTest, CliOnEmbeddedUriAfterTheWritersStopped) {
  store_.reset();
  Result r = Cli({"--metadata", "embedded://" + dir_.path(), "--cluster", kCluster, "status"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, StartsWith("controller: none\nbookies: 0 up, 4 down\n"
                                "bookie b1 127.0.0.1:4001 down ledgers=2\n"));
  EXPECT_THAT(r.out, HasSubstr("servers: 0\ntables: 2\n"));
  EXPECT_THAT(r.out, HasSubstr(" owner=s1 address=127.0.0.1:7001 epoch=3 owner_live=no\n"));
  EXPECT_THAT(r.out, HasSubstr("orphan assignment 9 table=gone owner=s2 address=127.0.0.1:7002 "
                               "epoch=1 owner_live=no\n"));

  // Flags may come after the command; --cluster defaults to "default".
  Result json = Cli({"status", "-o", "json", "--metadata", "embedded://" + dir_.path()});
  EXPECT_EQ(json.code, 0) << json.err;
  EXPECT_THAT(json.out, StartsWith("{\"controller\":null,\"bookies\":[],"));
}

// A bookie re-provisioned under its id: the ledgers that recorded its
// earlier instance are counted as to_refill (text: only when any; JSON:
// always), ledgers recording its current one are not.
TEST_F(ClusterCliTest, LedgersThatRecordedAnEarlierInstanceAreCountedToRefill) {
  meta::LedgerMetadata ledger;
  ledger.set_id(13);
  ledger.set_state(meta::CLOSED);
  meta::Segment* segment = ledger.add_segments();
  for (const char* b : {"b1", "b2"}) segment->add_bookies(b);
  segment->add_bookie_instances("instance-b1-before-its-disk-was-replaced");
  segment->add_bookie_instances("instance-b2");
  Put(keys_.Ledger(13), ledger.SerializeAsString());
  ledger.set_id(14);
  ledger.mutable_segments(0)->set_bookie_instances(0, "instance-b1");
  Put(keys_.Ledger(14), ledger.SerializeAsString());
  // Two segments that recorded an earlier b1 count once; b3 is down (no
  // instance to compare with): never counted.
  ledger.set_id(15);
  ledger.mutable_segments(0)->set_bookie_instances(0, "instance-b1-before");
  *ledger.add_segments() = ledger.segments(0);
  ledger.mutable_segments(1)->set_bookies(1, "b3");
  ledger.mutable_segments(1)->set_bookie_instances(1, "instance-b3-before");
  Put(keys_.Ledger(15), ledger.SerializeAsString());

  Result r = Command(store_.get(), {"status"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("bookie b1 127.0.0.1:4001 up ledgers=5 to_refill=2\n"));
  EXPECT_THAT(r.out, HasSubstr("bookie b2 127.0.0.1:4002 read-only ledgers=4\n"));
  EXPECT_THAT(r.out, HasSubstr("bookie b3 127.0.0.1:4003 down ledgers=2\n"));
  Result json = Command(store_.get(), {"-o", "json", "status"});
  ASSERT_EQ(json.code, 0) << json.err;
  EXPECT_THAT(json.out, HasSubstr("\"id\":\"b1\",\"address\":\"127.0.0.1:4001\",\"state\":\"up\","
                                  "\"ledgers\":5,\"to_refill\":2}"));
}

// delete-cookie lets a bookie that is down rejoin with a new disk; it is
// refused for a running bookie (whose cookie stays), and for an id the
// cluster has no cookie for.
TEST_F(ClusterCliTest, DeleteCookieOnlyForABookieThatIsDown) {
  Result running = Command(store_.get(), {"delete-cookie", "b1"});
  EXPECT_EQ(running.code, kClusterCliExitFailure);
  EXPECT_THAT(running.err, HasSubstr("bookie b1 is registered (running at 127.0.0.1:4001)"));
  EXPECT_TRUE(store_->Get(keys_.Cookie("b1")).ok());

  Result down = Command(store_.get(), {"delete-cookie", "b3"});
  EXPECT_EQ(down.code, 0) << down.err;
  EXPECT_THAT(down.out, HasSubstr("deleted the cookie of bookie b3 (instance instance-b3)"));
  EXPECT_TRUE(absl::IsNotFound(store_->Get(keys_.Cookie("b3")).status()));

  Result again = Command(store_.get(), {"delete-cookie", "b3"});
  EXPECT_EQ(again.code, kClusterCliExitFailure);
  EXPECT_THAT(again.err, HasSubstr("has no cookie for bookie b3"));
  Result other = Command(store_.get(), {"delete-cookie", "b2"}, "another-cluster");
  EXPECT_EQ(other.code, kClusterCliExitFailure);
  EXPECT_TRUE(store_->Get(keys_.Cookie("b2")).ok());
}

TEST(ClusterCli, UsageErrorsExitTwoWithoutTouchingTheStore) {
  // An unreachable etcd with the default 5 s dial timeout: a usage error
  // must be reported before connecting.
  const std::string unreachable = "etcd://127.0.0.1:" + std::to_string(testing::FreePort());
  const absl::Time start = absl::Now();
  const std::vector<std::vector<std::string>> bad = {
      {"status"},                                          // no --metadata
      {"--metadata"},                                      // no value
      {"--metadata", unreachable, "--cluster"},            // no value
      {"--metadata", unreachable, "--cluster", "", "status"},
      {"--metadata", unreachable},                         // no command
      {"--metadata", unreachable, "stat"},
      {"--metadata", unreachable, "status", "extra"},
      {"--metadata", unreachable, "-o", "yaml", "status"},
      {"--metadata", unreachable, "status", "-o"},
      {"--metadata", unreachable, "--verbose", "status"},
      {"--metadata", unreachable, "delete-cookie"},  // no bookie id
      {"--metadata", unreachable, "delete-cookie", ""},
      {"--metadata", unreachable, "delete-cookie", "b1", "b2"},
      {"--metadata", unreachable, "-o", "json", "delete-cookie", "b1"},
  };
  for (const auto& args : bad) {
    Result r = Cli(args);
    EXPECT_EQ(r.code, kClusterCliExitUsage) << absl::StrJoin(args, " ") << "\n" << r.err;
    EXPECT_THAT(r.err, StartsWith("ledgerkv cluster: "));
    EXPECT_THAT(r.err, HasSubstr("usage:\n"));
    EXPECT_EQ(r.out, "");
  }
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));

  Result help = Cli({"--help"});
  EXPECT_EQ(help.code, 0);
  EXPECT_THAT(help.out, HasSubstr("cluster --metadata URI"));

  // RunClusterCommand checks the command the same way (store unused).
  Result r = Command(nullptr, {"status", "now"});
  EXPECT_EQ(r.code, kClusterCliExitUsage);
  EXPECT_THAT(r.err, HasSubstr("unexpected argument \"now\""));
}

TEST(ClusterCli, StoreThatCannotBeOpenedExitsOne) {
  // The embedded store is locked by another open store ("another process").
  testing::TempDir dir;
  auto holder = metadata::EmbeddedStore::Open(dir.path());
  ASSERT_TRUE(holder.ok()) << holder.status();
  Result locked = Cli({"--metadata", "embedded://" + dir.path(), "status"});
  EXPECT_EQ(locked.code, kClusterCliExitFailure);
  EXPECT_THAT(locked.err, StartsWith("ledgerkv cluster: UNAVAILABLE"));
  EXPECT_EQ(locked.out, "");

  // A directory without a store (a typo) is not made into a new, empty one.
  const std::string typo = dir.path() + "/nothing-here";
  Result missing = Cli({"--metadata", "embedded://" + typo, "status"});
  EXPECT_EQ(missing.code, kClusterCliExitFailure);
  EXPECT_THAT(missing.err, StartsWith("ledgerkv cluster: NOT_FOUND"));
  EXPECT_FALSE(std::filesystem::exists(typo));

  // etcd on a closed port, with a short dial timeout: fails in about that.
  metadata::OpenStoreOptions options;
  options.etcd.dial_timeout = absl::Milliseconds(300);
  options.etcd.op_timeout = absl::Milliseconds(300);
  const absl::Time start = absl::Now();
  Result closed = Cli({"--metadata", "etcd://127.0.0.1:" + std::to_string(testing::FreePort()),
                       "status"},
                      options);
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));
  EXPECT_EQ(closed.code, kClusterCliExitFailure);
  EXPECT_THAT(closed.err, StartsWith("ledgerkv cluster: UNAVAILABLE"));
  EXPECT_EQ(closed.out, "");
}

}  // namespace
}  // namespace ledgerkv::kv
