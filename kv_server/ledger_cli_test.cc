// `ledgerkv ledger`: the operator sees what the metadata store and bookies
// hold, and list/show/read/recover/delete do what they say.
//  - In-process (TestCluster: real bookies, real EmbeddedStore) through
//    RunLedgerCommand, so entries can be read while bookies run.
//  - The real binary on the metadata of a stopped `ledgerkv standalone`.
#include "kv_server/ledger_cli.h"

#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"
#include "grpcpp/grpcpp.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ledger/ledger_test_util.h"
#include "proto/kv.grpc.pb.h"
#include "proto/metadata.pb.h"
#include "snapshot/manifest.h"
#include "tests/process_util.h"
#include "wal/log_writer.h"

namespace ledgerkv::kv {
namespace {

namespace v1 = ::ledgerkv::v1;
using ::testing::HasSubstr;

struct Result {
  int code = -1;
  std::string out;
  std::string err;
};

Result RunCli(ledger::testing::TestCluster& cluster, std::vector<std::string> command) {
  Result r;
  r.code = RunLedgerCommand(cluster.store(), "default", command, &r.out, &r.err);
  return r;
}

// `read ID` means entries 0..LAC: for a ledger with none readable (closed
// empty, or open with nothing confirmed) that range is empty, which is
// success with no output. Entries asked for by number that are not there
// are still an error.
TEST(LedgerCli, ReadingAnEmptyLedgerPrintsNothingAndSucceeds) {
  LKV_ASSIGN_OR_FAIL(auto cluster, ledger::testing::TestCluster::Start({.bookies = 1}));
  LKV_ASSIGN_OR_FAIL(auto client, cluster->NewClient());
  LKV_ASSIGN_OR_FAIL(auto closed, client->CreateLedger(ledger::testing::Quorums(1, 1, 1)));
  LKV_ASSERT_OK(closed->Close());
  LKV_ASSIGN_OR_FAIL(auto open, client->CreateLedger(ledger::testing::Quorums(1, 1, 1)));
  for (const uint64_t id : {closed->id(), open->id()}) {
    const std::string name = absl::StrCat(id);
    Result all = RunCli(*cluster, {"read", name});
    EXPECT_EQ(all.code, 0) << name << ": " << all.err;
    EXPECT_EQ(all.out, "") << name;
    EXPECT_EQ(all.err, "") << name;
    Result from = RunCli(*cluster, {"read", name, "--from", "0"});
    EXPECT_EQ(from.code, 1) << name;
    EXPECT_THAT(from.err, HasSubstr("--from 0 is beyond the last readable entry -1")) << name;
    Result to = RunCli(*cluster, {"read", name, "--to", "0"});
    EXPECT_EQ(to.code, 1) << name;
    EXPECT_THAT(to.err, HasSubstr("--to 0 is beyond the last readable entry -1")) << name;
  }
}

TEST(LedgerCli, ListShowReadRecoverDeleteAgainstLiveBookies) {
  LKV_ASSIGN_OR_FAIL(auto cluster, ledger::testing::TestCluster::Start({.bookies = 3}));
  LKV_ASSIGN_OR_FAIL(auto client, cluster->NewClient());
  ledger::CreateOptions create = ledger::testing::Quorums(3, 2, 2);
  create.custom["owner"] = "cli-test";
  LKV_ASSIGN_OR_FAIL(auto closed, client->CreateLedger(create));
  LKV_ASSERT_OK(closed->Append("hello"));
  LKV_ASSERT_OK(closed->Append(std::string("a\0b\n", 4)));
  LKV_ASSERT_OK(closed->Append(std::string(100, 'x')));
  LKV_ASSERT_OK(closed->Close());
  LKV_ASSIGN_OR_FAIL(auto open, client->CreateLedger(ledger::testing::Quorums(2, 2, 1)));
  LKV_ASSERT_OK(open->Append("e0"));
  LKV_ASSERT_OK(open->Append("e1"));
  LKV_ASSERT_OK(open->Append("e2"));  // carries LAC 1
  const std::string closed_id = absl::StrCat(closed->id());
  const std::string open_id = absl::StrCat(open->id());

  Result list = RunCli(*cluster, {"list"});
  ASSERT_EQ(list.code, 0) << list.err;
  const std::vector<std::string> lines = absl::StrSplit(list.out, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 3u) << list.out;  // header + 2 ledgers
  EXPECT_THAT(lines[1], HasSubstr(closed_id));
  EXPECT_THAT(lines[1], HasSubstr("CLOSED"));
  EXPECT_THAT(lines[1], HasSubstr("3/2/2"));
  EXPECT_TRUE(absl::EndsWith(lines[1], " 2")) << lines[1];  // last entry
  EXPECT_THAT(lines[2], HasSubstr(open_id));
  EXPECT_THAT(lines[2], HasSubstr("OPEN"));
  EXPECT_THAT(lines[2], HasSubstr("2/2/1"));

  Result show = RunCli(*cluster, {"show", closed_id});
  ASSERT_EQ(show.code, 0) << show.err;
  EXPECT_THAT(show.out, HasSubstr("state: CLOSED"));
  EXPECT_THAT(show.out, HasSubstr("ensemble_size: 3  write_quorum: 2  ack_quorum: 2"));
  EXPECT_THAT(show.out, HasSubstr("last_entry_id: 2"));
  EXPECT_THAT(show.out, HasSubstr("owner = cli-test"));
  EXPECT_THAT(show.out, HasSubstr("from entry 0:"));

  Result read = RunCli(*cluster, {"read", closed_id});
  ASSERT_EQ(read.code, 0) << read.err;
  EXPECT_EQ(read.out, absl::StrCat("entry 0 5 bytes: hello\n", "entry 1 4 bytes: a\\000b\\n\n",
                                   "entry 2 100 bytes: ", std::string(64, 'x'), "\n"));
  Result range = RunCli(*cluster, {"read", closed_id, "--from", "1", "--to", "1"});
  ASSERT_EQ(range.code, 0) << range.err;
  EXPECT_EQ(range.out, "entry 1 4 bytes: a\\000b\\n\n");
  Result beyond = RunCli(*cluster, {"read", closed_id, "--to", "3"});
  EXPECT_EQ(beyond.code, 1);
  EXPECT_THAT(beyond.err, HasSubstr("OUT_OF_RANGE"));
  Result past = RunCli(*cluster, {"read", closed_id, "--from", "3"});
  EXPECT_EQ(past.code, 1) << "nothing read, and exit 0";
  EXPECT_THAT(past.err, HasSubstr("--from 3 is beyond the last readable entry 2"));

  // Without recovery an open ledger reads up to its LAC and stays OPEN.
  Result tail = RunCli(*cluster, {"read", open_id});
  ASSERT_EQ(tail.code, 0) << tail.err;
  EXPECT_THAT(tail.out, HasSubstr("entry 0 2 bytes: e0\n"));
  EXPECT_THAT(tail.out, HasSubstr("entry 1 2 bytes: e1\n"));
  EXPECT_THAT(RunCli(*cluster, {"show", open_id}).out, HasSubstr("state: OPEN"));

  // Recovery closes it with every acknowledged entry and fences the writer.
  Result recover = RunCli(*cluster, {"recover", open_id});
  ASSERT_EQ(recover.code, 0) << recover.err;
  EXPECT_EQ(recover.out, absl::StrCat("ledger ", open_id, " CLOSED last_entry_id 2\n"));
  EXPECT_FALSE(open->Append("after recovery").ok());
  EXPECT_THAT(RunCli(*cluster, {"show", open_id}).out, HasSubstr("state: CLOSED"));

  Result del = RunCli(*cluster, {"delete", closed_id});
  ASSERT_EQ(del.code, 0) << del.err;
  Result gone = RunCli(*cluster, {"show", closed_id});
  EXPECT_EQ(gone.code, 1);
  EXPECT_THAT(gone.err, HasSubstr("NOT_FOUND"));
  const std::string after = RunCli(*cluster, {"list"}).out;
  const std::vector<std::string> left = absl::StrSplit(after, '\n', absl::SkipEmpty());
  ASSERT_EQ(left.size(), 2u) << after;
  EXPECT_TRUE(absl::StartsWith(left[1], open_id + " ")) << after;
}

// Opens log "cli-log" on the cluster and appends one record: its segment's
// ledger is OPEN, and the writer is live.
absl::StatusOr<std::unique_ptr<wal::LogWriter>> OpenLogWithOneRecord(
    ledger::testing::TestCluster& cluster, ledger::LedgerClient* client) {
  wal::LogOptions log;
  log.client = client;
  log.metadata = cluster.store();
  ASSIGN_OR_RETURN(std::unique_ptr<wal::LogWriter> writer, wal::LogWriter::Open(log, "cli-log"));
  RETURN_IF_ERROR(writer->AppendAndWait("record").status());
  return writer;
}

// `delete` refuses a ledger someone still relies on, and says who: an OPEN
// one (a writer may be getting adds acknowledged that GC would reclaim), a
// log's segment (the log would no longer open), a snapshot a manifest
// lists. --force deletes anyway; a ledger nobody names goes without it.
TEST(LedgerCli, DeleteRefusesALedgerThatIsOpenOrNamedByALogOrASnapshot) {
  LKV_ASSIGN_OR_FAIL(auto cluster, ledger::testing::TestCluster::Start({.bookies = 3}));
  LKV_ASSIGN_OR_FAIL(auto client, cluster->NewClient());

  // A log's segment: its ledger is OPEN while the writer lives, and still
  // named by the log once the writer closed it.
  LKV_ASSIGN_OR_FAIL(auto writer, OpenLogWithOneRecord(*cluster, client.get()));
  const std::string segment = absl::StrCat(writer->metadata().segments(0).ledger_id());
  Result open = RunCli(*cluster, {"delete", segment});
  EXPECT_EQ(open.code, 1);
  EXPECT_THAT(open.err, HasSubstr("FAILED_PRECONDITION"));
  EXPECT_THAT(open.err, HasSubstr("is OPEN"));
  // Nor is the log's open segment recovered (that would fence its live
  // writer) without --force: the writer still appends.
  Result recover = RunCli(*cluster, {"recover", segment});
  EXPECT_EQ(recover.code, 1);
  EXPECT_THAT(recover.err, HasSubstr("log cli-log names it as its segment"));
  LKV_ASSERT_OK(writer->AppendAndWait("after a refused recover").status());
  LKV_ASSERT_OK(writer->Close());
  // Closed, it recovers (nothing to do) without --force.
  EXPECT_EQ(RunCli(*cluster, {"recover", segment}).code, 0);
  Result named = RunCli(*cluster, {"delete", segment});
  EXPECT_EQ(named.code, 1);
  EXPECT_THAT(named.err, HasSubstr("log cli-log still names ledger " + segment));
  EXPECT_EQ(RunCli(*cluster, {"show", segment}).code, 0) << "a refused delete deleted";

  // A snapshot a manifest lists.
  ledger::CreateOptions create = ledger::testing::Quorums(3, 2, 2);
  create.custom = {{"purpose", "snapshot"}, {"range_id", "7"}};
  LKV_ASSIGN_OR_FAIL(auto snap, client->CreateLedger(create));
  LKV_ASSERT_OK(snap->Append("snapshot bytes"));
  LKV_ASSERT_OK(snap->Close());
  meta::v1::SnapshotManifest manifest;
  manifest.set_range_id(7);
  meta::v1::SnapshotRecord* record = manifest.add_snapshots();
  record->set_ledger_id(snap->id());
  record->set_range_id(7);
  record->set_seqno(5);
  LKV_ASSERT_OK(snapshot::StoreManifest(*cluster->store(), snapshot::ManifestKey("default", 7),
                                        manifest, metadata::kMustNotExist)
                    .status());
  const std::string snap_id = absl::StrCat(snap->id());
  Result listed = RunCli(*cluster, {"delete", snap_id});
  EXPECT_EQ(listed.code, 1);
  EXPECT_THAT(listed.err, HasSubstr("range 7's snapshot manifest still lists ledger " + snap_id));

  // A fresh snapshot ledger that no manifest lists yet may be about to be
  // listed (its publish in flight): left alone for now.
  LKV_ASSIGN_OR_FAIL(auto unlisted, client->CreateLedger(create));
  LKV_ASSERT_OK(unlisted->Close());
  Result fresh = RunCli(*cluster, {"delete", absl::StrCat(unlisted->id())});
  EXPECT_EQ(fresh.code, 1);
  EXPECT_THAT(fresh.err, HasSubstr("may be about to name it"));

  // --force deletes anyway.
  Result forced = RunCli(*cluster, {"delete", segment, "--force"});
  EXPECT_EQ(forced.code, 0) << forced.err;
  EXPECT_EQ(RunCli(*cluster, {"show", segment}).code, 1);
  EXPECT_EQ(RunCli(*cluster, {"delete", snap_id, "--force"}).code, 0);
  EXPECT_EQ(RunCli(*cluster, {"delete", "1", "--follow"}).code, 2) << "a read flag on delete";
}

// `recover --force` recovers a log's open segment anyway: its writer is
// fenced and fails for good.
TEST(LedgerCli, RecoverForceFencesALogsLiveWriter) {
  LKV_ASSIGN_OR_FAIL(auto cluster, ledger::testing::TestCluster::Start({.bookies = 3}));
  LKV_ASSIGN_OR_FAIL(auto client, cluster->NewClient());
  LKV_ASSIGN_OR_FAIL(auto writer, OpenLogWithOneRecord(*cluster, client.get()));
  const std::string segment = absl::StrCat(writer->metadata().segments(0).ledger_id());
  Result forced = RunCli(*cluster, {"recover", segment, "--force"});
  EXPECT_EQ(forced.code, 0) << forced.err;
  EXPECT_THAT(forced.out, HasSubstr("CLOSED last_entry_id 0"));
  EXPECT_FALSE(writer->AppendAndWait("fenced").ok());
}

// `read --follow` is `tail -f` for a ledger: it prints what is confirmed,
// then each entry as the writer's LAC passes it (an idle writer's last entry
// included), hands every batch on at once, and ends with exit 0 when the
// writer closes the ledger.
TEST(LedgerCli, ReadFollowPrintsEntriesAsTheyAreConfirmedAndEndsAtClose) {
  LKV_ASSIGN_OR_FAIL(auto cluster, ledger::testing::TestCluster::Start({.bookies = 3}));
  LKV_ASSIGN_OR_FAIL(auto client, cluster->NewClient());
  LKV_ASSIGN_OR_FAIL(auto writer, client->CreateLedger(ledger::testing::Quorums(3, 2, 2)));
  for (int i = 0; i < 3; ++i) LKV_ASSERT_OK(writer->Append(absl::StrCat("first-", i)));

  absl::Mutex mu;
  std::string printed;  // what was handed on so far, guarded by mu
  Result r;
  std::thread follower([&] {
    r.code = RunLedgerCommand(cluster->store(), "default",
                              {"read", absl::StrCat(writer->id()), "--from", "1", "--follow"},
                              &r.out, &r.err, [&] {
                                absl::MutexLock l(&mu);
                                printed += r.out;
                                r.out.clear();
                              });
  });
  auto wait_for = [&](const std::string& text) {
    absl::MutexLock l(&mu);
    auto seen = [&]() { return absl::StrContains(printed, text); };
    return mu.AwaitWithTimeout(absl::Condition(&seen), absl::Seconds(10));
  };
  EXPECT_TRUE(wait_for("entry 2 7 bytes: first-2\n")) << "the confirmed entries were not printed";
  for (int i = 3; i < 5; ++i) LKV_ASSERT_OK(writer->Append(absl::StrCat("later-", i)));
  // Entry 4 is the idle writer's last: only its explicit LAC confirms it.
  EXPECT_TRUE(wait_for("entry 4 7 bytes: later-4\n")) << "a new entry was not followed";
  LKV_ASSERT_OK(writer->Close());
  follower.join();
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  absl::MutexLock l(&mu);
  EXPECT_EQ(printed + r.out,
            "entry 1 7 bytes: first-1\n"
            "entry 2 7 bytes: first-2\n"
            "entry 3 7 bytes: later-3\n"
            "entry 4 7 bytes: later-4\n");

  // A closed ledger: the entries, then exit 0 at once.
  Result closed = RunCli(*cluster, {"read", absl::StrCat(writer->id()), "--from", "3", "--follow"});
  EXPECT_EQ(closed.code, 0) << closed.err;
  EXPECT_EQ(closed.out, "entry 3 7 bytes: later-3\nentry 4 7 bytes: later-4\n");
  // A ledger that does not exist is an error, not an endless wait.
  Result missing = RunCli(*cluster, {"read", "12345", "--follow"});
  EXPECT_EQ(missing.code, 1);
  EXPECT_THAT(missing.err, HasSubstr("NOT_FOUND"));
}

// `rereplicate --all --bookie B` moves every CLOSED ledger naming B off it
// (B stopped for good) and says so; an OPEN ledger naming B is left to its
// writer, reported, and makes the command exit 1. Once that one is closed,
// a second run moves it too and exits 0.
TEST(LedgerCli, RereplicateMovesEveryClosedLedgerOffABookie) {
  LKV_ASSIGN_OR_FAIL(auto cluster, ledger::testing::TestCluster::Start({.bookies = 5}));
  LKV_ASSIGN_OR_FAIL(auto client, cluster->NewClient());
  std::vector<uint64_t> closed;
  for (int i = 0; i < 3; ++i) {
    LKV_ASSIGN_OR_FAIL(auto writer, client->CreateLedger(ledger::testing::Quorums(3, 3, 2)));
    for (int e = 0; e < 10; ++e) LKV_ASSERT_OK(writer->Append(absl::StrCat("entry ", e)));
    LKV_ASSERT_OK(writer->Close());
    closed.push_back(writer->id());
  }
  LKV_ASSIGN_OR_FAIL(auto open, client->CreateLedger(ledger::testing::Quorums(3, 2, 2)));
  LKV_ASSERT_OK(open->Append("e0"));
  // A bookie of both the open ledger and the first closed one (two
  // ensembles of 3 among 5 bookies meet).
  LKV_ASSIGN_OR_FAIL(const auto first, client->GetLedgerMetadata(closed[0]));
  std::string gone;
  const meta::v1::Segment open_segment = open->metadata().segments(0);
  for (const std::string& b : open_segment.bookies()) {
    for (const std::string& c : first.segments(0).bookies()) {
      if (b == c) gone = b;
    }
  }
  ASSERT_FALSE(gone.empty());
  int named = 0;
  for (uint64_t id : closed) {
    LKV_ASSIGN_OR_FAIL(const auto m, client->GetLedgerMetadata(id));
    for (const std::string& b : m.segments(0).bookies()) named += b == gone ? 1 : 0;
  }
  cluster->StopBookie(cluster->IndexOf(gone));

  Result r = RunCli(*cluster, {"rereplicate", "--all", "--bookie", gone});
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr(absl::StrCat(named, " ledger")));
  EXPECT_THAT(r.out, HasSubstr("1 still naming it"));
  EXPECT_THAT(r.err, HasSubstr(absl::StrCat("ledger ", open->id(), ": FAILED_PRECONDITION")));
  for (uint64_t id : closed) {
    LKV_ASSIGN_OR_FAIL(const auto m, client->GetLedgerMetadata(id));
    for (const std::string& b : m.segments(0).bookies()) EXPECT_NE(b, gone) << id;
    LKV_ASSIGN_OR_FAIL(auto reader, client->OpenLedger(id, ledger::OpenMode::kNoRecovery));
    LKV_ASSIGN_OR_FAIL(auto entries, reader->Read(0, 9));
    ASSERT_EQ(entries.size(), 10u);
    EXPECT_EQ(entries[9].payload, "entry 9");
  }

