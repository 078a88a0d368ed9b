// The auditor (auditor.h) against real bookies: a bookie unregistered past
// its grace period has every CLOSED ledger's copies moved off it, with no
// operator; one back within the grace, or one only an open ledger names,
// is left alone.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "gtest/gtest.h"
#include "ledger/auditor.h"
#include "ledger/entry_format.h"
#include "ledger/ledger_test_util.h"
#include "proto/metadata.pb.h"

namespace ledgerkv::ledger {
namespace {

using testing::AppendRange;
using testing::ExpectReadable;
using testing::Quorums;
using testing::TestCluster;

constexpr absl::Duration kGrace = absl::Minutes(5);

bool NamesBookie(const meta::v1::LedgerMetadata& md, const std::string& bookie) {
  for (const auto& segment : md.segments()) {
    for (const std::string& b : segment.bookies()) {
      if (b == bookie) return true;
    }
  }
  return false;
}

const auto kAlways = [] { return true; };

// A CLOSED ledger of 20 entries (E3 Qw3, Qa2 unless given) on bookies 0,
// 1 and 2 of a four-bookie cluster: bookie 3, a spare, is stopped
// meanwhile and back up when it returns.
absl::StatusOr<uint64_t> ClosedLedgerOnFirstThree(TestCluster& cluster, LedgerClient& client,
                                                  int ack_quorum = 2) {
  cluster.StopBookie(3);
  ASSIGN_OR_RETURN(auto writer, client.CreateLedger(Quorums(3, 3, ack_quorum)));
  for (auto& r : AppendRange(*writer, 0, 19, 4)) RETURN_IF_ERROR(r.status());
  RETURN_IF_ERROR(writer->Close());
  RETURN_IF_ERROR(cluster.RestartBookie(3));
  return writer->id();
}

// A lost bookie's closed ledgers are re-replicated once its grace has
// passed, not before; an open ledger naming it is left to its writer; the
// moved ledger reads back whole with another of its bookies down too (so
// the replacement holds every copy it is named for).
TEST(AuditorTest, ALostBookiesClosedLedgersAreReplicatedOnceItsGraceHasPassed) {
  LKV_ASSIGN_OR_FAIL(auto cluster, TestCluster::Start({.bookies = 4}));
  LKV_ASSIGN_OR_FAIL(auto client, cluster->NewClient());
  // Every ledger on the same three bookies: the fourth is down meanwhile.
  cluster->StopBookie(3);
  LKV_ASSIGN_OR_FAIL(auto closed_writer, client->CreateLedger(Quorums(3, 2, 2)));
  for (const auto& r : AppendRange(*closed_writer, 0, 99, 16)) LKV_ASSERT_OK(r);
  LKV_ASSERT_OK(closed_writer->Close());
  const uint64_t closed = closed_writer->id();
  LKV_ASSIGN_OR_FAIL(auto open_writer, client->CreateLedger(Quorums(3, 2, 2)));
  for (const auto& r : AppendRange(*open_writer, 0, 9, 4)) LKV_ASSERT_OK(r);
  LKV_ASSERT_OK(cluster->RestartBookie(3));
  const std::string lost = cluster->bookie_id(0);
  cluster->StopBookie(0);

  Auditor auditor({.client = client.get(), .store = cluster->store(), .grace = kGrace});
  const absl::Time t0 = absl::Now();
  LKV_ASSIGN_OR_FAIL(auto first, auditor.Pass(t0, kAlways));
  EXPECT_EQ(first.missing, std::vector<std::string>{lost});
  EXPECT_TRUE(first.lost.empty());
  LKV_ASSIGN_OR_FAIL(auto early, auditor.Pass(t0 + kGrace - absl::Seconds(1), kAlways));
  EXPECT_TRUE(early.lost.empty());
  EXPECT_EQ(early.ledgers_replaced, 0);
  LKV_ASSIGN_OR_FAIL(const auto untouched, client->GetLedgerMetadata(closed));
  EXPECT_TRUE(NamesBookie(untouched, lost));

  // Told to stop (deposed, shutting down): nothing is copied or named.
  LKV_ASSIGN_OR_FAIL(auto stopped, auditor.Pass(t0 + kGrace, [] { return false; }));
  EXPECT_EQ(stopped.lost, std::vector<std::string>{lost});
  EXPECT_EQ(stopped.ledgers_replaced, 0);
  EXPECT_EQ(testing::BookieInfo(cluster->address(3)).entries_added(), 0u);
  LKV_ASSIGN_OR_FAIL(auto due, auditor.Pass(t0 + kGrace, kAlways));
  EXPECT_EQ(due.lost, std::vector<std::string>{lost});
  EXPECT_EQ(due.ledgers_replaced, 1) << absl::StrJoin(due.lines, "\n");
  EXPECT_EQ(due.ledgers_not_closed, 1);  // the open ledger: its writer's job
  EXPECT_EQ(due.ledgers_failed, 0) << absl::StrJoin(due.lines, "\n");
  LKV_ASSIGN_OR_FAIL(const auto moved, client->GetLedgerMetadata(closed));
  EXPECT_FALSE(NamesBookie(moved, lost)) << moved.ShortDebugString();
  EXPECT_TRUE(NamesBookie(moved, cluster->bookie_id(3))) << moved.ShortDebugString();
  LKV_ASSIGN_OR_FAIL(const auto still_open, client->GetLedgerMetadata(open_writer->id()));
  EXPECT_TRUE(NamesBookie(still_open, lost));

  // Entries of write set {0, 1} now live on the replacement alone.
  cluster->StopBookie(1);
  LKV_ASSIGN_OR_FAIL(auto fresh, cluster->NewClient());
  LKV_ASSIGN_OR_FAIL(auto reader, fresh->OpenLedger(closed, OpenMode::kNoRecovery));
  ExpectReadable(*reader, 0, 99);

  // The next pass has nothing left to do for the closed ledger.
  LKV_ASSIGN_OR_FAIL(auto again, auditor.Pass(t0 + 2 * kGrace, kAlways));
  EXPECT_EQ(again.ledgers_replaced, 0);
}

// A corrupt copy the auditor's move meets on a bookie that stays in the
// ensemble is repaired there, counted and logged.
TEST(AuditorTest, ACorruptCopyMetWhileMovingALedgerIsRepairedCountedAndLogged) {
  LKV_ASSIGN_OR_FAIL(auto cluster, TestCluster::Start({.bookies = 4}));
  LKV_ASSIGN_OR_FAIL(auto client, cluster->NewClient());
  // Qa = Qw: every copy stored before the ledger closes.
  LKV_ASSIGN_OR_FAIL(const uint64_t id, ClosedLedgerOnFirstThree(*cluster, *client, 3));
  LKV_ASSIGN_OR_FAIL(const auto md, client->GetLedgerMetadata(id));
  // Index 1's copy of entry 7 corrupt, index 0 lost: the copy reads from
  // index 1 first (LedgerRereplicationTest has the reasoning).
  const int holder = cluster->IndexOf(md.segments(0).bookies(1));
  cluster->StopBookie(holder);
  ASSERT_EQ(testing::CorruptJournal(cluster->data_dir(holder), "payload-7-"), 1);
  LKV_ASSERT_OK(cluster->RestartBookie(holder));
  cluster->StopBookie(cluster->IndexOf(md.segments(0).bookies(0)));

  Auditor auditor({.client = client.get(), .store = cluster->store(), .grace = kGrace});
  const absl::Time t0 = absl::Now();
  LKV_ASSERT_OK(auditor.Pass(t0, kAlways).status());
  LKV_ASSIGN_OR_FAIL(auto due, auditor.Pass(t0 + kGrace, kAlways));
  EXPECT_EQ(due.ledgers_replaced, 1) << absl::StrJoin(due.lines, "\n");
  EXPECT_EQ(due.corrupt_copies_repaired, 1) << absl::StrJoin(due.lines, "\n");
  EXPECT_EQ(due.corrupt_copies_unrepaired, 0);
  const std::string logged = absl::StrJoin(due.lines, "\n");
  EXPECT_NE(logged.find(absl::StrCat("bookie ", md.segments(0).bookies(1),
                                     " held a corrupt copy of entry 7: repaired")),
            std::string::npos)
      << logged;
}

// A lost bookie's ledger that cannot be moved (no bookie is left to take
// its copies) is counted as failed at every pass, and logged once rather
// than at every pass: an operator reads one line per stuck ledger, not one
// per ledger every few minutes.
TEST(AuditorTest, AnUnreplaceableLedgerIsCountedAtEveryPassButLoggedOnce) {
  LKV_ASSIGN_OR_FAIL(auto cluster, TestCluster::Start({.bookies = 3}));
  LKV_ASSIGN_OR_FAIL(auto client, cluster->NewClient());
  LKV_ASSIGN_OR_FAIL(auto writer, client->CreateLedger(Quorums(3, 3, 2)));
  for (const auto& r : AppendRange(*writer, 0, 19, 4)) LKV_ASSERT_OK(r);
  LKV_ASSERT_OK(writer->Close());
  const std::string lost = cluster->bookie_id(0);
  cluster->StopBookie(0);

  Auditor auditor({.client = client.get(), .store = cluster->store(), .grace = kGrace});
  const absl::Time t0 = absl::Now();
  LKV_ASSIGN_OR_FAIL(auto first, auditor.Pass(t0, kAlways));
  EXPECT_EQ(first.missing, std::vector<std::string>{lost});
  LKV_ASSIGN_OR_FAIL(auto due, auditor.Pass(t0 + kGrace, kAlways));
  EXPECT_EQ(due.ledgers_failed, 1);
  ASSERT_EQ(due.lines.size(), 1u) << absl::StrJoin(due.lines, "\n");
  EXPECT_NE(due.lines[0].find("failed"), std::string::npos) << due.lines[0];
  for (int pass = 1; pass <= 2; ++pass) {
    LKV_ASSIGN_OR_FAIL(auto again, auditor.Pass(t0 + kGrace + pass * absl::Minutes(1), kAlways));
    EXPECT_EQ(again.ledgers_failed, 1) << "a stuck ledger must still be counted";
    EXPECT_TRUE(again.lines.empty()) << "logged again: " << absl::StrJoin(again.lines, "\n");
  }
  LKV_ASSIGN_OR_FAIL(const auto md, client->GetLedgerMetadata(writer->id()));
  EXPECT_TRUE(NamesBookie(md, lost));
  // A new auditor (this server became the controller again) reports it afresh.
  Auditor next({.client = client.get(), .store = cluster->store(), .grace = kGrace});
  LKV_ASSIGN_OR_FAIL(auto next_first, next.Pass(t0, kAlways));
  LKV_ASSIGN_OR_FAIL(auto next_due, next.Pass(t0 + kGrace, kAlways));
  EXPECT_EQ(next_due.lines.size(), 1u) << absl::StrJoin(next_due.lines, "\n");
}

// A bookie that registers again within its grace period (a restart, a lost
// session) is forgotten: the next time it goes, its clock starts afresh.
// Nothing is copied while it is away for less than the grace.
TEST(AuditorTest, ABookieBackWithinItsGraceIsLeftAloneAndItsClockStartsAfresh) {
  LKV_ASSIGN_OR_FAIL(auto cluster, TestCluster::Start({.bookies = 4}));
  LKV_ASSIGN_OR_FAIL(auto client, cluster->NewClient());
  LKV_ASSIGN_OR_FAIL(const uint64_t ledger, ClosedLedgerOnFirstThree(*cluster, *client));
  const std::string away = cluster->bookie_id(0);

  Auditor auditor({.client = client.get(), .store = cluster->store(), .grace = kGrace});
  const absl::Time t0 = absl::Now();
  cluster->StopBookie(0);
  LKV_ASSIGN_OR_FAIL(auto gone, auditor.Pass(t0, kAlways));
  EXPECT_EQ(gone.missing, std::vector<std::string>{away});
  LKV_ASSERT_OK(cluster->RestartBookie(0));
  LKV_ASSIGN_OR_FAIL(auto back, auditor.Pass(t0 + kGrace / 2, kAlways));
  EXPECT_TRUE(back.missing.empty());
  cluster->StopBookie(0);
  // Past the first absence's grace, but only just seen gone again.
  LKV_ASSIGN_OR_FAIL(auto again, auditor.Pass(t0 + kGrace + absl::Seconds(1), kAlways));
  EXPECT_EQ(again.missing, std::vector<std::string>{away});
  EXPECT_TRUE(again.lost.empty());
  EXPECT_EQ(again.ledgers_replaced, 0);
  LKV_ASSIGN_OR_FAIL(const auto md, client->GetLedgerMetadata(ledger));
  EXPECT_TRUE(NamesBookie(md, away));
  EXPECT_EQ(testing::BookieInfo(cluster->address(3)).entries_added(), 0u) << "copied to a spare";
}

// While too many of the bookies the auditor knows are missing (a view that
// wrong is more likely etcd's than the cluster's), nothing is copied; the
// clocks go on, and copying starts at the first pass with fewer missing.
// Bookies still within their grace count: sessions that expire a little
// apart must not get the first one copied before the others are seen.
TEST(AuditorTest, TooManyMissingBookiesHoldCopyingOffUntilFewerAreMissing) {
  LKV_ASSIGN_OR_FAIL(auto cluster, TestCluster::Start({.bookies = 4}));
  LKV_ASSIGN_OR_FAIL(auto client, cluster->NewClient());
  LKV_ASSIGN_OR_FAIL(const uint64_t ledger, ClosedLedgerOnFirstThree(*cluster, *client));
  const std::string first = cluster->bookie_id(0);
  const std::string second = cluster->bookie_id(1);

  // Two of the four bookies missing is more than a quarter.
  Auditor auditor({.client = client.get(),
                   .store = cluster->store(),
                   .grace = kGrace,
                   .max_lost_fraction = 0.25});
  const absl::Time t0 = absl::Now();
  cluster->StopBookie(0);
  LKV_ASSIGN_OR_FAIL(auto seen, auditor.Pass(t0, kAlways));
  EXPECT_EQ(seen.missing, std::vector<std::string>{first});
  cluster->StopBookie(1);  // a minute later
  LKV_ASSIGN_OR_FAIL(auto later, auditor.Pass(t0 + absl::Minutes(1), kAlways));
  EXPECT_EQ(later.missing.size(), 2u);
  // The first is lost, the second still within its grace: held off all
  // the same.
  LKV_ASSIGN_OR_FAIL(auto held, auditor.Pass(t0 + kGrace, kAlways));
  EXPECT_EQ(held.lost, std::vector<std::string>{first});
  EXPECT_FALSE(held.held_off.empty());
  EXPECT_EQ(held.ledgers_replaced, 0);
  EXPECT_EQ(testing::BookieInfo(cluster->address(3)).entries_added(), 0u) << "copied anyway";
  LKV_ASSIGN_OR_FAIL(const auto untouched, client->GetLedgerMetadata(ledger));
  EXPECT_TRUE(NamesBookie(untouched, first));

  // One back: one of four missing is not more than a quarter. The other's
  // clock kept running while copying was held off: it is copied at once.
  LKV_ASSERT_OK(cluster->RestartBookie(1));
  LKV_ASSIGN_OR_FAIL(auto resumed, auditor.Pass(t0 + kGrace + absl::Seconds(1), kAlways));
  EXPECT_TRUE(resumed.held_off.empty()) << resumed.held_off;
  EXPECT_EQ(resumed.lost, std::vector<std::string>{first});
  EXPECT_EQ(resumed.ledgers_replaced, 1) << absl::StrJoin(resumed.lines, "\n");
  LKV_ASSIGN_OR_FAIL(const auto moved, client->GetLedgerMetadata(ledger));
  EXPECT_FALSE(NamesBookie(moved, first)) << moved.ShortDebugString();
  EXPECT_TRUE(NamesBookie(moved, second)) << moved.ShortDebugString();

  Auditor bad({.client = client.get(), .store = cluster->store(), .max_lost_fraction = 1.5});
  EXPECT_EQ(bad.Pass(t0, kAlways).status().code(), absl::StatusCode::kInvalidArgument);
}

// A stuck replacement, logged once, stays logged once across a pass that
// holds copying off: when copying resumes and fails the same way, no new
// line (the operator reads one line per stuck ledger).
TEST(AuditorTest, AFailureLoggedBeforeAHoldOffIsNotLoggedAgainWhenCopyingResumes) {
  LKV_ASSIGN_OR_FAIL(auto cluster, TestCluster::Start({.bookies = 3}));
  LKV_ASSIGN_OR_FAIL(auto client, cluster->NewClient());
  LKV_ASSIGN_OR_FAIL(auto writer, client->CreateLedger(Quorums(3, 3, 2)));
  for (const auto& r : AppendRange(*writer, 0, 9, 4)) LKV_ASSERT_OK(r);
  LKV_ASSERT_OK(writer->Close());
  cluster->StopBookie(0);  // no spare: its replacement fails

  Auditor auditor({.client = client.get(), .store = cluster->store(), .grace = kGrace});
  const absl::Time t0 = absl::Now();
  LKV_ASSIGN_OR_FAIL(auto first, auditor.Pass(t0, kAlways));
  LKV_ASSIGN_OR_FAIL(auto due, auditor.Pass(t0 + kGrace, kAlways));
  EXPECT_EQ(due.ledgers_failed, 1);
  EXPECT_EQ(due.lines.size(), 1u) << absl::StrJoin(due.lines, "\n");
  cluster->StopBookie(1);  // two of three missing: held off
  LKV_ASSIGN_OR_FAIL(auto held, auditor.Pass(t0 + kGrace + absl::Minutes(1), kAlways));
  EXPECT_FALSE(held.held_off.empty());
  EXPECT_TRUE(held.lines.empty()) << absl::StrJoin(held.lines, "\n");
  LKV_ASSERT_OK(cluster->RestartBookie(1));
  LKV_ASSIGN_OR_FAIL(auto resumed, auditor.Pass(t0 + kGrace + absl::Minutes(2), kAlways));
  EXPECT_TRUE(resumed.held_off.empty()) << resumed.held_off;
  EXPECT_EQ(resumed.ledgers_failed, 1);
  EXPECT_TRUE(resumed.lines.empty()) << "logged again: " << absl::StrJoin(resumed.lines, "\n");
}

// The recorded instance of `bookie` in segment 0 of `md`.
std::string RecordedInstance(const meta::v1::LedgerMetadata& md, const std::string& bookie) {
  const auto& segment = md.segments(0);
  for (int i = 0; i < segment.bookies_size(); ++i) {
    if (segment.bookies(i) == bookie) return InstanceOf(segment, i);
  }
  return "(not named)";
}

// A bookie re-provisioned under its id (disk replaced, cookie deleted by
// hand) is registered, so it is never missing; but the copies the ledgers
// recorded on its earlier instance are gone. The auditor copies them back
// onto the new instance at its first pass (no grace, no spare needed: the
// ensemble stays), exactly the entries of its write sets (E3 Qw2: two in
// three), records the new instance, and leaves ledgers that already record
// it; afterwards each of those entries reads back from that bookie alone
// (L2: no acknowledged entry lost).
TEST(AuditorTest, L2_ABookieReprovisionedUnderItsIdGetsItsCopiesBack) {
  LKV_ASSIGN_OR_FAIL(auto cluster, TestCluster::Start({.bookies = 3}));
  LKV_ASSIGN_OR_FAIL(auto client, cluster->NewClient());
  LKV_ASSIGN_OR_FAIL(auto before, client->CreateLedger(Quorums(3, 2, 2)));
  for (const auto& r : AppendRange(*before, 0, 19, 4)) LKV_ASSERT_OK(r);
  LKV_ASSERT_OK(before->Close());
  LKV_ASSIGN_OR_FAIL(auto open_writer, client->CreateLedger(Quorums(3, 3, 3)));
  for (const auto& r : AppendRange(*open_writer, 0, 4, 4)) LKV_ASSERT_OK(r);
  const std::string bookie = cluster->bookie_id(0);
  const std::string old_instance = cluster->bookie(0)->instance_id();
  const meta::v1::Segment first_segment = before->metadata().segments(0);
  const auto& ensemble = first_segment.bookies();
  const int index = static_cast<int>(std::find(ensemble.begin(), ensemble.end(), bookie) -
                                     ensemble.begin());
  std::vector<int64_t> held;  // the entries bookie 0 holds a copy of
  for (int64_t e = 0; e <= 19; ++e) {
    if (InWriteSet(e, index, 3, 2)) held.push_back(e);
  }
  ASSERT_LT(held.size(), 20u);

  LKV_ASSERT_OK(cluster->WipeBookie(0));
  // The auditor's client meets the bookie down (its channel there backs
  // off), as a long-lived controller's would.
  {
    LKV_ASSIGN_OR_FAIL(auto reader, client->OpenLedger(before->id(), OpenMode::kNoRecovery));
    ExpectReadable(*reader, 0, 19);
  }
  LKV_ASSERT_OK(cluster->RestartBookie(0));
  const std::string new_instance = cluster->bookie(0)->instance_id();
  ASSERT_NE(new_instance, old_instance);
  LKV_ASSIGN_OR_FAIL(auto fresh_client, cluster->NewClient());
  LKV_ASSIGN_OR_FAIL(auto after, fresh_client->CreateLedger(Quorums(3, 3, 3)));
  for (const auto& r : AppendRange(*after, 0, 4, 4)) LKV_ASSERT_OK(r);
  LKV_ASSERT_OK(after->Close());

  Auditor auditor({.client = client.get(), .store = cluster->store(), .grace = kGrace});
  const absl::Time t0 = absl::Now();
  LKV_ASSIGN_OR_FAIL(auto pass, auditor.Pass(t0, kAlways));
  EXPECT_TRUE(pass.missing.empty());
  EXPECT_EQ(pass.reprovisioned, std::vector<std::string>{bookie});
  EXPECT_EQ(pass.ledgers_refilled, 1) << absl::StrJoin(pass.lines, "\n");
  EXPECT_EQ(pass.entries_refilled, static_cast<int64_t>(held.size()));
  EXPECT_EQ(pass.entries_copied, 0);
  EXPECT_EQ(pass.ledgers_not_closed, 1);  // the open ledger: its writer's
  EXPECT_EQ(pass.ledgers_failed, 0) << absl::StrJoin(pass.lines, "\n");
  EXPECT_EQ(pass.ledgers_replaced, 0);
  LKV_ASSIGN_OR_FAIL(const auto refilled, client->GetLedgerMetadata(before->id()));
  EXPECT_EQ(RecordedInstance(refilled, bookie), new_instance) << refilled.ShortDebugString();

  // Done: the next pass and a second refill find nothing to copy.
  LKV_ASSIGN_OR_FAIL(auto again, auditor.Pass(t0 + absl::Minutes(1), kAlways));
  EXPECT_EQ(again.ledgers_refilled, 0);
  EXPECT_EQ(again.entries_refilled, 0);
  EXPECT_EQ(client->RefillBookie(before->id(), bookie).status().code(),
            absl::StatusCode::kNotFound);

  // The copies are on the new instance: readable with the other two down.
  cluster->StopBookie(1);
  cluster->StopBookie(2);
  // A bookie that is gone is not refilled (it is replaced, after its grace).
  EXPECT_EQ(client->RefillBookie(before->id(), cluster->bookie_id(1)).status().code(),
            absl::StatusCode::kUnavailable);
  LKV_ASSIGN_OR_FAIL(auto reader_client, cluster->NewClient());
  LKV_ASSIGN_OR_FAIL(auto reader, reader_client->OpenLedger(before->id(), OpenMode::kNoRecovery));
  for (int64_t e : held) {
    LKV_ASSIGN_OR_FAIL(auto entries, reader->Read(e, e));
    ASSERT_EQ(entries.size(), 1u);
    EXPECT_EQ(entries[0].payload, testing::PayloadFor(e)) << "entry " << e;
  }
}

}  // namespace
}  // namespace ledgerkv::ledger
