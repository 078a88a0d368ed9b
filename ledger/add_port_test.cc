// The bookie's add port (docs/add-transport.md), from the ledger client's
// side, against real bookies: writers use it and every entry reads back; a
// bookie without one still gets its adds (over the Add RPC); a bookie
// restarted on another add port is found again; a lost reply fails its add
// at the deadline and the writer replaces the bookie; a destroyed writer
// cancels its adds at once; a peer speaking anything else is disconnected
// and the bookie serves on.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/synchronization/notification.h"
#include "base/add_protocol.h"
#include "base/entry_checksum.h"
#include "base/fault_point.h"
#include "base/frame_conn.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "ledger/add_channel.h"
#include "ledger/bookie_pool.h"
#include "ledger/ledger_test_util.h"
#include "metadata/embedded_store.h"
#include "proto/bookie.pb.h"

// Address sanitizer builds (clang's __has_feature, gcc's macro).
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define LKV_UNDER_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) && !defined(LKV_UNDER_ASAN)
#define LKV_UNDER_ASAN 1
#endif

namespace ledgerkv::ledger {
namespace {

using testing::AppendRange;
using testing::BookieInfo;
using testing::ExpectReadable;
using testing::PayloadFor;
using testing::Quorums;
using testing::TempDir;
using testing::TestCluster;

// Whether a TCP connect to 127.0.0.1:port is refused (nothing listens).
bool RefusedOn127001(uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(port);
  const bool refused =
      ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 && errno == ECONNREFUSED;
  ::close(fd);
  return refused;
}

uint64_t AddPortRequests(TestCluster& cluster) {
  uint64_t n = 0;
  for (int i = 0; i < cluster.size(); ++i) n += BookieInfo(cluster.address(i)).add_port_requests();
  return n;
}

// Appends first..last (window 16), expects each acknowledged with its own
// id, closes, and reads everything back through a new reader.
void WriteAndReadBack(LedgerClient& client, const CreateOptions& quorums, int64_t last) {
  LKV_ASSIGN_OR_FAIL(auto writer, client.CreateLedger(quorums));
  const auto results = AppendRange(*writer, 0, last, 16);
  ASSERT_EQ(results.size(), static_cast<size_t>(last + 1));
  for (const auto& r : results) ASSERT_TRUE(r.ok()) << r.status();
  LKV_ASSERT_OK(writer->Close());
  LKV_ASSIGN_OR_FAIL(auto reader, client.OpenLedger(writer->id(), OpenMode::kNoRecovery));
  ExpectReadable(*reader, 0, last);
}

TEST(AddPortTest, WritersAddThroughTheAddPortAndEveryEntryReadsBack) {
  LKV_ASSIGN_OR_FAIL(auto cluster, TestCluster::Start({.bookies = 3}));
  for (int i = 0; i < 3; ++i) EXPECT_NE(BookieInfo(cluster->address(i)).add_port(), 0u);
  LKV_ASSIGN_OR_FAIL(auto client, cluster->NewClient());
  WriteAndReadBack(*client, Quorums(3, 2, 2), 299);
  const uint64_t after_first = AddPortRequests(*cluster);
  EXPECT_GT(after_first, 0u) << "the writer did not use the add port";

  // A client told not to use it adds over the Add RPC.
  ClientOptions options;
  options.use_add_port = false;
  options.rpc_timeout = absl::Seconds(2);
  LKV_ASSIGN_OR_FAIL(auto rpc_client, cluster->NewClient(std::move(options)));
  WriteAndReadBack(*rpc_client, Quorums(3, 2, 2), 99);
  EXPECT_EQ(AddPortRequests(*cluster), after_first);
}

// docs/cluster.md, "Addresses: listen and advertise": a bookie that binds
// every interface publishes the address it was told, and a writer reaches
// both its gRPC port and its add port at that host. The add port listens
// on 127.0.0.2 only, so a writer that dialled the listen host (0.0.0.0,
// which Linux takes for 127.0.0.1) would be refused and add over the RPC.
TEST(AddPortTest, ABookieListeningOnEveryInterfaceIsReachedAtItsAdvertisedAddress) {
  TempDir dir;
  LKV_ASSIGN_OR_FAIL(auto store, metadata::EmbeddedStore::Open(dir.path() + "/metadata"));
  bookie::BookieOptions bo;
  bo.data_dir = dir.path() + "/bookie";
  bo.listen = "0.0.0.0:0";
  bo.add_listen = "127.0.0.2:0";
  bo.advertise = "127.0.0.2";
  bo.metadata = store.get();
  LKV_ASSIGN_OR_FAIL(auto bookie, bookie::BookieServer::Start(bo));
  EXPECT_TRUE(absl::StartsWith(bookie->address(), "127.0.0.2:")) << bookie->address();
  EXPECT_NE(bookie->add_port(), 0);
  ClientOptions options;
  options.metadata = store.get();
  options.rpc_timeout = absl::Seconds(2);
  LKV_ASSIGN_OR_FAIL(auto client, LedgerClient::Create(options));
  WriteAndReadBack(*client, Quorums(1, 1, 1), 99);
  EXPECT_GT(BookieInfo(bookie->address()).add_port_requests(), 0u)
      << "the writer did not reach the add port at the advertised host";
}

TEST(AddPortTest, ABookieWithoutAnAddPortGetsItsAddsOverTheRpc) {
  LKV_ASSIGN_OR_FAIL(auto cluster, TestCluster::Start({.bookies = 3, .add_listen = "off"}));
  for (int i = 0; i < 3; ++i) EXPECT_EQ(BookieInfo(cluster->address(i)).add_port(), 0u);
  LKV_ASSIGN_OR_FAIL(auto client, cluster->NewClient());
  WriteAndReadBack(*client, Quorums(3, 2, 2), 199);
  EXPECT_EQ(AddPortRequests(*cluster), 0u);
}

TEST(AddPortTest, ABookieWhoseAddPortCannotBeReachedGetsItsAddsOverTheRpc) {
  // The add ports listen on 127.0.0.2; clients dial the host of the gRPC
  // address, 127.0.0.1, and are refused: as behind a firewall that lets
  // only the gRPC port through. The bookies are healthy and must stay in
  // the ensemble.
  //
  // The kernel picks each add port on 127.0.0.2 regardless of 127.0.0.1,
  // where the same number may belong to another listener of this process
  // (a bookie's gRPC port): the client would then reach that one instead of
  // being refused. Start again until every add port is refused on 127.0.0.1.
  std::unique_ptr<TestCluster> cluster;
  for (int attempt = 0; attempt < 5 && cluster == nullptr; ++attempt) {
    LKV_ASSIGN_OR_FAIL(cluster, TestCluster::Start({.bookies = 3, .add_listen = "127.0.0.2:0"}));
    for (int i = 0; i < 3 && cluster != nullptr; ++i) {
      const uint32_t port = BookieInfo(cluster->address(i)).add_port();
      ASSERT_NE(port, 0u);
      if (!RefusedOn127001(static_cast<uint16_t>(port))) cluster.reset();
    }
  }
  ASSERT_NE(cluster, nullptr) << "every attempt had an add port number in use on 127.0.0.1";
  LKV_ASSIGN_OR_FAIL(auto client, cluster->NewClient());
  LKV_ASSIGN_OR_FAIL(auto writer, client->CreateLedger(Quorums(3, 3, 3)));
  const auto results = AppendRange(*writer, 0, 99, 16);
  for (const auto& r : results) ASSERT_TRUE(r.ok()) << r.status();
  const meta::v1::LedgerMetadata md = writer->metadata();
  EXPECT_EQ(md.segments_size(), 1) << "a bookie was replaced: " << md.ShortDebugString();
  LKV_ASSERT_OK(writer->Close());
  LKV_ASSIGN_OR_FAIL(auto reader, client->OpenLedger(writer->id(), OpenMode::kNoRecovery));
  ExpectReadable(*reader, 0, 99);
  EXPECT_EQ(AddPortRequests(*cluster), 0u);
}

TEST(AddPortTest, ABookieRestartedOnAnotherAddPortIsFoundAgain) {
  LKV_ASSIGN_OR_FAIL(auto cluster, TestCluster::Start({.bookies = 1}));
  LKV_ASSIGN_OR_FAIL(auto client, cluster->NewClient());
  WriteAndReadBack(*client, Quorums(1, 1, 1), 19);
  const uint32_t before = BookieInfo(cluster->address(0)).add_port();
  // Restarted on the same gRPC address; its add port is a new free port.
  cluster->StopBookie(0);
  LKV_ASSERT_OK(cluster->RestartBookie(0));
  const uint32_t after = BookieInfo(cluster->address(0)).add_port();
  ASSERT_NE(after, 0u);
  if (after == before) GTEST_SKIP() << "the bookie got its old add port back";
  WriteAndReadBack(*client, Quorums(1, 1, 1), 19);
  // Through the new add port (the restarted bookie counts from 0), not the
  // RPC the channel falls back to when a port refuses it.
  EXPECT_GT(BookieInfo(cluster->address(0)).add_port_requests(), 0u);
}

TEST(AddPortTest, ALostReplyFailsItsAddAtTheDeadlineAndTheWriterReplacesTheBookie) {
  ScopedFaultPoints faults;
  LKV_ASSIGN_OR_FAIL(auto cluster, TestCluster::Start({.bookies = 3}));
  LKV_ASSIGN_OR_FAIL(auto client, cluster->NewClient(absl::Seconds(1)));
  LKV_ASSIGN_OR_FAIL(auto writer, client->CreateLedger(Quorums(2, 2, 2)));
  const std::string silent = writer->metadata().segments(0).bookies(0);
  FaultPoints::Get().Arm("bookie.add_port.drop_reply",
                         [silent](std::string_view bookie) { return bookie == silent; });
  const absl::Time start = absl::Now();
  const auto results = AppendRange(*writer, 0, 9, 4);
  const absl::Duration took = absl::Now() - start;
  for (int64_t i = 0; i < 10; ++i) {
    ASSERT_TRUE(results[i].ok()) << results[i].status();
  }
  // Nothing could be acknowledged before the silent bookie's add timed out.
  EXPECT_GE(took, absl::Milliseconds(900));
  const meta::v1::LedgerMetadata md = writer->metadata();
  const auto& last = md.segments(md.segments_size() - 1);
  for (const std::string& b : last.bookies()) EXPECT_NE(b, silent) << md.ShortDebugString();
  FaultPoints::Get().DisarmAll();
  LKV_ASSERT_OK(writer->Close());
  LKV_ASSIGN_OR_FAIL(auto reader, client->OpenLedger(writer->id(), OpenMode::kNoRecovery));
  ExpectReadable(*reader, 0, 9);
}

TEST(AddPortTest, DestroyingAWriterCancelsItsAddsWithoutWaitingForTheDeadline) {
  ScopedFaultPoints faults;
  LKV_ASSIGN_OR_FAIL(auto cluster, TestCluster::Start({.bookies = 1}));
  LKV_ASSIGN_OR_FAIL(auto client, cluster->NewClient(absl::Seconds(60)));
  LKV_ASSIGN_OR_FAIL(auto writer, client->CreateLedger(Quorums(1, 1, 1)));
  FaultPoints::Get().ArmAlways("bookie.add_port.drop_reply");
  absl::Notification done;
  absl::Status result;
  writer->AppendAsync(PayloadFor(0), [&](absl::StatusOr<int64_t> r) {
    result = r.status();
    done.Notify();
  });
  // Wait until the bookie has the request (its reply is then dropped).
  const absl::Time wait_until = absl::Now() + absl::Seconds(10);
  while (AddPortRequests(*cluster) == 0 && absl::Now() < wait_until) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  ASSERT_GT(AddPortRequests(*cluster), 0u);
  const absl::Time start = absl::Now();
  writer.reset();
  EXPECT_LT(absl::Now() - start, absl::Seconds(10)) << "the writer waited for the add's deadline";
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_FALSE(result.ok());
}

// A writer destroyed while a reply makes it send its next request (on the
// channel's thread) must not wait for that request's deadline: the request
// was registered before the writer's cancel pass but had no id yet, so the
// pass could not name it; it cancels itself when it gets one.
TEST(AddPortTest, ARequestSentDuringTheWritersCancelPassIsCancelledToo) {
  ScopedFaultPoints faults;
  // Declared before the writer: its destruction runs the callbacks below.
  std::atomic<int> replies{0};
  std::atomic<int> sends{0};
  std::atomic<int> ended{0};
  absl::Notification appended, held, cancel_pass_done;
  const std::thread::id test_thread = std::this_thread::get_id();
  LKV_ASSIGN_OR_FAIL(auto cluster, TestCluster::Start({.bookies = 1}));
  ClientOptions options;
  options.rpc_timeout = absl::Seconds(60);
  options.max_rpcs_in_flight_per_bookie = 1;  // entry 1 waits for entry 0's reply
  LKV_ASSIGN_OR_FAIL(auto client, cluster->NewClient(options));
  LKV_ASSIGN_OR_FAIL(auto writer, client->CreateLedger(Quorums(1, 1, 1)));
  // Entry 0's reply waits until entry 1 is queued behind it, so that entry
  // 1 is sent from the channel's thread, by that reply. Every later reply
  // is lost: entry 1's add would end only at its 60 s deadline.
  FaultPoints::Get().Arm("bookie.add_port.drop_reply", [&](std::string_view) {
    if (replies.fetch_add(1) > 0) return true;
    appended.WaitForNotificationWithTimeout(absl::Seconds(30));
    return false;
  });
  // The second send (entry 1) stops before it has an id until the
  // writer's cancel pass is over.
  FaultPoints::Get().Arm("ledger.writer.add_channel_send", [&](std::string_view) {
    if (sends.fetch_add(1) == 1 && std::this_thread::get_id() != test_thread) {
      held.Notify();
      cancel_pass_done.WaitForNotificationWithTimeout(absl::Seconds(30));
    }
    return false;
  });
  FaultPoints::Get().Arm("ledger.writer.calls_cancelled", [&](std::string_view) {
    cancel_pass_done.Notify();
    return false;
  });
  for (int e = 0; e < 2; ++e) {
    writer->AppendAsync(PayloadFor(e), [&](absl::StatusOr<int64_t>) { ended.fetch_add(1); });
  }
  appended.Notify();
  ASSERT_TRUE(held.WaitForNotificationWithTimeout(absl::Seconds(10)));
  const absl::Time start = absl::Now();
  writer.reset();
  EXPECT_LT(absl::Now() - start, absl::Seconds(10)) << "the writer waited for the add's deadline";
  EXPECT_EQ(ended.load(), 2);
}

// An empty add through `conn`'s add channel (answered at once): its
// status. Opens the add port connection and its thread.
grpc::Status EmptyAdd(BookieConn& conn) {
  const bookie::v1::AddRequest request;
  AddChannel::Results results;
  absl::Notification done;
  grpc::Status status;
  conn.add_channel->Add(conn.add_channel->NewCallId(), request, &results,
                        absl::Now() + absl::Seconds(10), [&](const grpc::Status& s) {
                          status = s;
                          done.Notify();
                        });
  if (!done.WaitForNotificationWithTimeout(absl::Seconds(10))) {
    return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "no answer");
  }
  return status;
}

// A long-running client must not keep a channel, an add port connection
// and a thread for every bookie address it ever used: one that nobody has
// held for the idle time is closed, one still held is kept, and a closed
// one opens again on its next use.
TEST(AddPortTest, AConnectionNobodyHoldsIsClosedAfterItsIdleTimeAndOpensAgainOnUse) {
  LKV_ASSIGN_OR_FAIL(auto cluster, TestCluster::Start({.bookies = 2}));
  const absl::Duration idle = absl::Milliseconds(400);
  BookiePool pool(cluster->store(), metadata::Keys("default"), nullptr, nullptr,
                  /*use_add_port=*/true, absl::Seconds(5), idle);
  std::shared_ptr<BookieConn> released = pool.ForAddress(cluster->address(0));
  // Held all along (as a writer holds its ensemble's), never asked for again.
  std::shared_ptr<BookieConn> held = pool.ForAddress(cluster->address(1));
  ASSERT_NE(released->add_channel, nullptr);
  ASSERT_TRUE(EmptyAdd(*released).ok());
  ASSERT_TRUE(EmptyAdd(*held).ok());
  const std::weak_ptr<BookieConn> gone = released;
  released.reset();
  EXPECT_EQ(pool.connections_for_test(), 2u);

  // The pool's thread closes the released one once it has been idle for
  // `idle`, and not before.
  const absl::Time start = absl::Now();
  while (!gone.expired() && absl::Now() - start < absl::Seconds(10)) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_TRUE(gone.expired()) << "an idle connection was kept";
  EXPECT_GE(absl::Now() - start, idle);
  // Past another idle time, the held one is still the pool's.
  absl::SleepFor(2 * idle);
  EXPECT_EQ(pool.connections_for_test(), 1u);
  EXPECT_EQ(pool.ForAddress(cluster->address(1)), held) << "a held connection was replaced";
  ASSERT_TRUE(EmptyAdd(*held).ok()) << "the connection still held must stay open";

  // The closed one opens again, and adds through it.
  std::shared_ptr<BookieConn> again = pool.ForAddress(cluster->address(0));
  EXPECT_TRUE(EmptyAdd(*again).ok());
  EXPECT_EQ(pool.connections_for_test(), 2u);
}

// A long-lived client whose writers come and go cancels calls that have
// just ended; the channel must not remember each of those ids. A cancel
// that arrives before its Add still ends that call at once.
TEST(AddPortTest, CancelsOfEndedCallsLeaveNothingBehindAndEarlyCancelsStillWork) {
  LKV_ASSIGN_OR_FAIL(auto cluster, TestCluster::Start({.bookies = 1}));
  AddChannel channel(cluster->address(0),
                     grpc::CreateChannel(cluster->address(0), grpc::InsecureChannelCredentials()),
                     absl::Seconds(10));
  const bookie::v1::AddRequest request;  // no entries: answered at once
  for (int i = 0; i < 50; ++i) {
    AddChannel::Results response;
    absl::Notification done;
    grpc::Status status;
    const uint64_t id = channel.NewCallId();
    channel.Add(id, request, &response, absl::Now() + absl::Seconds(10),
                [&](const grpc::Status& s) {
                  status = s;
                  done.Notify();
                });
    ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(10)));
    ASSERT_TRUE(status.ok()) << status.error_message();
    channel.Cancel(id);  // ended already: nothing to do, nothing to keep
  }
  EXPECT_GT(BookieInfo(cluster->address(0)).add_port_requests(), 0u);
  EXPECT_EQ(channel.cancel_marks_for_test(), 0u);
  channel.Cancel(1u << 30);  // never handed out
  EXPECT_EQ(channel.cancel_marks_for_test(), 0u);

  const uint64_t id = channel.NewCallId();
  channel.Cancel(id);
  EXPECT_EQ(channel.cancel_marks_for_test(), 1u);
  AddChannel::Results response;
  grpc::Status status;
  bool ran = false;
  channel.Add(id, request, &response, absl::Now() + absl::Seconds(10),
              [&](const grpc::Status& s) {
                status = s;
                ran = true;
              });
  EXPECT_TRUE(ran) << "an add cancelled before it was made must end inline";
  EXPECT_EQ(status.error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_EQ(channel.cancel_marks_for_test(), 0u);
}