  // The open ledger's writer closes it (its bookie is down: the close
  // needs no add); then it moves too.
  LKV_ASSERT_OK(open->Close());
  Result again = RunCli(*cluster, {"rereplicate", absl::StrCat(open->id()), "--bookie", gone});
  EXPECT_EQ(again.code, 0) << again.err;
  EXPECT_THAT(again.out, HasSubstr(absl::StrCat("ledger ", open->id(), ": bookie ", gone,
                                                " replaced by ")));
  Result none = RunCli(*cluster, {"rereplicate", "--all", "--bookie", gone});
  EXPECT_EQ(none.code, 0) << none.err;
  EXPECT_THAT(none.out, HasSubstr("0 ledgers moved off bookie"));
  EXPECT_THAT(none.out, HasSubstr("0 still naming it"));
  // Done is done (a rerun after a lost reply); an unknown ledger is not.
  Result done = RunCli(*cluster, {"rereplicate", absl::StrCat(closed[0]), "--bookie", gone});
  EXPECT_EQ(done.code, 0) << done.err;
  EXPECT_THAT(done.out, HasSubstr("does not name bookie"));
  Result unknown = RunCli(*cluster, {"rereplicate", "99999", "--bookie", gone});
  EXPECT_EQ(unknown.code, 1);
  EXPECT_THAT(unknown.err, HasSubstr("NOT_FOUND"));
  // A bookie id the cluster never knew (a typo) is not "nothing to move":
  // exit 0 would say it may be retired.
  for (const std::vector<std::string>& typo :
       {std::vector<std::string>{"rereplicate", "--all", "--bookie", gone + "0"},
        std::vector<std::string>{"rereplicate", absl::StrCat(closed[0]), "--bookie", "nosuch:1"}}) {
    Result r = RunCli(*cluster, typo);
    EXPECT_EQ(r.code, 1) << typo[1] << ": " << r.out;
    EXPECT_THAT(r.err, HasSubstr("has no cookie or registration")) << typo[1];
  }
}

// A corrupt copy met on another bookie while moving a ledger off B is
// repaired there and printed under the ledger's line; the exit status still
// says only whether any ledger names B.
TEST(LedgerCli, RereplicatePrintsTheCorruptCopiesItRepaired) {
  LKV_ASSIGN_OR_FAIL(auto cluster, ledger::testing::TestCluster::Start({.bookies = 4}));
  LKV_ASSIGN_OR_FAIL(auto client, cluster->NewClient());
  // Qa = Qw: every copy stored before the ledger closes.
  LKV_ASSIGN_OR_FAIL(auto writer, client->CreateLedger(ledger::testing::Quorums(3, 3, 3)));
  for (int e = 0; e < 10; ++e) LKV_ASSERT_OK(writer->Append(ledger::testing::PayloadFor(e)));
  LKV_ASSERT_OK(writer->Close());
  const meta::v1::Segment segment = writer->metadata().segments(0);
  // Index 1's copy of entry 5 corrupt; index 0 gone. The copy reads from
  // index 1 first (LedgerRereplicationTest has the reasoning).
  const int holder = cluster->IndexOf(segment.bookies(1));
  cluster->StopBookie(holder);
  ASSERT_EQ(ledger::testing::CorruptJournal(cluster->data_dir(holder), "payload-5-"), 1);
  LKV_ASSERT_OK(cluster->RestartBookie(holder));
  const std::string gone = segment.bookies(0);
  cluster->StopBookie(cluster->IndexOf(gone));

  Result r = RunCli(*cluster, {"rereplicate", absl::StrCat(writer->id()), "--bookie", gone});
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr(absl::StrCat("ledger ", writer->id(), ": bookie ", gone,
                                            " replaced by ")));
  EXPECT_THAT(r.out, HasSubstr(absl::StrCat("  ledger ", writer->id(), ": bookie ",
                                            segment.bookies(1),
                                            " held a corrupt copy of entry 5: repaired")));
  EXPECT_EQ(r.err, "");
}

