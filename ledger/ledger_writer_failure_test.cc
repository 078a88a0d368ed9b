// How a writer ends (fenced, or unable to replace a bookie) and what it
// survives (transient metadata store failures, a bookie re-provisioned
// under its id with no spare) against real bookies: an entry that reached
// Qa before the end is still acknowledged (L2), and neither a store hiccup
// during an ensemble change nor a bookie's new instance ends the writer.
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "base/fault_point.h"
#include "gtest/gtest.h"
#include "ledger/ledger_test_util.h"
#include "ledger/placement.h"
#include "metadata/metadata_store.h"
#include "proto/metadata.pb.h"

namespace ledgerkv::ledger {
namespace {

using testing::AppendRange;
using testing::FlakyStore;
using testing::ExpectReadable;
using testing::PayloadFor;
using testing::Quorums;
using testing::TestCluster;

// Waits until each bookie holds `n` entries. (Whether their replies have
// reached the writer is the caller's to wait for: ledger.writer.acked.)
void WaitUntilDurable(const std::vector<std::string>& addresses, int64_t n) {
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  for (const std::string& address : addresses) {
    while (static_cast<int64_t>(testing::BookieInfo(address).entries_added()) < n && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(5));
    }
    ASSERT_GE(static_cast<int64_t>(testing::BookieInfo(address).entries_added()), n) << address;
  }
}

// Counts the replies writer `id` takes in for entries first..last.
std::shared_ptr<std::atomic<int>> CountAcks(uint64_t id, int64_t first, int64_t last) {
  auto acks = std::make_shared<std::atomic<int>>(0);
  FaultPoints::Get().Arm("ledger.writer.acked", [id, first, last, acks](std::string_view arg) {
    for (int64_t i = first; i <= last; ++i) {
      if (arg == absl::StrCat(id, " ", i)) acks->fetch_add(1);
    }
    return false;
  });
  return acks;
}

// Collects callback results in call order.
class Results {
 public:
  LedgerWriter::AddCallback Callback() {
    return [this](absl::StatusOr<int64_t> r) {
      absl::MutexLock l(&mu_);
      results_.push_back(std::move(r));
    };
  }
  std::vector<absl::StatusOr<int64_t>> WaitFor(size_t n) {
    absl::MutexLock l(&mu_);
    auto enough = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return results_.size() >= n; };
    mu_.Await(absl::Condition(&enough));
    return results_;
  }
  // How many callbacks have run so far (does not wait).
  size_t size() {
    absl::MutexLock l(&mu_);
    return results_.size();
  }

 private:
  absl::Mutex mu_;
  std::vector<absl::StatusOr<int64_t>> results_ ABSL_GUARDED_BY(mu_);
};

// Notifies once however often it is hit.
struct Once {
  void Notify() {
    if (!fired.exchange(true)) note.Notify();
  }
  std::atomic<bool> fired{false};
  absl::Notification note;
};

// Arms ledger.writer.ensemble_change for ledger `id` (decimal): each change
// of it notifies `in_change`, then waits for `release` before going on.
void HoldEnsembleChanges(const std::string& id, std::shared_ptr<Once> in_change,
                         std::shared_ptr<absl::Notification> release) {
  FaultPoints::Get().Arm("ledger.writer.ensemble_change",
                         [id, in_change, release](std::string_view ledger) {
                           if (ledger == id) {
                             in_change->Notify();
                             release->WaitForNotification();
                           }
                           return false;
                         });
}

// A registered "bookie" that never answers: it accepts connections and
// completes the HTTP/2 handshake (an empty SETTINGS frame and a SETTINGS
// ack), so the client's channel is READY, but it never replies to a
// request: every RPC to it stays pending until cancelled or its deadline.
// It reads and discards what clients send and notices when they close.
// Deregistered on destruction.
class HungBookie {
 public:
  static constexpr char kId[] = "hung-bookie";

  explicit HungBookie(metadata::MetadataStore* store) : store_(store) {
    listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    if (listen_fd_ < 0 || bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
        listen(listen_fd_, 64) != 0 ||
        getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0 ||
        pipe2(wake_, O_CLOEXEC) != 0) {
      ADD_FAILURE() << "cannot listen: errno " << errno;
      return;
    }
    meta::v1::BookieRegistration registration;
    registration.set_bookie_id(kId);
    registration.set_address(absl::StrCat("127.0.0.1:", ntohs(addr.sin_port)));
    registration.set_instance_id("hung-instance");
    auto put = store_->Put(Key(), registration.SerializeAsString(), metadata::kAnyVersion);
    EXPECT_TRUE(put.ok()) << put.status();
    thread_ = std::thread([this] { Serve(); });
  }
  ~HungBookie() {
    ledgerkv::IgnoreError(store_->Delete(Key(), metadata::kAnyVersion));
    if (thread_.joinable()) {
      static_cast<void>(write(wake_[1], "x", 1));
      thread_.join();
    }
    for (int fd : {listen_fd_, wake_[0], wake_[1]}) {
      if (fd >= 0) close(fd);
    }
  }
  HungBookie(const HungBookie&) = delete;
  HungBookie& operator=(const HungBookie&) = delete;

  // Succeeds if some client connected and every connection was closed by
  // its client within `timeout`.
  ::testing::AssertionResult AllConnectionsClosedWithin(absl::Duration timeout) {
    absl::MutexLock l(&mu_);
    auto closed = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return accepted_ > 0 && open_ == 0;
    };
    if (mu_.AwaitWithTimeout(absl::Condition(&closed), timeout)) {
      return ::testing::AssertionSuccess() << accepted_ << " connections closed";
    }
    return ::testing::AssertionFailure() << open_ << " of " << accepted_
                                         << " client connections still open "
                                         << absl::FormatDuration(timeout) << " later";
  }

 private:
  std::string Key() const { return metadata::Keys(ClientOptions().cluster).Bookie(kId); }

  void Serve() {
    // Server preface: SETTINGS (empty), then an ack of the client's SETTINGS.
    static constexpr unsigned char kPreface[] = {0, 0, 0, 4, 0, 0, 0, 0, 0,
                                                 0, 0, 0, 4, 1, 0, 0, 0, 0};
    std::vector<int> conns;
    for (;;) {
      std::vector<pollfd> fds = {{wake_[0], POLLIN, 0}, {listen_fd_, POLLIN, 0}};
      for (int fd : conns) fds.push_back({fd, POLLIN, 0});
      if (poll(fds.data(), fds.size(), -1) < 0) continue;
      if (fds[0].revents != 0) break;
      if (fds[1].revents != 0) {
        const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
        if (fd >= 0) {
          static_cast<void>(write(fd, kPreface, sizeof(kPreface)));
          conns.push_back(fd);
          absl::MutexLock l(&mu_);
          ++accepted_;
          ++open_;
        }
      }
      for (size_t k = 2; k < fds.size(); ++k) {
        if (fds[k].revents == 0) continue;
        char buf[4096];
        const ssize_t n = read(fds[k].fd, buf, sizeof(buf));
        if (n > 0 || (n < 0 && errno == EINTR)) continue;
        close(fds[k].fd);
        conns.erase(std::find(conns.begin(), conns.end(), fds[k].fd));
        absl::MutexLock l(&mu_);
        --open_;
      }
    }
    for (int fd : conns) close(fd);
  }

  metadata::MetadataStore* const store_;
  int listen_fd_ = -1;
  int wake_[2] = {-1, -1};
  std::thread thread_;
  absl::Mutex mu_;
  int accepted_ ABSL_GUARDED_BY(mu_) = 0;
  int open_ ABSL_GUARDED_BY(mu_) = 0;
};

