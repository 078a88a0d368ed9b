// Open with recovery against real bookies: writer crashes (L2, L3), split
// brain (L5), lost fence requests and replies (L8, BookKeeper issue 2614),
// concurrent recoverers (L9), replacing a dead bookie during recovery.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "base/fault_point.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "ledger/bookie/bookie_server.h"
#include "ledger/ledger_test_util.h"
#include "proto/bookie.grpc.pb.h"
#include "proto/metadata.pb.h"

namespace ledgerkv::ledger {
namespace {

using testing::AppendRange;
using testing::Appender;
using testing::ExpectFenced;
using testing::MaxOf;
using testing::BookieInfo;
using testing::CorruptJournal;
using testing::ExpectReadable;
using testing::PayloadFor;
using testing::Quorums;
using testing::TestCluster;

TEST(LedgerRecoveryTest, L3_AfterWriterCrashEveryEntryUpToLastIsReadableAndNoneAboveAcked) {
  LKV_ASSIGN_OR_FAIL(auto cluster, TestCluster::Start({.bookies = 3}));
  LKV_ASSIGN_OR_FAIL(auto client, cluster->NewClient());
  LKV_ASSIGN_OR_FAIL(auto writer, client->CreateLedger(Quorums(3, 2, 2)));
  const uint64_t id = writer->id();
  std::vector<int64_t> acked;
  {
    Appender appender(writer.get(), 64);
    appender.WaitForAcks(150);
    // The writer crashes with adds in flight.
    appender.Halt();
    writer.reset();
    appender.Stop();
    acked = appender.acked();
  }
  ASSERT_GE(acked.size(), 150u);

  LKV_ASSIGN_OR_FAIL(auto other, cluster->NewClient());
  LKV_ASSIGN_OR_FAIL(auto reader, other->OpenLedger(id, OpenMode::kRecover));
  ASSERT_TRUE(reader->closed());
  const int64_t last = reader->last_readable();
  EXPECT_GE(last, MaxOf(acked));
  ExpectReadable(*reader, 0, last);
  EXPECT_EQ(reader->Read(last + 1, last + 1).status().code(), absl::StatusCode::kOutOfRange);
  uint64_t length = 0;
  for (int64_t i = 0; i <= last; ++i) length += PayloadFor(i).size();
  EXPECT_EQ(reader->metadata().length(), length);

  // Recovering a closed ledger changes nothing.
  LKV_ASSIGN_OR_FAIL(auto before, other->GetLedgerMetadata(id));
  LKV_ASSIGN_OR_FAIL(auto again, other->OpenLedger(id, OpenMode::kRecover));
  EXPECT_EQ(again->last_readable(), last);
  LKV_ASSIGN_OR_FAIL(auto after, other->GetLedgerMetadata(id));
  EXPECT_EQ(before.SerializeAsString(), after.SerializeAsString());
}

TEST(LedgerRecoveryTest, L5_SplitBrainFencedWriterIsNeverAcknowledgedAgain) {
  LKV_ASSIGN_OR_FAIL(auto cluster, TestCluster::Start({.bookies = 3}));
  LKV_ASSIGN_OR_FAIL(auto client_a, cluster->NewClient());
  LKV_ASSIGN_OR_FAIL(auto writer, client_a->CreateLedger(Quorums(3, 2, 2)));
  Appender appender(writer.get(), 16);
  appender.WaitForAcks(50);

  // B takes over while A keeps appending.
  LKV_ASSIGN_OR_FAIL(auto client_b, cluster->NewClient());
  LKV_ASSIGN_OR_FAIL(auto reader, client_b->OpenLedger(writer->id(), OpenMode::kRecover));
  const int64_t last = reader->last_readable();

  appender.WaitForError();
  ExpectFenced(appender.first_error());
  appender.Stop();
  // Every id A ever saw acknowledged is kept.
  EXPECT_LE(MaxOf(appender.acked()), last);
  EXPECT_GE(static_cast<int64_t>(appender.acked().size()), 50);
  // A never gets another ack, and cannot close over B's result.
  for (int i = 0; i < 5; ++i) ExpectFenced(writer->Append("late").status());
  ExpectFenced(writer->Close());
  ExpectReadable(*reader, 0, last);
  LKV_ASSIGN_OR_FAIL(auto md, client_b->GetLedgerMetadata(writer->id()));
  EXPECT_EQ(md.state(), meta::v1::CLOSED);
  EXPECT_EQ(md.last_entry_id(), last);
}

// L5 after the ledger is gone: B recovers A's ledger (fencing the bookies),
// then deletes it, and every bookie collects it (its state, fence mark
// included, leaves the index). A, deposed while idle, appends again: its
// bookies must still answer FENCED, not take the add as one to a new
// ledger and acknowledge it.
TEST(LedgerRecoveryTest, L5_AFencedWriterIsNotAcknowledgedAfterItsLedgerIsDeletedAndCollected) {
  LKV_ASSIGN_OR_FAIL(auto cluster, TestCluster::Start({.bookies = 3}));
  LKV_ASSIGN_OR_FAIL(auto client_a, cluster->NewClient());
  LKV_ASSIGN_OR_FAIL(auto writer, client_a->CreateLedger(Quorums(3, 2, 2)));
  const auto results = AppendRange(*writer, 0, 9, 4);
  for (const auto& r : results) ASSERT_TRUE(r.ok()) << r.status();

  LKV_ASSIGN_OR_FAIL(auto client_b, cluster->NewClient());
  {
    LKV_ASSIGN_OR_FAIL(auto reader, client_b->OpenLedger(writer->id(), OpenMode::kRecover));
    EXPECT_EQ(reader->last_readable(), 9);
  }
  LKV_ASSERT_OK(client_b->DeleteLedger(writer->id()));
  for (int i = 0; i < cluster->size(); ++i) {
    LKV_ASSERT_OK(cluster->bookie(i)->RunGcOnce());
    // The collection really happened: the bookie no longer holds the ledger.
    auto stub = bookie::v1::Bookie::NewStub(
        grpc::CreateChannel(cluster->address(i), grpc::InsecureChannelCredentials()));
    bookie::v1::ReadRequest req;
    req.set_ledger_id(writer->id());
    req.set_first_entry_id(0);
    req.set_count(1);
    bookie::v1::ReadResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    ASSERT_TRUE(stub->Read(&ctx, req, &resp).ok());
    EXPECT_EQ(resp.code(), bookie::v1::NO_SUCH_LEDGER) << "bookie " << i;
  }

  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<int64_t> late = writer->Append(absl::StrCat("late ", i));
    EXPECT_FALSE(late.ok()) << "a deposed writer was acknowledged entry " << *late;
  }
  ExpectFenced(writer->Append("later").status());
}

// BookKeeper issue 2614: E=3 Qw=2 Qa=2 plus a spare; the fence request to
// one bookie is lost; the writer keeps appending and, as a bookie dies,
// tries an ensemble change while recovery runs. No acknowledged entry may be
// truncated, and the writer must end fenced. The writer's change is held
// until recovery's first attempt has marked the ledger IN_RECOVERY, so that
// the two overlap; that attempt must refuse (the write quorum {dying, deaf}
// has no fenced member) and the change must then fail, replacing nobody.
TEST(LedgerRecoveryTest, L8_LostFenceRequestDuringEnsembleChangeNeverTruncatesAckedEntry) {
  ScopedFaultPoints faults;
  LKV_ASSIGN_OR_FAIL(auto cluster, TestCluster::Start({.bookies = 4}));
  LKV_ASSIGN_OR_FAIL(auto client, cluster->NewClient(absl::Seconds(1)));
  LKV_ASSIGN_OR_FAIL(auto writer, client->CreateLedger(Quorums(3, 2, 2)));
  const meta::v1::Segment segment = writer->metadata().segments(0);
  const std::string deaf = segment.bookies(1);  // never hears the fence
  const std::string dying = segment.bookies(0);
  Appender appender(writer.get(), 8);
  appender.WaitForAcks(40);

  auto dropped = std::make_shared<std::atomic<int>>(0);
  FaultPoints::Get().Arm("bookie.fence.drop_request", [deaf, dropped](std::string_view bookie) {
    if (bookie != deaf) return false;
    dropped->fetch_add(1);
    return true;
  });
  // Recovery may cancel the deaf bookie's request once the others' fences
  // cover every write quorum, maybe before it arrived: their fence replies
  // wait (on their journal threads, bounded) until it was lost.
  FaultPoints::Get().Arm("bookie.fence.drop_reply", [deaf, dropped](std::string_view bookie) {
    const absl::Time give_up = absl::Now() + absl::Seconds(10);
    while (bookie != deaf && dropped->load() == 0 && absl::Now() < give_up) {
      absl::SleepFor(absl::Milliseconds(1));
    }
    return false;
  });
  auto in_change = std::make_shared<absl::Notification>();
  auto release = std::make_shared<absl::Notification>();
  const std::string ledger_arg = absl::StrCat(writer->id());
  FaultPoints::Get().Arm("ledger.writer.ensemble_change",
                         [ledger_arg, in_change, release](std::string_view ledger) {
                           if (ledger == ledger_arg) {
                             if (!in_change->HasBeenNotified()) in_change->Notify();
                             release->WaitForNotification();
                           }
                           return false;
                         });
  cluster->StopBookie(cluster->IndexOf(dying));  // the writer starts an ensemble change
  ASSERT_TRUE(in_change->WaitForNotificationWithTimeout(absl::Seconds(30)))
      << "the writer never tried to replace the stopped bookie";

  LKV_ASSIGN_OR_FAIL(auto recoverer, cluster->NewClient(absl::Seconds(1)));
  absl::StatusOr<std::unique_ptr<LedgerReader>> reader =
      recoverer->OpenLedger(writer->id(), OpenMode::kRecover);
  EXPECT_TRUE(absl::IsUnavailable(reader.status()))
      << "recovery closed the ledger without a fenced member in {dying, deaf}: "
      << reader.status();
  EXPECT_GE(dropped->load(), 1) << "no fence request was lost: the test proves nothing";
  LKV_ASSIGN_OR_FAIL(auto in_recovery, recoverer->GetLedgerMetadata(writer->id()));
  EXPECT_EQ(in_recovery.state(), meta::v1::IN_RECOVERY);

  // The writer's change now meets a ledger in recovery: it must fail the
  // writer as fenced, not name a replacement.
  release->Notify();
  appender.WaitForError();
  ExpectFenced(appender.first_error());
  appender.Stop();
  EXPECT_EQ(writer->stats().ensemble_changes, 0);

  FaultPoints::Get().DisarmAll();  // the network heals
  for (int attempt = 0; attempt < 5 && !reader.ok(); ++attempt) {
    reader = recoverer->OpenLedger(writer->id(), OpenMode::kRecover);
    if (!reader.ok()) {
      EXPECT_TRUE(absl::IsUnavailable(reader.status())) << reader.status();
    }
  }
  ASSERT_TRUE(reader.ok()) << reader.status();
  const int64_t last = (*reader)->last_readable();
  EXPECT_LE(MaxOf(appender.acked()), last) << "an acknowledged entry was truncated";
  EXPECT_GE(static_cast<int64_t>(appender.acked().size()), 40);
  ExpectFenced(writer->Append("after recovery").status());
  ExpectReadable(**reader, 0, last);
}

// A bookie that could not be reached during recovery (its fence requests and
// recovery adds were refused) is planned around by the reads that follow
// recovery in the same client, as one a read could not reach is (a KV range
// replays its log right after recovering it): for
// ClientOptions.slow_bookie_hold, it is asked for nothing its replicas can
// answer. Once that hold has passed, it is asked again; and a bookie that
// answered recovery's adds (only its fences were refused) is not held.
TEST(LedgerRecoveryTest, ABookieRecoveryCouldNotReachIsPlannedAroundByTheReadsAfterIt) {
  ScopedFaultPoints faults;
  // No fsync: the third case needs the deaf bookie's re-add answered within
  // recovery's grace (raised below), which a busy disk could make long.
  LKV_ASSIGN_OR_FAIL(auto cluster, TestCluster::Start({.bookies = 3, .sync = false}));
  ClientOptions writer_options;
  // No explicit LAC write: the bookies keep at most the LAC entry 29
  // carried (28 or less), so recovery re-adds entry 29 at least.
  writer_options.explicit_lac_delay = absl::InfiniteDuration();
  LKV_ASSIGN_OR_FAIL(auto client, cluster->NewClient(writer_options));
  struct Case {
    absl::Duration hold;
    bool adds_refused;
    bool planned_around;
  };
  for (const Case& c : {Case{absl::Seconds(30), true, true}, Case{absl::Milliseconds(1), true, false},
                        Case{absl::Seconds(30), false, false}}) {
    SCOPED_TRACE(absl::StrCat("slow_bookie_hold ", absl::FormatDuration(c.hold),
                              c.adds_refused ? ", fences and recovery adds refused"
                                             : ", fences refused, recovery adds answered"));
    LKV_ASSIGN_OR_FAIL(auto writer, client->CreateLedger(Quorums(3, 3, 2)));
    std::vector<std::string> addresses;
    const meta::v1::LedgerMetadata created = writer->metadata();
    for (const std::string& b : created.segments(0).bookies()) {
      addresses.push_back(cluster->address(cluster->IndexOf(b)));
    }
    const std::vector<uint64_t> stored_before = testing::EntriesAdded(addresses);
    for (const auto& r : AppendRange(*writer, 0, 29, 8)) LKV_ASSERT_OK(r);
    // Every copy stored: the deaf bookie's refusals below must meet
    // recovery's requests, not the writer's last ones.
    ASSERT_TRUE(testing::WaitForStored(addresses, stored_before, 30));
    const std::string deaf = writer->metadata().segments(0).bookies(2);
    // Its fences (and so its fencing reads) and, if so, its recovery adds
    // fail UNAVAILABLE at once.
    auto fences = std::make_shared<std::atomic<int>>(0);
    auto adds = std::make_shared<std::atomic<int>>(0);
    auto refuse = [deaf](std::shared_ptr<std::atomic<int>> count) {
      return [deaf, count](std::string_view bookie) {
        if (bookie != deaf) return false;
        count->fetch_add(1);
        return true;
      };
    };
    FaultPoints::Get().Arm("bookie.fence.drop_request", refuse(fences));
    // Recovery needs only two fences of three and cancels the third once
    // it has them: the others' fences are answered only after the deaf
    // bookie's was refused, or its request could be cancelled before it
    // arrived (their journal threads wait here, not the deaf bookie's).
    FaultPoints::Get().Arm("bookie.fence.drop_reply", [deaf, fences](std::string_view bookie) {
      const absl::Time give_up = absl::Now() + absl::Seconds(10);
      while (bookie != deaf && fences->load() == 0 && absl::Now() < give_up) {
        absl::SleepFor(absl::Milliseconds(1));
      }
      return false;
    });
    if (c.adds_refused) FaultPoints::Get().Arm("bookie.add.drop_request", refuse(adds));
    ClientOptions options;
    options.slow_bookie_hold = c.hold;
    // The answered re-adds of the third case are waited for on any machine
    // (refused ones fail at once and are not waited for).
    options.recovery_readd_grace = absl::Seconds(10);
    // Each read waits for its answer: what is counted is where reads go.
    options.speculative_read_timeout = absl::InfiniteDuration();
    // 2-entry chunks, which rotate over the bookies when none is slow.
    options.max_entries_per_read_rpc = 2;
    LKV_ASSIGN_OR_FAIL(auto recoverer, cluster->NewClient(options));
    LKV_ASSIGN_OR_FAIL(auto reader, recoverer->OpenLedger(writer->id(), OpenMode::kRecover));
    ASSERT_GE(fences->load(), 1) << "no fence was refused: the test proves nothing";
    ASSERT_EQ(adds->load() >= 1, c.adds_refused) << "entry 29 was not re-added";
    FaultPoints::Get().DisarmAll();  // the network heals
    ASSERT_EQ(reader->last_readable(), 29);
    absl::SleepFor(absl::Milliseconds(10));  // the short hold passes
    const uint64_t before = BookieInfo(cluster->address(cluster->IndexOf(deaf))).read_requests();
    ExpectReadable(*reader, 0, 29);
    const uint64_t asked =
        BookieInfo(cluster->address(cluster->IndexOf(deaf))).read_requests() - before;
    if (c.planned_around) {
      EXPECT_EQ(asked, 0u) << "the reads after recovery asked the bookie it could not reach";
    } else {
      EXPECT_GT(asked, 0u) << "a bookie no longer slow was still kept out";
    }
  }
}

TEST(LedgerRecoveryTest, L8_WithoutEnoughFenceRepliesRecoveryFailsAndTruncatesNothing) {
  ScopedFaultPoints faults;
  LKV_ASSIGN_OR_FAIL(auto cluster, TestCluster::Start({.bookies = 3}));
  LKV_ASSIGN_OR_FAIL(auto client, cluster->NewClient(absl::Seconds(1)));
  LKV_ASSIGN_OR_FAIL(auto writer, client->CreateLedger(Quorums(3, 2, 2)));
  const uint64_t id = writer->id();
  for (const auto& r : AppendRange(*writer, 0, 29, 8)) LKV_ASSERT_OK(r);
  const meta::v1::Segment segment = writer->metadata().segments(0);
  writer.reset();  // writer crash

  // Bookie 1 fences but the reply to the fence request is lost (later
  // fenced reads get through); bookie 2 is down. The write quorum {1, 2}
  // then has no confirmed fenced member, and recovery must not proceed even
  // though every read it could do next would be answered.
  const std::string lost_reply = segment.bookies(1);
  auto dropped = std::make_shared<std::atomic<int>>(0);
  FaultPoints::Get().Arm("bookie.fence.drop_reply", [lost_reply, dropped](std::string_view bookie) {
    return bookie == lost_reply && dropped->fetch_add(1) == 0;
  });
  const int down = cluster->IndexOf(segment.bookies(2));
  cluster->StopBookie(down);

  LKV_ASSIGN_OR_FAIL(auto recoverer, cluster->NewClient(absl::Seconds(1)));
  auto failed = recoverer->OpenLedger(id, OpenMode::kRecover);
  EXPECT_TRUE(absl::IsUnavailable(failed.status())) << failed.status();
  LKV_ASSIGN_OR_FAIL(auto md, recoverer->GetLedgerMetadata(id));
  EXPECT_EQ(md.state(), meta::v1::IN_RECOVERY);  // nothing decided, nothing truncated
  EXPECT_EQ(dropped->load(), 1);

  FaultPoints::Get().DisarmAll();
  LKV_ASSERT_OK(cluster->RestartBookie(down));
  LKV_ASSIGN_OR_FAIL(auto reader, recoverer->OpenLedger(id, OpenMode::kRecover));
  EXPECT_EQ(reader->last_readable(), 29);
  ExpectReadable(*reader, 0, 29);
}

// A bookie that lost its data but answers at the registered id and address
// (started without a metadata store, so no cookie stopped it) is an empty
// replica, not an authority on absence: with Qw=Qa=2 its fence alone would
// cover the write quorum and its "no such ledger" alone would call every
// entry absent. Recovery sends the instance id recorded in the segment, the
// impostor answers INSTANCE_MISMATCH, and recovery must stop without
// closing anything.
TEST(LedgerRecoveryTest, L8_ReplicaWithAnotherInstanceIdIsNeverCountedAsFencedOrEmpty) {
  LKV_ASSIGN_OR_FAIL(auto cluster, TestCluster::Start({.bookies = 2}));
  LKV_ASSIGN_OR_FAIL(auto client, cluster->NewClient(absl::Seconds(1)));
  LKV_ASSIGN_OR_FAIL(auto writer, client->CreateLedger(Quorums(2, 2, 2)));
  const uint64_t id = writer->id();
  for (const auto& r : AppendRange(*writer, 0, 9, 4)) LKV_ASSERT_OK(r);
  writer.reset();  // writer crash

  const int healthy = 0, wiped = 1;
  const std::string wiped_id = cluster->bookie_id(wiped);
  const std::string wiped_address = cluster->address(wiped);
  cluster->StopBookie(healthy);
  cluster->StopBookie(wiped);
  bookie::BookieOptions impostor_options;
  impostor_options.data_dir = cluster->data_dir(wiped) + "-wiped";
  impostor_options.listen = wiped_address;
  impostor_options.bookie_id = wiped_id;
  std::unique_ptr<bookie::BookieServer> impostor;
  for (int attempt = 0; attempt < 50 && impostor == nullptr; ++attempt) {
    auto started = bookie::BookieServer::Start(impostor_options);
    if (started.ok()) {
      impostor = *std::move(started);
    } else {
      absl::SleepFor(absl::Milliseconds(50));  // the port may linger
    }
  }
  ASSERT_NE(impostor, nullptr);
  // Registered under the old id at the old address, as after a restart.
  const metadata::Keys keys(impostor_options.cluster);
  meta::v1::BookieRegistration reg;
  reg.set_bookie_id(wiped_id);
  reg.set_address(wiped_address);
  reg.set_instance_id(impostor->instance_id());
  ASSERT_TRUE(cluster->store()->Put(keys.Bookie(wiped_id), reg.SerializeAsString(),
                                    metadata::kAnyVersion).ok());

  LKV_ASSIGN_OR_FAIL(auto recoverer, cluster->NewClient(absl::Seconds(1)));
  auto failed = recoverer->OpenLedger(id, OpenMode::kRecover);
  EXPECT_TRUE(absl::IsUnavailable(failed.status())) << failed.status();
  LKV_ASSIGN_OR_FAIL(auto md, recoverer->GetLedgerMetadata(id));
  EXPECT_EQ(md.state(), meta::v1::IN_RECOVERY) << "recovery closed the ledger on an empty replica";

  // The real bookies come back: nothing was lost.
  impostor.reset();
  ASSERT_TRUE(cluster->store()->Delete(keys.Bookie(wiped_id), metadata::kAnyVersion).ok());
  LKV_ASSERT_OK(cluster->RestartBookie(healthy));
  LKV_ASSERT_OK(cluster->RestartBookie(wiped));
  LKV_ASSIGN_OR_FAIL(auto reader, recoverer->OpenLedger(id, OpenMode::kRecover));
  EXPECT_EQ(reader->last_readable(), 9);
  ExpectReadable(*reader, 0, 9);
}

// Two recoverers run the whole protocol at once: each is held before its
// closing CAS until the other got there too (so both fenced, read forward
// and re-added the same entries), then both CAS. They agree, and nothing
// acknowledged is lost.
TEST(LedgerRecoveryTest, L9_ConcurrentRecoverersAgreeOnLastEntry) {
  ScopedFaultPoints faults;
  LKV_ASSIGN_OR_FAIL(auto cluster, TestCluster::Start({.bookies = 3}));
  for (int round = 0; round < 3; ++round) {
    auto at_close = std::make_shared<std::atomic<int>>(0);
    FaultPoints::Get().Arm("ledger.recovery.before_close", [at_close](std::string_view) {
      at_close->fetch_add(1);
      const absl::Time give_up = absl::Now() + absl::Seconds(20);
      while (at_close->load() < 2 && absl::Now() < give_up) absl::SleepFor(absl::Milliseconds(1));
      return false;
    });
    LKV_ASSIGN_OR_FAIL(auto client, cluster->NewClient());
    LKV_ASSIGN_OR_FAIL(auto writer, client->CreateLedger(Quorums(3, 2, 2)));
    const uint64_t id = writer->id();
    std::vector<int64_t> acked;
    {
      Appender appender(writer.get(), 32);
      appender.WaitForAcks(20 + 10 * round);
      appender.Halt();
      writer.reset();
      appender.Stop();
      acked = appender.acked();
    }
    absl::StatusOr<std::unique_ptr<LedgerReader>> results[2];
    std::thread recoverers[2];
    for (int k = 0; k < 2; ++k) {
      recoverers[k] = std::thread([&, k] {
        auto c = cluster->NewClient();
        if (!c.ok()) {
          results[k] = c.status();
          return;
        }
        results[k] = (*c)->OpenLedger(id, OpenMode::kRecover);
      });
    }
    for (auto& t : recoverers) t.join();
    FaultPoints::Get().DisarmAll();
    for (auto& r : results) ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(at_close->load(), 2) << "the recoverers did not both reach their closing CAS";
    EXPECT_EQ(results[0].value()->last_readable(), results[1].value()->last_readable());
    EXPECT_EQ(results[0].value()->metadata().length(), results[1].value()->metadata().length());
    EXPECT_GE(results[0].value()->last_readable(), MaxOf(acked));
    ExpectReadable(*results[1].value(), 0, results[1].value()->last_readable());
  }
}

// Here A is held just before its closing CAS until B has recovered and
// closed the ledger; A's CAS then loses and A must adopt B's result rather
// than fail or differ.
TEST(LedgerRecoveryTest, L9_RecovererWhoseCloseLosesAdoptsTheWinnersResult) {
  ScopedFaultPoints faults;
  LKV_ASSIGN_OR_FAIL(auto cluster, TestCluster::Start({.bookies = 3}));
  LKV_ASSIGN_OR_FAIL(auto client, cluster->NewClient());
  LKV_ASSIGN_OR_FAIL(auto writer, client->CreateLedger(Quorums(3, 2, 2)));
  const uint64_t id = writer->id();
  for (const auto& r : AppendRange(*writer, 0, 19, 8)) LKV_ASSERT_OK(r);
  writer.reset();  // writer crash

  auto holding = std::make_shared<absl::Notification>();
  auto release = std::make_shared<absl::Notification>();
  auto hits = std::make_shared<std::atomic<int>>(0);
  FaultPoints::Get().Arm("ledger.recovery.before_close",
                         [id, holding, release, hits](std::string_view ledger) {
                           if (ledger == std::to_string(id) && hits->fetch_add(1) == 0) {
                             holding->Notify();  // the first recoverer (A) waits here
                             release->WaitForNotification();
                           }
                           return false;
                         });
  absl::StatusOr<std::unique_ptr<LedgerReader>> a;
  std::thread first([&] {
    auto c = cluster->NewClient();
    a = c.ok() ? (*c)->OpenLedger(id, OpenMode::kRecover)
               : absl::StatusOr<std::unique_ptr<LedgerReader>>(c.status());
  });
  ASSERT_TRUE(holding->WaitForNotificationWithTimeout(absl::Seconds(10)));
  LKV_ASSIGN_OR_FAIL(auto other, cluster->NewClient());
  LKV_ASSIGN_OR_FAIL(auto b, other->OpenLedger(id, OpenMode::kRecover));
  EXPECT_EQ(b->metadata().state(), meta::v1::CLOSED);
  EXPECT_EQ(hits->load(), 2) << "B must have run recovery itself, not found A's result";
  release->Notify();
  first.join();
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ((*a)->last_readable(), b->last_readable());
  EXPECT_EQ((*a)->metadata().length(), b->metadata().length());
  EXPECT_EQ((*a)->metadata().SerializeAsString(), b->metadata().SerializeAsString());
  EXPECT_EQ(b->last_readable(), 19);
  ExpectReadable(**a, 0, 19);
}

TEST(LedgerRecoveryTest, L2_RecoveryReplacesDeadBookieBeforeNamingItInMetadata) {
  LKV_ASSIGN_OR_FAIL(auto cluster, TestCluster::Start({.bookies = 4}));
  // No explicit LAC write: the bookies must know only the piggybacked LAC.
  LKV_ASSIGN_OR_FAIL(auto client, cluster->NewClientWithoutExplicitLac());
  // Qa = Qw: a re-add cannot complete without every member of a write set.
  LKV_ASSIGN_OR_FAIL(auto writer, client->CreateLedger(Quorums(3, 3, 3)));
  const uint64_t id = writer->id();
  // One at a time, so that entry 29 carries LAC 28.
  for (int i = 0; i < 30; ++i) LKV_ASSERT_OK(writer->Append(PayloadFor(i)));
  const meta::v1::Segment segment = writer->metadata().segments(0);
  writer.reset();
  // The bookies know LAC 28 (piggybacked on entry 29): entry 29 must be
  // re-added, and one member of its write set is dead.
  const std::string dead = segment.bookies(2);
  cluster->StopBookie(cluster->IndexOf(dead));

  LKV_ASSIGN_OR_FAIL(auto other, cluster->NewClient());
  LKV_ASSIGN_OR_FAIL(auto reader, other->OpenLedger(id, OpenMode::kRecover));
  EXPECT_EQ(reader->last_readable(), 29);
  const meta::v1::LedgerMetadata md = reader->metadata();
  ASSERT_EQ(md.segments_size(), 2);
  EXPECT_EQ(md.segments(1).first_entry_id(), 29);
  EXPECT_NE(md.segments(1).bookies(2), dead);
  EXPECT_EQ(md.segments(1).bookies(0), segment.bookies(0));
  ExpectReadable(*reader, 0, 29);
}

// Qa = Qw = E = 3 and no spare: a bookie re-provisioned under its id since
// the writer crashed answers the re-adds INSTANCE_MISMATCH, and recovery
// re-adds them to its new instance instead, naming it only from the first
// re-added entry on (the earlier entries are not on it).
TEST(LedgerRecoveryTest, L2_WithNoSpareRecoveryReAddsToAReprovisionedBookiesNewInstance) {
  LKV_ASSIGN_OR_FAIL(auto cluster, TestCluster::Start({.bookies = 3}));
  LKV_ASSIGN_OR_FAIL(auto client, cluster->NewClientWithoutExplicitLac());
  LKV_ASSIGN_OR_FAIL(auto writer, client->CreateLedger(Quorums(3, 3, 3)));
  const uint64_t id = writer->id();
  // One at a time, so that entry 29 carries LAC 28: 29 is re-added.
  for (int i = 0; i < 30; ++i) LKV_ASSERT_OK(writer->Append(PayloadFor(i)));
  writer.reset();
  const int wiped = 2;
  const std::string bookie = cluster->bookie_id(wiped);
  const std::string old_instance = cluster->bookie(wiped)->instance_id();
  LKV_ASSERT_OK(cluster->ReprovisionBookie(wiped));
  const std::string new_instance = cluster->bookie(wiped)->instance_id();

  LKV_ASSIGN_OR_FAIL(auto other, cluster->NewClient());
  LKV_ASSIGN_OR_FAIL(auto reader, other->OpenLedger(id, OpenMode::kRecover));
  EXPECT_EQ(reader->last_readable(), 29);
  const meta::v1::LedgerMetadata md = reader->metadata();
  ASSERT_EQ(md.segments_size(), 2) << md.ShortDebugString();
  EXPECT_EQ(md.segments(1).first_entry_id(), 29);
  const auto& ensemble = md.segments(1).bookies();
  const int index =
      static_cast<int>(std::find(ensemble.begin(), ensemble.end(), bookie) - ensemble.begin());
  ASSERT_LT(index, 3) << md.ShortDebugString();
  EXPECT_EQ(md.segments(1).bookie_instances(index), new_instance);
  EXPECT_EQ(md.segments(0).bookie_instances(index), old_instance);
  ExpectReadable(*reader, 0, 29);
  // The re-added entry is on the new instance: readable from it alone.
  for (int i = 0; i < 3; ++i) {
    if (i != wiped) cluster->StopBookie(i);
  }
  LKV_ASSIGN_OR_FAIL(auto alone, cluster->NewClient());
  LKV_ASSIGN_OR_FAIL(auto alone_reader, alone->OpenLedger(id, OpenMode::kNoRecovery));
  LKV_ASSIGN_OR_FAIL(auto last, alone_reader->Read(29, 29));
  ASSERT_EQ(last.size(), 1u);
  EXPECT_EQ(last[0].payload, PayloadFor(29));
}

// The confirmed entry recovery starts from is corrupt on one replica and the
// other replica is down. That is not data loss (the other copy may be
// intact): recovery fails with UNAVAILABLE, leaves the ledger IN_RECOVERY,
// and succeeds once the replica is back.
// Recovery names a replacement only for entries it holds. E=Qw=3, Qa=2
// and two spares: the last entry's re-adds fail on two ensemble bookies,
// both spares replace them, and one spare fails too. Qa is reached (the
// survivor and the other spare), and the failed spare gives its place back
// to the bookie it replaced instead of being named, empty, in the closed
// ledger's last segment.
TEST(LedgerRecoveryTest, L2_RecoveryNamesNoReplacementThatReceivedNothing) {
  ScopedFaultPoints faults;
  LKV_ASSIGN_OR_FAIL(auto cluster, TestCluster::Start({.bookies = 5}));
  // Without explicit LAC writes entry 9 stays above the bookies' LAC, so
  // recovery re-adds it.
  LKV_ASSIGN_OR_FAIL(auto client, cluster->NewClientWithoutExplicitLac());
  LKV_ASSIGN_OR_FAIL(auto writer, client->CreateLedger(Quorums(3, 3, 2)));
  const uint64_t id = writer->id();
  for (const auto& r : AppendRange(*writer, 0, 9, 1)) LKV_ASSERT_OK(r);
  const meta::v1::Segment segment = writer->metadata().segments(0);
  writer.reset();  // writer crash

  std::vector<std::string> spares;
  for (int i = 0; i < cluster->size(); ++i) {
    const std::string& b = cluster->bookie_id(i);
    if (std::find(segment.bookies().begin(), segment.bookies().end(), b) ==
        segment.bookies().end()) {
      spares.push_back(b);
    }
  }
  ASSERT_EQ(spares.size(), 2u);
  const std::string failing_spare = spares[0], acking_spare = spares[1];
  auto refused = std::make_shared<std::atomic<int>>(0);
  FaultPoints::Get().Arm("bookie.add.drop_request",
                         [segment, failing_spare, refused](std::string_view bookie) {
                           const bool drop = bookie == segment.bookies(1) ||
                                             bookie == segment.bookies(2) ||
                                             bookie == failing_spare;
                           if (drop) refused->fetch_add(1);
                           return drop;
                         });
  // The acking spare's copy gives the re-add its Qa, after which recovery
  // waits only a short grace for the failing spare: its sync waits (on its
  // journal thread, bounded) until the failing spare's add was refused, so
  // that request is not cancelled before it arrives.
  const std::string acking_dir = cluster->data_dir(cluster->IndexOf(acking_spare)) + "/";
  FaultPoints::Get().Arm("bookie.journal.before_sync",
                         [acking_dir, refused](std::string_view journal) {
                           const absl::Time give_up = absl::Now() + absl::Seconds(10);
                           while (journal.substr(0, acking_dir.size()) == acking_dir &&
                                  refused->load() < 3 && absl::Now() < give_up) {
                             absl::SleepFor(absl::Milliseconds(1));
                           }
                           return false;
                         });

  LKV_ASSIGN_OR_FAIL(auto other, cluster->NewClient());
  LKV_ASSIGN_OR_FAIL(auto reader, other->OpenLedger(id, OpenMode::kRecover));
  FaultPoints::Get().DisarmAll();
  EXPECT_GE(refused->load(), 3) << "the re-adds did not fail as arranged";
  EXPECT_EQ(reader->last_readable(), 9);
  const meta::v1::LedgerMetadata md = reader->metadata();
  ASSERT_EQ(md.segments_size(), 2) << md.ShortDebugString();
  const meta::v1::Segment& last = md.segments(1);
  EXPECT_EQ(last.first_entry_id(), 9);
  const std::vector<std::string> named(last.bookies().begin(), last.bookies().end());
  EXPECT_EQ(std::count(named.begin(), named.end(), failing_spare), 0)
      << "a replacement that received nothing is named: " << md.ShortDebugString();
  EXPECT_EQ(std::count(named.begin(), named.end(), acking_spare), 1) << md.ShortDebugString();
  EXPECT_EQ(named[0], segment.bookies(0));
  ExpectReadable(*reader, 0, 9);
}

// Writes entries 0..9 one at a time to a new E=Qw=Qa=2 ledger on the
// cluster's two bookies (so entry 9 carries LAC 8: recovery starts at entry
// 8 and reads forward from 9), leaves it OPEN (the writer crashes) and
// stops both bookies. Returns its id, or 0 on failure.
uint64_t WriteTenAndStopBothBookies(TestCluster& cluster) {
  uint64_t id = 0;
  {
    auto client = cluster.NewClient();
    EXPECT_TRUE(client.ok()) << client.status();
    if (!client.ok()) return 0;
    auto writer = (*client)->CreateLedger(Quorums(2, 2, 2));
    EXPECT_TRUE(writer.ok()) << writer.status();
    if (!writer.ok()) return 0;
    for (int i = 0; i < 10; ++i) {
      auto appended = (*writer)->Append(PayloadFor(i));
      EXPECT_TRUE(appended.ok()) << appended.status();
      if (!appended.ok()) return 0;
    }
    id = (*writer)->id();
  }  // writer crash
  cluster.StopBookie(0);
  cluster.StopBookie(1);
  return id;
}

TEST(LedgerRecoveryTest, L10_CorruptConfirmedEntryWithItsOtherReplicaDownIsUnavailable) {
  LKV_ASSIGN_OR_FAIL(auto cluster, TestCluster::Start({.bookies = 2}));
  const uint64_t id = WriteTenAndStopBothBookies(*cluster);
  ASSERT_NE(id, 0u);
  EXPECT_EQ(CorruptJournal(cluster->data_dir(0), "payload-8-"), 1);
  LKV_ASSERT_OK(cluster->RestartBookie(0));

  LKV_ASSIGN_OR_FAIL(auto client, cluster->NewClient(absl::Seconds(1)));
  auto failed = client->OpenLedger(id, OpenMode::kRecover);
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kUnavailable) << failed.status();
  LKV_ASSIGN_OR_FAIL(auto md, client->GetLedgerMetadata(id));
  EXPECT_EQ(md.state(), meta::v1::IN_RECOVERY);

