// Read path of the ledger client against real bookies: the LAC bound (L6),
// tailing readers, corrupt replicas (L10), deletion and bookie GC.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "base/fault_point.h"
#include "ledger/client_core.h"
#include "ledger/entry_format.h"
#include "ledger/ledger_test_util.h"
#include "ledger/replica_read.h"
#include "proto/bookie.grpc.pb.h"

namespace ledgerkv::ledger {
namespace {

using testing::CorruptJournal;
using testing::ExpectReadable;
using testing::FlakyStore;
using testing::PayloadFor;
using testing::Quorums;
using testing::TestCluster;

// No explicit LAC writes (the bookies' LAC moves only with appends), and
// the LAC read waits for every bookie rather than settling 500 ms after the
// first answer: a loaded machine must not make a reader see an older LAC
// than the one these tests check for.
ClientOptions WithoutExplicitLacOrSpeculation() {
  ClientOptions options;
  options.rpc_timeout = absl::Seconds(10);
  options.explicit_lac_delay = absl::InfiniteDuration();
  options.speculative_read_timeout = absl::InfiniteDuration();
  return options;
}

// An answer is noted when its round is decided, possibly long after it
// arrived: it clears a slow mark only if the mark is older than the call it
// answered, never one a later failure set. Zero hold: nothing is held;
// an infinite one holds until an answer.
TEST(SlowBookiesTest, AnAnswerClearsOnlyAMarkOlderThanTheCallItAnswered) {
  SlowBookies slow(absl::Seconds(30));
  const absl::Time sent_before = absl::Now() - absl::Milliseconds(1);
  slow.Mark("b");
  EXPECT_TRUE(slow.IsSlow("b"));
  EXPECT_FALSE(slow.IsSlow("other"));
  slow.Clear("b", sent_before);
  EXPECT_TRUE(slow.IsSlow("b")) << "an answer to a call sent before the mark cleared it";
  slow.Clear("b", absl::Now());
  EXPECT_FALSE(slow.IsSlow("b"));

  SlowBookies none(absl::ZeroDuration());
  none.Mark("b");
  EXPECT_FALSE(none.IsSlow("b"));
  SlowBookies forever(absl::InfiniteDuration());
  forever.Mark("b");
  EXPECT_TRUE(forever.IsSlow("b"));
  forever.Clear("b", absl::Now());
  EXPECT_FALSE(forever.IsSlow("b"));
}

TEST(LedgerReadTest, L6_ReaderNeverSeesBeyondLacOrLastEntry) {
  LKV_ASSIGN_OR_FAIL(auto cluster, TestCluster::Start({.bookies = 3}));
  // Without explicit LAC writes the bookies' LAC stays one entry behind.
  LKV_ASSIGN_OR_FAIL(auto client, cluster->NewClient(WithoutExplicitLacOrSpeculation()));
  LKV_ASSIGN_OR_FAIL(auto writer, client->CreateLedger(Quorums(3, 2, 2)));
  for (int i = 0; i < 10; ++i) LKV_ASSERT_OK(writer->Append(PayloadFor(i)));

  LKV_ASSIGN_OR_FAIL(auto reader, client->OpenLedger(writer->id(), OpenMode::kNoRecovery));
  EXPECT_FALSE(reader->closed());
  // Entry 9 is on the bookies, but only entry 10 would carry LAC 9.
  EXPECT_EQ(reader->last_readable(), 8);
  EXPECT_LE(reader->last_readable(), writer->lac());
  auto beyond = reader->Read(9, 9);
  EXPECT_EQ(beyond.status().code(), absl::StatusCode::kOutOfRange) << beyond.status();
  EXPECT_EQ(reader->Read(5, 12).status().code(), absl::StatusCode::kOutOfRange);
  ExpectReadable(*reader, 0, 8);

  for (int i = 10; i < 20; ++i) LKV_ASSERT_OK(writer->Append(PayloadFor(i)));
  LKV_ASSIGN_OR_FAIL(int64_t lac, reader->ReadLac());
  EXPECT_EQ(lac, 18);
  ExpectReadable(*reader, 9, 18);

  LKV_ASSERT_OK(writer->Close());
  LKV_ASSIGN_OR_FAIL(lac, reader->ReadLac());
  EXPECT_EQ(lac, 19);
  EXPECT_TRUE(reader->closed());
  ExpectReadable(*reader, 19, 19);
  EXPECT_EQ(reader->Read(19, 20).status().code(), absl::StatusCode::kOutOfRange);
}

TEST(LedgerReadTest, TailingReaderWaitForLacWakesWhenTheWriterAppends) {
  LKV_ASSIGN_OR_FAIL(auto cluster, TestCluster::Start({.bookies = 3}));
  // The LAC moves only with appends here (no explicit LAC writes), so the
  // first wait must time out.
  LKV_ASSIGN_OR_FAIL(auto client, cluster->NewClient(WithoutExplicitLacOrSpeculation()));
  LKV_ASSIGN_OR_FAIL(auto writer, client->CreateLedger(Quorums(3, 2, 2)));
  LKV_ASSERT_OK(writer->Append(PayloadFor(0)));
  LKV_ASSERT_OK(writer->Append(PayloadFor(1)));
  LKV_ASSIGN_OR_FAIL(auto reader, client->OpenLedger(writer->id(), OpenMode::kNoRecovery));
  ASSERT_EQ(reader->last_readable(), 0);

  EXPECT_EQ(reader->WaitForLac(0, absl::Milliseconds(200)).status().code(),
            absl::StatusCode::kDeadlineExceeded);

  absl::Notification woke;
  absl::StatusOr<int64_t> waited;
  const absl::Time start = absl::Now();
  std::thread tail([&] {
    waited = reader->WaitForLac(0, absl::Seconds(20));
    woke.Notify();
  });
  EXPECT_FALSE(woke.WaitForNotificationWithTimeout(absl::Milliseconds(300)));
  LKV_ASSERT_OK(writer->Append(PayloadFor(2)));  // carries LAC 1
  tail.join();
  ASSERT_TRUE(waited.ok()) << waited.status();
  EXPECT_GE(*waited, 1);
  EXPECT_LT(absl::Now() - start, absl::Seconds(5)) << "the long poll did not wake on the append";
  ExpectReadable(*reader, 0, 1);

  LKV_ASSERT_OK(writer->Close());
  LKV_ASSIGN_OR_FAIL(int64_t last, reader->WaitForLac(1, absl::Seconds(5)));
  EXPECT_EQ(last, 2);
  EXPECT_EQ(reader->WaitForLac(2, absl::Seconds(5)).status().code(),
            absl::StatusCode::kOutOfRange);
}

// A writer that stops appending writes its LAC to its bookies after
// explicit_lac_delay (docs/ledger-protocol.md, "Explicit LAC writes"): a
// tailing reader sees the last entry without waiting for another append,
// and still never beyond the writer's LAC (L6). Once per quiet period.
TEST(LedgerReadTest, L6_TailingReaderSeesAnIdleWritersLastEntryThroughAnExplicitLac) {
  LKV_ASSIGN_OR_FAIL(auto cluster, TestCluster::Start({.bookies = 3}));
  LKV_ASSIGN_OR_FAIL(auto client, cluster->NewClient());
  LKV_ASSIGN_OR_FAIL(auto writer, client->CreateLedger(Quorums(3, 2, 2)));
  for (int i = 0; i < 3; ++i) LKV_ASSERT_OK(writer->Append(PayloadFor(i)));
  LKV_ASSIGN_OR_FAIL(auto reader, client->OpenLedger(writer->id(), OpenMode::kNoRecovery));

  // Entry 2 is the last one: no later entry will ever carry LAC 2.
  const absl::Time start = absl::Now();
  LKV_ASSIGN_OR_FAIL(int64_t lac, reader->WaitForLac(1, absl::Seconds(10)));
  EXPECT_EQ(lac, 2);
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_LE(lac, writer->lac());
  ExpectReadable(*reader, 0, 2);
  EXPECT_EQ(reader->Read(3, 3).status().code(), absl::StatusCode::kOutOfRange);

  // One write per bookie of the segment for this quiet period; none while
  // the LAC stands still.
  const int64_t writes = writer->stats().lac_writes;
  EXPECT_GE(writes, 3);
  EXPECT_EQ(writes % 3, 0);
  absl::SleepFor(absl::Milliseconds(300));
  EXPECT_EQ(writer->stats().lac_writes, writes);

  // The next quiet period after more appends writes again.
  LKV_ASSERT_OK(writer->Append(PayloadFor(3)));
  LKV_ASSIGN_OR_FAIL(lac, reader->WaitForLac(2, absl::Seconds(10)));
  EXPECT_EQ(lac, 3);
  EXPECT_GE(writer->stats().lac_writes, writes + 3);
  ExpectReadable(*reader, 3, 3);
}


// Range reads are batched (one Read RPC carries many entries), also with
// striping (E > Qw), where each bookie holds only runs of Qw entries out of
// every E: a chunk of up to 1024 entries costs one request per bookie it
// needs, not one per run (docs/ledger-protocol.md, "Range reads").
// Two refreshes of one reader race: the slower one read the metadata while
// the ledger was OPEN and returns after the faster one saw it CLOSED. The
// reader keeps the newer metadata: a closed ledger never reads as open
// again, and a tailer is told it is closed instead of waiting for more.
TEST(LedgerReadTest, AReaderNeverGoesBackToOlderMetadataThanItHasSeen) {
  LKV_ASSIGN_OR_FAIL(auto cluster, TestCluster::Start({.bookies = 3}));
  LKV_ASSIGN_OR_FAIL(auto writer_client, cluster->NewClient());
  LKV_ASSIGN_OR_FAIL(auto writer, writer_client->CreateLedger(Quorums(3, 2, 2)));
  for (int i = 0; i < 10; ++i) LKV_ASSERT_OK(writer->Append(PayloadFor(i)));

  FlakyStore store(cluster->store());
  absl::Notification held, release;
  std::atomic<bool> hold_next{false};
  store.after_get = [&](std::string_view) {
    if (!hold_next.exchange(false)) return;
    held.Notify();
    release.WaitForNotification();
  };
  ClientOptions options;
  options.metadata = &store;
  options.rpc_timeout = absl::Seconds(2);
  LKV_ASSIGN_OR_FAIL(auto client, LedgerClient::Create(options));
  LKV_ASSIGN_OR_FAIL(auto reader, client->OpenLedger(writer->id(), OpenMode::kNoRecovery));
  ASSERT_FALSE(reader->closed());

  hold_next = true;
  std::thread slow([&] { IgnoreError(reader->ReadLac().status()); });
  held.WaitForNotification();  // the slow refresh holds OPEN metadata
  LKV_ASSERT_OK(writer->Close());
  auto fast = reader->ReadLac();
  ASSERT_TRUE(fast.ok()) << fast.status();
  EXPECT_EQ(*fast, 9);
  ASSERT_TRUE(reader->closed());
  release.Notify();
  slow.join();

  EXPECT_TRUE(reader->closed()) << "an older load turned the closed ledger back to open";
  EXPECT_EQ(reader->metadata().state(), meta::v1::CLOSED);
  EXPECT_EQ(reader->last_readable(), 9);
  EXPECT_EQ(reader->WaitForLac(9, absl::Milliseconds(200)).status().code(),
            absl::StatusCode::kOutOfRange);
}

// A client that never sends a speculative read: tests that count Read RPCs
// must not see one sent because a loaded test machine was slow to answer.
ClientOptions WithoutSpeculativeReads() {
  ClientOptions options;
  options.rpc_timeout = absl::Seconds(10);
  options.speculative_read_timeout = absl::InfiniteDuration();
  return options;
}

TEST(LedgerReadTest, RangeReadSendsOneRequestPerBookiePerChunkAlsoWhenStriped) {
  LKV_ASSIGN_OR_FAIL(auto cluster, TestCluster::Start({.bookies = 3}));
  LKV_ASSIGN_OR_FAIL(auto client, cluster->NewClient(WithoutSpeculativeReads()));
  auto read_requests = [&] {
    uint64_t n = 0;
    for (int i = 0; i < cluster->size(); ++i) {
      n += testing::BookieInfo(cluster->bookie(i)->address()).read_requests();
    }
    return n;
  };
  constexpr int64_t kEntries = 3000;  // chunks of 1024, 1024 and 952 entries
  struct Case {
    int e, qw, qa;
    uint64_t max_requests;  // bookies needed per chunk x 3 chunks
  };
  auto entries_stored = [&] {
    uint64_t n = 0;
    for (int i = 0; i < cluster->size(); ++i) {
      n += testing::BookieInfo(cluster->bookie(i)->address()).entries_added();
    }
    return n;
  };
  uint64_t copies = 0;  // every case's entries times Qw
  for (const Case& c : {Case{3, 3, 2, 3}, Case{3, 2, 2, 6}}) {
    SCOPED_TRACE(absl::StrCat("E=", c.e, " Qw=", c.qw, " Qa=", c.qa));
    LKV_ASSIGN_OR_FAIL(auto writer, client->CreateLedger(Quorums(c.e, c.qw, c.qa)));
    for (const auto& r : testing::AppendRange(*writer, 0, kEntries - 1, 256)) LKV_ASSERT_OK(r);
    LKV_ASSERT_OK(writer->Close());
    // With Qa < Qw an entry is acknowledged before its last copy is
    // stored: a replica still catching up would answer NO_SUCH_ENTRY for
    // its tail and cost a request more. Count requests against full replicas.
    copies += static_cast<uint64_t>(kEntries) * c.qw;
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (entries_stored() < copies && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(5));
    ASSERT_GE(entries_stored(), copies);
    LKV_ASSIGN_OR_FAIL(auto reader, client->OpenLedger(writer->id(), OpenMode::kNoRecovery));
    const uint64_t before = read_requests();
    ExpectReadable(*reader, 0, kEntries - 1);
    const uint64_t sent = read_requests() - before;
    EXPECT_GE(sent, 3u);  // at least one per chunk: the counter counts
    EXPECT_LE(sent, c.max_requests);
  }
}

// A replica that lacks a tail of the range (it may, with Qa < Qw, or
// while lagging) says so for the whole tail in one answer, so a striped
// read stays batched around it instead of learning one id per round.
TEST(LedgerReadTest, StripedReadAroundAReplicaMissingATailStaysBatched) {
  LKV_ASSIGN_OR_FAIL(auto cluster, TestCluster::Start({.bookies = 4}));
  LKV_ASSIGN_OR_FAIL(auto client, cluster->NewClient(WithoutSpeculativeReads()));
  constexpr int64_t kEntries = 3000, kHeldByAll = 100;
  uint64_t id = 0;
  meta::v1::LedgerMetadata md;
  {
    LKV_ASSIGN_OR_FAIL(auto writer, client->CreateLedger(Quorums(4, 2, 2)));
    id = writer->id();
    md = writer->metadata();
  }  // dropped without a close: the entries and the close are written below
  const meta::v1::Segment& segment = md.segments(0);
  // The bookie at ensemble index 0 never gets entries past kHeldByAll.
  std::vector<std::vector<bookie::v1::Entry>> held(4);
  uint64_t length = 0;
  for (int64_t e = 0; e < kEntries; ++e) {
    const std::string payload = PayloadFor(e);
    length += payload.size();
    const bookie::v1::Entry entry = MakeEntry(id, e, e - 1, length, payload);
    for (int i : WriteSet(e, 4, 2)) {
      if (i != 0 || e <= kHeldByAll) held[i].push_back(entry);
    }
  }
  for (int i = 0; i < 4; ++i) {
    const int b = cluster->IndexOf(segment.bookies(i));
    ASSERT_GE(b, 0);
    auto stub = bookie::v1::Bookie::NewStub(
        grpc::CreateChannel(cluster->address(b), grpc::InsecureChannelCredentials()));
    for (size_t from = 0; from < held[i].size(); from += 256) {
      bookie::v1::AddRequest req;
      req.set_expected_instance_id(segment.bookie_instances(i));
      for (size_t k = from; k < std::min(held[i].size(), from + 256); ++k) {
        *req.add_entries() = held[i][k];
      }
      bookie::v1::AddResponse resp;
      grpc::ClientContext ctx;
      ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
      ASSERT_TRUE(stub->Add(&ctx, req, &resp).ok());
      for (const auto& r : resp.results()) ASSERT_EQ(r.code(), bookie::v1::OK);
    }
  }
  const metadata::Keys keys(ClientOptions().cluster);
  LKV_ASSIGN_OR_FAIL(metadata::VersionedValue stored, cluster->store()->Get(keys.Ledger(id)));
  md.set_state(meta::v1::CLOSED);
  md.set_last_entry_id(kEntries - 1);
  md.set_length(length);
  LKV_ASSERT_OK(cluster->store()->Put(keys.Ledger(id), md.SerializeAsString(), stored.version));

  auto read_requests = [&] {
    uint64_t n = 0;
    for (int i = 0; i < cluster->size(); ++i) {
      n += testing::BookieInfo(cluster->address(i)).read_requests();
    }
    return n;
  };
  LKV_ASSIGN_OR_FAIL(auto reader, client->OpenLedger(id, OpenMode::kNoRecovery));
  ASSERT_TRUE(reader->closed());
  const uint64_t before = read_requests();
  ExpectReadable(*reader, 0, kEntries - 1);
  const uint64_t sent = read_requests() - before;
  // Two requests per chunk of 1024, then one more per chunk for the ids the
  // short replica lacks: 12 at most. One id per round would be hundreds.
  EXPECT_GE(sent, 3u);
  EXPECT_LE(sent, 12u);
}

// Entries 0..9 in a closed E=2 Qw=2 ledger: a copy on each of the two
// bookies of `cluster`.
void WriteTenEntriesOnBothBookies(TestCluster& cluster, meta::v1::LedgerMetadata* md) {
  LKV_ASSIGN_OR_FAIL(auto client, cluster.NewClient());
  LKV_ASSIGN_OR_FAIL(auto writer, client->CreateLedger(Quorums(2, 2, 2)));
  for (int i = 0; i < 10; ++i) LKV_ASSERT_OK(writer->Append(PayloadFor(i)));
  LKV_ASSERT_OK(writer->Close());
  *md = writer->metadata();
}

TEST(LedgerReadTest, L10_CorruptReplicaIsSkippedAndNoIntactReplicaIsDataLoss) {
  LKV_ASSIGN_OR_FAIL(auto cluster, TestCluster::Start({.bookies = 2}));
  meta::v1::LedgerMetadata md;
  ASSERT_NO_FATAL_FAILURE(WriteTenEntriesOnBothBookies(*cluster, &md));
  const uint64_t id = md.id();
  cluster->StopBookie(0);
  cluster->StopBookie(1);
  // Entry 3: one replica corrupt. Entry 6: both.
  EXPECT_EQ(CorruptJournal(cluster->data_dir(0), "payload-3-"), 1);
  EXPECT_EQ(CorruptJournal(cluster->data_dir(0), "payload-6-"), 1);
  EXPECT_EQ(CorruptJournal(cluster->data_dir(1), "payload-6-"), 1);
  LKV_ASSERT_OK(cluster->RestartBookie(0));
  LKV_ASSERT_OK(cluster->RestartBookie(1));

  LKV_ASSIGN_OR_FAIL(auto client, cluster->NewClient());
  LKV_ASSIGN_OR_FAIL(auto reader, client->OpenLedger(id, OpenMode::kNoRecovery));
  ExpectReadable(*reader, 0, 5);  // entry 3 from the intact replica
  ExpectReadable(*reader, 3, 3);
  auto lost = reader->Read(6, 6);
  EXPECT_EQ(lost.status().code(), absl::StatusCode::kDataLoss) << lost.status();
  EXPECT_EQ(reader->Read(0, 9).status().code(), absl::StatusCode::kDataLoss);
  ExpectReadable(*reader, 7, 9);
}

// Speculation changes a read's latency, not whether it succeeds: the
// replica asked first (ensemble index 0) is slower than the speculative
// timeout and holds the only intact copy of entry 3; the other one is
// corrupt. The slow read is given up on, the other replica answers CORRUPT,
// and the slow one is asked again and waited for: the entry is read, not
// reported UNAVAILABLE.
TEST(LedgerReadTest, L10_ASlowReplicaWithTheOnlyIntactCopyIsWaitedForOnceTheOthersFail) {
  ScopedFaultPoints faults;
  LKV_ASSIGN_OR_FAIL(auto cluster, TestCluster::Start({.bookies = 2}));
  meta::v1::LedgerMetadata md;
  ASSERT_NO_FATAL_FAILURE(WriteTenEntriesOnBothBookies(*cluster, &md));
  const std::string slow_id = md.segments(0).bookies(0);
  const int corrupt = cluster->IndexOf(md.segments(0).bookies(1));
  ASSERT_GE(corrupt, 0);
  cluster->StopBookie(corrupt);
  EXPECT_EQ(CorruptJournal(cluster->data_dir(corrupt), "payload-3-"), 1);
  LKV_ASSERT_OK(cluster->RestartBookie(corrupt));
  FaultPoints::Get().Arm("bookie.read.start", [slow_id](std::string_view bookie) {
    if (bookie == slow_id) absl::SleepFor(absl::Milliseconds(500));
    return false;
  });

  ClientOptions options;
  options.rpc_timeout = absl::Seconds(10);
  options.speculative_read_timeout = absl::Milliseconds(50);
  LKV_ASSIGN_OR_FAIL(auto client, cluster->NewClient(options));
  LKV_ASSIGN_OR_FAIL(auto reader, client->OpenLedger(md.id(), OpenMode::kNoRecovery));
  ExpectReadable(*reader, 3, 3);
  ExpectReadable(*reader, 0, 9);
}

// Recovery reads the confirmed entry it starts from on every replica at
// once (ReadEntryFromAnyReplica), under the range reader's rules: an intact
// copy wins; a corrupt copy is never absence (L10) and DATA_LOSS needs every
// replica's answer; and a reply that holds nothing for the entry is no
// answer at all (only a positive NO_SUCH_ENTRY counts towards absence), so
// the entry is then UNAVAILABLE, not lost.
TEST(LedgerReadTest, L10_ReadingOneEntryFromAnyReplicaFollowsTheRangeReadersRules) {
  ScopedFaultPoints faults;
  LKV_ASSIGN_OR_FAIL(auto cluster, TestCluster::Start({.bookies = 2}));
  meta::v1::LedgerMetadata md;
  ASSERT_NO_FATAL_FAILURE(WriteTenEntriesOnBothBookies(*cluster, &md));
  cluster->StopBookie(0);
  cluster->StopBookie(1);
  EXPECT_EQ(CorruptJournal(cluster->data_dir(0), "payload-3-"), 1);
  EXPECT_EQ(CorruptJournal(cluster->data_dir(0), "payload-6-"), 1);
  EXPECT_EQ(CorruptJournal(cluster->data_dir(1), "payload-6-"), 1);
  LKV_ASSERT_OK(cluster->RestartBookie(0));
  LKV_ASSERT_OK(cluster->RestartBookie(1));

  ClientOptions options;
  options.metadata = cluster->store();
  ClientCore core(options);
  auto three = ReadEntryFromAnyReplica(core, md, 3);
  ASSERT_TRUE(three.ok()) << three.status();
  EXPECT_EQ(UserPayload(*three), PayloadFor(3));
  EXPECT_TRUE(absl::IsDataLoss(ReadEntryFromAnyReplica(core, md, 6).status()));
  EXPECT_TRUE(absl::IsDataLoss(ReadEntryFromAnyReplica(core, md, 50).status()));

  const std::string empty = md.segments(0).bookies(0);
  FaultPoints::Get().Arm("bookie.read.empty_reply",
                         [empty](std::string_view bookie) { return bookie == empty; });
  const auto unread = ReadEntryFromAnyReplica(core, md, 50);
  EXPECT_TRUE(absl::IsUnavailable(unread.status())) << unread.status();
  auto seven = ReadEntryFromAnyReplica(core, md, 7);
  ASSERT_TRUE(seven.ok()) << seven.status();
  EXPECT_EQ(UserPayload(*seven), PayloadFor(7));

  // The range reader: an answer without the first entry asked for is no
  // answer for any entry of the request (nor is it asked again forever).
  auto tail = ReadReplicas(core, md, 7, 9);
  ASSERT_TRUE(tail.ok()) << tail.status();
  for (int i = 7; i <= 9; ++i) EXPECT_EQ(UserPayload((*tail)[i - 7]), PayloadFor(i));
  const auto six = ReadReplicas(core, md, 6, 6);
  EXPECT_TRUE(absl::IsUnavailable(six.status())) << six.status();
}

// A corrupt copy on one replica says nothing about the other: while that one
// cannot be read the entry may be intact there, so the read is UNAVAILABLE
// (retry later), never DATA_LOSS; once it answers, the entry is read.
TEST(LedgerReadTest, L10_CorruptReplicaWithTheOtherUnreachableIsUnavailableNotDataLoss) {
  LKV_ASSIGN_OR_FAIL(auto cluster, TestCluster::Start({.bookies = 2}));
  meta::v1::LedgerMetadata md;
  ASSERT_NO_FATAL_FAILURE(WriteTenEntriesOnBothBookies(*cluster, &md));
  const uint64_t id = md.id();
  cluster->StopBookie(0);
  cluster->StopBookie(1);
  EXPECT_EQ(CorruptJournal(cluster->data_dir(0), "payload-3-"), 1);
  LKV_ASSERT_OK(cluster->RestartBookie(0));

  LKV_ASSIGN_OR_FAIL(auto client, cluster->NewClient());
  LKV_ASSIGN_OR_FAIL(auto reader, client->OpenLedger(id, OpenMode::kNoRecovery));
  auto unknown = reader->Read(3, 3);
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kUnavailable) << unknown.status();
  EXPECT_EQ(reader->Read(0, 9).status().code(), absl::StatusCode::kUnavailable);