// Destroying a writer and its client while Add RPCs to a bookie that never
// answers are in flight cancels those RPCs and releases everything on the
// caller's thread, in either order: no gRPC callback is left holding the
// writer or the client's channels (it would destroy a channel from inside
// its own callback; gRPC aborts with "ref_counted.h: prior > 0"). Observable
// as the hung bookie's connection closing promptly (before the fix it stayed
// open until the RPC deadline) and, under ASan, no use-after-free.
TEST(LedgerWriterFailureTest, DestroyingWriterAndClientWithAddsInFlightIsCleanAndPrompt) {
  LKV_ASSIGN_OR_FAIL(auto cluster, TestCluster::Start({.bookies = 2}));
  for (const bool client_first : {false, true}) {
    SCOPED_TRACE(client_first ? "client destroyed first" : "writer destroyed first");
    HungBookie hung(cluster->store());
    // A deadline far beyond the test: only cancellation ends the hung RPCs.
    LKV_ASSIGN_OR_FAIL(auto client, cluster->NewClient(absl::Seconds(120)));
    LKV_ASSIGN_OR_FAIL(auto writer, client->CreateLedger(Quorums(3, 3, 2)));
    ASSERT_EQ(writer->metadata().segments(0).bookies_size(), 3);
    // Qa=2: the two real bookies acknowledge, the hung one holds every add.
    for (const auto& r : AppendRange(*writer, 0, 19, 8)) LKV_ASSERT_OK(r);
    Results late;
    for (int64_t i = 20; i < 30; ++i) writer->AppendAsync(PayloadFor(i), late.Callback());

    const absl::Time start = absl::Now();
    if (client_first) {
      client.reset();
      writer.reset();
    } else {
      writer.reset();
      client.reset();
    }
    EXPECT_LT(absl::Now() - start, absl::Seconds(10)) << "RPCs were waited out, not cancelled";
    const auto results = late.WaitFor(10);  // all delivered by ~LedgerWriter
    ASSERT_EQ(results.size(), 10u);
    for (const auto& r : results) {
      EXPECT_TRUE(r.ok() || absl::IsCancelled(r.status())) << r.status();
    }
    EXPECT_TRUE(hung.AllConnectionsClosedWithin(absl::Seconds(3)));
  }
}

// The same for the gathers of recovery and reads (rpc_gather.h): recovery
// proceeds without the hung bookie (fence quorum Qw-Qa+1 = 2 of 3), leaving
// its calls in flight; they are cancelled, not left to a gRPC callback.
TEST(LedgerWriterFailureTest, RecoveryAroundAHungBookieLeavesNoCallInFlight) {
  LKV_ASSIGN_OR_FAIL(auto cluster, TestCluster::Start({.bookies = 2}));
  HungBookie hung(cluster->store());
  uint64_t id = 0;
  {
    LKV_ASSIGN_OR_FAIL(auto client, cluster->NewClient(absl::Seconds(120)));
    LKV_ASSIGN_OR_FAIL(auto writer, client->CreateLedger(Quorums(3, 3, 2)));
    for (const auto& r : AppendRange(*writer, 0, 19, 8)) LKV_ASSERT_OK(r);
    id = writer->id();
  }  // the ledger stays open
  // The fence and the re-adds proceed without the hung bookie; calls to it
  // may still be in flight when they do.
  LKV_ASSIGN_OR_FAIL(auto client, cluster->NewClient(absl::Seconds(2)));
  LKV_ASSIGN_OR_FAIL(auto reader, client->OpenLedger(id, OpenMode::kRecover));
  EXPECT_GE(reader->metadata().last_entry_id(), 19) << "recovery dropped an acknowledged entry";
  ExpectReadable(*reader, 0, 19);
  reader.reset();
  client.reset();
  EXPECT_TRUE(hung.AllConnectionsClosedWithin(absl::Seconds(3)));
}

// docs/ledger-protocol.md, recovery step 4: the re-adds wait for Qa acks
// per entry, not for the whole write set, so a bookie that accepts
// connections and never answers costs recovery nothing once the other two
// have answered (waiting for it would cost the 30 s RPC deadline per round
// of re-adds; the bounds below leave a loaded machine 10 s). Nor does the read of the confirmed entry recovery starts
// from (ReadEntryFromAnyReplica), nor a read of the recovered ledger.
// Every acknowledged entry is still kept.
TEST(LedgerWriterFailureTest, RecoveryReAddsDoNotWaitForAHungBookieOnceEntriesHaveQaAcks) {
  LKV_ASSIGN_OR_FAIL(auto cluster, TestCluster::Start({.bookies = 2}));
  HungBookie hung(cluster->store());
  uint64_t id = 0;
  {
    // No explicit LAC write: the bookies' LAC stays at 18, so recovery
    // starts there and re-adds entry 19 (to all three, the hung one too).
    ClientOptions options;
    options.rpc_timeout = absl::Seconds(120);  // the hung bookie never fails the writer
    options.explicit_lac_delay = absl::InfiniteDuration();
    LKV_ASSIGN_OR_FAIL(auto client, cluster->NewClient(options));
    LKV_ASSIGN_OR_FAIL(auto writer, client->CreateLedger(Quorums(3, 3, 2)));
    for (const auto& r : AppendRange(*writer, 0, 19, 8)) LKV_ASSERT_OK(r);
    id = writer->id();
  }  // the ledger stays open
  LKV_ASSIGN_OR_FAIL(auto client, cluster->NewClient(absl::Seconds(30)));
  absl::Time start = absl::Now();
  LKV_ASSIGN_OR_FAIL(auto reader, client->OpenLedger(id, OpenMode::kRecover));
  EXPECT_LT(absl::Now() - start, absl::Seconds(10)) << "recovery waited for the hung bookie";
  EXPECT_EQ(reader->metadata().state(), meta::v1::CLOSED);
  EXPECT_GE(reader->metadata().last_entry_id(), 19) << "recovery dropped an acknowledged entry";
  // The re-adds marked the bookie that did not answer as slow: reading the
  // ledger now (as a log replay after recovery does) does not ask it first
  // and wait out its deadline.
  start = absl::Now();
  ExpectReadable(*reader, 0, 19);
  EXPECT_LT(absl::Now() - start, absl::Seconds(10)) << "the read waited for the hung bookie";
}