  LKV_ASSERT_OK(cluster->RestartBookie(1));
  LKV_ASSIGN_OR_FAIL(auto reader, client->OpenLedger(id, OpenMode::kRecover));
  EXPECT_EQ(reader->last_readable(), 9);
  ExpectReadable(*reader, 9, 9);
}

// The first entry after the confirmed one is corrupt on both replicas
// (E=Qw=Qa=2). It may have been acknowledged, so recovery must not drop it,
// and no retry can read it: recovery fails with DATA_LOSS (not UNAVAILABLE,
// which callers retry for ever), again on a second attempt, and the ledger
// stays IN_RECOVERY, with nothing truncated.
TEST(LedgerRecoveryTest, L10_AnEntryWhoseEveryCopyIsCorruptIsDataLossNotRetriedOrTruncated) {
  LKV_ASSIGN_OR_FAIL(auto cluster, TestCluster::Start({.bookies = 2}));
  const uint64_t id = WriteTenAndStopBothBookies(*cluster);
  ASSERT_NE(id, 0u);
  EXPECT_EQ(CorruptJournal(cluster->data_dir(0), "payload-9-"), 1);
  EXPECT_EQ(CorruptJournal(cluster->data_dir(1), "payload-9-"), 1);
  LKV_ASSERT_OK(cluster->RestartBookie(0));
  LKV_ASSERT_OK(cluster->RestartBookie(1));

  LKV_ASSIGN_OR_FAIL(auto client, cluster->NewClient(absl::Seconds(1)));
  for (int attempt = 0; attempt < 2; ++attempt) {
    auto failed = client->OpenLedger(id, OpenMode::kRecover);
    ASSERT_EQ(failed.status().code(), absl::StatusCode::kDataLoss) << failed.status();
    EXPECT_NE(failed.status().message().find("entry 9"), std::string::npos) << failed.status();
    LKV_ASSIGN_OR_FAIL(auto md, client->GetLedgerMetadata(id));
    EXPECT_EQ(md.state(), meta::v1::IN_RECOVERY);
  }
  // The entries before it are still there to read without recovery.
  LKV_ASSIGN_OR_FAIL(auto reader, client->OpenLedger(id, OpenMode::kNoRecovery));
  ExpectReadable(*reader, 0, 8);
}

