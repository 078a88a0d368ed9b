// Re-replication (rereplicate.h) against real bookies: a closed ledger's
// copies move off a bookie that is gone, every entry is readable again with
// Qw copies on named bookies, and refusals change nothing.
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "base/fault_point.h"
#include "gtest/gtest.h"
#include "ledger/entry_format.h"
#include "ledger/ledger_test_util.h"
#include "proto/metadata.pb.h"

namespace ledgerkv::ledger {
namespace {

using testing::AppendRange;
using testing::BookieInfo;
using testing::CorruptJournal;
using testing::ExpectReadable;
using testing::PayloadFor;
using testing::Quorums;
using testing::TestCluster;

// Writes entries 0..last to a new ledger and closes it.
uint64_t WriteClosedLedger(LedgerClient& client, const CreateOptions& quorums, int64_t last) {
  auto writer = client.CreateLedger(quorums);
  EXPECT_TRUE(writer.ok()) << writer.status();
  if (!writer.ok()) return 0;
  for (const auto& r : AppendRange(**writer, 0, last, 16)) EXPECT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE((*writer)->Close().ok());
  return (*writer)->id();
}

// A closed E=3 Qw=2 Qa=2 ledger of entries 0..last whose first bookie is
// then stopped for good: where re-replication starts from.
struct LostCopy {
  uint64_t id = 0;
  meta::v1::LedgerMetadata before;  // naming the lost bookie
  std::string lost;
};
absl::StatusOr<LostCopy> ClosedLedgerThatLostItsFirstBookie(TestCluster& cluster,
                                                            LedgerClient& client, int64_t last) {
  LostCopy c;
  c.id = WriteClosedLedger(client, Quorums(3, 2, 2), last);
  if (c.id == 0) return absl::InternalError("the ledger was not written");
  ASSIGN_OR_RETURN(c.before, client.GetLedgerMetadata(c.id));
  c.lost = c.before.segments(0).bookies(0);
  cluster.StopBookie(cluster.IndexOf(c.lost));
  return c;
}

bool Names(const meta::v1::Segment& segment, const std::string& bookie) {
  for (const std::string& b : segment.bookies()) {
    if (b == bookie) return true;
  }
  return false;
}

// L2 after a bookie is lost for good: E=3 Qw=2 Qa=2 and the bookie at
// index 0 is gone. Its entries (two thirds of them) are copied to a spare,
// which the metadata then names; with another ensemble bookie down as
// well, every entry still reads back, so the spare holds every copy it is
// named for.
TEST(LedgerRereplicationTest, L2_ACopyMovedOffALostBookieIsReadableWithoutIt) {
  LKV_ASSIGN_OR_FAIL(auto cluster, TestCluster::Start({.bookies = 4}));
  LKV_ASSIGN_OR_FAIL(auto client, cluster->NewClient());
  constexpr int64_t kLast = 199;
  LKV_ASSIGN_OR_FAIL(const LostCopy c,
                     ClosedLedgerThatLostItsFirstBookie(*cluster, *client, kLast));
  const uint64_t id = c.id;
  const meta::v1::LedgerMetadata& before = c.before;
  const meta::v1::Segment old = before.segments(0);
  const std::string& lost = c.lost;

  LKV_ASSIGN_OR_FAIL(auto result, client->ReplaceBookie(id, lost));
  int64_t expected = 0;
  for (int64_t e = 0; e <= kLast; ++e) expected += InWriteSet(e, 0, 3, 2) ? 1 : 0;
  EXPECT_EQ(result.segments_changed, 1);
  EXPECT_EQ(result.entries_copied, expected);
  ASSERT_EQ(result.replacements.size(), 1u);
  const std::string spare = result.replacements[0];
  EXPECT_FALSE(Names(old, spare));
  EXPECT_EQ(BookieInfo(cluster->address(cluster->IndexOf(spare))).entries_added(),
            static_cast<uint64_t>(expected));

  LKV_ASSIGN_OR_FAIL(const auto after, client->GetLedgerMetadata(id));
  ASSERT_EQ(after.segments_size(), 1);
  EXPECT_EQ(after.segments(0).bookies(0), spare);
  EXPECT_EQ(after.segments(0).bookies(1), old.bookies(1));
  EXPECT_EQ(after.segments(0).bookies(2), old.bookies(2));
  EXPECT_EQ(after.segments(0).bookie_instances(0),
            BookieInfo(cluster->address(cluster->IndexOf(spare))).instance_id());
  EXPECT_EQ(after.state(), meta::v1::CLOSED);
  EXPECT_EQ(after.last_entry_id(), kLast);
  EXPECT_EQ(after.length(), before.length());

  // Entries of write set {0, 1} are now only on the spare.
  cluster->StopBookie(cluster->IndexOf(old.bookies(1)));
  LKV_ASSIGN_OR_FAIL(auto fresh, cluster->NewClient());
  LKV_ASSIGN_OR_FAIL(auto reader, fresh->OpenLedger(id, OpenMode::kNoRecovery));
  ExpectReadable(*reader, 0, kLast);

  // Done once: the bookie is no longer named.
  EXPECT_TRUE(absl::IsNotFound(client->ReplaceBookie(id, lost).status()));
}

// The final CAS, when its reply is lost (it landed, the client hears
// UNAVAILABLE): reading the metadata back finds the replacement named, and
// the call succeeds instead of failing or starting over (which would find
// the bookie no longer named: NOT_FOUND).
// With E > Qw a bookie holds runs of Qw entries out of every E: moving its
// copies reads only those. An entry it never held that no replica can
// serve intact (here corrupt on both of its bookies) is not its copy to
// move and must not stop the move, which would leave every entry the lost
// bookie did hold a copy short for good.
TEST(LedgerRereplicationTest, AnEntryTheLostBookieNeverHeldDoesNotStopItsCopiesMoving) {
  LKV_ASSIGN_OR_FAIL(auto cluster, TestCluster::Start({.bookies = 4}));
  LKV_ASSIGN_OR_FAIL(auto client, cluster->NewClient());
  LKV_ASSIGN_OR_FAIL(auto writer, client->CreateLedger(Quorums(3, 2, 2)));
  constexpr int64_t kLast = 11;
  for (int64_t e = 0; e <= kLast; ++e) LKV_ASSERT_OK(writer->Append(PayloadFor(e)));
  LKV_ASSERT_OK(writer->Close());
  const uint64_t id = writer->id();
  const meta::v1::Segment segment = writer->metadata().segments(0);
  const std::string lost = segment.bookies(0);
  // Entry 1's write set is {1, 2}: both copies corrupt.
  ASSERT_FALSE(InWriteSet(1, 0, 3, 2));
  for (int i : {1, 2}) {
    const int b = cluster->IndexOf(segment.bookies(i));
    cluster->StopBookie(b);
    EXPECT_EQ(CorruptJournal(cluster->data_dir(b), "payload-1-"), 1);
    LKV_ASSERT_OK(cluster->RestartBookie(b));
  }
  cluster->StopBookie(cluster->IndexOf(lost));

  LKV_ASSIGN_OR_FAIL(auto result, client->ReplaceBookie(id, lost));
  int64_t expected = 0;
  for (int64_t e = 0; e <= kLast; ++e) expected += InWriteSet(e, 0, 3, 2) ? 1 : 0;
  EXPECT_EQ(result.entries_copied, expected);
  LKV_ASSIGN_OR_FAIL(auto after, client->GetLedgerMetadata(id));
  EXPECT_FALSE(Names(after.segments(0), lost));
  // The copies are on the replacement: with index 1's bookie down too,
  // the entries only index 0 and 1 held read back from it.
  cluster->StopBookie(cluster->IndexOf(segment.bookies(1)));
  LKV_ASSIGN_OR_FAIL(auto reader, client->OpenLedger(id, OpenMode::kNoRecovery));
  for (int64_t e = 0; e <= kLast; e += 3) ExpectReadable(*reader, e, e);
}

// A closed E=Qw=Qa=3 ledger of entries 0..kCorruptLast whose entry 5 is
// corrupt on the bookie at index 1, and whose bookie at index 0 is then
// stopped for good. Copying it reads every entry from index 1 first (index
// 0 fails; the next bookie in the plan's rotation) and falls back to index
// 2 for entry 5: the corrupt copy is met on the way. (Qa = Qw: with Qa <
// Qw, index 2's copy of entry 5 may not be stored when the ledger closes.)
constexpr int64_t kCorruptLast = 11;
absl::StatusOr<LostCopy> ClosedLedgerWithACorruptCopyOnIndex1(TestCluster& cluster,
                                                              LedgerClient& client) {
  LostCopy c;
  c.id = WriteClosedLedger(client, Quorums(3, 3, 3), kCorruptLast);
  if (c.id == 0) return absl::InternalError("the ledger was not written");
  ASSIGN_OR_RETURN(c.before, client.GetLedgerMetadata(c.id));
  const int holder = cluster.IndexOf(c.before.segments(0).bookies(1));
  cluster.StopBookie(holder);
  if (const int hits = CorruptJournal(cluster.data_dir(holder), "payload-5-"); hits != 1) {
    return absl::InternalError(absl::StrCat("corrupted ", hits, " copies, not 1"));
  }
  RETURN_IF_ERROR(cluster.RestartBookie(holder));
  c.lost = c.before.segments(0).bookies(0);
  cluster.StopBookie(cluster.IndexOf(c.lost));
  return c;
}

// L10 kept by the copy: a corrupt copy met while moving a ledger off a lost
// bookie, on a bookie that stays in the ensemble, is re-added there from the
// intact copy and reported. With every other replica down, the whole
// ledger then reads back from that bookie alone.
TEST(LedgerRereplicationTest, L10_ACorruptCopyMetWhileCopyingIsRepairedOnItsBookie) {
  LKV_ASSIGN_OR_FAIL(auto cluster, TestCluster::Start({.bookies = 4}));
  LKV_ASSIGN_OR_FAIL(auto client, cluster->NewClient());
  LKV_ASSIGN_OR_FAIL(const LostCopy c, ClosedLedgerWithACorruptCopyOnIndex1(*cluster, *client));
  const std::string holder = c.before.segments(0).bookies(1);

  // A client that never talked to the restarted holder.
  LKV_ASSIGN_OR_FAIL(auto mover, cluster->NewClient());
  LKV_ASSIGN_OR_FAIL(auto result, mover->ReplaceBookie(c.id, c.lost));
  EXPECT_EQ(result.entries_copied, kCorruptLast + 1);
  EXPECT_EQ(result.corrupt.repaired, 1);
  EXPECT_EQ(result.corrupt.unrepaired, 0);
  ASSERT_EQ(result.corrupt.lines.size(), 1u);
  EXPECT_EQ(result.corrupt.lines[0],
            absl::StrCat("ledger ", c.id, ": bookie ", holder,
                         " held a corrupt copy of entry 5: repaired from an intact copy"));

  ASSERT_EQ(result.replacements.size(), 1u);
  cluster->StopBookie(cluster->IndexOf(result.replacements[0]));
  cluster->StopBookie(cluster->IndexOf(c.before.segments(0).bookies(2)));
  LKV_ASSIGN_OR_FAIL(auto fresh, cluster->NewClient());
  LKV_ASSIGN_OR_FAIL(auto reader, fresh->OpenLedger(c.id, OpenMode::kNoRecovery));
  ExpectReadable(*reader, 0, kCorruptLast);
}

// A corrupt copy whose bookie refuses the re-add is reported as not
// repaired, once, although the first replacement also refuses its copies
// and the entries are read again for the second; the move itself still
// completes (the copies it made are intact).
TEST(LedgerRereplicationTest, ACorruptCopyThatCannotBeRepairedIsReportedOnceAndTheMoveCompletes) {
  ScopedFaultPoints faults;
  LKV_ASSIGN_OR_FAIL(auto cluster, TestCluster::Start({.bookies = 5}));
  LKV_ASSIGN_OR_FAIL(auto client, cluster->NewClient());
  LKV_ASSIGN_OR_FAIL(const LostCopy c, ClosedLedgerWithACorruptCopyOnIndex1(*cluster, *client));
  const std::string holder = c.before.segments(0).bookies(1);
  // The holder refuses every add; the first other bookie to get one (the
  // first replacement chosen) refuses it too.
  absl::Mutex mu;
  std::string first_replacement;  // guarded by mu
  FaultPoints::Get().Arm("bookie.add.drop_request", [&, holder](std::string_view bookie) {
    if (bookie == holder) return true;
    absl::MutexLock l(&mu);
    if (!first_replacement.empty()) return false;
    first_replacement = std::string(bookie);
    return true;
  });

  LKV_ASSIGN_OR_FAIL(auto mover, cluster->NewClient());
  LKV_ASSIGN_OR_FAIL(auto result, mover->ReplaceBookie(c.id, c.lost));
  ASSERT_EQ(result.replacements.size(), 1u);
  {
    absl::MutexLock l(&mu);
    ASSERT_FALSE(first_replacement.empty());
    EXPECT_NE(result.replacements[0], first_replacement);
  }
  EXPECT_EQ(result.entries_copied, kCorruptLast + 1);
  EXPECT_EQ(result.corrupt.repaired, 0);
  EXPECT_EQ(result.corrupt.unrepaired, 1);
  ASSERT_EQ(result.corrupt.lines.size(), 1u);
  EXPECT_NE(result.corrupt.lines[0].find(absl::StrCat(
                "bookie ", holder, " held a corrupt copy of entry 5: NOT repaired: bookie ",
                holder)),
            std::string::npos)
      << result.corrupt.lines[0];
  LKV_ASSIGN_OR_FAIL(const auto after, client->GetLedgerMetadata(c.id));
  EXPECT_FALSE(Names(after.segments(0), c.lost));
  // Entry 5 still reads back, from the replacement or index 2.
  LKV_ASSIGN_OR_FAIL(auto reader, client->OpenLedger(c.id, OpenMode::kNoRecovery));
  ExpectReadable(*reader, 0, kCorruptLast);
}

// A run that fails after it repaired a copy (here: its caller stops it
// before the last window) says what it repaired in its error.
TEST(LedgerRereplicationTest, ARunThatFailsAfterARepairNamesItInItsError) {
  LKV_ASSIGN_OR_FAIL(auto cluster, TestCluster::Start({.bookies = 4}));
  LKV_ASSIGN_OR_FAIL(auto client, cluster->NewClient());
  LKV_ASSIGN_OR_FAIL(const LostCopy c, ClosedLedgerWithACorruptCopyOnIndex1(*cluster, *client));
  // Windows of 4 entries: 0..3, 4..7 (entry 5, repaired), 8..11.
  ClientOptions options;
  options.max_entries_per_read_rpc = 4;
  LKV_ASSIGN_OR_FAIL(auto mover, cluster->NewClient(options));
  int asked = 0;
  auto stopped = mover->ReplaceBookie(c.id, c.lost, [&] { return ++asked < 3; });
  EXPECT_TRUE(absl::IsCancelled(stopped.status())) << stopped.status();
  EXPECT_NE(stopped.status().message().find(absl::StrCat(
                "(before that: ledger ", c.id, ": bookie ", c.before.segments(0).bookies(1),
                " held a corrupt copy of entry 5: repaired from an intact copy)")),
            std::string::npos)
      << stopped.status();
  // Repaired, although the move did not happen.
  LKV_ASSIGN_OR_FAIL(const auto after, client->GetLedgerMetadata(c.id));
  EXPECT_TRUE(Names(after.segments(0), c.lost));
  cluster->StopBookie(cluster->IndexOf(c.before.segments(0).bookies(2)));
  LKV_ASSIGN_OR_FAIL(auto fresh, cluster->NewClient());
  LKV_ASSIGN_OR_FAIL(auto reader, fresh->OpenLedger(c.id, OpenMode::kNoRecovery));
  ExpectReadable(*reader, 5, 5);
}

// With E > Qw a bookie's read of a span answers NO_SUCH_ENTRY for the ids
// outside its write set: those are not corrupt copies. Only the one
// corrupt copy is repaired and reported. E=4 Qw=Qa=3, index 0 lost:
// index 1 is asked first for the entries it holds (0, 3, 4, 7, 8, 11 of
// those index 0 held), its copy of entry 4 is corrupt, index 2 has it.
TEST(LedgerRereplicationTest, WithEAboveQwOnlyTheCorruptCopyInAWriteSetIsRepaired) {
  LKV_ASSIGN_OR_FAIL(auto cluster, TestCluster::Start({.bookies = 5}));
  LKV_ASSIGN_OR_FAIL(auto client, cluster->NewClient());
  const uint64_t id = WriteClosedLedger(*client, Quorums(4, 3, 3), kCorruptLast);
  ASSERT_NE(id, 0u);
  LKV_ASSIGN_OR_FAIL(const auto before, client->GetLedgerMetadata(id));
  const meta::v1::Segment segment = before.segments(0);
  ASSERT_TRUE(InWriteSet(4, 1, 4, 3));
  const int holder = cluster->IndexOf(segment.bookies(1));
  cluster->StopBookie(holder);
  ASSERT_EQ(CorruptJournal(cluster->data_dir(holder), "payload-4-"), 1);
  LKV_ASSERT_OK(cluster->RestartBookie(holder));
  const std::string lost = segment.bookies(0);
  cluster->StopBookie(cluster->IndexOf(lost));

  LKV_ASSIGN_OR_FAIL(auto mover, cluster->NewClient());
  LKV_ASSIGN_OR_FAIL(auto result, mover->ReplaceBookie(id, lost));
  int64_t expected = 0;
  for (int64_t e = 0; e <= kCorruptLast; ++e) expected += InWriteSet(e, 0, 4, 3) ? 1 : 0;
  EXPECT_EQ(result.entries_copied, expected);
  EXPECT_EQ(result.corrupt.repaired, 1);
  EXPECT_EQ(result.corrupt.unrepaired, 0);
  EXPECT_EQ(result.corrupt.lines,
            std::vector<std::string>{absl::StrCat("ledger ", id, ": bookie ", segment.bookies(1),
                                                  " held a corrupt copy of entry 4: repaired "
                                                  "from an intact copy")});
  // Entry 4 reads back from index 1 alone.
  ASSERT_EQ(result.replacements.size(), 1u);
  cluster->StopBookie(cluster->IndexOf(result.replacements[0]));
  cluster->StopBookie(cluster->IndexOf(segment.bookies(2)));
  LKV_ASSIGN_OR_FAIL(auto fresh, cluster->NewClient());
  LKV_ASSIGN_OR_FAIL(auto reader, fresh->OpenLedger(id, OpenMode::kNoRecovery));
  ExpectReadable(*reader, 4, 4);
}

TEST(LedgerRereplicationTest, ACasWhoseReplyWasLostIsFoundByReadingBack) {
  ScopedFaultPoints faults;
  LKV_ASSIGN_OR_FAIL(auto cluster, TestCluster::Start({.bookies = 4}));
  LKV_ASSIGN_OR_FAIL(auto client, cluster->NewClient());
  LKV_ASSIGN_OR_FAIL(const LostCopy c, ClosedLedgerThatLostItsFirstBookie(*cluster, *client, 59));
  const uint64_t id = c.id;
  const meta::v1::LedgerMetadata& before = c.before;
  const std::string& lost = c.lost;

  std::atomic<int> lost_replies{0};
  FaultPoints::Get().Arm("ledger.rereplicate.reply_lost", [&](std::string_view) {
    return lost_replies.fetch_add(1) == 0;
  });
  LKV_ASSIGN_OR_FAIL(auto result, client->ReplaceBookie(id, lost));
  EXPECT_EQ(lost_replies.load(), 1);
  ASSERT_EQ(result.replacements.size(), 1u);
  LKV_ASSIGN_OR_FAIL(const auto after, client->GetLedgerMetadata(id));
  EXPECT_EQ(after.segments(0).bookies(0), result.replacements[0]);
  cluster->StopBookie(cluster->IndexOf(before.segments(0).bookies(1)));
  LKV_ASSIGN_OR_FAIL(auto fresh, cluster->NewClient());
  LKV_ASSIGN_OR_FAIL(auto reader, fresh->OpenLedger(id, OpenMode::kNoRecovery));
  ExpectReadable(*reader, 0, 59);
}

// The final CAS losing a race (the ledger's metadata changed after it was
// read): the next attempt copies to the same replacement again, so no
// unnamed copies are left on a second spare, and names it. Placement picks
// at random among the spares, so two rounds with four or five spares each
// leave a retry that forgot its replacement ~5% chance to pass.
TEST(LedgerRereplicationTest, ACasThatLostARaceIsRetriedOnTheSameReplacement) {
  ScopedFaultPoints faults;
  LKV_ASSIGN_OR_FAIL(auto cluster, TestCluster::Start({.bookies = 8}));
  LKV_ASSIGN_OR_FAIL(auto client, cluster->NewClient());
  constexpr int64_t kLast = 59;
  int64_t expected = 0;
  for (int64_t e = 0; e <= kLast; ++e) expected += InWriteSet(e, 0, 3, 2) ? 1 : 0;
  std::vector<uint64_t> added_before(cluster->size());
  for (int round = 0; round < 2; ++round) {
    SCOPED_TRACE(round);
    LKV_ASSIGN_OR_FAIL(const LostCopy c,
                       ClosedLedgerThatLostItsFirstBookie(*cluster, *client, kLast));
    const uint64_t id = c.id;
    const meta::v1::LedgerMetadata& before = c.before;
    const std::string& lost = c.lost;
    for (int i = 0; i < cluster->size(); ++i) {
      if (cluster->bookie(i) != nullptr) {
        added_before[i] = BookieInfo(cluster->address(i)).entries_added();
      }
    }

    // Before the first CAS, another change moves the record's version (the
    // same value stored again); the CAS then fails ABORTED.
    const std::string key = metadata::Keys("default").Ledger(id);
    std::atomic<int> before_cas{0};
    FaultPoints::Get().Arm("ledger.rereplicate.before_cas", [&](std::string_view) {
      if (before_cas.fetch_add(1) > 0) return false;
      auto got = cluster->store()->Get(key);
      EXPECT_TRUE(got.ok()) << got.status();
      if (got.ok()) {
        EXPECT_TRUE(cluster->store()->Put(key, got->value, got->version).ok());
      }
      return false;
    });
    LKV_ASSIGN_OR_FAIL(auto result, client->ReplaceBookie(id, lost));
    FaultPoints::Get().Disarm("ledger.rereplicate.before_cas");
    EXPECT_EQ(before_cas.load(), 2) << "the first CAS did not lose";
    ASSERT_EQ(result.replacements.size(), 1u);
    const std::string spare = result.replacements[0];
    LKV_ASSIGN_OR_FAIL(const auto after, client->GetLedgerMetadata(id));
    EXPECT_EQ(after.segments(0).bookies(0), spare);

    // Both attempts wrote to the named spare (the same bytes twice); no
    // other spare got anything.
    for (int i = 0; i < cluster->size(); ++i) {
      const std::string& b = cluster->bookie_id(i);
      if (cluster->bookie(i) == nullptr || Names(before.segments(0), b)) continue;
      EXPECT_EQ(BookieInfo(cluster->address(i)).entries_added() - added_before[i],
                static_cast<uint64_t>(b == spare ? 2 * expected : 0))
          << b;
    }
    // Entries of write set {0, 1} are on the spare alone now.
    const std::string second = before.segments(0).bookies(1);
    cluster->StopBookie(cluster->IndexOf(second));
    LKV_ASSIGN_OR_FAIL(auto fresh, cluster->NewClient());
    LKV_ASSIGN_OR_FAIL(auto reader, fresh->OpenLedger(id, OpenMode::kNoRecovery));
    ExpectReadable(*reader, 0, kLast);
    LKV_ASSERT_OK(cluster->RestartBookie(cluster->IndexOf(second)));
  }
}

// A caller that stops the run (a controller deposed or shutting down) gets
// CANCELLED at the next window of the copy; nothing is named.
TEST(LedgerRereplicationTest, ARunItsCallerStopsIsCancelledAndNamesNothing) {
  LKV_ASSIGN_OR_FAIL(auto cluster, TestCluster::Start({.bookies = 4}));
  LKV_ASSIGN_OR_FAIL(auto client, cluster->NewClient());
  LKV_ASSIGN_OR_FAIL(const LostCopy c, ClosedLedgerThatLostItsFirstBookie(*cluster, *client, 29));
  const uint64_t id = c.id;
  const meta::v1::LedgerMetadata& before = c.before;
  const std::string& lost = c.lost;
  int asked = 0;
  auto stopped = client->ReplaceBookie(id, lost, [&] { return ++asked < 1; });
  EXPECT_TRUE(absl::IsCancelled(stopped.status())) << stopped.status();
  EXPECT_EQ(asked, 1);
  LKV_ASSIGN_OR_FAIL(const auto after, client->GetLedgerMetadata(id));
  EXPECT_EQ(after.ShortDebugString(), before.ShortDebugString());
  // Asked and allowed: the same call completes.
  LKV_ASSIGN_OR_FAIL(auto done, client->ReplaceBookie(id, lost, [] { return true; }));
  EXPECT_EQ(done.segments_changed, 1);
}

// A bookie named in two segments (the writer replaced another one midway)
// is replaced in both, each by a bookie outside that segment's ensemble.
// With every bookie but the replacements down, the whole ledger reads back.
TEST(LedgerRereplicationTest, EverySegmentNamingTheBookieGetsItsOwnReplacement) {
  LKV_ASSIGN_OR_FAIL(auto cluster, TestCluster::Start({.bookies = 6}));
  LKV_ASSIGN_OR_FAIL(auto client, cluster->NewClient());
  LKV_ASSIGN_OR_FAIL(auto writer, client->CreateLedger(Quorums(3, 3, 2)));
  const uint64_t id = writer->id();
  for (const auto& r : AppendRange(*writer, 0, 49, 8)) LKV_ASSERT_OK(r);
  const meta::v1::Segment first = writer->metadata().segments(0);
  cluster->StopBookie(cluster->IndexOf(first.bookies(2)));  // the writer replaces it
  for (const auto& r : AppendRange(*writer, 50, 99, 8)) LKV_ASSERT_OK(r);
  LKV_ASSERT_OK(writer->Close());
  LKV_ASSIGN_OR_FAIL(const auto before, client->GetLedgerMetadata(id));
  ASSERT_EQ(before.segments_size(), 2) << before.ShortDebugString();
  const std::string retired = first.bookies(0);
  ASSERT_TRUE(Names(before.segments(1), retired));
  LKV_ASSERT_OK(cluster->RestartBookie(cluster->IndexOf(first.bookies(2))));

  LKV_ASSIGN_OR_FAIL(auto result, client->ReplaceBookie(id, retired));
  EXPECT_EQ(result.segments_changed, 2);
  LKV_ASSIGN_OR_FAIL(const auto after, client->GetLedgerMetadata(id));
  ASSERT_EQ(after.segments_size(), 2);
  for (int s = 0; s < 2; ++s) {
    EXPECT_FALSE(Names(after.segments(s), retired)) << after.ShortDebugString();
    EXPECT_FALSE(Names(before.segments(s), result.replacements[s]));
    EXPECT_EQ(after.segments(s).first_entry_id(), before.segments(s).first_entry_id());
  }
  // Stop every bookie that is not a replacement: with Qw = E = 3 each
  // segment's entries are then on its replacement alone.
  for (int i = 0; i < cluster->size(); ++i) {
    const std::string& b = cluster->bookie_id(i);
    if (b != result.replacements[0] && b != result.replacements[1]) cluster->StopBookie(i);
  }
  LKV_ASSIGN_OR_FAIL(auto fresh, cluster->NewClient());
  LKV_ASSIGN_OR_FAIL(auto reader, fresh->OpenLedger(id, OpenMode::kNoRecovery));
  ExpectReadable(*reader, 0, 99);
}

// Refusals change nothing: an unknown ledger or a bookie it does not name
// (NOT_FOUND), an OPEN ledger (FAILED_PRECONDITION: its writer replaces
// bookies itself), and no bookie to replace it with (UNAVAILABLE), also
// when the only candidate is registered but cannot be reached.
TEST(LedgerRereplicationTest, RefusalsLeaveTheLedgerAsItWas) {
  LKV_ASSIGN_OR_FAIL(auto cluster, TestCluster::Start({.bookies = 3}));
  LKV_ASSIGN_OR_FAIL(auto client, cluster->NewClient());
  EXPECT_TRUE(absl::IsNotFound(client->ReplaceBookie(999, cluster->bookie_id(0)).status()));

  LKV_ASSIGN_OR_FAIL(auto writer, client->CreateLedger(Quorums(2, 2, 2)));
  for (const auto& r : AppendRange(*writer, 0, 9, 4)) LKV_ASSERT_OK(r);
  const uint64_t id = writer->id();
  const meta::v1::Segment segment = writer->metadata().segments(0);
  auto open = client->ReplaceBookie(id, segment.bookies(0));
  EXPECT_TRUE(absl::IsFailedPrecondition(open.status())) << open.status();
  LKV_ASSERT_OK(writer->Close());
  LKV_ASSIGN_OR_FAIL(const auto closed, client->GetLedgerMetadata(id));

  std::string outsider;
  for (int i = 0; i < cluster->size(); ++i) {
    if (!Names(segment, cluster->bookie_id(i))) outsider = cluster->bookie_id(i);
  }
  ASSERT_FALSE(outsider.empty());
  EXPECT_TRUE(absl::IsNotFound(client->ReplaceBookie(id, outsider).status()));

  // The only bookie outside the ensemble is down: no replacement.
  cluster->StopBookie(cluster->IndexOf(outsider));
  auto none = client->ReplaceBookie(id, segment.bookies(0));
  EXPECT_TRUE(absl::IsUnavailable(none.status())) << none.status();
  LKV_ASSIGN_OR_FAIL(const auto unchanged, client->GetLedgerMetadata(id));
  EXPECT_EQ(unchanged.ShortDebugString(), closed.ShortDebugString());

  // A registered bookie that cannot be reached is tried, passed over, and
  // (with nothing else left) named nowhere.
  meta::v1::BookieRegistration ghost;
  ghost.set_bookie_id("ghost-bookie");
  ghost.set_address("127.0.0.1:1");
  ghost.set_instance_id("0123456789abcdef0123456789abcdef");
  LKV_ASSERT_OK(cluster->store()->Put(metadata::Keys("default").Bookie("ghost-bookie"),
                                      ghost.SerializeAsString(), metadata::kAnyVersion));
  auto passed_over = client->ReplaceBookie(id, segment.bookies(0));
  EXPECT_TRUE(absl::IsUnavailable(passed_over.status())) << passed_over.status();
  EXPECT_NE(passed_over.status().message().find("passed over"), std::string::npos)
      << passed_over.status();
  EXPECT_NE(passed_over.status().message().find("ghost-bookie"), std::string::npos)
      << passed_over.status();
  LKV_ASSIGN_OR_FAIL(const auto still, client->GetLedgerMetadata(id));
  EXPECT_EQ(still.ShortDebugString(), closed.ShortDebugString());
}

// A refill (rereplicate.h, RefillBookieInLedger) whose final CAS landed but
// whose reply was lost finds it by reading back, as a replacement's does;
// a segment that recorded no instance of the bookie ("": written before
// instance ids were recorded) is never judged stale, so such a ledger has
// nothing to refill.
TEST(LedgerRereplicationTest, ARefillWhoseCasReplyWasLostIsFoundAndUnrecordedInstancesAreLeft) {
  ScopedFaultPoints faults;
  LKV_ASSIGN_OR_FAIL(auto cluster, TestCluster::Start({.bookies = 3}));
  LKV_ASSIGN_OR_FAIL(auto client, cluster->NewClient());
  std::vector<uint64_t> ids;
  for (int i = 0; i < 2; ++i) {
    LKV_ASSIGN_OR_FAIL(auto writer, client->CreateLedger(Quorums(3, 3, 3)));
    for (const auto& r : AppendRange(*writer, 0, 9, 4)) LKV_ASSERT_OK(r);
    LKV_ASSERT_OK(writer->Close());
    ids.push_back(writer->id());
  }
  // The second ledger's metadata as an older writer wrote it: no instances.
  const std::string key = metadata::Keys("default").Ledger(ids[1]);
  LKV_ASSIGN_OR_FAIL(const auto stored, cluster->store()->Get(key));
  meta::v1::LedgerMetadata unrecorded;
  ASSERT_TRUE(unrecorded.ParseFromString(stored.value));
  unrecorded.mutable_segments(0)->clear_bookie_instances();
  LKV_ASSERT_OK(
      cluster->store()->Put(key, unrecorded.SerializeAsString(), stored.version).status());
  const std::string bookie = cluster->bookie_id(0);
  LKV_ASSERT_OK(cluster->ReprovisionBookie(0));

  std::atomic<int> lost_replies{0};
  FaultPoints::Get().Arm("ledger.rereplicate.reply_lost", [&](std::string_view) {
    return lost_replies.fetch_add(1) == 0;
  });
  LKV_ASSIGN_OR_FAIL(auto result, client->RefillBookie(ids[0], bookie));
  EXPECT_EQ(lost_replies.load(), 1);
  EXPECT_EQ(result.segments_changed, 1);
  EXPECT_EQ(result.entries_copied, 10);
  EXPECT_EQ(result.replacements, std::vector<std::string>{bookie});
  LKV_ASSIGN_OR_FAIL(const auto after, client->GetLedgerMetadata(ids[0]));
  const auto& segment = after.segments(0);
  for (int i = 0; i < segment.bookies_size(); ++i) {
    if (segment.bookies(i) == bookie) {
      EXPECT_EQ(InstanceOf(segment, i), cluster->bookie(0)->instance_id());
    }
  }
  EXPECT_EQ(client->RefillBookie(ids[1], bookie).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(BookieInfo(cluster->address(0)).entries_added(), 10u) << "copied the other ledger";
}

}  // namespace
}  // namespace ledgerkv::ledger