// Writes entries 0..last to a new E=3 Qw=3 Qa=2 ledger whose ensemble is
// the cluster's two bookies and the hung one, then closes it by recovery.
void WriteAndRecoverAroundAHungBookie(TestCluster& cluster, int64_t last, uint64_t* id) {
  {
    LKV_ASSIGN_OR_FAIL(auto client, cluster.NewClient(absl::Seconds(120)));
    LKV_ASSIGN_OR_FAIL(auto writer, client->CreateLedger(Quorums(3, 3, 2)));
    for (const auto& r : AppendRange(*writer, 0, last, 16)) LKV_ASSERT_OK(r);
    *id = writer->id();
  }
  LKV_ASSIGN_OR_FAIL(auto client, cluster.NewClient(absl::Seconds(20)));
  LKV_ASSIGN_OR_FAIL(auto closed, client->OpenLedger(*id, OpenMode::kRecover));
  ASSERT_GE(closed->metadata().last_entry_id(), last);
}

// A long read pays a hung bookie's deadline once, not once per round of
// reads: after its first read timed out, the later rounds ask the other
// replicas (SlowBookies). 120 entries in 2-entry reads are 8 rounds of 8
// reads; each round waits for all of its calls, and with rotation every
// round gives the hung bookie some of them. Every entry is read intact.
TEST(LedgerWriterFailureTest, ALongReadPaysAHungBookiesDeadlineOnceNotPerRound) {
  LKV_ASSIGN_OR_FAIL(auto cluster, TestCluster::Start({.bookies = 2}));
  HungBookie hung(cluster->store());
  uint64_t id = 0;
  ASSERT_NO_FATAL_FAILURE(WriteAndRecoverAroundAHungBookie(*cluster, 119, &id));
  ClientOptions options;
  options.rpc_timeout = absl::Seconds(1);
  options.max_entries_per_read_rpc = 2;
  // The slow marks alone, without speculative reads (tested below).
  options.speculative_read_timeout = absl::InfiniteDuration();
  LKV_ASSIGN_OR_FAIL(auto client, cluster->NewClient(options));
  LKV_ASSIGN_OR_FAIL(auto reader, client->OpenLedger(id, OpenMode::kNoRecovery));
  const absl::Time start = absl::Now();
  ExpectReadable(*reader, 0, 119);
  EXPECT_LT(absl::Now() - start, absl::Seconds(6)) << "every round waited for the hung bookie";
}

// Speculative reads: a round of reads that includes a hung bookie waits
// speculative_read_timeout for it, not its RPC deadline, then asks the
// other replicas for its entries; every entry is read intact.
TEST(LedgerWriterFailureTest, AReadAroundAHungBookieWaitsTheSpeculativeTimeoutNotTheDeadline) {
  LKV_ASSIGN_OR_FAIL(auto cluster, TestCluster::Start({.bookies = 2}));
  HungBookie hung(cluster->store());
  uint64_t id = 0;
  ASSERT_NO_FATAL_FAILURE(WriteAndRecoverAroundAHungBookie(*cluster, 59, &id));
  ClientOptions options;
  options.rpc_timeout = absl::Seconds(30);
  options.speculative_read_timeout = absl::Milliseconds(200);
  // 2-entry reads, 8 per round rotating over the ensemble: the first round
  // surely asks the hung bookie for some.
  options.max_entries_per_read_rpc = 2;
  LKV_ASSIGN_OR_FAIL(auto client, cluster->NewClient(options));
  LKV_ASSIGN_OR_FAIL(auto reader, client->OpenLedger(id, OpenMode::kNoRecovery));
  const absl::Time start = absl::Now();
  ExpectReadable(*reader, 0, 59);
  EXPECT_LT(absl::Now() - start, absl::Seconds(10)) << "the read waited for the hung bookie's deadline";
}

// The decision to give up on a silent bookie is taken again after every
// answer: at the speculative timeout the only other replica has not
// answered either (it is slow, not hung), so nothing can be asked
// elsewhere yet; once it answers, the hung bookie's reads are given up on,
// not left to their 30 s deadline.
TEST(LedgerWriterFailureTest, AHungBookiesReadIsGivenUpOnOnceASlowReplicaAnswers) {
  ScopedFaultPoints faults;
  LKV_ASSIGN_OR_FAIL(auto cluster, TestCluster::Start({.bookies = 1}));
  HungBookie hung(cluster->store());
  uint64_t id = 0;
  {
    LKV_ASSIGN_OR_FAIL(auto client, cluster->NewClient(absl::Seconds(120)));
    LKV_ASSIGN_OR_FAIL(auto writer, client->CreateLedger(Quorums(2, 2, 1)));
    for (const auto& r : AppendRange(*writer, 0, 9, 4)) LKV_ASSERT_OK(r);
    id = writer->id();
    // The writer tells the bookies its LAC once it is quiet (50 ms).
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (absl::Now() < deadline) {
      LKV_ASSIGN_OR_FAIL(auto lac_client, cluster->NewClient(absl::Seconds(2)));
      LKV_ASSIGN_OR_FAIL(auto probe, lac_client->OpenLedger(id, OpenMode::kNoRecovery));
      if (probe->last_readable() == 9) break;
      absl::SleepFor(absl::Milliseconds(20));
    }
  }  // the ledger stays open
  const std::string slow_id = cluster->bookie_id(0);
  FaultPoints::Get().Arm("bookie.read.start", [slow_id](std::string_view bookie) {
    if (bookie == slow_id) absl::SleepFor(absl::Milliseconds(300));
    return false;
  });
  ClientOptions options;
  options.rpc_timeout = absl::Seconds(30);
  options.speculative_read_timeout = absl::Milliseconds(50);
  options.max_entries_per_read_rpc = 1;  // the first round asks both bookies
  LKV_ASSIGN_OR_FAIL(auto client, cluster->NewClient(options));
  LKV_ASSIGN_OR_FAIL(auto reader, client->OpenLedger(id, OpenMode::kNoRecovery));
  ASSERT_EQ(reader->last_readable(), 9);
  const absl::Time start = absl::Now();
  ExpectReadable(*reader, 0, 9);
  EXPECT_LT(absl::Now() - start, absl::Seconds(15)) << "the read waited for the hung bookie's deadline";
}