  LKV_ASSERT_OK(cluster->RestartBookie(1));
  ExpectReadable(*reader, 0, 9);
}

// Asks bookie `address` directly for entry 0 of `ledger_id`.
bookie::v1::Code RawReadCode(const std::string& address, uint64_t ledger_id) {
  auto stub = bookie::v1::Bookie::NewStub(
      grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
  bookie::v1::ReadRequest request;
  request.set_ledger_id(ledger_id);
  request.set_first_entry_id(0);
  request.set_count(1);
  bookie::v1::ReadResponse response;
  grpc::Status status = stub->Read(&ctx, request, &response);
  if (!status.ok()) return bookie::v1::IO_ERROR;
  if (response.code() != bookie::v1::OK) return response.code();
  return response.results_size() > 0 ? response.results(0).code() : bookie::v1::CODE_UNSPECIFIED;
}

TEST(LedgerReadTest, DeleteThenBookieGcReclaimsEntriesAndKeepsOtherLedgers) {
  LKV_ASSIGN_OR_FAIL(auto cluster, TestCluster::Start({.bookies = 3}));
  LKV_ASSIGN_OR_FAIL(auto client, cluster->NewClient());
  // Qa = Qw: every bookie holds every entry once it is acknowledged.
  LKV_ASSIGN_OR_FAIL(auto doomed, client->CreateLedger(Quorums(3, 3, 3)));
  LKV_ASSIGN_OR_FAIL(auto kept, client->CreateLedger(Quorums(3, 3, 3)));
  for (int i = 0; i < 5; ++i) {
    LKV_ASSERT_OK(doomed->Append(PayloadFor(i)));
    LKV_ASSERT_OK(kept->Append(PayloadFor(i)));
  }
  LKV_ASSERT_OK(doomed->Close());
  LKV_ASSERT_OK(kept->Close());
  for (int b = 0; b < 3; ++b) {
    EXPECT_EQ(RawReadCode(cluster->bookie(b)->address(), doomed->id()), bookie::v1::OK);
  }

  LKV_ASSERT_OK(client->DeleteLedger(doomed->id()));
  EXPECT_TRUE(absl::IsNotFound(client->OpenLedger(doomed->id(), OpenMode::kNoRecovery).status()));
  EXPECT_TRUE(absl::IsNotFound(client->DeleteLedger(doomed->id())));
  for (int b = 0; b < 3; ++b) {
    LKV_ASSERT_OK(cluster->bookie(b)->RunGcOnce());
    EXPECT_EQ(RawReadCode(cluster->bookie(b)->address(), doomed->id()),
              bookie::v1::NO_SUCH_LEDGER);
  }
  LKV_ASSIGN_OR_FAIL(auto reader, client->OpenLedger(kept->id(), OpenMode::kNoRecovery));
  ExpectReadable(*reader, 0, 4);
}

}  // namespace
}  // namespace ledgerkv::ledger