// A bookie restarts at a new address while the client still caches the old
// one. A recovery attempt that cannot reach it must drop the cached address,
// so that it (or the next attempt) finds the bookie where it now is. With
// Qa = Qw = E and no spare bookie, recovery cannot complete without it.
TEST(LedgerRecoveryTest, RecoveryFindsABookieThatReRegisteredAtANewAddress) {
  LKV_ASSIGN_OR_FAIL(auto cluster, TestCluster::Start({.bookies = 3}));
  LKV_ASSIGN_OR_FAIL(auto client, cluster->NewClient(absl::Seconds(1)));
  LKV_ASSIGN_OR_FAIL(auto writer, client->CreateLedger(Quorums(3, 3, 3)));
  const uint64_t id = writer->id();
  for (int i = 0; i < 10; ++i) LKV_ASSERT_OK(writer->Append(PayloadFor(i)));
  // Not the bookie at index 0: the read of the confirmed entry asks that
  // one, and replica reads already drop unreachable addresses.
  const int mover = cluster->IndexOf(writer->metadata().segments(0).bookies(2));
  writer.reset();
  const std::string old_address = cluster->address(mover);
  cluster->StopBookie(mover);
  LKV_ASSERT_OK(cluster->RestartBookieElsewhere(mover));
  ASSERT_NE(cluster->address(mover), old_address);

  absl::StatusOr<std::unique_ptr<LedgerReader>> reader;
  for (int attempt = 0; attempt < 2 && !reader.ok(); ++attempt) {
    reader = client->OpenLedger(id, OpenMode::kRecover);
  }
  ASSERT_TRUE(reader.ok()) << reader.status();
  EXPECT_EQ((*reader)->last_readable(), 9);
  EXPECT_EQ((*reader)->metadata().segments_size(), 1);  // nobody was replaced
  ExpectReadable(**reader, 0, 9);
}