// Reading the LAC of an open ledger asks every bookie of its last segment
// for the highest LAC; once one answered, a hung one gets
// speculative_read_timeout more, not its deadline. Any answer is a true
// LAC, so the reader still sees every acknowledged entry the writer told
// the bookies about.
TEST(LedgerWriterFailureTest, ReadingTheLacAroundAHungBookieWaitsTheSpeculativeTimeoutNotTheDeadline) {
  LKV_ASSIGN_OR_FAIL(auto cluster, TestCluster::Start({.bookies = 2}));
  HungBookie hung(cluster->store());
  LKV_ASSIGN_OR_FAIL(auto client, cluster->NewClient(absl::Seconds(120)));
  LKV_ASSIGN_OR_FAIL(auto writer, client->CreateLedger(Quorums(3, 3, 2)));
  for (const auto& r : AppendRange(*writer, 0, 19, 4)) LKV_ASSERT_OK(r);
  ClientOptions options;
  options.rpc_timeout = absl::Seconds(30);
  options.speculative_read_timeout = absl::Milliseconds(200);
  LKV_ASSIGN_OR_FAIL(auto reader_client, cluster->NewClient(options));
  // The writer tells the bookies its LAC (19) once it is quiet (50 ms).
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  int64_t lac = -1;
  while (lac < 19 && absl::Now() < deadline) {
    const absl::Time start = absl::Now();
    LKV_ASSIGN_OR_FAIL(auto reader, reader_client->OpenLedger(writer->id(), OpenMode::kNoRecovery));
    ASSERT_LT(absl::Now() - start, absl::Seconds(10)) << "the LAC read waited for the hung bookie";
    lac = reader->last_readable();
  }
  EXPECT_EQ(lac, 19);
}

// A bookie slower than speculative_read_timeout that holds the only copy
// left to try is waited for, not cancelled: the read succeeds.
TEST(LedgerWriterFailureTest, ASlowBookieWithTheOnlyCopyIsWaitedForNotGivenUpOnSpeculatively) {
  ScopedFaultPoints faults;
  LKV_ASSIGN_OR_FAIL(auto cluster, TestCluster::Start({.bookies = 1}));
  LKV_ASSIGN_OR_FAIL(auto client, cluster->NewClient());
  LKV_ASSIGN_OR_FAIL(auto writer, client->CreateLedger(Quorums(1, 1, 1)));
  for (const auto& r : AppendRange(*writer, 0, 9, 4)) LKV_ASSERT_OK(r);
  LKV_ASSERT_OK(writer->Close());
  FaultPoints::Get().Arm("bookie.read.start", [](std::string_view) {
    absl::SleepFor(absl::Milliseconds(600));
    return false;
  });
  ClientOptions options;
  options.rpc_timeout = absl::Seconds(10);
  options.speculative_read_timeout = absl::Milliseconds(50);
  LKV_ASSIGN_OR_FAIL(auto slow_client, cluster->NewClient(options));
  LKV_ASSIGN_OR_FAIL(auto reader, slow_client->OpenLedger(writer->id(), OpenMode::kNoRecovery));
  const uint64_t before = testing::BookieInfo(cluster->address(0)).read_requests();
  ExpectReadable(*reader, 0, 9);
  EXPECT_EQ(testing::BookieInfo(cluster->address(0)).read_requests() - before, 1u)
      << "the read was given up on and sent again";
}

// Entries 1..10 reach Qa while entry 0's callback is still running (so
// nothing is delivered meanwhile); then a recoverer fences the ledger and
// entry 11 is answered FENCED. Entries 1..10 are durable and recovery keeps
// them: they must be acknowledged, not failed. `bookies` bookies, E = Qw =
// bookies, Qa = bookies - (bookies > 1).
void FencedWriterStillAcknowledgesEntriesThatReachedQa(int bookies, bool callbacks_on_reply_thread) {
  ScopedFaultPoints faults;
  LKV_ASSIGN_OR_FAIL(auto cluster, TestCluster::Start({.bookies = bookies}));
  ClientOptions options;
  options.callbacks_on_reply_thread = callbacks_on_reply_thread;
  LKV_ASSIGN_OR_FAIL(auto client, cluster->NewClient(options));
  const int qa = bookies > 1 ? bookies - 1 : 1;
  // Outlive the writer, whose destructor may still run callbacks.
  absl::Notification in_callback, release;
  Results results;
  LKV_ASSIGN_OR_FAIL(auto writer, client->CreateLedger(Quorums(bookies, bookies, qa)));
  const std::string id = std::to_string(writer->id());
  auto failed = std::make_shared<Once>();
  FaultPoints::Get().Arm("ledger.writer.failed", [id, failed](std::string_view ledger) {
    if (ledger == id) failed->Notify();
    return false;
  });

  writer->AppendAsync(PayloadFor(0), [&](absl::StatusOr<int64_t> r) {
    EXPECT_TRUE(r.ok()) << r.status();
    in_callback.Notify();
    release.WaitForNotification();
  });
  // A failed assertion below must not leave the callback (and the writer's
  // destructor) waiting for good.
  absl::Cleanup release_on_return = [&release] {
    if (!release.HasBeenNotified()) release.Notify();
  };
  in_callback.WaitForNotification();
  auto acks = CountAcks(writer->id(), 1, 10);
  for (int i = 1; i <= 10; ++i) writer->AppendAsync(PayloadFor(i), results.Callback());
  // The writer has Qa replies for each of them before the fence.
  const absl::Time until = absl::Now() + absl::Seconds(10);
  while (acks->load() < 10 * qa && absl::Now() < until) absl::SleepFor(absl::Milliseconds(5));
  ASSERT_GE(acks->load(), 10 * qa) << "the bookies' replies did not reach the writer";

  LKV_ASSIGN_OR_FAIL(auto other, cluster->NewClient());
  LKV_ASSIGN_OR_FAIL(auto reader, other->OpenLedger(writer->id(), OpenMode::kRecover));
  EXPECT_EQ(reader->last_readable(), 10);
  writer->AppendAsync(PayloadFor(11), results.Callback());  // answered FENCED
  ASSERT_TRUE(failed->note.WaitForNotificationWithTimeout(absl::Seconds(10)));
  std::move(release_on_return).Invoke();

  const auto got = results.WaitFor(11);
  for (int i = 1; i <= 10; ++i) {
    ASSERT_TRUE(got[i - 1].ok()) << "entry " << i << " reached Qa before the fence: "
                                 << got[i - 1].status();
    EXPECT_EQ(*got[i - 1], i);
  }
  EXPECT_EQ(got[10].status().code(), absl::StatusCode::kFailedPrecondition) << got[10].status();
  EXPECT_EQ(writer->lac(), 10);
  ExpectReadable(*reader, 0, 10);
}