// A bookie re-provisioned under its id (disk replaced, cookie deleted):
// `refill --all` copies back onto it what every closed ledger recorded on
// its earlier instance, and the ledgers then read back from it alone; an
// open ledger is refused until it is closed; a rerun has nothing left; a
// bookie that is not registered is an error, not "done".
TEST(LedgerCli, RefillCopiesBackWhatAReprovisionedBookieLost) {
  LKV_ASSIGN_OR_FAIL(auto cluster, ledger::testing::TestCluster::Start({.bookies = 3}));
  LKV_ASSIGN_OR_FAIL(auto client, cluster->NewClient());
  std::vector<uint64_t> closed;
  for (int i = 0; i < 2; ++i) {
    LKV_ASSIGN_OR_FAIL(auto writer, client->CreateLedger(ledger::testing::Quorums(3, 3, 3)));
    for (int e = 0; e < 10; ++e) LKV_ASSERT_OK(writer->Append(absl::StrCat("entry ", e)));
    LKV_ASSERT_OK(writer->Close());
    closed.push_back(writer->id());
  }
  LKV_ASSIGN_OR_FAIL(auto open, client->CreateLedger(ledger::testing::Quorums(3, 3, 3)));
  LKV_ASSERT_OK(open->Append("e0"));
  const std::string bookie = cluster->bookie_id(0);
  LKV_ASSERT_OK(cluster->ReprovisionBookie(0));

  Result r = RunCli(*cluster, {"refill", "--all", "--bookie", bookie});
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  for (uint64_t id : closed) {
    EXPECT_THAT(r.out, HasSubstr(absl::StrCat("ledger ", id, ": bookie ", bookie,
                                              " refilled in 1 segment, 10 entries copied back")));
  }
  EXPECT_THAT(r.out, HasSubstr("2 ledgers refilled onto bookie"));
  EXPECT_THAT(r.err, HasSubstr(absl::StrCat("ledger ", open->id(), ": FAILED_PRECONDITION")));

  LKV_ASSERT_OK(open->Close());
  Result one = RunCli(*cluster, {"refill", absl::StrCat(open->id()), "--bookie", bookie});
  EXPECT_EQ(one.code, 0) << one.err;
  EXPECT_THAT(one.out, HasSubstr("1 entry copied back"));
  Result again = RunCli(*cluster, {"refill", "--all", "--bookie", bookie});
  EXPECT_EQ(again.code, 0) << again.err;
  EXPECT_THAT(again.out,
              HasSubstr("0 ledgers refilled onto bookie " + bookie +
                        ", 3 recording its current instance already, 0 failed"));
  Result done = RunCli(*cluster, {"refill", absl::StrCat(closed[0]), "--bookie", bookie});
  EXPECT_EQ(done.code, 0) << done.err;
  EXPECT_THAT(done.out, HasSubstr("nothing to refill"));
  // A ledger id given that does not name the bookie is a mistake, not done.
  LKV_ASSERT_OK(cluster->AddBookie());
  Result other =
      RunCli(*cluster, {"refill", absl::StrCat(closed[0]), "--bookie", cluster->bookie_id(3)});
  EXPECT_EQ(other.code, 1) << other.out;
  EXPECT_THAT(other.err, HasSubstr("does not name bookie"));
  Result typo = RunCli(*cluster, {"refill", "--all", "--bookie", "nosuch:1"});
  EXPECT_EQ(typo.code, 1);
  EXPECT_THAT(typo.err, HasSubstr("not registered"));

  cluster->StopBookie(1);
  cluster->StopBookie(2);
  LKV_ASSIGN_OR_FAIL(auto fresh, cluster->NewClient());
  for (uint64_t id : closed) {
    LKV_ASSIGN_OR_FAIL(auto reader, fresh->OpenLedger(id, ledger::OpenMode::kNoRecovery));
    LKV_ASSIGN_OR_FAIL(auto entries, reader->Read(0, 9));
    ASSERT_EQ(entries.size(), 10u);
    EXPECT_EQ(entries[9].payload, "entry 9");
  }
}