// Step 2 fences every bookie of the last segment. The forward reads of step
// 3 then need the fence flag only for bookies whose fence was not confirmed
// yet: a fence on every window cost each bookie a journal record and an
// fdatasync per window.
TEST(LedgerRecoveryTest, ForwardReadsDoNotRefenceBookiesAlreadyConfirmedFenced) {
  ScopedFaultPoints faults;
  LKV_ASSIGN_OR_FAIL(auto cluster, TestCluster::Start({.bookies = 3}));
  // No explicit LAC write either, which could raise the bookies' LAC.
  LKV_ASSIGN_OR_FAIL(auto client, cluster->NewClientWithoutExplicitLac());
  LKV_ASSIGN_OR_FAIL(auto writer, client->CreateLedger(Quorums(3, 2, 2)));
  const uint64_t id = writer->id();
  // All in flight at once: they carry a low LAC, so recovery reads them all.
  for (const auto& r : AppendRange(*writer, 0, 63, 64)) LKV_ASSERT_OK(r);
  writer.reset();  // writer crash

  // Fence requests received, by bookie id.
  struct Fences {
    absl::Mutex mu;
    std::map<std::string, int> by_bookie ABSL_GUARDED_BY(mu);
  };
  auto fences = std::make_shared<Fences>();
  FaultPoints::Get().Arm("bookie.fence.drop_request", [fences](std::string_view bookie) {
    absl::MutexLock l(&fences->mu);
    ++fences->by_bookie[std::string(bookie)];
    return false;
  });
  std::vector<uint64_t> syncs_before;
  for (int i = 0; i < 3; ++i) syncs_before.push_back(BookieInfo(cluster->address(i)).syncs());
  ClientOptions options;
  options.metadata = cluster->store();
  constexpr int kWindow = 4;  // 16 forward-read windows
  options.max_entries_per_read_rpc = kWindow;
  LKV_ASSIGN_OR_FAIL(auto recoverer, LedgerClient::Create(options));
  LKV_ASSIGN_OR_FAIL(auto reader, recoverer->OpenLedger(id, OpenMode::kRecover));
  EXPECT_EQ(reader->last_readable(), 63);
  for (int i = 0; i < 3; ++i) {
    // One fence record, then the re-added entries (one or two batches).
    EXPECT_LE(BookieInfo(cluster->address(i)).syncs() - syncs_before[i], 3u) << "bookie " << i;
  }
  // Step 2 goes on once two of the three bookies confirmed their fence:
  // those are never fenced again. (The third may be fenced again by every
  // window until one of its fenced reads returns, which waits for its
  // fdatasync: on a slow disk that can be every window, so its count is
  // not bounded here.)
  {
    absl::MutexLock l(&fences->mu);
    int fenced_once = 0;
    std::string counts;
    for (const auto& [bookie, n] : fences->by_bookie) {
      fenced_once += n == 1;
      absl::StrAppend(&counts, " ", bookie, "=", n);
    }
    EXPECT_GE(fenced_once, 2) << "bookies confirmed fenced were fenced again:" << counts;
  }
  ExpectReadable(*reader, 0, 63);
}

}  // namespace
}  // namespace ledgerkv::ledger