// One bookie, callbacks on the writer's thread: its replies keep arriving
// while the writer's thread is in entry 0's callback.
TEST(LedgerWriterFailureTest, L2_FencedWriterStillAcknowledgesEntriesThatReachedQa) {
  FencedWriterStillAcknowledgesEntriesThatReachedQa(1, /*callbacks_on_reply_thread=*/false);
}

// E=Qw=3, Qa=2, callbacks on reply threads (the default): entry 0's
// callback holds the connection thread of the bookie whose reply made it
// ready; the other two bookies' replies carry entries 1..10 to Qa.
TEST(LedgerWriterFailureTest, L2_FencedWriterStillAcknowledgesEntriesThatReachedQaOnReplyThreads) {
  FencedWriterStillAcknowledgesEntriesThatReachedQa(3, /*callbacks_on_reply_thread=*/true);
}

// E=3 Qw=3 Qa=2 on exactly three bookies: when one stops, the ensemble
// change cannot find a replacement and the writer fails. Entries acked by
// the two live bookies while the change was running are durable, and the
// writer's close seals them: they must be acknowledged.
TEST(LedgerWriterFailureTest, L2_FailedEnsembleChangeStillAcknowledgesEntriesThatReachedQa) {
  ScopedFaultPoints faults;
  LKV_ASSIGN_OR_FAIL(auto cluster, TestCluster::Start({.bookies = 3}));
  LKV_ASSIGN_OR_FAIL(auto client, cluster->NewClient());
  LKV_ASSIGN_OR_FAIL(auto writer, client->CreateLedger(Quorums(3, 3, 2)));
  const std::string id = std::to_string(writer->id());
  for (const auto& r : AppendRange(*writer, 0, 4, 4)) LKV_ASSERT_OK(r);

  auto in_change = std::make_shared<Once>();
  auto release = std::make_shared<absl::Notification>();
  HoldEnsembleChanges(id, in_change, release);
  // Replies the writer has taken in for entries 5..14 (one per bookie).
  auto acks = CountAcks(writer->id(), 5, 14);
  const meta::v1::Segment segment = writer->metadata().segments(0);
  cluster->StopBookie(cluster->IndexOf(segment.bookies(2)));
  Results results;
  writer->AppendAsync(PayloadFor(5), results.Callback());  // fails on the stopped bookie
  ASSERT_TRUE(in_change->note.WaitForNotificationWithTimeout(absl::Seconds(10)));
  // Entry 5 may have been acknowledged before the change began, if the two
  // live bookies' acks reached the writer before the stopped one's failure.
  const size_t acked_before_change = results.size();
  const int64_t lac_before_change = writer->lac();
  ASSERT_LE(acked_before_change, 1u);
  ASSERT_EQ(lac_before_change, 4 + static_cast<int64_t>(acked_before_change));
  // Acked by the two live bookies while the change holds acks back.
  for (int i = 6; i <= 14; ++i) writer->AppendAsync(PayloadFor(i), results.Callback());
  WaitUntilDurable({cluster->address(cluster->IndexOf(segment.bookies(0))),
                    cluster->address(cluster->IndexOf(segment.bookies(1)))},
                   15);
  // And the writer has both live bookies' replies for each of them (a
  // reply still on its way when the change fails would fail its entry).
  const absl::Time until = absl::Now() + absl::Seconds(10);
  while (acks->load() < 20 && absl::Now() < until) absl::SleepFor(absl::Milliseconds(5));
  ASSERT_EQ(acks->load(), 20) << "the live bookies' replies did not all reach the writer";
  // Entries 5..14 are on Qa bookies now and the writer knows it, but the
  // change's metadata CAS is still in flight: nothing more may be
  // acknowledged yet (docs/ledger-protocol.md, BookKeeper issue 2614).
  EXPECT_EQ(results.size(), acked_before_change)
      << "an add was acknowledged during the ensemble change";
  EXPECT_EQ(writer->lac(), lac_before_change);
  release->Notify();

  const auto got = results.WaitFor(10);
  for (int i = 5; i <= 14; ++i) {
    ASSERT_TRUE(got[i - 5].ok()) << "entry " << i << " had Qa acks: " << got[i - 5].status();
    EXPECT_EQ(*got[i - 5], i);
  }
  EXPECT_EQ(writer->lac(), 14);
  auto late = writer->Append("after the failure");
  EXPECT_TRUE(absl::IsUnavailable(late.status())) << late.status();
  LKV_ASSERT_OK(writer->Close());
  EXPECT_EQ(writer->metadata().last_entry_id(), 14);
  LKV_ASSIGN_OR_FAIL(auto reader, client->OpenLedger(writer->id(), OpenMode::kNoRecovery));
  ExpectReadable(*reader, 0, 14);
}

