// Durability of `ledgerkv standalone` through its process boundary:
// snapshots bound the log (it is truncated once snapshots cover it) and a
// restart keeps the data; with three bookies (E = Qw = Qa = 3) every
// acknowledged write survives kill -9 of the whole process, and each restart
// fences the previous owner with a higher log epoch.
#include <iostream>
#include <map>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "gtest/gtest-spi.h"
#include "gtest/gtest.h"
#include "base/small_tmpfs.h"
#include "tests/kv_crash_workload.h"
#include "tests/kv_process_util.h"

namespace ledgerkv {
namespace {

namespace v1 = ::ledgerkv::v1;
using testing::CrashWorkload;
using testing::StandaloneFlags;
using testing::StandaloneServer;
using testing::TempDir;

absl::StatusOr<v1::RangeInfo> OnlyRange(StandaloneServer& server, const std::string& table) {
  auto d = testing::DescribeTable(server.admin(), table);
  if (!d.ok()) return d.status();
  if (d->ranges_size() != 1) {
    return absl::InternalError(absl::StrCat("expected one range: ", d->ShortDebugString()));
  }
  return d->ranges(0);
}

grpc::Status Put(StandaloneServer& server, const std::string& table, const std::string& key,
                 const std::string& value, v1::PutResponse* resp) {
  v1::PutRequest req;
  req.set_table(table);
  req.set_key(key);
  req.set_value(value);
  grpc::ClientContext ctx;
  testing::SetDeadline(&ctx);
  return server.kv().Put(&ctx, req, resp);
}

TEST(KvDurabilityProcessTest, SnapshotsTruncateTheLogAndRestartKeepsEveryKey) {
  TempDir dir;
  StandaloneServer server(dir.path() + "/data");
  StandaloneFlags flags;
  flags.snapshot_log_mb = 1;
  ASSERT_TRUE(server.Start(flags).ok()) << server.LogTail();
  ASSERT_TRUE(testing::CreateTable(server.admin(), "snap").ok());

  // A few keys overwritten many times: about 5 MiB of log per phase for
  // 128 KiB of live data, so only snapshots plus truncation keep the log
  // bounded.
  constexpr int kKeys = 4;
  constexpr int kRoundsPerPhase = 40;
  std::map<std::string, std::string> want;
  int64_t last_revision = 0;
  int rounds = 0;
  auto write_rounds = [&](int n) {
    for (int end = rounds + n; rounds < end; ++rounds) {
      for (int k = 0; k < kKeys; ++k) {
        std::string key = absl::StrCat("key", k);
        std::string value = absl::StrFormat("r%03d-%s", rounds, std::string(32 << 10, 'a' + k));
        v1::PutResponse resp;
        grpc::Status s = Put(server, "snap", key, value, &resp);
        ASSERT_TRUE(s.ok()) << s.error_message() << server.LogTail();
        EXPECT_GT(resp.header().revision(), last_revision);
        last_revision = resp.header().revision();
        want[key] = value;
      }
    }
  };
  auto live_bytes = [&] {
    int64_t n = 0;
    for (const auto& [k, v] : want) n += static_cast<int64_t>(k.size() + v.size());
    return n;
  };
  // Waits (snapshots are taken in the background) until `done` holds.
  auto wait_for = [&](auto done) {
    v1::RangeInfo info;
    for (absl::Time end = absl::Now() + absl::Seconds(30); absl::Now() < end;
         absl::SleepFor(absl::Milliseconds(100))) {
      auto got = OnlyRange(server, "snap");
      EXPECT_TRUE(got.ok()) << got.status();
      if (!got.ok()) break;
      info = *got;
      if (done(info)) break;
    }
    return info;
  };
  // Data, counters and log position after a restart.
  auto expect_intact = [&](const v1::RangeInfo& before) {
    auto scan = testing::ScanAll(server.kv(), "snap");
    ASSERT_TRUE(scan.ok()) << scan.status();
    ASSERT_EQ(scan->kvs.size(), want.size());
    for (const auto& kv : scan->kvs) {
      EXPECT_EQ(kv.value(), want[kv.key()]) << testing::KvString(kv);
      EXPECT_EQ(kv.version(), rounds) << testing::KvString(kv);
    }
    EXPECT_EQ(scan->revision, last_revision);
    auto after = OnlyRange(server, "snap");
    ASSERT_TRUE(after.ok()) << after.status();
    EXPECT_EQ(after->revision(), last_revision);
    EXPECT_EQ(after->key_count(), kKeys);
    EXPECT_EQ(after->bytes(), live_bytes());
    EXPECT_GE(after->snapshot_seqno(), before.snapshot_seqno()) << after->ShortDebugString();
    EXPECT_GE(after->log_first_seqno(), before.log_first_seqno()) << after->ShortDebugString();
    EXPECT_GT(after->epoch(), before.epoch()) << "a restart raises the log epoch";
  };

  ASSERT_NO_FATAL_FAILURE(write_rounds(kRoundsPerPhase));
  v1::RangeInfo a = wait_for([](const v1::RangeInfo& i) { return i.snapshot_seqno() > 0; });
  EXPECT_GT(a.snapshot_seqno(), 0u) << a.ShortDebugString();
  EXPECT_EQ(a.revision(), last_revision);
  EXPECT_EQ(a.key_count(), kKeys);
  EXPECT_EQ(a.bytes(), live_bytes());
  std::cout << "after ~5 MiB in one run: " << a.ShortDebugString() << "\n";

  // A restart starts a new ledger of the log; snapshots taken after it let
  // the log drop the old one.
  ASSERT_EQ(server.Terminate(), 0) << server.LogTail();
  ASSERT_TRUE(server.Start(flags).ok()) << server.LogTail();
  ASSERT_NO_FATAL_FAILURE(expect_intact(a));
  ASSERT_NO_FATAL_FAILURE(write_rounds(kRoundsPerPhase));
  v1::RangeInfo b = wait_for([](const v1::RangeInfo& i) { return i.log_first_seqno() > 1; });
  std::cout << "after a restart and ~5 MiB more: " << b.ShortDebugString() << "\n";
  EXPECT_GT(b.snapshot_seqno(), a.snapshot_seqno()) << b.ShortDebugString();
  EXPECT_GT(b.log_first_seqno(), 1u) << "log not truncated: " << b.ShortDebugString();
  EXPECT_LE(b.log_first_seqno(), b.snapshot_seqno() + 1)
      << "the log must still reach back to the oldest retained snapshot: " << b.ShortDebugString();

  ASSERT_EQ(server.Terminate(), 0) << server.LogTail();
  ASSERT_TRUE(server.Start(flags).ok()) << server.LogTail();
  ASSERT_NO_FATAL_FAILURE(expect_intact(b));

  // Writing goes on from where it was.
  v1::PutResponse resp;
  ASSERT_TRUE(Put(server, "snap", "key0", "after", &resp).ok());
  EXPECT_EQ(resp.header().revision(), last_revision + 1);
  EXPECT_EQ(server.Terminate(), 0);
}

// docs/range-server.md: "the log is truncated below the oldest retained
// snapshot's seqno + 1", so the log holds about the records since the older
// of the K=2 snapshots. Truncation drops whole ledgers, so this holds only if
// the log's ledgers roll at about the snapshot threshold; with the default
// 64 MiB roll, a busy range that never restarts keeps up to 64 MiB of log
// whatever --snapshot-log-mb says.
TEST(KvDurabilityProcessTest, SnapshotsTruncateTheLogWithoutARestart) {
  TempDir dir;
  StandaloneServer server(dir.path() + "/data");
  StandaloneFlags flags;
  flags.snapshot_log_mb = 1;
  ASSERT_TRUE(server.Start(flags).ok()) << server.LogTail();
  ASSERT_TRUE(testing::CreateTable(server.admin(), "snap").ok());
  // 8 MiB of overwrites of four keys: eight times the snapshot threshold.
  for (int round = 0; round < 64; ++round) {
    for (int k = 0; k < 4; ++k) {
      v1::PutResponse resp;
      grpc::Status s =
          Put(server, "snap", absl::StrCat("key", k),
              absl::StrFormat("r%03d-%s", round, std::string(32 << 10, 'a' + k)), &resp);
      ASSERT_TRUE(s.ok()) << s.error_message() << server.LogTail();
    }
  }
  v1::RangeInfo info;
  for (absl::Time end = absl::Now() + absl::Seconds(10); absl::Now() < end;
       absl::SleepFor(absl::Milliseconds(100))) {
    auto got = OnlyRange(server, "snap");
    ASSERT_TRUE(got.ok()) << got.status();
    info = *got;
    if (info.log_first_seqno() > 1) break;
  }
  EXPECT_GT(info.snapshot_seqno(), 0u) << info.ShortDebugString();
  EXPECT_GT(info.log_first_seqno(), 1u)
      << "8 MiB of log with --snapshot-log-mb 1 and nothing truncated (does the log's ledger "
         "roll only at LogOptions::roll_bytes = 64 MiB?): "
      << info.ShortDebugString();
  EXPECT_EQ(server.Terminate(), 0);
}

TEST(KvDurabilityProcessTest, ThreeBookiesEveryAcknowledgedWriteSurvivesKill9) {
  TempDir dir;
  StandaloneServer server(dir.path() + "/data");
  StandaloneFlags flags;
  flags.bookies = 3;
  ASSERT_TRUE(server.Start(flags).ok()) << server.LogTail();
  ASSERT_TRUE(testing::CreateTable(server.admin(), "acks").ok());

  CrashWorkload first("acks", "a/", /*threads_per_kind=*/2);
  std::map<std::string, v1::KeyValue> first_outcome;
  uint64_t epoch = 0;
  for (int round = 0; round < 2; ++round) {
    SCOPED_TRACE(absl::StrCat("round ", round));
    auto info = OnlyRange(server, "acks");
    ASSERT_TRUE(info.ok()) << info.status();
    EXPECT_GT(info->epoch(), epoch) << "each restart raises the log epoch";
    epoch = info->epoch();

    CrashWorkload second("acks", "b/", /*threads_per_kind=*/2);
    CrashWorkload& workload = round == 0 ? first : second;
    workload.Start(server.channel());
    absl::Status acked = workload.WaitForAcks(20, absl::Seconds(60));
    ASSERT_TRUE(acked.ok()) << "before the kill: " << acked << "\n" << server.LogTail();
    server.Kill();
    workload.StopAndJoin();
    EXPECT_GT(workload.InFlight(), 0) << "the kill was meant to catch writes in flight";
    ASSERT_TRUE(server.Start(flags).ok()) << server.LogTail();

    auto scan = testing::ScanAll(server.kv(), "acks");
    ASSERT_TRUE(scan.ok()) << scan.status();
    auto state = testing::ToMap(scan->kvs);
    workload.Verify(state, scan->revision);
    std::map<std::string, v1::KeyValue> outcome(state.lower_bound("a/"), state.lower_bound("a0"));
    if (round == 0) {
      first_outcome = outcome;
    } else {
      // The first round's outcome, in-flight writes included, stays decided.
      ASSERT_EQ(outcome.size(), first_outcome.size());
      for (const auto& [key, kv] : first_outcome) {
        EXPECT_EQ(testing::KvString(outcome[key]), testing::KvString(kv));
      }
    }
  }
  EXPECT_EQ(server.Terminate(), 0);
}

// SIGTERM while writers are busy: the server finishes or refuses what is in
// flight, exits 0, and after a restart every acknowledged write is there,
// exactly as the live server showed it before.
TEST(KvDurabilityProcessTest, SigtermWithWritesInFlightExitsZeroAndKeepsAcknowledgedWrites) {
  TempDir dir;
  StandaloneServer server(dir.path() + "/data");
  ASSERT_TRUE(server.Start().ok()) << server.LogTail();
  ASSERT_TRUE(testing::CreateTable(server.admin(), "term").ok());
  // First the live state of a finished workload...
  CrashWorkload first("term", "a/", /*threads_per_kind=*/2);
  first.Start(server.channel());
  absl::Status first_acked = first.WaitForAcks(15, absl::Seconds(60));
  ASSERT_TRUE(first_acked.ok()) << first_acked << "\n" << server.LogTail();
  first.StopAndJoin();
  auto live = testing::ScanAll(server.kv(), "term");
  ASSERT_TRUE(live.ok()) << live.status();
  {
    SCOPED_TRACE("live, before any restart");
    first.Verify(testing::ToMap(live->kvs), live->revision);
  }
  // ... then SIGTERM in the middle of a second one.
  CrashWorkload second("term", "b/", /*threads_per_kind=*/2);
  second.Start(server.channel());
  absl::Status acked = second.WaitForAcks(15, absl::Seconds(60));
  ASSERT_TRUE(acked.ok()) << "before SIGTERM: " << acked << "\n" << server.LogTail();
  EXPECT_EQ(server.Terminate(absl::Seconds(30)), 0) << server.LogTail();
  second.StopAndJoin();
  ASSERT_TRUE(server.Start().ok()) << server.LogTail();
  auto scan = testing::ScanAll(server.kv(), "term");
  ASSERT_TRUE(scan.ok()) << scan.status();
  auto state = testing::ToMap(scan->kvs);
  SCOPED_TRACE("after SIGTERM and restart");
  second.Verify(state, scan->revision);
  for (const auto& kv : live->kvs) {
    EXPECT_EQ(testing::KvString(state[kv.key()]), testing::KvString(kv)) << "changed by a restart";
  }
  EXPECT_EQ(server.Terminate(), 0);
}

// SIGTERM does not wait for connected but idle clients to hang up: the
// server closes their connections once its calls are done (kv/listen.h,
// StopServing). Before, a client holding an idle channel (as this test
// does) kept it up ~4.5 s, until gRPC's 5 s backup poll noticed the GOAWAY.
TEST(KvDurabilityProcessTest, SigtermWithAnIdleClientConnectedStopsPromptly) {
  TempDir dir;
  StandaloneServer server(dir.path() + "/data");
  ASSERT_TRUE(server.Start().ok()) << server.LogTail();
  ASSERT_TRUE(testing::CreateTable(server.admin(), "idle").ok());
  v1::PutResponse resp;
  ASSERT_TRUE(Put(server, "idle", "k", "v", &resp).ok());  // the channel is up
  const absl::Time start = absl::Now();
  EXPECT_EQ(server.Terminate(), 0) << server.LogTail();
  // Far below the 10 s shutdown grace an idle connection used to hold it
  // for, with room for a sanitizer build under ctest -j2.
  EXPECT_LT(absl::Now() - start, absl::Seconds(6)) << "(the shutdown grace is 10 s)";
  ASSERT_TRUE(server.Start().ok()) << server.LogTail();
  v1::GetRequest req;
  req.set_table("idle");
  req.set_key("k");
  v1::GetResponse got;
  grpc::ClientContext ctx;
  testing::SetDeadline(&ctx);
  ASSERT_TRUE(server.kv().Get(&ctx, req, &got).ok());
  EXPECT_TRUE(got.found());
  EXPECT_EQ(got.kv().value(), "v");
  EXPECT_EQ(server.Terminate(), 0);
}

// A full disk under `ledgerkv standalone`: the bookie's disk watermark
// (95% by default) stops puts with an error (never a false OK); once space
// is freed puts succeed again without a restart (the
// bookie takes adds again below 90% and the range reopens by itself);
// SIGTERM exits 0 and a restart has every acknowledged write. (The abort
// that RocksDB's LOG file caused on a full disk is pinned by the bookie and
// metadata-store tests.)
TEST(KvDurabilityProcessTest, FullDiskFailsPutsKeepsGetsAndTakesPutsAgainOnceSpaceIsFreed) {
  TempDir dir;
  SmallTmpfs fs;
  if (absl::Status m = fs.Mount(dir.path(), 256); !m.ok()) {
    GTEST_SKIP() << m << " (needs CAP_SYS_ADMIN, as root in CI)";
  }
  StandaloneServer server(dir.path() + "/data");
  ASSERT_TRUE(server.Start().ok()) << server.LogTail();
  ASSERT_TRUE(testing::CreateTable(server.admin(), "full").ok());
  std::map<std::string, std::string> acked;
  auto put = [&](int i) {
    const std::string key = absl::StrFormat("k%06d", i);
    const std::string value = absl::StrCat(i, ":", std::string(16 << 10, 'v'));
    v1::PutResponse resp;
    grpc::Status st = Put(server, "full", key, value, &resp);
    if (st.ok()) acked[key] = value;
    return st;
  };
  auto expect_every_acked_put = [&] {
    for (const auto& [key, value] : acked) {
      v1::GetRequest req;
      req.set_table("full");
      req.set_key(key);
      v1::GetResponse resp;
      grpc::Status st;
      // A read is refused (retry-safe) only while the range reopens: if
      // the bookie's read-only registration lags the failure, one attempt
      // may open a new log and reopen the range, briefly. Reads never wait
      // for the disk (RangeHostReopenTest shows there is no gap at all
      // while the log cannot be opened).
      for (int attempt = 0; attempt < 50; ++attempt) {
        grpc::ClientContext ctx;
        testing::SetDeadline(&ctx);
        st = server.kv().Get(&ctx, req, &resp);
        if (st.error_code() != grpc::StatusCode::UNAVAILABLE) break;
        absl::SleepFor(absl::Milliseconds(20));
      }
      ASSERT_TRUE(st.ok()) << key << ": " << st.error_message() << "\n" << server.LogTail();
      ASSERT_TRUE(resp.found()) << "acknowledged " << key << " is lost";
      ASSERT_EQ(resp.kv().value(), value) << key;
    }
  };
  int i = 0;
  for (; i < 50; ++i) ASSERT_TRUE(put(i).ok());
  fs.WaitForQuiet();  // the journal filler is done
  if (absl::Status f = fs.FillLeaving(20 << 20); !f.ok()) FAIL() << f;
  grpc::Status failed;
  for (; i < 20000 && failed.ok(); ++i) failed = put(i);
  ASSERT_FALSE(failed.ok()) << "the disk never filled up";
  std::cerr << "first failed put: code " << failed.error_code() << ": " << failed.error_message()
            << "\n";
  EXPECT_EQ(failed.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_FALSE(failed.error_message().empty());
  // Reads go on while the disk is full: the range's local state holds every
  // acknowledged put, and it keeps answering until its log can be opened
  // again (docs/range-server.md, "Reads while the log cannot be written"),
  // across the host's reopen attempts.
  ASSERT_NO_FATAL_FAILURE(expect_every_acked_put());
  absl::SleepFor(absl::Seconds(2));
  ASSERT_NO_FATAL_FAILURE(expect_every_acked_put());
  {
    // The put that failed: its add was refused READ_ONLY by the only
    // bookie (E = Qw = Qa = 1), so it is in no log and never appears.
    const std::string key = absl::StrFormat("k%06d", i - 1);
    v1::GetRequest req;
    req.set_table("full");
    req.set_key(key);
    v1::GetResponse resp;
    grpc::ClientContext ctx;
    testing::SetDeadline(&ctx);
    ASSERT_TRUE(server.kv().Get(&ctx, req, &resp).ok());
    EXPECT_FALSE(resp.found()) << "the put that failed is visible: " << key;
  }
  grpc::Status still = put(i);
  ASSERT_FALSE(still.ok()) << "the disk had room again before the reads were checked";
  EXPECT_EQ(still.error_code(), grpc::StatusCode::UNAVAILABLE) << still.error_message();
  {
    // Operators see why: DescribeTable names the refusal.
    auto info = OnlyRange(server, "full");
    ASSERT_TRUE(info.ok()) << info.status();
    EXPECT_TRUE(absl::StrContains(info->writes_refused(), "log failed")) << info->ShortDebugString();
  }

  // A restart while the disk is still full: the range cannot open a log
  // writer, so it opens for reads (Range::OpenForReads) and answers them.
  // (A clean stop frees some space, the journal's zero-filled tail: the
  // disk is topped up again first, to 10 MiB free of 256, ~96% used: over
  // the 95% watermark, with room for the RocksDB files a start creates.)
  EXPECT_EQ(server.Terminate(), 0) << server.LogTail();
  ASSERT_TRUE(fs.TopUpLeaving(10 << 20).ok());
  ASSERT_TRUE(server.Start().ok()) << server.LogTail();
  ASSERT_NO_FATAL_FAILURE(expect_every_acked_put());
  still = put(i);
  ASSERT_FALSE(still.ok()) << "the disk had room again after the restart";
  EXPECT_EQ(still.error_code(), grpc::StatusCode::UNAVAILABLE) << still.error_message();

  // Space freed: puts succeed again, with no restart (the range reopens
  // with backoff, at most 5 s apart; the bookie checks every second).
  ASSERT_TRUE(fs.Free().ok());
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  grpc::Status again = put(i);
  while (!again.ok() && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(200));
    again = put(i);
  }
  ASSERT_TRUE(again.ok()) << "puts still fail 60 s after space was freed: "
                          << again.error_message() << "\n"
                          << server.LogTail();
  for (int more = i + 1; more < i + 20; ++more) ASSERT_TRUE(put(more).ok()) << more;
  {
    auto info = OnlyRange(server, "full");
    ASSERT_TRUE(info.ok()) << info.status();
    EXPECT_EQ(info->writes_refused(), "") << info->ShortDebugString();
  }
  ASSERT_NO_FATAL_FAILURE(expect_every_acked_put());
  EXPECT_EQ(server.Terminate(), 0) << server.LogTail();

  ASSERT_TRUE(server.Start().ok()) << server.LogTail();
  ASSERT_NO_FATAL_FAILURE(expect_every_acked_put());
  v1::PutResponse resp;
  EXPECT_TRUE(Put(server, "full", "after", "a", &resp).ok());
  EXPECT_EQ(server.Terminate(), 0) << server.LogTail();
}

// Range ids are never reused: a table dropped and created again under the
// same name starts empty and never meets the old one's log or snapshots,
// across clean restarts and kill -9.
TEST(KvDurabilityProcessTest, RecreatedTableNeverSeesTheDroppedOnesData) {
  TempDir dir;
  StandaloneServer server(dir.path() + "/data");
  StandaloneFlags flags;
  flags.snapshot_log_mb = 1;
  ASSERT_TRUE(server.Start(flags).ok()) << server.LogTail();
  ASSERT_TRUE(testing::CreateTable(server.admin(), "t").ok());
  for (int i = 0; i < 40; ++i) {
    v1::PutResponse resp;
    ASSERT_TRUE(
        Put(server, "t", absl::StrCat("old", i % 5), std::string(32 << 10, 'o'), &resp).ok());
  }
  auto old_info = OnlyRange(server, "t");
  ASSERT_TRUE(old_info.ok()) << old_info.status();
  {
    v1::DropTableRequest req;
    req.set_name("t");
    v1::DropTableResponse resp;
    grpc::ClientContext ctx;
    testing::SetDeadline(&ctx, absl::Seconds(30));
    grpc::Status s = server.admin().DropTable(&ctx, req, &resp);
    ASSERT_TRUE(s.ok()) << s.error_message();
  }
  ASSERT_TRUE(testing::CreateTable(server.admin(), "t").ok());
  auto new_info = OnlyRange(server, "t");
  ASSERT_TRUE(new_info.ok()) << new_info.status();
  EXPECT_NE(new_info->range_id(), old_info->range_id()) << "a range id was reused";
  auto expect_only_new = [&](const std::string& when, int64_t want_keys) {
    SCOPED_TRACE(when);
    auto scan = testing::ScanAll(server.kv(), "t");
    ASSERT_TRUE(scan.ok()) << scan.status();
    EXPECT_EQ(static_cast<int64_t>(scan->kvs.size()), want_keys);
    for (const auto& kv : scan->kvs)
      EXPECT_EQ(kv.key().rfind("new", 0), 0u) << testing::KvString(kv);
  };
  ASSERT_NO_FATAL_FAILURE(expect_only_new("after re-creation", 0));
  v1::PutResponse resp;
  ASSERT_TRUE(Put(server, "t", "new0", "v", &resp).ok());
  EXPECT_EQ(resp.prev_kv().key(), "");
  ASSERT_EQ(server.Terminate(), 0) << server.LogTail();
  ASSERT_TRUE(server.Start(flags).ok()) << server.LogTail();
  ASSERT_NO_FATAL_FAILURE(expect_only_new("after a clean restart", 1));
  ASSERT_TRUE(Put(server, "t", "new1", "v", &resp).ok());
  server.Kill();
  ASSERT_TRUE(server.Start(flags).ok()) << server.LogTail();
  ASSERT_NO_FATAL_FAILURE(expect_only_new("after kill -9", 2));
  EXPECT_EQ(server.Terminate(), 0);
}

// The crash checker itself: on the state of a clean run it reports
// nothing, and it reports a lost acknowledged increment and half a txn.
TEST(KvDurabilityProcessTest, CrashCheckerFlagsLostAndHalfAppliedWrites) {
  TempDir dir;
  StandaloneServer server(dir.path() + "/data");
  ASSERT_TRUE(server.Start().ok()) << server.LogTail();
  ASSERT_TRUE(testing::CreateTable(server.admin(), "check").ok());
  CrashWorkload workload("check", "c/", /*threads_per_kind=*/1);
  workload.Start(server.channel());
  absl::Status acked = workload.WaitForAcks(5, absl::Seconds(60));
  ASSERT_TRUE(acked.ok()) << acked << "\n" << server.LogTail();
  workload.StopAndJoin();  // no kill: every write acknowledged
  for (const absl::Status& e : workload.Errors()) ADD_FAILURE() << "writer error: " << e;
  ASSERT_EQ(workload.InFlight(), 0);
  auto scan = testing::ScanAll(server.kv(), "check");
  ASSERT_TRUE(scan.ok()) << scan.status();
  auto state = testing::ToMap(scan->kvs);
  workload.Verify(state, scan->revision);
  ASSERT_FALSE(::testing::Test::HasFailure());

  auto lost = state;
  ASSERT_EQ(lost.erase("c/inc-0/ctr"), 1u);
  EXPECT_NONFATAL_FAILURE(workload.Verify(lost, scan->revision), "counter 0");
  auto half = state;
  ASSERT_EQ(half.count("c/txn-0/b"), 1u);
  half["c/txn-0/b"].set_value("tok-0");
  EXPECT_NONFATAL_FAILURE(workload.Verify(half, scan->revision), "half a txn");
  EXPECT_EQ(server.Terminate(), 0);
}

}  // namespace
}  // namespace ledgerkv