// One add over an AddChannel and its outcome. The request is empty (no
// entries: answered at once) unless an entry is put in.
struct ChannelCall {
  bookie::v1::AddRequest request;
  AddChannel::Results response;
  grpc::Status status;
  absl::Notification done;

  // Puts in one entry with a valid checksum.
  void SetEntry(uint64_t ledger_id, int64_t entry_id, std::string payload) {
    bookie::v1::Entry* e = request.add_entries();
    e->set_ledger_id(ledger_id);
    e->set_entry_id(entry_id);
    e->set_lac(-1);
    e->set_payload(std::move(payload));
    e->set_checksum(EntryChecksum(ledger_id, entry_id, -1, e->payload()));
  }
};

// A channel (its own connection) to bookie 0. Calls made on it must be
// declared before it: its destructor ends what is still pending.
std::unique_ptr<AddChannel> NewAddChannel(TestCluster& cluster) {
  return std::make_unique<AddChannel>(
      cluster.address(0),
      grpc::CreateChannel(cluster.address(0), grpc::InsecureChannelCredentials()),
      absl::Seconds(10));
}

void AddOn(AddChannel& channel, ChannelCall* call, absl::Duration timeout) {
  channel.Add(channel.NewCallId(), call->request, &call->response, absl::Now() + timeout,
              [call](const grpc::Status& s) {
                call->status = s;
                call->done.Notify();
              });
}