// A writer that failed for another reason first (a bookie it cannot
// replace) and then hears FENCED from a bookie (an add held there while a
// recoverer fenced it) closes with FAILED_PRECONDITION, as the contract
// says for a fenced writer, not with its first UNAVAILABLE: a caller that
// retries UNAVAILABLE would retry for ever and never learn that the ledger
// is someone else's now.
TEST(LedgerWriterFailureTest, CloseSaysFencedWhenAFenceReplyArrivesAfterTheWriterFailed) {
  ScopedFaultPoints faults;
  LKV_ASSIGN_OR_FAIL(auto cluster, TestCluster::Start({.bookies = 3}));
  LKV_ASSIGN_OR_FAIL(auto client, cluster->NewClient());
  LKV_ASSIGN_OR_FAIL(auto writer, client->CreateLedger(Quorums(3, 3, 2)));
  const std::string id = std::to_string(writer->id());
  for (const auto& r : AppendRange(*writer, 0, 4, 4)) LKV_ASSERT_OK(r);
  const meta::v1::Segment segment = writer->metadata().segments(0);
  const std::string held_id = segment.bookies(1);
  const std::string failing_id = segment.bookies(2);
  // Qa = 2: entries 0..4 were acknowledged before the third bookie's copy
  // was necessarily stored. Both bookies the points below act on must have
  // taken their last request in, or the points would catch one of those.
  WaitUntilDurable({cluster->address(cluster->IndexOf(held_id)),
                    cluster->address(cluster->IndexOf(failing_id))},
                   5);
  // The next add to one bookie waits at its door until released; the next
  // add to another fails, and no spare can replace that bookie.
  auto hold = std::make_shared<std::atomic<bool>>(true);
  auto fail = std::make_shared<std::atomic<bool>>(true);
  auto held = std::make_shared<absl::Notification>();
  auto release = std::make_shared<absl::Notification>();
  FaultPoints::Get().Arm("bookie.add.drop_request",
                         [held_id, failing_id, hold, fail, held, release](std::string_view bookie) {
                           if (bookie == held_id && hold->exchange(false)) {
                             held->Notify();
                             release->WaitForNotification();
                             return false;
                           }
                           return bookie == failing_id && fail->exchange(false);
                         });
  // A failed check below must not leave the bookie's thread held (the
  // cluster's shutdown would wait for it for ever).
  absl::Cleanup release_on_exit = [release] {
    if (!release->HasBeenNotified()) release->Notify();
  };
  auto fenced_reply = std::make_shared<absl::Notification>();
  FaultPoints::Get().Arm("ledger.writer.fenced_reply", [id, fenced_reply](std::string_view arg) {
    if (arg == id && !fenced_reply->HasBeenNotified()) fenced_reply->Notify();
    return false;
  });
  // Entry 5 reaches one bookie, is held at the second and fails at the
  // third: the writer fails.
  Results results;
  writer->AppendAsync(PayloadFor(5), results.Callback());
  ASSERT_TRUE(held->WaitForNotificationWithTimeout(absl::Seconds(10)));
  const auto first = results.WaitFor(1);
  ASSERT_TRUE(absl::IsUnavailable(first[0].status())) << first[0].status();
  // A recoverer fences the bookies and closes the ledger.
  LKV_ASSIGN_OR_FAIL(auto other, cluster->NewClient());
  LKV_ASSIGN_OR_FAIL(auto reader, other->OpenLedger(writer->id(), OpenMode::kRecover));
  ASSERT_GE(reader->metadata().last_entry_id(), 4);
  // The held add goes on now, finds the ledger fenced, and says so.
  std::move(release_on_exit).Invoke();
  ASSERT_TRUE(fenced_reply->WaitForNotificationWithTimeout(absl::Seconds(10)))
      << "the held add's FENCED reply never reached the writer";
  const absl::Status closed = writer->Close();
  EXPECT_EQ(closed.code(), absl::StatusCode::kFailedPrecondition) << closed;
  EXPECT_TRUE(absl::StrContains(closed.message(), "fenced")) << closed;
}

// The writer is destroyed while an ensemble change is choosing its
// replacement: the change must not record a new ensemble for a writer that
// will never send to it, and the destructor returns without waiting on the
// store.
TEST(LedgerWriterFailureTest, AWriterDestroyedDuringAnEnsembleChangeLeavesTheMetadataAlone) {
  ScopedFaultPoints faults;
  LKV_ASSIGN_OR_FAIL(auto cluster, TestCluster::Start({.bookies = 4}));
  LKV_ASSIGN_OR_FAIL(auto client, cluster->NewClient());
  LKV_ASSIGN_OR_FAIL(auto writer, client->CreateLedger(Quorums(3, 2, 2)));
  const uint64_t ledger_id = writer->id();
  const std::string id = std::to_string(ledger_id);
  for (const auto& r : AppendRange(*writer, 0, 4, 4)) LKV_ASSERT_OK(r);
  LKV_ASSIGN_OR_FAIL(const auto before, client->GetLedgerMetadata(ledger_id));

  auto in_change = std::make_shared<Once>();
  auto failed = std::make_shared<Once>();
  auto release = std::make_shared<absl::Notification>();
  HoldEnsembleChanges(id, in_change, release);
  // Hit under the writer's lock when it fails: only notify.
  FaultPoints::Get().Arm("ledger.writer.failed", [id, failed](std::string_view ledger) {
    if (ledger == id) failed->Notify();
    return false;
  });
  cluster->StopBookie(cluster->IndexOf(before.segments(0).bookies(2)));
  Results results;
  writer->AppendAsync(PayloadFor(5), results.Callback());
  ASSERT_TRUE(in_change->note.WaitForNotificationWithTimeout(absl::Seconds(10)));

  std::thread destroyer([&] { writer.reset(); });
  // The destructor has marked the writer failed before the change resumes.
  ASSERT_TRUE(failed->note.WaitForNotificationWithTimeout(absl::Seconds(10)));
  release->Notify();
  destroyer.join();

  LKV_ASSIGN_OR_FAIL(const auto after, client->GetLedgerMetadata(ledger_id));
  EXPECT_EQ(after.SerializeAsString(), before.SerializeAsString())
      << "a destroyed writer recorded an ensemble change: " << after.ShortDebugString();
  // Entry 5's outcome is unknown to its caller, so recovery may keep it.
  ASSERT_EQ(results.size(), 1u);
  LKV_ASSIGN_OR_FAIL(auto reader, client->OpenLedger(ledger_id, OpenMode::kRecover));
  EXPECT_GE(reader->last_readable(), 4);
  ExpectReadable(*reader, 0, reader->last_readable());
}

