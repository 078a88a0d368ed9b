// Write path of the ledger client against real bookies: quorum validation
// (L1), ordering and batching (L4), close (L3), ensemble changes and bookie
// crashes (L2), bad input.
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "base/fault_point.h"
#include "gtest/gtest.h"
#include "ledger/ledger_test_util.h"
#include "ledger/placement.h"
#include "proto/metadata.pb.h"

namespace ledgerkv::ledger {
namespace {

using testing::AppendRange;
using testing::ExpectReadable;
using testing::PayloadFor;
using testing::Quorums;
using testing::TestCluster;

TEST(LedgerWriteTest, L1_InvalidQuorumsAreRejectedAndNothingIsCreated) {
  LKV_ASSIGN_OR_FAIL(auto cluster, TestCluster::Start({.bookies = 3}));
  LKV_ASSIGN_OR_FAIL(auto client, cluster->NewClient());
  const std::vector<std::vector<int>> bad = {
      {2, 3, 1},  // E < Qw
      {3, 2, 3},  // Qa > Qw
      {3, 2, 0},  // Qa = 0
      {3, 0, 0}, {0, 0, 0}, {-1, -1, -1},
      {65, 2, 2},  // beyond the ack bitmask
  };
  for (const auto& q : bad) {
    auto writer = client->CreateLedger(Quorums(q[0], q[1], q[2]));
    EXPECT_EQ(writer.status().code(), absl::StatusCode::kInvalidArgument)
        << "E=" << q[0] << " Qw=" << q[1] << " Qa=" << q[2] << ": " << writer.status();
  }
  metadata::Keys keys("default");
  auto ledgers = cluster->store()->List(keys.LedgersPrefix());
  LKV_ASSERT_OK(ledgers);
  EXPECT_TRUE(ledgers->empty());
  // Not even an id was consumed.
  EXPECT_TRUE(absl::IsNotFound(cluster->store()->Get(keys.IdGen("ledger")).status()));

  LKV_ASSIGN_OR_FAIL(auto writer, client->CreateLedger(Quorums(3, 3, 1)));
  EXPECT_EQ(writer->metadata().state(), meta::v1::OPEN);
}

// The metadata store applied the create but its reply was lost (the
// outcome is unknown). The client finds its own record and goes on: the
// ledger is written and closed, instead of an error that leaves an OPEN
// ledger nobody will ever write to or close.
TEST(LedgerWriteTest, ACreateWhoseReplyWasLostFindsItsRecordAndWrites) {
  ScopedFaultPoints faults;
  LKV_ASSIGN_OR_FAIL(auto cluster, TestCluster::Start({.bookies = 3}));
  LKV_ASSIGN_OR_FAIL(auto client, cluster->NewClient());
  FaultPoints::Get().ArmAlways("ledger.create.reply_lost");
  LKV_ASSIGN_OR_FAIL(auto writer, client->CreateLedger(Quorums(3, 2, 2)));
  FaultPoints::Get().DisarmAll();
  for (const auto& r : AppendRange(*writer, 0, 9, 4)) LKV_ASSERT_OK(r);
  LKV_ASSERT_OK(writer->Close());
  metadata::Keys keys("default");
  auto ledgers = cluster->store()->List(keys.LedgersPrefix());
  LKV_ASSERT_OK(ledgers);
  ASSERT_EQ(ledgers->size(), 1u) << "one create, one ledger";
  LKV_ASSIGN_OR_FAIL(auto md, client->GetLedgerMetadata(writer->id()));
  EXPECT_EQ(md.state(), meta::v1::CLOSED);
  EXPECT_EQ(md.last_entry_id(), 9);
}

TEST(LedgerWriteTest, PlacementChoosesDistinctWritableBookiesAndExplainsShortage) {
  LKV_ASSIGN_OR_FAIL(auto cluster, TestCluster::Start({.bookies = 3}));
  metadata::Keys keys("default");
  // A read-only bookie is registered but must never be chosen.
  meta::v1::BookieRegistration ro;
  ro.set_bookie_id("read-only-bookie");
  ro.set_address("127.0.0.1:1");
  ro.set_read_only(true);
  LKV_ASSERT_OK(cluster->store()->Put(keys.Bookie("read-only-bookie"), ro.SerializeAsString(),
                                      metadata::kAnyVersion));
  Placement placement(cluster->store(), keys);
  for (int round = 0; round < 10; ++round) {
    LKV_ASSIGN_OR_FAIL(auto chosen, placement.Choose(3, {}));
    absl::flat_hash_set<std::string> ids;
    for (const auto& b : chosen) {
      ids.insert(b.bookie_id);
      EXPECT_GE(cluster->IndexOf(b.bookie_id), 0) << b.bookie_id;
      EXPECT_FALSE(b.instance_id.empty());
    }
    EXPECT_EQ(ids.size(), 3u);
  }
  LKV_ASSIGN_OR_FAIL(auto replacement,
                     placement.ChooseReplacement(absl::flat_hash_set<std::string>{
                         cluster->bookie_id(0), cluster->bookie_id(1)}));
  EXPECT_EQ(replacement.bookie_id, cluster->bookie_id(2));

  auto too_many = placement.Choose(4, {});
  EXPECT_TRUE(absl::IsUnavailable(too_many.status())) << too_many.status();
  EXPECT_NE(too_many.status().message().find("need 4, have 3"), std::string::npos)
      << too_many.status();
  EXPECT_NE(too_many.status().message().find("1 read-only"), std::string::npos);

  LKV_ASSIGN_OR_FAIL(auto client, cluster->NewClient());
  auto writer = client->CreateLedger(Quorums(4, 2, 2));
  EXPECT_TRUE(absl::IsUnavailable(writer.status())) << writer.status();
}

TEST(LedgerWriteTest, L4_AcksInIdOrderWith64InFlightAndAddsAreBatched) {
  ScopedFaultPoints faults;
  LKV_ASSIGN_OR_FAIL(auto cluster, TestCluster::Start({.bookies = 3}));
  LKV_ASSIGN_OR_FAIL(auto client, cluster->NewClient());
  LKV_ASSIGN_OR_FAIL(auto writer, client->CreateLedger(Quorums(3, 3, 2)));
  // Each round's appends are all issued while the bookies' syncs wait
  // (bounded), as when the disk is the slow part: what is measured is that
  // entries queued behind the RPCs in flight leave together, not how fast
  // this thread appends compared with a loopback round trip.
  struct Gate {
    absl::Mutex mu;
    std::shared_ptr<absl::Notification> open;
  };
  auto gate = std::make_shared<Gate>();
  FaultPoints::Get().Arm("bookie.journal.before_sync", [gate](std::string_view) {
    std::shared_ptr<absl::Notification> open;
    {
      absl::MutexLock l(&gate->mu);
      open = gate->open;
    }
    if (open != nullptr) open->WaitForNotificationWithTimeout(absl::Seconds(10));
    return false;
  });

  absl::Mutex mu;
  std::vector<int64_t> order;
  std::vector<int64_t> lac_at_callback;
  std::atomic<int> errors{0};
  constexpr int kRounds = 5, kInFlight = 64;
  for (int round = 0; round < kRounds; ++round) {
    absl::Notification all_done;
    std::atomic<int> remaining{kInFlight};
    auto open = std::make_shared<absl::Notification>();
    {
      absl::MutexLock l(&gate->mu);
      gate->open = open;
    }
    for (int k = 0; k < kInFlight; ++k) {
      writer->AppendAsync(PayloadFor(round * kInFlight + k), [&](absl::StatusOr<int64_t> r) {
        if (!r.ok()) {
          ++errors;
        } else {
          absl::MutexLock l(&mu);
          order.push_back(*r);
          lac_at_callback.push_back(writer->lac());
        }
        if (--remaining == 0) all_done.Notify();
      });
    }
    open->Notify();
    all_done.WaitForNotification();
    // LAC is the contiguous acknowledged prefix: everything so far.
    EXPECT_EQ(writer->lac(), (round + 1) * kInFlight - 1);
  }
  EXPECT_EQ(errors.load(), 0);
  ASSERT_EQ(order.size(), static_cast<size_t>(kRounds * kInFlight));
  for (size_t i = 0; i < order.size(); ++i) {
    ASSERT_EQ(order[i], static_cast<int64_t>(i)) << "completion out of order";
    // An entry's ack is never delivered before its LAC covers it.
    EXPECT_GE(lac_at_callback[i], order[i]);
  }
  // 64 appends in flight must not become 64 tiny RPCs per bookie.
  const WriterStats stats = writer->stats();
  // Third copies (Qw=3, Qa=2) may still be queued when the last ack arrives.
  EXPECT_GE(stats.entries_sent, kRounds * kInFlight * 2);
  EXPECT_LE(stats.entries_sent, kRounds * kInFlight * 3);
  EXPECT_LE(stats.add_rpcs * 4, stats.entries_sent)
      << stats.add_rpcs << " Add RPCs for " << stats.entries_sent << " entry copies";

  LKV_ASSERT_OK(writer->Close());
  LKV_ASSIGN_OR_FAIL(auto reader, client->OpenLedger(writer->id(), OpenMode::kNoRecovery));
  ExpectReadable(*reader, 0, kRounds * kInFlight - 1);
}

// A load like the log layer's: `in_flight` appends, each callback
// appending the next until `total` were made. The first `in_flight` are
// made by the callback of one starter append (entry 0), so that they leave
// as one request per bookie, as a log's do once it runs. Returns the ids
// the callbacks saw, in callback order, and fails the test if two
// callbacks ever ran at once.
std::vector<int64_t> RunCallbackPipeline(LedgerWriter& writer, int in_flight, int total) {
  // Shared with the callbacks: a failed wait below must not free it under them.
  struct Load : std::enable_shared_from_this<Load> {
    LedgerWriter* writer = nullptr;
    int total = 0;
    int in_flight = 0;
    std::atomic<int> issued{0};
    std::atomic<int> running{0};
    std::atomic<bool> overlapped{false};
    absl::Mutex mu;
    std::vector<int64_t> ids ABSL_GUARDED_BY(mu);
    std::vector<absl::Status> errors ABSL_GUARDED_BY(mu);
    absl::Notification done;
    void Issue() {
      const int i = issued.fetch_add(1);
      if (i >= total) return;
      writer->AppendAsync(PayloadFor(i), [self = shared_from_this(), i](absl::StatusOr<int64_t> r) {
        if (self->running.fetch_add(1) != 0) self->overlapped = true;
        bool last;
        {
          absl::MutexLock l(&self->mu);
          if (r.ok()) {
            self->ids.push_back(*r);
          } else {
            self->errors.push_back(r.status());
          }
          last = static_cast<int>(self->ids.size() + self->errors.size()) == self->total;
        }
        // From the callback, as the log layer does: the starter's makes
        // the pipeline, every other one keeps it full.
        for (int k = 0; k < (i == 0 ? self->in_flight : 1); ++k) self->Issue();
        self->running.fetch_sub(1);
        if (last) self->done.Notify();
      });
    }
  };
  auto load = std::make_shared<Load>();
  load->writer = &writer;
  load->total = total;
  load->in_flight = in_flight;
  load->Issue();
  EXPECT_TRUE(load->done.WaitForNotificationWithTimeout(absl::Seconds(60)));
  EXPECT_FALSE(load->overlapped.load()) << "two callbacks of one writer ran at once";
  absl::MutexLock l(&load->mu);
  for (const absl::Status& e : load->errors) ADD_FAILURE() << e;
  return load->ids;
}

// Whichever thread delivers (the bookie connection's whose reply made
// entries ready, or the writer's), callbacks come one at a time in id order
// (L4), and the appends they make are held until the batch of callbacks is
// done, so they leave in one Add request per bookie instead of one each.
TEST(LedgerWriteTest, L4_CallbacksInIdOrderAndTheirAppendsLeaveTogetherOnEitherThread) {
  LKV_ASSIGN_OR_FAIL(auto cluster, TestCluster::Start({.bookies = 3}));
  for (const bool on_reply_thread : {true, false}) {
    for (const int bookies : {1, 3}) {
      SCOPED_TRACE(absl::StrCat(on_reply_thread ? "reply thread" : "writer's thread", ", E=Qw=",
                                bookies));
      ClientOptions options;
      options.callbacks_on_reply_thread = on_reply_thread;
      LKV_ASSIGN_OR_FAIL(auto client, cluster->NewClient(options));
      LKV_ASSIGN_OR_FAIL(auto writer,
                         client->CreateLedger(Quorums(bookies, bookies, bookies == 1 ? 1 : 2)));
      constexpr int kInFlight = 64, kTotal = 64 * 30;
      const std::vector<int64_t> ids = RunCallbackPipeline(*writer, kInFlight, kTotal);
      ASSERT_EQ(ids.size(), static_cast<size_t>(kTotal));
      for (size_t i = 0; i < ids.size(); ++i) {
        ASSERT_EQ(ids[i], static_cast<int64_t>(i)) << "completion out of order";
      }
      const WriterStats stats = writer->stats();
      // The pipeline starts as one request per bookie, each reply makes its
      // 64 acks ready together, and their callbacks' appends leave as one
      // request per bookie again: about 64 entries per request (the
      // starter's and the last are smaller). Without the hold, the first
      // appends of each batch would leave one by one until the in-flight
      // cap, and the groups would split (measured: about a dozen entries
      // per request).
      EXPECT_GE(stats.entries_sent, stats.add_rpcs * 24)
          << stats.add_rpcs << " Add requests for " << stats.entries_sent << " entry copies";
      LKV_ASSERT_OK(writer->Close());
      LKV_ASSIGN_OR_FAIL(auto reader, client->OpenLedger(writer->id(), OpenMode::kNoRecovery));
      ExpectReadable(*reader, 0, kTotal - 1);
    }
  }
}

// Callbacks run on the bookie connection's thread by default: a callback
// that blocks holds up the replies of the client's other writers to that
// bookie (the documented cost), and with callbacks_on_reply_thread off it
// holds up only its own writer.
TEST(LedgerWriteTest, ABlockedCallbackHoldsUpOtherWritersOnlyOnTheReplyThread) {
  LKV_ASSIGN_OR_FAIL(auto cluster, TestCluster::Start({.bookies = 1}));
  for (const bool on_reply_thread : {true, false}) {
    SCOPED_TRACE(on_reply_thread ? "reply thread" : "writer's thread");
    // Outlive the writers, whose destructors may still run the callbacks.
    absl::Notification in_callback, release, other_done;
    ClientOptions options;
    options.callbacks_on_reply_thread = on_reply_thread;
    LKV_ASSIGN_OR_FAIL(auto client, cluster->NewClient(options));
    LKV_ASSIGN_OR_FAIL(auto blocked, client->CreateLedger(Quorums(1, 1, 1)));
    LKV_ASSIGN_OR_FAIL(auto other, client->CreateLedger(Quorums(1, 1, 1)));
    // Both writers' adds travel on the client's one connection to the bookie.
    LKV_ASSERT_OK(other->Append("warm").status());
    absl::Cleanup release_on_return = [&release] {
      if (!release.HasBeenNotified()) release.Notify();
    };
    blocked->AppendAsync("a", [&](absl::StatusOr<int64_t> r) {
      EXPECT_TRUE(r.ok()) << r.status();
      in_callback.Notify();
      release.WaitForNotification();
    });
    ASSERT_TRUE(in_callback.WaitForNotificationWithTimeout(absl::Seconds(10)));
    other->AppendAsync("b", [&](absl::StatusOr<int64_t> r) {
      EXPECT_TRUE(r.ok()) << r.status();
      other_done.Notify();
    });
    if (on_reply_thread) {
      EXPECT_FALSE(other_done.WaitForNotificationWithTimeout(absl::Milliseconds(300)))
          << "the other writer's reply was read while the connection's thread ran a callback";
      std::move(release_on_return).Invoke();
      EXPECT_TRUE(other_done.WaitForNotificationWithTimeout(absl::Seconds(10)));
    } else {
      EXPECT_TRUE(other_done.WaitForNotificationWithTimeout(absl::Seconds(10)))
          << "a callback blocked on one writer's thread held up another writer";
      std::move(release_on_return).Invoke();
    }
    LKV_ASSERT_OK(blocked->Close());
    LKV_ASSERT_OK(other->Close());
  }
}

// The writer is destroyed (on another thread) while one of its callbacks
// runs on a bookie connection's thread: the destructor waits for that
// callback, and the appends still pending end CANCELLED, each exactly once.
TEST(LedgerWriteTest, DestroyingAWriterWaitsForACallbackRunningOnAReplyThread) {
  // Outlive the writer, whose destructor may still run the callbacks.
  absl::Notification in_callback, release;
  std::atomic<bool> callback_returned{false};
  absl::Mutex mu;
  std::vector<absl::StatusOr<int64_t>> later;
  LKV_ASSIGN_OR_FAIL(auto cluster, TestCluster::Start({.bookies = 1}));
  LKV_ASSIGN_OR_FAIL(auto client, cluster->NewClient());
  LKV_ASSIGN_OR_FAIL(auto writer, client->CreateLedger(Quorums(1, 1, 1)));
  absl::Cleanup release_on_return = [&release] {
    if (!release.HasBeenNotified()) release.Notify();
  };
  writer->AppendAsync("first", [&](absl::StatusOr<int64_t> r) {
    EXPECT_TRUE(r.ok()) << r.status();
    in_callback.Notify();
    release.WaitForNotification();
    callback_returned = true;
  });
  ASSERT_TRUE(in_callback.WaitForNotificationWithTimeout(absl::Seconds(10)));
  for (int i = 0; i < 5; ++i) {
    writer->AppendAsync("later", [&](absl::StatusOr<int64_t> r) {
      absl::MutexLock l(&mu);
      later.push_back(std::move(r));
    });
  }
  std::atomic<bool> destroyed{false};
  std::thread destroyer([&] {
    writer.reset();
    destroyed = true;
  });
  absl::SleepFor(absl::Milliseconds(200));
  EXPECT_FALSE(destroyed.load()) << "the writer was destroyed while its callback was running";
  std::move(release_on_return).Invoke();
  destroyer.join();
  EXPECT_TRUE(callback_returned.load());
  absl::MutexLock l(&mu);
  ASSERT_EQ(later.size(), 5u) << "every pending append's callback runs exactly once";
  for (const auto& r : later) {
    // Acknowledged if its reply came before the destructor, else CANCELLED.
    if (!r.ok()) {
      EXPECT_EQ(r.status().code(), absl::StatusCode::kCancelled) << r.status();
    }
  }
}

// Writers `slow` and `gone` get their replies read in one batch by the
// client's connection thread, which queues a delivery for each; `slow`'s
// runs first and its callback blocks. Destroying `gone` must not wait for
// that callback (another writer's): its queued delivery finds it gone, and
// its own thread delivers its last completion.
TEST(LedgerWriteTest, DestroyingAWriterDoesNotWaitForAnotherWritersCallback) {
  // Outlive the writers, whose destructors may still run the callbacks.
  absl::Notification busy_in, busy_go, slow_in, release;
  std::atomic<int> gone_results{0};
  LKV_ASSIGN_OR_FAIL(auto cluster, TestCluster::Start({.bookies = 1}));
  LKV_ASSIGN_OR_FAIL(auto client, cluster->NewClient());
  LKV_ASSIGN_OR_FAIL(auto busy, client->CreateLedger(Quorums(1, 1, 1)));
  LKV_ASSIGN_OR_FAIL(auto slow, client->CreateLedger(Quorums(1, 1, 1)));
  LKV_ASSIGN_OR_FAIL(auto gone, client->CreateLedger(Quorums(1, 1, 1)));
  absl::Cleanup release_on_return = [&] {
    if (!busy_go.HasBeenNotified()) busy_go.Notify();
    if (!release.HasBeenNotified()) release.Notify();
  };
  const uint64_t stored_before = testing::BookieInfo(cluster->address(0)).entries_added();
  // The connection thread is held in `busy`'s callback while both replies
  // arrive, so that it reads them together afterwards.
  busy->AppendAsync("busy", [&](absl::StatusOr<int64_t>) {
    busy_in.Notify();
    busy_go.WaitForNotification();
  });
  ASSERT_TRUE(busy_in.WaitForNotificationWithTimeout(absl::Seconds(10)));
  slow->AppendAsync("slow", [&](absl::StatusOr<int64_t> r) {
    EXPECT_TRUE(r.ok()) << r.status();
    slow_in.Notify();
    release.WaitForNotification();
  });
  gone->AppendAsync("gone", [&](absl::StatusOr<int64_t>) { gone_results.fetch_add(1); });
  const absl::Time until = absl::Now() + absl::Seconds(10);
  while (testing::BookieInfo(cluster->address(0)).entries_added() < stored_before + 3 &&
         absl::Now() < until) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  absl::SleepFor(absl::Milliseconds(100));  // both replies on their way
  busy_go.Notify();
  ASSERT_TRUE(slow_in.WaitForNotificationWithTimeout(absl::Seconds(10)));

  std::atomic<bool> destroyed{false};
  absl::Notification destroyed_note;
  std::thread destroyer([&] {
    gone.reset();
    destroyed = true;
    destroyed_note.Notify();
  });
  EXPECT_TRUE(destroyed_note.WaitForNotificationWithTimeout(absl::Seconds(5)))
      << "destroying a writer waited for another writer's callback";
  std::move(release_on_return).Invoke();
  destroyer.join();
  EXPECT_EQ(gone_results.load(), 1) << "the destroyed writer's add got no callback, or two";
  LKV_ASSERT_OK(slow->Close());
  LKV_ASSERT_OK(busy->Close());
}

TEST(LedgerWriteTest, L3_CloseSealsAtLacWithLengthAndEveryEntryIsReadable) {
  LKV_ASSIGN_OR_FAIL(auto cluster, TestCluster::Start({.bookies = 3}));
  LKV_ASSIGN_OR_FAIL(auto client, cluster->NewClient());
  CreateOptions options = Quorums(3, 2, 2);
  options.custom["owner"] = "test";
  LKV_ASSIGN_OR_FAIL(auto writer, client->CreateLedger(options));
  uint64_t length = 0;
  for (int i = 0; i < 30; ++i) {
    LKV_ASSIGN_OR_FAIL(int64_t id, writer->Append(PayloadFor(i, 10 + i)));
    EXPECT_EQ(id, i);
    length += PayloadFor(i, 10 + i).size();
  }
  LKV_ASSERT_OK(writer->Close());
  LKV_ASSIGN_OR_FAIL(auto md, client->GetLedgerMetadata(writer->id()));
  EXPECT_EQ(md.state(), meta::v1::CLOSED);
  EXPECT_EQ(md.last_entry_id(), 29);
  EXPECT_EQ(md.length(), length);
  EXPECT_EQ(md.custom().at("owner"), "test");
  EXPECT_EQ(md.segments_size(), 1);

  LKV_ASSIGN_OR_FAIL(auto reader, client->OpenLedger(writer->id(), OpenMode::kRecover));
  EXPECT_TRUE(reader->closed());
  EXPECT_EQ(reader->last_readable(), 29);
  LKV_ASSIGN_OR_FAIL(auto entries, reader->Read(0, 29));
  for (int i = 0; i < 30; ++i) EXPECT_EQ(entries[i].payload, PayloadFor(i, 10 + i));
  EXPECT_EQ(reader->Read(29, 30).status().code(), absl::StatusCode::kOutOfRange);

  // An empty ledger closes at -1.
  LKV_ASSIGN_OR_FAIL(auto empty, client->CreateLedger(Quorums(2, 2, 1)));
  LKV_ASSERT_OK(empty->Close());
  EXPECT_EQ(empty->metadata().last_entry_id(), -1);
  LKV_ASSIGN_OR_FAIL(auto empty_reader, client->OpenLedger(empty->id(), OpenMode::kNoRecovery));
  EXPECT_EQ(empty_reader->last_readable(), -1);
  EXPECT_EQ(empty_reader->Read(0, 0).status().code(), absl::StatusCode::kOutOfRange);
}

TEST(LedgerWriteTest, BadInputGetsClearErrors) {
  LKV_ASSIGN_OR_FAIL(auto cluster, TestCluster::Start({.bookies = 2}));
  LKV_ASSIGN_OR_FAIL(auto client, cluster->NewClient());
  LKV_ASSIGN_OR_FAIL(auto writer, client->CreateLedger(Quorums(2, 2, 2)));
  LKV_ASSERT_OK(writer->Append("x"));
  LKV_ASSERT_OK(writer->Close());
  LKV_ASSERT_OK(writer->Close());  // idempotent
  auto appended = writer->Append("after close");
  EXPECT_EQ(appended.status().code(), absl::StatusCode::kFailedPrecondition) << appended.status();
  EXPECT_NE(appended.status().message().find("closed"), std::string::npos);

  EXPECT_TRUE(absl::IsNotFound(client->OpenLedger(987654, OpenMode::kNoRecovery).status()));
  EXPECT_TRUE(absl::IsNotFound(client->OpenLedger(987654, OpenMode::kRecover).status()));
  EXPECT_TRUE(absl::IsNotFound(client->DeleteLedger(987654)));
  EXPECT_TRUE(absl::IsNotFound(client->GetLedgerMetadata(987654).status()));

  LKV_ASSIGN_OR_FAIL(auto reader, client->OpenLedger(writer->id(), OpenMode::kNoRecovery));
  EXPECT_EQ(reader->Read(-1, 0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(reader->Read(1, 0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(reader->Read(0, 1).status().code(), absl::StatusCode::kOutOfRange);

  // An oversized entry is refused without harming the writer.
  ClientOptions small;
  small.metadata = cluster->store();
  small.max_entry_bytes = 1000;
  LKV_ASSIGN_OR_FAIL(auto small_client, LedgerClient::Create(small));
  LKV_ASSIGN_OR_FAIL(auto small_writer, small_client->CreateLedger(Quorums(2, 2, 2)));
  EXPECT_EQ(small_writer->Append(std::string(1001, 'x')).status().code(),
            absl::StatusCode::kInvalidArgument);
  LKV_ASSIGN_OR_FAIL(int64_t first_id, small_writer->Append(std::string(1000, 'x')));
  EXPECT_EQ(first_id, 0);

  ClientOptions no_store;
  EXPECT_EQ(LedgerClient::Create(no_store).status().code(), absl::StatusCode::kInvalidArgument);
  for (absl::Duration bad : {absl::ZeroDuration(), absl::Milliseconds(-1)}) {
    ClientOptions no_speculation_timeout;
    no_speculation_timeout.metadata = cluster->store();
    no_speculation_timeout.speculative_read_timeout = bad;
    EXPECT_EQ(LedgerClient::Create(no_speculation_timeout).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
  ClientOptions hold;
  hold.metadata = cluster->store();
  hold.slow_bookie_hold = absl::Milliseconds(-1);
  EXPECT_EQ(LedgerClient::Create(hold).status().code(), absl::StatusCode::kInvalidArgument);
  hold.slow_bookie_hold = absl::ZeroDuration();  // never hold: valid
  LKV_ASSERT_OK(LedgerClient::Create(hold).status());
  ClientOptions grace;
  grace.metadata = cluster->store();
  grace.recovery_readd_grace = absl::Milliseconds(-1);
  EXPECT_EQ(LedgerClient::Create(grace).status().code(), absl::StatusCode::kInvalidArgument);
  grace.recovery_readd_grace = absl::ZeroDuration();  // only Qa waited for: valid
  // Entries larger than a bookie stores, or add requests larger than its
  // frames, are refused when the client is created, not by a bookie later.
  for (int64_t bad : {int64_t{0}, (int64_t{64} << 20) - 7}) {
    ClientOptions entry;
    entry.metadata = cluster->store();
    entry.max_entry_bytes = bad;
    EXPECT_EQ(LedgerClient::Create(entry).status().code(), absl::StatusCode::kInvalidArgument)
        << bad;
    ClientOptions rpc;
    rpc.metadata = cluster->store();
    rpc.max_bytes_per_add_rpc = bad;
    EXPECT_EQ(LedgerClient::Create(rpc).status().code(), absl::StatusCode::kInvalidArgument)
        << bad;
  }
  LKV_ASSERT_OK(LedgerClient::Create(grace).status());
  // An idle time so short that a connection could be closed right after a
  // call let go of it is refused; InfiniteDuration (never close) is fine.
  for (absl::Duration bad : {absl::ZeroDuration(), absl::Milliseconds(999)}) {
    ClientOptions idle;
    idle.metadata = cluster->store();
    idle.idle_connection_close = bad;
    EXPECT_EQ(LedgerClient::Create(idle).status().code(), absl::StatusCode::kInvalidArgument);
  }
  ClientOptions never;
  never.metadata = cluster->store();
  never.idle_connection_close = absl::InfiniteDuration();
  LKV_ASSERT_OK(LedgerClient::Create(never).status());
}

// L3 at the size limit: an entry as large as a bookie stores (64 MiB with
// the client's 8-byte header) is acknowledged, read back, and recovered
// (fencing reads and a recovery add both carry it). The client's gRPC
// limits used to be exactly 64 MiB, so such an entry was acknowledged over
// the add port but no read or recovery could ever carry it back: the
// ledger could not be closed. (And a client allowed 64 MiB user payloads
// sent entries every bookie refused, and replaced healthy bookies.)
TEST(LedgerWriteTest, L3_AnEntryOfTheLargestSizeIsReadBackAndRecovered) {
  LKV_ASSIGN_OR_FAIL(auto cluster, TestCluster::Start({.bookies = 2}));
  ClientOptions options;
  options.metadata = cluster->store();
  options.max_entry_bytes = (int64_t{64} << 20) - 8;
  LKV_ASSIGN_OR_FAIL(auto client, LedgerClient::Create(options));
  LKV_ASSIGN_OR_FAIL(auto writer, client->CreateLedger(Quorums(2, 2, 2)));
  std::string big((size_t{64} << 20) - 8, 'x');
  big.replace(0, 5, "first");
  big.replace(big.size() - 4, 4, "last");
  LKV_ASSERT_OK(writer->Append("small").status());
  // The last entry: above the LAC any bookie holds, so recovery must read
  // it (with the fence flag) and add it again.
  LKV_ASSIGN_OR_FAIL(int64_t id, writer->Append(big));
  ASSERT_EQ(id, 1);
  LKV_ASSIGN_OR_FAIL(auto reader, client->OpenLedger(writer->id(), OpenMode::kNoRecovery));
  LKV_ASSIGN_OR_FAIL(auto tail, reader->Read(0, 0));
  ASSERT_EQ(tail.size(), 1u);
  EXPECT_EQ(tail[0].payload, "small");
  LKV_ASSIGN_OR_FAIL(auto other, cluster->NewClient(options));
  LKV_ASSIGN_OR_FAIL(auto recovered, other->OpenLedger(writer->id(), OpenMode::kRecover));
  EXPECT_EQ(recovered->metadata().last_entry_id(), 1);
  LKV_ASSIGN_OR_FAIL(auto entries, recovered->Read(0, 1));
  ASSERT_EQ(entries.size(), 2u);
  EXPECT_EQ(entries[0].payload, "small");
  EXPECT_TRUE(entries[1].payload == big) << "the largest entry came back different";
}

TEST(LedgerWriteTest, L2_BookieStoppedMidStreamEnsembleChangeKeepsEveryAckedEntry) {
  LKV_ASSIGN_OR_FAIL(auto cluster, TestCluster::Start({.bookies = 4}));
  LKV_ASSIGN_OR_FAIL(auto client, cluster->NewClient());
  LKV_ASSIGN_OR_FAIL(auto writer, client->CreateLedger(Quorums(3, 2, 2)));
  const meta::v1::Segment first_segment = writer->metadata().segments(0);
  const std::string victim = first_segment.bookies(1);

  for (const auto& r : AppendRange(*writer, 0, 39, 16)) LKV_ASSERT_OK(r);
  // Stop an ensemble bookie while adds are in flight.
  absl::Mutex mu;
  std::vector<absl::StatusOr<int64_t>> results;
  for (int64_t i = 40; i < 120; ++i) {
    writer->AppendAsync(PayloadFor(i), [&](absl::StatusOr<int64_t> r) {
      absl::MutexLock l(&mu);
      results.push_back(std::move(r));
    });
    if (i == 50) cluster->StopBookie(cluster->IndexOf(victim));
  }
  {
    absl::MutexLock l(&mu);
    auto all = [&]() { return results.size() == 80u; };
    mu.Await(absl::Condition(&all));
  }
  for (size_t k = 0; k < results.size(); ++k) {
    ASSERT_TRUE(results[k].ok()) << results[k].status();
    EXPECT_EQ(*results[k], static_cast<int64_t>(40 + k));
  }
  LKV_ASSERT_OK(writer->Close());
  EXPECT_EQ(writer->stats().ensemble_changes, 1);

  LKV_ASSIGN_OR_FAIL(auto md, client->GetLedgerMetadata(writer->id()));
  EXPECT_EQ(md.last_entry_id(), 119);
  ASSERT_EQ(md.segments_size(), 2);
  const meta::v1::Segment& second = md.segments(1);
  EXPECT_GT(second.first_entry_id(), 39);  // LAC was at least 39 when it failed
  EXPECT_LE(second.first_entry_id(), 52);
  for (int i = 0; i < 3; ++i) {
    EXPECT_NE(second.bookies(i), victim);
    if (i != 1) {
      EXPECT_EQ(second.bookies(i), first_segment.bookies(i));
    }
  }
  EXPECT_EQ(second.bookie_instances(1),
            cluster->bookie(cluster->IndexOf(second.bookies(1)))->instance_id());

  LKV_ASSIGN_OR_FAIL(auto reader, client->OpenLedger(writer->id(), OpenMode::kNoRecovery));
  ExpectReadable(*reader, 0, 119);
}

TEST(LedgerWriteTest, L2_AckedEntriesSurviveBookieCrashWithinQaMinusOne) {
  LKV_ASSIGN_OR_FAIL(auto cluster, TestCluster::Start({.bookies = 3}));
  LKV_ASSIGN_OR_FAIL(auto client, cluster->NewClient());
  LKV_ASSIGN_OR_FAIL(auto writer, client->CreateLedger(Quorums(3, 3, 2)));
  const uint64_t id = writer->id();
  for (const auto& r : AppendRange(*writer, 0, 59, 32)) LKV_ASSERT_OK(r);
  // One bookie (Qa-1) and the writer crash.
  cluster->StopBookie(1);
  writer.reset();

  LKV_ASSIGN_OR_FAIL(auto other, cluster->NewClient());
  LKV_ASSIGN_OR_FAIL(auto reader, other->OpenLedger(id, OpenMode::kRecover));
  EXPECT_EQ(reader->last_readable(), 59);
  ExpectReadable(*reader, 0, 59);
  // (A bookie process killed with kill -9 and restarted:
  // LedgerProcessTest in tests/ledger_process_test.cc.)
}

}  // namespace
}  // namespace ledgerkv::ledger