// Connects `channel` (an empty add, answered at once).
void Greet(AddChannel& channel, ChannelCall* call) {
  AddOn(channel, call, absl::Seconds(10));
  ASSERT_TRUE(call->done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  ASSERT_TRUE(call->status.ok()) << call->status.error_message();
}

// Arms bookie.add_port.stop_reading, counting how often greeted
// connections ask it, and waits (at most 10 s) until one has asked: from
// then on that connection reads nothing.
std::shared_ptr<std::atomic<int>> StopReadingOnceAsked() {
  auto asked = std::make_shared<std::atomic<int>>(0);
  FaultPoints::Get().Arm("bookie.add_port.stop_reading", [asked](std::string_view) {
    asked->fetch_add(1);
    return true;
  });
  const absl::Time until = absl::Now() + absl::Seconds(10);
  while (asked->load() == 0 && absl::Now() < until) absl::SleepFor(absl::Milliseconds(5));
  return asked;
}

// Sends an 8 MiB add on each of `calls` (together more than loopback's
// socket buffers take): the first times out after `first_timeout`, the
// others would wait 60 s.
void SendLargeAdds(AddChannel& channel, std::vector<ChannelCall>* calls,
                   absl::Duration first_timeout) {
  for (size_t i = 0; i < calls->size(); ++i) {
    (*calls)[i].SetEntry(1, static_cast<int64_t>(i), std::string(size_t{8} << 20, 'x'));
    AddOn(channel, &(*calls)[i], i == 0 ? first_timeout : absl::Seconds(60));
  }
}

// What a connection found to have stopped reading does to the calls of
// SendLargeAdds: the first ends DEADLINE_EXCEEDED, and the rest end at
// once after it, UNAVAILABLE ("stopped reading"), not at their deadlines.
void ExpectTheFirstTimesOutAndTheRestFailAtOnce(std::vector<ChannelCall>& calls) {
  ASSERT_TRUE(calls[0].done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_EQ(calls[0].status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED)
      << calls[0].status.error_message();
  for (size_t i = 1; i < calls.size(); ++i) {
    ASSERT_TRUE(calls[i].done.WaitForNotificationWithTimeout(absl::Seconds(10)))
        << "call " << i << " still waits for its own deadline on a connection nobody reads";
    EXPECT_EQ(calls[i].status.error_code(), grpc::StatusCode::UNAVAILABLE)
        << calls[i].status.error_message();
    EXPECT_NE(calls[i].status.error_message().find("stopped reading"), std::string::npos)
        << calls[i].status.error_message();
  }
}

// What a connection that is kept does to the calls of SendLargeAdds: the
// first ends DEADLINE_EXCEEDED while requests are still unsent (else the
// test proves nothing), and the rest still wait some time after (a close
// would have failed them at once).
void ExpectTheFirstTimesOutAloneWithRequestsUnsent(AddChannel& channel,
                                                   std::vector<ChannelCall>& calls) {
  ASSERT_TRUE(calls[0].done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_EQ(calls[0].status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED)
      << calls[0].status.error_message();
  ASSERT_GT(channel.queued_bytes_for_test(), 0u)
      << "every request was sent before the add timed out: the test proves nothing";
  absl::SleepFor(absl::Milliseconds(500));
  for (size_t i = 1; i < calls.size(); ++i) {
    EXPECT_FALSE(calls[i].done.HasBeenNotified())
        << "call " << i << ": the connection was closed: " << calls[i].status.error_message();
  }
}

// Holds the bookies' journal threads before each sync until Release() (at
// the latest when it is destroyed, so declare it after the cluster).
class JournalGate {
 public:
  JournalGate() {
    FaultPoints::Get().Arm("bookie.journal.before_sync",
                           [release = release_, held = held_](std::string_view) {
                             held->store(true);
                             release->WaitForNotificationWithTimeout(absl::Seconds(30));
                             return false;
                           });
  }
  ~JournalGate() { Release(); }
  JournalGate(const JournalGate&) = delete;
  JournalGate& operator=(const JournalGate&) = delete;

  // Waits (at most 10 s) until a batch is held; false if none came.
  bool AwaitHeld() const {
    const absl::Time until = absl::Now() + absl::Seconds(10);
    while (!held_->load() && absl::Now() < until) absl::SleepFor(absl::Milliseconds(5));
    return held_->load();
  }
  void Release() {
    if (!release_->HasBeenNotified()) release_->Notify();
  }

 private:
  const std::shared_ptr<absl::Notification> release_ = std::make_shared<absl::Notification>();
  const std::shared_ptr<std::atomic<bool>> held_ = std::make_shared<std::atomic<bool>>(false);
};

// A bookie that stops reading its add port connection (hung, or its disk
// stalled with its in-flight bound reached) while the client has more to
// send: once an add times out with no reply on that connection since it was
// sent, the channel closes it rather than hold the unsent requests until
// TCP gives up. The calls still pending fail UNAVAILABLE at once instead of
// at their own deadlines, and the next add connects again.
TEST(AddPortTest, AConnectionWhoseBookieStoppedReadingIsClosedWhenAnAddTimesOut) {
  ScopedFaultPoints faults;
  LKV_ASSIGN_OR_FAIL(auto cluster, TestCluster::Start({.bookies = 1}));
  constexpr int kCalls = 4;
  ChannelCall hello, again;
  std::vector<ChannelCall> calls(kCalls);
  const std::unique_ptr<AddChannel> channel = NewAddChannel(*cluster);
  ASSERT_NO_FATAL_FAILURE(Greet(*channel, &hello));
  // The connection's thread decides whether to read before each wait
  // (every 500 ms at most): once it has asked, it reads nothing more.
  const std::shared_ptr<std::atomic<int>> asked = StopReadingOnceAsked();
  ASSERT_GT(asked->load(), 0) << "the connection's thread never reached its read decision";

  SendLargeAdds(*channel, &calls, absl::Seconds(1));
  ASSERT_GT(channel->queued_bytes_for_test(), 0u)
      << "every request fit in the socket buffers: the test proves nothing";

  ASSERT_NO_FATAL_FAILURE(ExpectTheFirstTimesOutAndTheRestFailAtOnce(calls));

  FaultPoints::Get().DisarmAll();  // the bookie comes back
  AddOn(*channel, &again, absl::Seconds(10));
  ASSERT_TRUE(again.done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_TRUE(again.status.ok()) << again.status.error_message();
}

// The same when the adds wait for the connection and leave as it opens
// (their send time is the connection's): a bookie that greets and then
// reads nothing more is still found out when the first of them times out.
TEST(AddPortTest, AddsSentAsTheConnectionOpensAlsoFindABookieThatStoppedReading) {
  ScopedFaultPoints faults;
  LKV_ASSIGN_OR_FAIL(auto cluster, TestCluster::Start({.bookies = 1}));
  constexpr int kCalls = 4;
  std::vector<ChannelCall> calls(kCalls);
  // Greeted connections read nothing (the hello is read before this is asked).
  FaultPoints::Get().ArmAlways("bookie.add_port.stop_reading");
  const std::unique_ptr<AddChannel> channel = NewAddChannel(*cluster);
  SendLargeAdds(*channel, &calls, absl::Seconds(2));
  ASSERT_NO_FATAL_FAILURE(ExpectTheFirstTimesOutAndTheRestFailAtOnce(calls));
}

// A bookie that is slow but still reading (its socket keeps taking the
// bytes) is not taken for one that stopped: an add that times out there
// ends alone, DEADLINE_EXCEEDED, and the connection and the other calls
// stay.
TEST(AddPortTest, ASlowBookieThatStillReadsKeepsItsConnectionWhenAnAddTimesOut) {
  ScopedFaultPoints faults;
  LKV_ASSIGN_OR_FAIL(auto cluster, TestCluster::Start({.bookies = 1}));
  ChannelCall hello, slow, later;
  const std::unique_ptr<AddChannel> channel = NewAddChannel(*cluster);
  ASSERT_NO_FATAL_FAILURE(Greet(*channel, &hello));
  // The bookie reads on but never answers (its replies are lost).
  FaultPoints::Get().ArmAlways("bookie.add_port.drop_reply");
  slow.SetEntry(1, 0, "p");
  later.SetEntry(1, 1, "p");
  AddOn(*channel, &slow, absl::Seconds(1));
  AddOn(*channel, &later, absl::Seconds(60));
  ASSERT_TRUE(slow.done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_EQ(slow.status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED)
      << slow.status.error_message();
  absl::SleepFor(absl::Milliseconds(300));  // a close would have failed it by now
  EXPECT_FALSE(later.done.HasBeenNotified())
      << "a connection the bookie reads was closed: " << later.status.error_message();
}

// The third part of the rule: a bookie that reads slowly, so that requests
// are still unsent when an add times out with no reply since it was sent,
// keeps its connection as long as its socket took bytes in the last half of
// that add's wait (at most 1 s): the add ends alone, DEADLINE_EXCEEDED, and
// the other calls stay. (Its replies are lost, so no reply clears it.)
TEST(AddPortTest, ABookieReadingSlowlyKeepsItsConnectionWhileItsSocketTakesBytes) {
#ifdef LKV_UNDER_ASAN
  // The rule allows a socket 1 s without taking bytes, and the reader here
  // pauses 300 ms per pass. Under ASan beside another test (ctest -j2) the
  // passes and the channel's own deadline check (0.4 s late) stretched past
  // that: CI's sanitizer runs of 2026-12-06 failed it twice in a row (the
  // second time without fdatasync), with no change to the code it tests.
  // The regular build runs it.
  GTEST_SKIP() << "a sub-second timing rule; too slow to judge under ASan";
#endif
  ScopedFaultPoints faults;
  LKV_ASSIGN_OR_FAIL(auto cluster, TestCluster::Start({.bookies = 1}));
  // 160 MiB. Loopback's socket buffers take up to ~36 MiB at once here
  // (tcp_rmem up to 32 MiB, tcp_wmem 4 MiB), and the bookie reads at most
  // 8 MiB per pass: by the 2 s deadline at most ~90 MiB can have left.
  constexpr int kCalls = 20;
  ChannelCall hello;
  std::vector<ChannelCall> calls(kCalls);
  const std::unique_ptr<AddChannel> channel = NewAddChannel(*cluster);
  ASSERT_NO_FATAL_FAILURE(Greet(*channel, &hello));
  FaultPoints::Get().ArmAlways("bookie.add_port.drop_reply");
  // The connection's thread pauses 300 ms before each read (at most 8 MiB),
  // well inside the 1 s the rule allows a socket to take nothing (a loaded
  // machine may add a few hundred ms to a pass).
  auto reads = std::make_shared<std::atomic<int>>(0);
  FaultPoints::Get().Arm("bookie.add_port.stop_reading", [reads](std::string_view) {
    reads->fetch_add(1);
    absl::SleepFor(absl::Milliseconds(300));
    return false;
  });
  SendLargeAdds(*channel, &calls, absl::Seconds(2));
  ASSERT_NO_FATAL_FAILURE(ExpectTheFirstTimesOutAloneWithRequestsUnsent(*channel, calls));
  EXPECT_GT(reads->load(), 2);
}

// The first part of the rule: a bookie that stopped reading but answered
// something after the timed-out add was sent (here an add it had read
// before and held at its journal) is alive: the add ends alone,
// DEADLINE_EXCEEDED, and the connection and the other calls stay.
TEST(AddPortTest, ABookieThatAnsweredSinceTheAddWasSentKeepsItsConnection) {
  ScopedFaultPoints faults;
  LKV_ASSIGN_OR_FAIL(auto cluster, TestCluster::Start({.bookies = 1}));
  constexpr int kCalls = 4;
  ChannelCall hello, early;
  std::vector<ChannelCall> calls(kCalls);
  const std::unique_ptr<AddChannel> channel = NewAddChannel(*cluster);
  ASSERT_NO_FATAL_FAILURE(Greet(*channel, &hello));
  // The journal holds `early` before its sync until released.
  JournalGate gate;
  early.SetEntry(2, 0, "early");
  AddOn(*channel, &early, absl::Seconds(30));
  ASSERT_TRUE(gate.AwaitHeld()) << "the early add never reached the journal";
  // From here on the connection reads nothing.
  const std::shared_ptr<std::atomic<int>> asked = StopReadingOnceAsked();
  ASSERT_GT(asked->load(), 0) << "the connection's thread never reached its read decision";

  SendLargeAdds(*channel, &calls, absl::Seconds(2));
  absl::SleepFor(absl::Milliseconds(300));  // the large adds left
  gate.Release();                           // the early add's reply comes now
  ASSERT_TRUE(early.done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_TRUE(early.status.ok()) << early.status.error_message();
  ASSERT_NO_FATAL_FAILURE(ExpectTheFirstTimesOutAloneWithRequestsUnsent(*channel, calls));
}

// A raw TCP connection to 127.0.0.1:port, or -1.
int Dial(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    ::close(fd);
    return -1;
  }
  timeval tv{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  return fd;
}

// Whether the peer closes `fd` (reads end) within the receive timeout.
bool ClosedByPeer(int fd) {
  char buf[256];
  for (;;) {
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n == 0) return true;
    if (n < 0) return errno == ECONNRESET;
  }
}

// A frame header as it goes on the wire (little-endian, as on x86).
std::string RawHeader(uint32_t body_bytes, uint32_t status, uint8_t id) {
  std::string h(kFrameHeaderBytes, '\0');
  std::memcpy(h.data(), &body_bytes, 4);
  std::memcpy(h.data() + 4, &status, 4);
  h[8] = static_cast<char>(id);
  return h;
}

// The client's hello frame, raw.
std::string RawHello() {
  return RawHeader(add_protocol::kHelloBody.size(), add_protocol::kHelloStatus, 0) +
         std::string(add_protocol::kHelloBody);
}

// Polls `conn` until the frame with `id` arrives (or 10 s pass).
absl::StatusOr<std::pair<uint32_t, std::string>> AwaitFrame(FrameConn& conn, uint64_t id) {
  const absl::Time until = absl::Now() + absl::Seconds(10);
  std::vector<FrameView> frames;
  while (absl::Now() < until) {
    frames.clear();
    absl::Status s = conn.Poll(absl::Milliseconds(100), true, &frames);
    for (const FrameView& f : frames) {
      if (f.id == id) return std::make_pair(f.status, std::string(f.body));
    }
    if (!s.ok()) return s;
  }
  return absl::DeadlineExceededError("no reply");
}

TEST(AddPortTest, APeerSpeakingAnotherProtocolIsDisconnectedAndTheBookieServesOn) {
  LKV_ASSIGN_OR_FAIL(auto cluster, TestCluster::Start({.bookies = 1}));
  const int port = static_cast<int>(BookieInfo(cluster->address(0)).add_port());
  ASSERT_NE(port, 0);

  {  // A gRPC (HTTP/2) client dialling the wrong port.
    const int fd = Dial(port);
    ASSERT_GE(fd, 0);
    const std::string preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
    ASSERT_EQ(::send(fd, preface.data(), preface.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(preface.size()));
    EXPECT_TRUE(ClosedByPeer(fd));
    ::close(fd);
  }
  {  // The hello and a request longer than the pre-hello limit in one send:
     // the limit applies to the hello only, so the request is answered.
    const int fd = Dial(port);
    ASSERT_GE(fd, 0);
    bookie::v1::AddRequest req;
    req.set_expected_instance_id(std::string(100, 'x'));
    bookie::v1::Entry* e = req.add_entries();
    e->set_ledger_id(78);
    const std::string body = req.SerializeAsString();
    ASSERT_GT(body.size(), 64u);
    const std::string bytes = RawHello() + RawHeader(body.size(), 0, 9) + body;
    ASSERT_EQ(::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(bytes.size()));
    char reply[kFrameHeaderBytes];
    size_t got = 0;
    while (got < sizeof(reply)) {
      const ssize_t n = ::recv(fd, reply + got, sizeof(reply) - got, 0);
      ASSERT_GT(n, 0) << "no reply: the connection was closed";
      got += static_cast<size_t>(n);
    }
    EXPECT_EQ(reply[8], 9);
    uint32_t status = 0;
    std::memcpy(&status, reply + 4, 4);
    EXPECT_EQ(status, 0u);
    ::close(fd);
  }
  {  // A greeted client that then announces a 4 GiB frame.
    const int fd = Dial(port);
    ASSERT_GE(fd, 0);
    const std::string bytes = RawHello() + RawHeader(0xfffffff0u, 0, 1);
    ASSERT_EQ(::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(bytes.size()));
    EXPECT_TRUE(ClosedByPeer(fd));
    ::close(fd);
  }
  {  // An unparsable request is answered INVALID_ARGUMENT; the connection stays.
    LKV_ASSIGN_OR_FAIL(auto conn, FrameConn::Connect("127.0.0.1", port, absl::Seconds(5),
                                                     add_protocol::kMaxBodyBytes));
    ASSERT_TRUE(conn->Send(0, add_protocol::kHelloStatus, add_protocol::kHelloBody));
    const std::string junk = "\xff\xff\xff\xff\xff";
    ASSERT_TRUE(conn->Send(5, 0, junk));
    auto reply = AwaitFrame(*conn, 5);
    LKV_ASSERT_OK(reply.status());
    EXPECT_EQ(reply->first, static_cast<uint32_t>(grpc::StatusCode::INVALID_ARGUMENT))
        << reply->second;
    // A well-formed request on the same connection: an unknown instance id
    // is refused per entry, as the Add RPC does.
    bookie::v1::AddRequest req;
    req.set_expected_instance_id("not-this-bookie");
    bookie::v1::Entry* e = req.add_entries();
    e->set_ledger_id(77);
    e->set_entry_id(0);
    const std::string body = req.SerializeAsString();
    ASSERT_TRUE(conn->Send(6, 0, body));
    reply = AwaitFrame(*conn, 6);
    LKV_ASSERT_OK(reply.status());
    ASSERT_EQ(reply->first, 0u) << reply->second;
    bookie::v1::AddResponse resp;
    ASSERT_TRUE(resp.ParseFromString(reply->second));
    ASSERT_EQ(resp.results_size(), 1);
    EXPECT_EQ(resp.results(0).code(), bookie::v1::INSTANCE_MISMATCH);
  }
  // Real writers are served as before.
  LKV_ASSIGN_OR_FAIL(auto client, cluster->NewClient());
  WriteAndReadBack(*client, Quorums(1, 1, 1), 49);
  EXPECT_GT(AddPortRequests(*cluster), 0u);
}

// A bookie that closes the writer's add port connection before any reply
// (here: at its connection limit, which a raw client holds) is refusing the
// transport, not failing: the adds sent on that connection and the next
// ones go over the Add RPC, and the bookie stays in the ensemble. With E=1
// and no spare bookie, a failed add would fail the writer.
TEST(AddPortTest, ABookieThatClosesTheConnectionBeforeAnyReplyGetsTheAddsOverTheRpc) {
  LKV_ASSIGN_OR_FAIL(auto cluster,
                     TestCluster::Start({.bookies = 1, .add_port_max_connections = 1}));
  const int port = static_cast<int>(BookieInfo(cluster->address(0)).add_port());
  ASSERT_NE(port, 0);
  // The one connection the bookie serves; a reply shows it is being served.
  LKV_ASSIGN_OR_FAIL(auto holder, FrameConn::Connect("127.0.0.1", port, absl::Seconds(5),
                                                     add_protocol::kMaxBodyBytes));
  ASSERT_TRUE(holder->Send(0, add_protocol::kHelloStatus, add_protocol::kHelloBody));
  ASSERT_TRUE(holder->Send(1, 0, std::string_view("\xff\xff\xff")));
  auto reply = AwaitFrame(*holder, 1);
  LKV_ASSERT_OK(reply.status());
  ASSERT_EQ(reply->first, static_cast<uint32_t>(grpc::StatusCode::INVALID_ARGUMENT));

  LKV_ASSIGN_OR_FAIL(auto client, cluster->NewClient());
  LKV_ASSIGN_OR_FAIL(auto writer, client->CreateLedger(Quorums(1, 1, 1)));
  const auto results = AppendRange(*writer, 0, 99, 16);
  ASSERT_EQ(results.size(), 100u);
  for (const auto& r : results) ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(writer->metadata().segments_size(), 1)
      << "the bookie was replaced: " << writer->metadata().ShortDebugString();
  LKV_ASSERT_OK(writer->Close());
  LKV_ASSIGN_OR_FAIL(auto reader, client->OpenLedger(writer->id(), OpenMode::kNoRecovery));
  ExpectReadable(*reader, 0, 99);
  EXPECT_EQ(AddPortRequests(*cluster), 0u) << "the held connection was the only one served";
}

// A peer that connects and says nothing, or half a hello, is disconnected
// after the hello timeout, and its connection slot serves writers again.
TEST(AddPortTest, APeerThatNeverSaysHelloIsDisconnectedAndItsSlotFreed) {
  LKV_ASSIGN_OR_FAIL(auto cluster,
                     TestCluster::Start({.bookies = 1,
                                         .add_port_max_connections = 2,
                                         .add_port_hello_timeout = absl::Seconds(1)}));
  const int port = static_cast<int>(BookieInfo(cluster->address(0)).add_port());
  ASSERT_NE(port, 0);
  const int silent = Dial(port);
  ASSERT_GE(silent, 0);
  const int half = Dial(port);
  ASSERT_GE(half, 0);
  const std::string hello = RawHello();
  ASSERT_EQ(::send(half, hello.data(), 10, MSG_NOSIGNAL), 10);
  // Dial's receive timeout is 10 s: far past the hello timeout.
  EXPECT_TRUE(ClosedByPeer(silent)) << "a silent peer kept its connection";
  EXPECT_TRUE(ClosedByPeer(half)) << "a peer with half a hello kept its connection";
  ::close(silent);
  ::close(half);

  // Both slots serve writers again: their adds go through the add port.
  LKV_ASSIGN_OR_FAIL(auto client, cluster->NewClient());
  WriteAndReadBack(*client, Quorums(1, 1, 1), 49);
  EXPECT_GT(AddPortRequests(*cluster), 0u);
}

TEST(AddPortTest, AddPortLimitsMustBePositive) {
  TempDir dir;
  bookie::BookieOptions options;
  options.data_dir = dir.path() + "/bookie";
  options.add_port_max_connections = 0;
  EXPECT_EQ(bookie::BookieServer::Start(options).status().code(),
            absl::StatusCode::kInvalidArgument);
  options.add_port_max_connections = 1;
  options.add_port_hello_timeout = absl::ZeroDuration();
  EXPECT_EQ(bookie::BookieServer::Start(options).status().code(),
            absl::StatusCode::kInvalidArgument);
  options.add_port_hello_timeout = absl::Seconds(1);
  options.add_port_max_in_flight_bytes = 0;
  EXPECT_EQ(bookie::BookieServer::Start(options).status().code(),
            absl::StatusCode::kInvalidArgument);
  options.add_port_max_in_flight_bytes = 1;
  LKV_ASSERT_OK(bookie::BookieServer::Start(options).status());
}

// The bookie's memory for requests it has read and not yet answered is
// bounded across connections, not only per connection: with the journal
// stalled and a 1 MiB budget spent by a first writer's connection, a
// second connection gets none of its requests into the bookie (its own
// per-connection bound would let it have 64 MiB); the rest waits in the
// sockets, and everything is stored once the journal moves again. A writer
// that connects meanwhile is still greeted (a hello left unread past the
// hello timeout would send its adds over the RPC, which has no budget).
TEST(AddPortTest, RequestsWithTheStorageAreBoundedAcrossConnections) {
  ScopedFaultPoints faults;
  // A hello timeout long enough for the writers below to say hello on a
  // loaded machine, short enough for the newcomer to wait past it.
  LKV_ASSIGN_OR_FAIL(auto cluster, TestCluster::Start({.bookies = 1,
                                                        .add_port_hello_timeout =
                                                            absl::Seconds(1),
                                                        .add_port_max_in_flight_bytes = 1 << 20}));
  constexpr int kChannels = 2, kCalls = 8;
  // Outlive the channels, which end what is pending when destroyed.
  ChannelCall newcomer;
  std::vector<ChannelCall> hellos(kChannels);
  std::vector<std::vector<ChannelCall>> calls(kChannels);
  for (auto& c : calls) c = std::vector<ChannelCall>(kCalls);
  std::vector<std::unique_ptr<AddChannel>> channels;  // one connection each
  for (int c = 0; c < kChannels; ++c) {
    channels.push_back(NewAddChannel(*cluster));
    ASSERT_NO_FATAL_FAILURE(Greet(*channels[c], &hellos[c]));
  }
  auto taken = [&, before = BookieInfo(cluster->address(0)).add_port_requests()] {
    return BookieInfo(cluster->address(0)).add_port_requests() - before;
  };

  // The journal thread holds its first batch before the sync (released at
  // the latest when an assertion below ends the test early).
  JournalGate gate;
  // 2 MiB each: one read of a connection (at most 8 MiB) takes at most 4.
  auto send_all = [&](int c) {
    for (int i = 0; i < kCalls; ++i) {
      calls[c][i].SetEntry(100 + c, i, std::string(size_t{2} << 20, static_cast<char>('a' + i)));
      AddOn(*channels[c], &calls[c][i], absl::Seconds(60));
    }
  };
  send_all(0);
  ASSERT_TRUE(gate.AwaitHeld()) << "no batch reached the journal";
  // Whatever the timing, the first connection reads no more once its
  // requests spend the budget (one read: at most 4 of them).
  absl::SleepFor(absl::Milliseconds(500));
  const uint64_t first = taken();
  EXPECT_GE(first, 1u);
  EXPECT_LE(first, 4u) << "the bookie took in requests beyond its budget";

  send_all(1);
  absl::SleepFor(absl::Milliseconds(500));  // time enough to read 16 MiB on loopback
  EXPECT_EQ(taken(), first) << "a second connection read although the budget was spent";
  for (const auto& c : calls) {
    for (const ChannelCall& call : c) EXPECT_FALSE(call.done.HasBeenNotified());
  }
  // A third writer connects during the stall and waits past the hello
  // timeout: its hello is read, its add waits for the budget like the rest.
  const std::unique_ptr<AddChannel> third = NewAddChannel(*cluster);
  // Too large to come in with the hello (before it, the bookie reads at
  // most 80 bytes).
  newcomer.SetEntry(200, 0, std::string(4096, 'n'));
  AddOn(*third, &newcomer, absl::Seconds(60));
  absl::SleepFor(absl::Milliseconds(2500));  // past the hello timeout
  EXPECT_EQ(taken(), first);

  gate.Release();
  for (auto& c : calls) {
    for (ChannelCall& call : c) {
      ASSERT_TRUE(call.done.WaitForNotificationWithTimeout(absl::Seconds(30)));
      ASSERT_TRUE(call.status.ok()) << call.status.error_message();
      ASSERT_EQ(call.response.size(), 1u);
      EXPECT_EQ(call.response[0].code, bookie::v1::OK);
    }
  }
  ASSERT_TRUE(newcomer.done.WaitForNotificationWithTimeout(absl::Seconds(30)));
  ASSERT_TRUE(newcomer.status.ok()) << newcomer.status.error_message();
  ASSERT_EQ(newcomer.response.size(), 1u);
  EXPECT_EQ(newcomer.response[0].code, bookie::v1::OK);
  EXPECT_EQ(taken(), static_cast<uint64_t>(kChannels * kCalls + 1))
      << "the newcomer's add did not come through the add port";
}

// A connection the bookie is not reading (here: a fault point; in life the
// budget above, or a peer that does not read its replies) still notices
// its peer leaving, and its thread ends at once instead of waiting until
// the bookie would read again.
TEST(AddPortTest, APeerLeavingAConnectionTheBookieIsNotReadingEndsItsThread) {
  ScopedFaultPoints faults;
  LKV_ASSIGN_OR_FAIL(auto cluster, TestCluster::Start({.bookies = 1}));
  const int port = static_cast<int>(BookieInfo(cluster->address(0)).add_port());
  ASSERT_NE(port, 0);
  const int fd = Dial(port);
  ASSERT_GE(fd, 0);
  const std::string hello = RawHello();
  ASSERT_EQ(::send(fd, hello.data(), hello.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(hello.size()));
  // The fault point is asked before each wait of a greeted connection: at
  // least every 500 ms while that connection's thread lives.
  const std::shared_ptr<std::atomic<int>> asked = StopReadingOnceAsked();
  ASSERT_GT(asked->load(), 0) << "the connection was never greeted";
  ::close(fd);
  absl::SleepFor(absl::Milliseconds(1000));
  const int after_close = asked->load();
  absl::SleepFor(absl::Milliseconds(1200));  // two more waits, had the thread lived on
  EXPECT_EQ(asked->load(), after_close) << "the connection's thread lives on after its peer left";
}

}  // namespace
}  // namespace ledgerkv::ledger