// The store fails every attempt of an ensemble change's CAS, so the writer
// ends (UNAVAILABLE) without knowing whether the change landed; then it
// turns out it did. That is this writer's own change, not a takeover: Close
// seals the ledger on top of it, at the writer's LAC, instead of reporting
// "fenced" and leaving the ledger open for someone to recover.
TEST(LedgerWriterFailureTest, CloseAfterAnEnsembleChangeOfUnknownOutcomeSealsTheLedger) {
  ScopedFaultPoints faults;
  LKV_ASSIGN_OR_FAIL(auto cluster, TestCluster::Start({.bookies = 4}));
  FlakyStore flaky(cluster->store());
  ClientOptions options;
  options.metadata = &flaky;
  options.rpc_timeout = absl::Seconds(2);
  options.metadata_retries = 3;
  LKV_ASSIGN_OR_FAIL(auto client, LedgerClient::Create(options));
  LKV_ASSIGN_OR_FAIL(auto writer, client->CreateLedger(Quorums(3, 3, 2)));
  for (const auto& r : AppendRange(*writer, 0, 4, 4)) LKV_ASSERT_OK(r);
  const meta::v1::LedgerMetadata before = writer->metadata();
  const std::string id = std::to_string(writer->id());
  auto failed = std::make_shared<Once>();
  FaultPoints::Get().Arm("ledger.writer.failed", [id, failed](std::string_view ledger) {
    if (ledger == id) failed->Notify();
    return false;
  });

  flaky.defer_puts = options.metadata_retries;  // every attempt: UNAVAILABLE, applied later
  cluster->StopBookie(cluster->IndexOf(before.segments(0).bookies(2)));
  Results results;
  writer->AppendAsync(PayloadFor(5), results.Callback());
  ASSERT_TRUE(failed->note.WaitForNotificationWithTimeout(absl::Seconds(20)));
  ASSERT_EQ(results.WaitFor(1).size(), 1u);
  EXPECT_FALSE(writer->Append(PayloadFor(6)).ok()) << "an ended writer acknowledged an append";
  const std::vector<absl::Status> applied = flaky.ApplyDeferredPuts();
  ASSERT_FALSE(applied.empty());
  LKV_ASSERT_OK(applied[0]);  // the change landed after all
  LKV_ASSIGN_OR_FAIL(const auto changed, client->GetLedgerMetadata(writer->id()));
  ASSERT_EQ(changed.segments_size(), 2) << changed.ShortDebugString();

  const int64_t lac = writer->lac();
  EXPECT_GE(lac, 4);
  LKV_ASSERT_OK(writer->Close());
  LKV_ASSIGN_OR_FAIL(const auto closed, client->GetLedgerMetadata(writer->id()));
  EXPECT_EQ(closed.state(), meta::v1::CLOSED);
  EXPECT_EQ(closed.last_entry_id(), lac);
  EXPECT_EQ(closed.segments_size(), 2) << "the close dropped the writer's own ensemble change";
  LKV_ASSIGN_OR_FAIL(auto other, cluster->NewClient());
  LKV_ASSIGN_OR_FAIL(auto reader, other->OpenLedger(writer->id(), OpenMode::kNoRecovery));
  EXPECT_EQ(reader->last_readable(), lac);
  ExpectReadable(*reader, 0, lac);
}

// The ensemble change's CAS lands but its reply is lost, and before the
// writer re-reads, someone changes an unrelated field (custom metadata).
// OPEN with exactly the writer's new segments is its own change: it goes on
// appending on the new ensemble, and the other field is kept.
TEST(LedgerWriterFailureTest, AnEnsembleChangeThatLandedIsRecognisedDespiteAnUnrelatedEdit) {
  LKV_ASSIGN_OR_FAIL(auto cluster, TestCluster::Start({.bookies = 4}));
  FlakyStore flaky(cluster->store());
  ClientOptions options;
  options.metadata = &flaky;
  options.rpc_timeout = absl::Seconds(2);
  LKV_ASSIGN_OR_FAIL(auto client, LedgerClient::Create(options));
  LKV_ASSIGN_OR_FAIL(auto writer, client->CreateLedger(Quorums(3, 2, 2)));
  for (const auto& r : AppendRange(*writer, 0, 9, 4)) LKV_ASSERT_OK(r);
  const std::string key = metadata::Keys(options.cluster).Ledger(writer->id());
  std::atomic<bool> edited{false};
  metadata::MetadataStore* real = cluster->store();
  flaky.after_put = [&](std::string_view put_key) {
    if (put_key != key || edited.exchange(true)) return;
    auto got = real->Get(key);
    ASSERT_TRUE(got.ok()) << got.status();
    meta::v1::LedgerMetadata md;
    ASSERT_TRUE(md.ParseFromString(got->value));
    (*md.mutable_custom())["owner"] = "someone else";
    ASSERT_TRUE(real->Put(key, md.SerializeAsString(), got->version).ok());
  };
  flaky.lose_put_replies = 1;
  cluster->StopBookie(cluster->IndexOf(writer->metadata().segments(0).bookies(1)));
  for (const auto& r : AppendRange(*writer, 10, 39, 8)) LKV_ASSERT_OK(r);
  EXPECT_TRUE(edited.load());
  EXPECT_EQ(writer->stats().ensemble_changes, 1);
  LKV_ASSERT_OK(writer->Close());
  LKV_ASSIGN_OR_FAIL(const auto closed, client->GetLedgerMetadata(writer->id()));
  EXPECT_EQ(closed.state(), meta::v1::CLOSED);
  EXPECT_EQ(closed.last_entry_id(), 39);
  EXPECT_EQ(closed.custom().at("owner"), "someone else");
  LKV_ASSIGN_OR_FAIL(auto other, cluster->NewClient());
  LKV_ASSIGN_OR_FAIL(auto reader, other->OpenLedger(writer->id(), OpenMode::kNoRecovery));
  ExpectReadable(*reader, 0, 39);
}

TEST(LedgerWriterFailureTest, TransientStoreFailuresDuringEnsembleChangeAreRetried) {
  LKV_ASSIGN_OR_FAIL(auto cluster, TestCluster::Start({.bookies = 4}));
  FlakyStore flaky(cluster->store());
  ClientOptions options;
  options.metadata = &flaky;
  options.rpc_timeout = absl::Seconds(2);
  LKV_ASSIGN_OR_FAIL(auto client, LedgerClient::Create(options));
  LKV_ASSIGN_OR_FAIL(auto writer, client->CreateLedger(Quorums(3, 2, 2)));
  for (const auto& r : AppendRange(*writer, 0, 9, 4)) LKV_ASSERT_OK(r);

  // The bookie listing fails twice; the CAS lands but its reply is lost, so
  // the writer's retry meets its own write (ABORTED) and re-reads, and that
  // re-read fails once too.
  flaky.fail_lists = 2;
  flaky.lose_put_replies = 1;
  flaky.fail_gets = 1;
  cluster->StopBookie(cluster->IndexOf(writer->metadata().segments(0).bookies(1)));
  for (const auto& r : AppendRange(*writer, 10, 39, 8)) LKV_ASSERT_OK(r);
  EXPECT_EQ(flaky.fail_lists.load(), 0);
  EXPECT_EQ(flaky.lose_put_replies.load(), 0);
  EXPECT_EQ(flaky.fail_gets.load(), 0);
  EXPECT_EQ(writer->stats().ensemble_changes, 1);
  LKV_ASSERT_OK(writer->Close());

  LKV_ASSIGN_OR_FAIL(auto other, cluster->NewClient());
  LKV_ASSIGN_OR_FAIL(auto reader, other->OpenLedger(writer->id(), OpenMode::kNoRecovery));
  EXPECT_EQ(reader->last_readable(), 39);
  ExpectReadable(*reader, 0, 39);
}