TEST(LedgerCli, BadArgumentsAreUsageErrors) {
  LKV_ASSIGN_OR_FAIL(auto cluster, ledger::testing::TestCluster::Start({.bookies = 1}));
  for (const std::vector<std::string>& bad :
       std::vector<std::vector<std::string>>{{},
                                             {"frobnicate"},
                                             {"show"},
                                             {"show", "abc"},
                                             {"show", "-1"},
                                             {"read", "1", "--from"},
                                             {"read", "1", "--from", "5", "--to", "2"},
                                             {"read", "1", "--follow", "--to", "2"},
                                             {"show", "1", "--follow"},
                                             {"delete", "1", "extra"},
                                             {"list", "1"},
                                             {"rereplicate", "1"},
                                             {"rereplicate", "--bookie", "b"},
                                             {"rereplicate", "1", "--all", "--bookie", "b"},
                                             {"rereplicate", "1", "--bookie"},
                                             {"rereplicate", "x", "--bookie", "b"}}) {
    Result r = RunCli(*cluster, bad);
    EXPECT_EQ(r.code, 2) << absl::StrJoin(bad, " ");
    EXPECT_THAT(r.err, HasSubstr("ledgerkv ledger: ")) << absl::StrJoin(bad, " ");
  }
  Result unknown = RunCli(*cluster, {"delete", "12345"});
  EXPECT_EQ(unknown.code, 1);
  EXPECT_THAT(unknown.err, HasSubstr("NOT_FOUND"));
}