// A replacement is never a bookie that failed as the instance it runs as
// now (nor one whose instance is unknown); the same id re-provisioned as a
// new instance is a bookie like any other.
TEST(LedgerWriterFailureTest, PlacementTakesAFailedBookieBackOnlyAsAnotherInstance) {
  LKV_ASSIGN_OR_FAIL(auto cluster, TestCluster::Start({.bookies = 2}));
  Placement placement(cluster->store(), metadata::Keys("default"));
  const std::string failed = cluster->bookie_id(0);
  const std::string instance = cluster->bookie(0)->instance_id();
  ASSERT_FALSE(instance.empty());
  auto excluding = [&](const std::string& recorded) {
    Exclusions exclude;
    exclude.ExcludeId(cluster->bookie_id(1));
    exclude.ExcludeInstance(failed, recorded);
    return exclude;
  };
  for (const std::string& same : {instance, std::string()}) {
    auto none = placement.ChooseReplacement(excluding(same));
    EXPECT_TRUE(absl::IsUnavailable(none.status())) << "recorded '" << same << "'";
    EXPECT_NE(none.status().message().find("2 excluded"), std::string::npos) << none.status();
  }
  LKV_ASSIGN_OR_FAIL(auto again, placement.ChooseReplacement(excluding("an-earlier-instance")));
  EXPECT_EQ(again.bookie_id, failed);
  EXPECT_EQ(again.instance_id, instance);
  // Excluded by id, it stays out whatever instance it runs as.
  Exclusions by_id = excluding("an-earlier-instance");
  by_id.ExcludeId(failed);
  EXPECT_TRUE(absl::IsUnavailable(placement.ChooseReplacement(by_id).status()));
}

// A bookie re-provisioned under its id (disk wiped, cookie deleted) while a
// writer uses it, with no spare and Qa = Qw = E = 3 (nothing completes
// without it): the writer's next add there fails, and its ensemble change
// names the bookie's new instance from the LAC on instead of failing the
// writer. The client met the bookie down first (a reader of the same
// client), so its connections there may be backing off: the change must
// not let that fail the new instance's first adds. The entries before the
// change are a copy short until a refill puts them back.
TEST(LedgerWriterFailureTest, L2_WithNoSpareAReprovisionedBookieTakesItsPlaceBackAsItsNewInstance) {
  LKV_ASSIGN_OR_FAIL(auto cluster, TestCluster::Start({.bookies = 3}));
  LKV_ASSIGN_OR_FAIL(auto client, cluster->NewClient());
  LKV_ASSIGN_OR_FAIL(auto writer, client->CreateLedger(Quorums(3, 3, 3)));
  for (const auto& r : AppendRange(*writer, 0, 19, 8)) LKV_ASSERT_OK(r);
  const int wiped = 1;
  const std::string bookie = cluster->bookie_id(wiped);
  const std::string old_instance = cluster->bookie(wiped)->instance_id();
  LKV_ASSERT_OK(cluster->WipeBookie(wiped));
  {
    LKV_ASSIGN_OR_FAIL(auto reader, client->OpenLedger(writer->id(), OpenMode::kNoRecovery));
    ASSERT_GE(reader->last_readable(), 2);  // so that the reads reach every bookie
    for (int64_t e = 0; e <= reader->last_readable(); ++e) {
      LKV_ASSERT_OK(reader->Read(e, e).status());
    }
  }
  LKV_ASSERT_OK(cluster->RestartBookie(wiped));
  const std::string new_instance = cluster->bookie(wiped)->instance_id();
  ASSERT_NE(new_instance, old_instance);

  for (const auto& r : AppendRange(*writer, 20, 59, 8)) LKV_ASSERT_OK(r);
  LKV_ASSERT_OK(writer->Close());
  EXPECT_EQ(writer->stats().ensemble_changes, 1);
  LKV_ASSIGN_OR_FAIL(auto md, client->GetLedgerMetadata(writer->id()));
  EXPECT_EQ(md.last_entry_id(), 59);
  ASSERT_EQ(md.segments_size(), 2) << md.ShortDebugString();
  const meta::v1::Segment& second = md.segments(1);
  const int64_t boundary = 20;  // the LAC when the change began was 19
  EXPECT_EQ(second.first_entry_id(), boundary);
  const auto& ensemble = second.bookies();
  const int index =
      static_cast<int>(std::find(ensemble.begin(), ensemble.end(), bookie) - ensemble.begin());
  ASSERT_LT(index, 3) << md.ShortDebugString();
  EXPECT_EQ(second.bookie_instances(index), new_instance);
  EXPECT_EQ(md.segments(0).bookie_instances(index), old_instance);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(second.bookies(i), md.segments(0).bookies(i));

  // The new instance holds the entries from the change on: readable from
  // it alone. Those before come back with a refill.
  auto read = [&](int64_t first, int64_t last) -> absl::Status {
    ASSIGN_OR_RETURN(auto reader_client, cluster->NewClient());
    ASSIGN_OR_RETURN(auto reader, reader_client->OpenLedger(writer->id(), OpenMode::kNoRecovery));
    ASSIGN_OR_RETURN(auto entries, reader->Read(first, last));
    if (static_cast<int64_t>(entries.size()) != last - first + 1) {
      return absl::InternalError(absl::StrCat("read ", entries.size(), " entries"));
    }
    for (const auto& entry : entries) {
      if (entry.payload != PayloadFor(entry.entry_id)) {
        return absl::DataLossError(absl::StrCat("entry ", entry.entry_id, " differs"));
      }
    }
    return absl::OkStatus();
  };
  auto read_alone = [&](int64_t first, int64_t last) {
    for (int i = 0; i < 3; ++i) {
      if (i != wiped) cluster->StopBookie(i);
    }
    absl::Status status = read(first, last);
    for (int i = 0; i < 3; ++i) {
      if (i != wiped) {
        EXPECT_TRUE(cluster->RestartBookie(i).ok());
      }
    }
    return status;
  };
  const absl::Status new_segment = read_alone(boundary, 59);
  EXPECT_TRUE(new_segment.ok()) << new_segment;
  EXPECT_FALSE(read_alone(0, 0).ok());
  EXPECT_FALSE(read_alone(boundary - 1, boundary - 1).ok());
  LKV_ASSIGN_OR_FAIL(auto refilled, client->RefillBookie(writer->id(), bookie));
  EXPECT_EQ(refilled.segments_changed, 1);
  EXPECT_EQ(refilled.entries_copied, boundary);
  const absl::Status all = read_alone(0, 59);
  EXPECT_TRUE(all.ok()) << all;
}

}  // namespace
}  // namespace ledgerkv::ledger