// Runs `command` through the shell; stdout and stderr are returned apart.
Result Shell(const std::string& command, const std::string& err_path) {
  Result r;
  FILE* pipe = popen((command + " 2>" + err_path).c_str(), "r");
  if (pipe == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), pipe)) > 0) r.out.append(buf, n);
  const int status = pclose(pipe);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  if (FILE* f = fopen(err_path.c_str(), "r")) {
    while ((n = fread(buf, 1, sizeof(buf), f)) > 0) r.err.append(buf, n);
    fclose(f);
  }
  return r;
}

TEST(LedgerCliBinary, InspectsAndDeletesTheLedgersOfAStoppedStandalone) {
  ledgerkv::testing::TempDir dir;
  const std::string bin = ledgerkv::testing::BinaryPath("kv_server/ledgerkv");
  {
    constexpr char kReady[] = "ledgerkv standalone serving on ";
    LKV_ASSIGN_OR_FAIL(auto server, ledgerkv::testing::Process::Start(
                                        {bin, "standalone", "--data-dir", dir.path(), "--listen",
                                         "127.0.0.1:0"},
                                        kReady));
    const std::string address = server->ready_line().substr(std::string(kReady).size());
    auto kv = v1::KV::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
    for (int i = 0; i < 5; ++i) {
      grpc::ClientContext ctx;
      ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(20)));
      v1::PutRequest req;
      req.set_table("default");
      req.set_key(absl::StrCat("key", i));
      req.set_value(absl::StrCat("value", i));
      v1::PutResponse resp;
      grpc::Status s = kv->Put(&ctx, req, &resp);
      ASSERT_TRUE(s.ok()) << s.error_message() << "\n" << server->LogTail();
    }
    ASSERT_EQ(server->Terminate(), 0) << server->LogTail();
  }
  const std::string ledger_cmd =
      absl::StrCat(bin, " ledger --metadata embedded://", dir.path(), "/metadata ");
  const std::string err_path = dir.path() + "/cli.err";

  Result list = Shell(ledger_cmd + "list", err_path);
  ASSERT_EQ(list.code, 0) << list.err;
  std::vector<std::string> lines = absl::StrSplit(list.out, '\n', absl::SkipEmpty());
  ASSERT_GE(lines.size(), 2u) << list.out;  // header + at least one range log ledger
  EXPECT_THAT(lines[0], HasSubstr("LEDGER"));
  const std::string id = std::vector<std::string>(absl::StrSplit(lines.back(), ' '))[0];

  Result show = Shell(ledger_cmd + "show " + id, err_path);
  ASSERT_EQ(show.code, 0) << show.err;
  EXPECT_THAT(show.out, HasSubstr("ledger " + id + "\n  state: "));

  EXPECT_THAT(show.out, HasSubstr("standalone-bookie-0"));

  // The standalone's bookies stopped with it: read reports the bookie as down
  // (exit 1) instead of hanging or printing nothing. Reading entries from
  // live bookies is covered in-process above.
  Result read = Shell(ledger_cmd + "read " + id, err_path);
  EXPECT_EQ(read.code, 1) << read.out;
  EXPECT_THAT(read.err, HasSubstr("ledgerkv ledger: UNAVAILABLE"));
  EXPECT_THAT(read.err, HasSubstr("not registered"));

  // The range's log still names it: refused, kept.
  Result refused = Shell(ledger_cmd + "delete " + id, err_path);
  EXPECT_EQ(refused.code, 1) << refused.out;
  EXPECT_THAT(refused.err, HasSubstr("still names ledger " + id));
  Result del = Shell(ledger_cmd + "delete " + id + " --force", err_path);
  ASSERT_EQ(del.code, 0) << del.err;
  Result gone = Shell(ledger_cmd + "show " + id, err_path);
  EXPECT_EQ(gone.code, 1) << gone.out;
  EXPECT_THAT(gone.err, HasSubstr("ledgerkv ledger: NOT_FOUND"));

  Result bad = Shell(ledger_cmd + "show not-a-number", err_path);
  EXPECT_EQ(bad.code, 2);
  EXPECT_THAT(bad.err, HasSubstr("bad ledger id"));
  // A mistyped embedded store directory is an error, not a new empty store.
  const std::string typo = dir.path() + "/metadta";
  Result missing = Shell(absl::StrCat(bin, " ledger --metadata embedded://", typo, " list"), err_path);
  EXPECT_EQ(missing.code, 1) << missing.out;
  EXPECT_THAT(missing.err, HasSubstr("NOT_FOUND"));
  EXPECT_FALSE(std::filesystem::exists(typo)) << "the typo became a store";
  Result no_uri = Shell(bin + " ledger list", err_path);
  EXPECT_EQ(no_uri.code, 2);
  EXPECT_THAT(no_uri.err, HasSubstr("--metadata is required"));
}

}  // namespace
}  // namespace ledgerkv::kv
