// The Bookie gRPC service over real gRPC on 127.0.0.1.
#include <chrono>
#include <limits>
#include <memory>
#include <string>
#include <thread>

#include "absl/synchronization/notification.h"
#include "base/entry_checksum.h"
#include "base/fault_env.h"
#include "base/fault_point.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "ledger/bookie/bookie_server.h"
#include "ledger/bookie/test_util.h"
#include "proto/bookie.grpc.pb.h"

namespace ledgerkv::bookie {
namespace {

using testing::NewTempDir;

v1::Entry MakeEntry(uint64_t ledger, int64_t entry, int64_t lac, std::string payload) {
  v1::Entry e;
  e.set_ledger_id(ledger);
  e.set_entry_id(entry);
  e.set_lac(lac);
  e.set_checksum(EntryChecksum(ledger, entry, lac, payload));
  e.set_payload(std::move(payload));
  return e;
}

class BookieServiceTest : public ::testing::Test {
 protected:
  void SetUp() override { Start(nullptr); }

  // Starts a bookie on a new data directory, or on the last one (a restart).
  void Start(Env* env, bool same_dir = false) {
    server_.reset();
    if (!same_dir) data_dir_ = NewTempDir("service");
    BookieOptions o;
    o.data_dir = data_dir_;
    o.env = env;
    o.bookie_id = "bookie-under-test";
    auto s = BookieServer::Start(o);
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = std::move(*s);
    stub_ = v1::Bookie::NewStub(
        grpc::CreateChannel(server_->address(), grpc::InsecureChannelCredentials()));
  }

  void Deadline(grpc::ClientContext* ctx, int seconds = 10) {
    ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(seconds));
  }

  // Adds entries [first, first+n) of `ledger` in one request; returns codes.
  std::vector<v1::Code> Add(uint64_t ledger, int64_t first, int n, bool recovery = false,
                            std::string instance = "") {
    v1::AddRequest req;
    req.set_recovery(recovery);
    req.set_expected_instance_id(instance);
    for (int i = 0; i < n; ++i) {
      const int64_t e = first + i;
      *req.add_entries() = MakeEntry(ledger, e, e - 1, testing::Payload(ledger, e));
    }
    v1::AddResponse resp;
    grpc::ClientContext ctx;
    Deadline(&ctx);
    grpc::Status st = stub_->Add(&ctx, req, &resp);
    EXPECT_TRUE(st.ok()) << st.error_message();
    std::vector<v1::Code> codes;
    for (int i = 0; i < resp.results_size(); ++i) {
      EXPECT_EQ(resp.results(i).ledger_id(), ledger);
      EXPECT_EQ(resp.results(i).entry_id(), first + i);
      codes.push_back(resp.results(i).code());
    }
    return codes;
  }

  grpc::Status Read(const v1::ReadRequest& req, v1::ReadResponse* resp) {
    grpc::ClientContext ctx;
    Deadline(&ctx);
    return stub_->Read(&ctx, req, resp);
  }

  grpc::Status ReadLac(const v1::ReadLacRequest& req, v1::ReadLacResponse* resp) {
    grpc::ClientContext ctx;
    Deadline(&ctx);
    return stub_->ReadLac(&ctx, req, resp);
  }

  // An async ReadLac long poll on `ledger` waiting for a LAC above `at_most`.
  struct LongPoll {
    // A test that stops early must not free a call gRPC still uses.
    ~LongPoll() {
      ctx.TryCancel();
      done.WaitForNotification();
    }
    v1::ReadLacRequest req;
    v1::ReadLacResponse resp;
    grpc::ClientContext ctx;
    absl::Notification done;
    grpc::Status status;
  };
  std::unique_ptr<LongPoll> StartLongPoll(uint64_t ledger, int64_t at_most) {
    auto poll = std::make_unique<LongPoll>();
    poll->req.set_ledger_id(ledger);
    poll->req.set_wait_if_lac_at_most(at_most);
    poll->req.set_wait_timeout_ms(20000);
    Deadline(&poll->ctx, 30);
    LongPoll* p = poll.get();
    stub_->async()->ReadLac(&p->ctx, &p->req, &p->resp, [p](grpc::Status s) {
      p->status = s;
      p->done.Notify();
    });
    return poll;
  }

  v1::WriteLacResponse WriteLac(uint64_t ledger, int64_t lac, std::string instance = "") {
    v1::WriteLacRequest req;
    req.set_ledger_id(ledger);
    req.set_lac(lac);
    req.set_expected_instance_id(std::move(instance));
    grpc::ClientContext ctx;
    Deadline(&ctx);
    v1::WriteLacResponse resp;
    grpc::Status st = stub_->WriteLac(&ctx, req, &resp);
    EXPECT_TRUE(st.ok()) << st.error_message();
    return resp;
  }

  // ReadLac without a long poll, fencing the ledger first if `fence`.
  grpc::Status ReadLacNow(uint64_t ledger, bool fence, v1::ReadLacResponse* resp) {
    v1::ReadLacRequest req;
    req.set_ledger_id(ledger);
    req.set_fence(fence);
    req.set_wait_if_lac_at_most(-2);
    return ReadLac(req, resp);
  }

  int64_t LacOf(uint64_t ledger) {
    v1::ReadLacResponse resp;
    EXPECT_TRUE(ReadLacNow(ledger, /*fence=*/false, &resp).ok());
    EXPECT_EQ(resp.code(), v1::OK);
    return resp.lac();
  }

  v1::GetInfoResponse Info() {
    grpc::ClientContext ctx;
    Deadline(&ctx);
    v1::GetInfoResponse resp;
    EXPECT_TRUE(stub_->GetInfo(&ctx, v1::GetInfoRequest(), &resp).ok());
    return resp;
  }

  std::string data_dir_;
  std::unique_ptr<BookieServer> server_;
  std::unique_ptr<v1::Bookie::Stub> stub_;
};

TEST_F(BookieServiceTest, BatchAddThenRangeRead) {
  EXPECT_EQ(Add(1, 0, 10), std::vector<v1::Code>(10, v1::OK));
  v1::ReadRequest req;
  req.set_ledger_id(1);
  req.set_first_entry_id(2);
  req.set_count(5);
  v1::ReadResponse resp;
  ASSERT_TRUE(Read(req, &resp).ok());
  ASSERT_EQ(resp.code(), v1::OK);
  ASSERT_EQ(resp.results_size(), 5);
  for (int i = 0; i < 5; ++i) {
    const v1::ReadResult& r = resp.results(i);
    EXPECT_EQ(r.code(), v1::OK);
    EXPECT_EQ(r.entry_id(), 2 + i);
    EXPECT_EQ(r.entry().payload(), testing::Payload(1, 2 + i));
    EXPECT_EQ(r.entry().lac(), 1 + i);
    EXPECT_EQ(r.entry().checksum(), EntryChecksum(1, 2 + i, 1 + i, r.entry().payload()));
  }

  // Past the end: every id asked for gets an explicit NO_SUCH_ENTRY (a
  // reader learns in one answer that this replica lacks the whole tail).
  req.set_first_entry_id(8);
  req.set_count(5);
  resp.Clear();
  ASSERT_TRUE(Read(req, &resp).ok());
  ASSERT_EQ(resp.results_size(), 5);
  EXPECT_EQ(resp.results(1).code(), v1::OK);
  for (int i = 2; i < 5; ++i) {
    EXPECT_EQ(resp.results(i).code(), v1::NO_SUCH_ENTRY) << i;
    EXPECT_EQ(resp.results(i).entry_id(), 8 + i);
    EXPECT_FALSE(resp.results(i).has_entry());
  }

  // max_bytes stops early but always returns one entry.
  req.set_first_entry_id(0);
  req.set_count(10);
  req.set_max_bytes(1);
  resp.Clear();
  ASSERT_TRUE(Read(req, &resp).ok());
  EXPECT_EQ(resp.results_size(), 1);
  req.set_max_bytes(static_cast<int64_t>(testing::Payload(1, 0).size() +
                                         testing::Payload(1, 1).size()));
  resp.Clear();
  ASSERT_TRUE(Read(req, &resp).ok());
  EXPECT_EQ(resp.results_size(), 2);
}

// Striped ensembles leave gaps: every id in the range gets its own answer.
TEST_F(BookieServiceTest, RangeReadAnswersEveryIdAcrossGaps) {
  for (int64_t e : {0, 2, 4}) ASSERT_EQ(Add(3, e, 1), std::vector<v1::Code>{v1::OK});
  v1::ReadRequest req;
  req.set_ledger_id(3);
  req.set_first_entry_id(0);
  req.set_count(10);
  v1::ReadResponse resp;
  ASSERT_TRUE(Read(req, &resp).ok());
  ASSERT_EQ(resp.code(), v1::OK);
  std::vector<v1::Code> expected = {v1::OK, v1::NO_SUCH_ENTRY, v1::OK, v1::NO_SUCH_ENTRY, v1::OK};
  expected.resize(10, v1::NO_SUCH_ENTRY);  // past the last entry too
  ASSERT_EQ(resp.results_size(), static_cast<int>(expected.size()));
  for (int i = 0; i < resp.results_size(); ++i) {
    EXPECT_EQ(resp.results(i).entry_id(), i);
    EXPECT_EQ(resp.results(i).code(), expected[i]) << i;
    EXPECT_EQ(resp.results(i).has_entry(), expected[i] == v1::OK) << i;
  }
}

TEST_F(BookieServiceTest, UnknownLedgerAndBadArguments) {
  v1::ReadRequest req;
  req.set_ledger_id(77);
  req.set_count(1);
  v1::ReadResponse resp;
  ASSERT_TRUE(Read(req, &resp).ok());
  EXPECT_EQ(resp.code(), v1::NO_SUCH_LEDGER);
  req.set_count(0);
  resp.Clear();
  ASSERT_TRUE(Read(req, &resp).ok());
  EXPECT_EQ(resp.code(), v1::INVALID);
  // Ids past INT64_MAX do not exist: refused, not wrapped to negative ids.
  req.set_first_entry_id(std::numeric_limits<int64_t>::max() - 2);
  req.set_count(10);
  resp.Clear();
  ASSERT_TRUE(Read(req, &resp).ok());
  EXPECT_EQ(resp.code(), v1::INVALID);
  EXPECT_EQ(resp.results_size(), 0);
  v1::ReadLacResponse lresp;
  ASSERT_TRUE(ReadLacNow(77, /*fence=*/false, &lresp).ok());
  EXPECT_EQ(lresp.code(), v1::NO_SUCH_LEDGER);

  v1::AddRequest bad;
  v1::Entry e = MakeEntry(1, 0, -1, "x");
  e.set_checksum(e.checksum() + 1);
  *bad.add_entries() = e;
  v1::AddResponse aresp;
  grpc::ClientContext ctx;
  Deadline(&ctx);
  ASSERT_TRUE(stub_->Add(&ctx, bad, &aresp).ok());
  EXPECT_EQ(aresp.results(0).code(), v1::INVALID);
}

// A request for another instance (e.g. from before a data-dir wipe) never
// gets a negative answer.
TEST_F(BookieServiceTest, InstanceMismatchIsNeverNoSuchEntry) {
  const std::string wrong = "00000000000000000000000000000000";
  EXPECT_EQ(Add(1, 0, 2, false, wrong), std::vector<v1::Code>(2, v1::INSTANCE_MISMATCH));
  EXPECT_EQ(Add(1, 0, 1, false, server_->instance_id()), std::vector<v1::Code>{v1::OK});
  v1::ReadRequest req;
  req.set_expected_instance_id(wrong);
  req.set_ledger_id(1);
  req.set_first_entry_id(5);
  req.set_count(1);
  v1::ReadResponse resp;
  ASSERT_TRUE(Read(req, &resp).ok());
  EXPECT_EQ(resp.code(), v1::INSTANCE_MISMATCH);
  EXPECT_EQ(resp.results_size(), 0);
  v1::ReadLacRequest lreq;
  lreq.set_expected_instance_id(wrong);
  lreq.set_ledger_id(1);
  lreq.set_fence(true);
  v1::ReadLacResponse lresp;
  ASSERT_TRUE(ReadLac(lreq, &lresp).ok());
  EXPECT_EQ(lresp.code(), v1::INSTANCE_MISMATCH);
  // ... and did not fence.
  EXPECT_EQ(Add(1, 1, 1), std::vector<v1::Code>{v1::OK});
}

TEST_F(BookieServiceTest, ReadLacLongPollCompletesWhenAnAddArrives) {
  ASSERT_EQ(Add(1, 0, 1), std::vector<v1::Code>{v1::OK});  // lac -1
  const absl::Time start = absl::Now();
  auto poll = StartLongPoll(1, -1);
  EXPECT_FALSE(poll->done.WaitForNotificationWithTimeout(absl::Milliseconds(200)));
  ASSERT_EQ(Add(1, 1, 1), std::vector<v1::Code>{v1::OK});  // lac 0
  ASSERT_TRUE(poll->done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  ASSERT_TRUE(poll->status.ok()) << poll->status.error_message();
  EXPECT_EQ(poll->resp.code(), v1::OK);
  EXPECT_EQ(poll->resp.lac(), 0);
  EXPECT_EQ(poll->resp.last_entry_id(), 1);
  EXPECT_FALSE(poll->resp.fenced());
}

TEST_F(BookieServiceTest, ReadLacLongPollTimesOut) {
  ASSERT_EQ(Add(1, 0, 3), std::vector<v1::Code>(3, v1::OK));  // lac 1
  v1::ReadLacRequest req;
  req.set_ledger_id(1);
  req.set_wait_if_lac_at_most(1);
  req.set_wait_timeout_ms(300);
  v1::ReadLacResponse resp;
  const absl::Time start = absl::Now();
  ASSERT_TRUE(ReadLac(req, &resp).ok());
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(300));
  EXPECT_EQ(resp.code(), v1::OK);
  EXPECT_EQ(resp.lac(), 1);
}

// An idle writer's explicit LAC (docs/ledger-protocol.md, "Explicit LAC
// writes"): ReadLac answers it, it never lowers the LAC, bad input changes
// nothing, and it is kept in memory only.
TEST_F(BookieServiceTest, WriteLacRaisesTheLacReadLacAnswersAndNeverLowersIt) {
  ASSERT_EQ(Add(1, 0, 3), std::vector<v1::Code>(3, v1::OK));  // piggybacked lac 1
  ASSERT_EQ(LacOf(1), 1);

  v1::WriteLacResponse resp = WriteLac(1, 2);
  EXPECT_EQ(resp.code(), v1::OK);
  EXPECT_EQ(resp.lac(), 2);
  EXPECT_EQ(LacOf(1), 2);
  resp = WriteLac(1, 0);  // a late, lower one
  EXPECT_EQ(resp.code(), v1::OK);
  EXPECT_EQ(resp.lac(), 2);
  EXPECT_EQ(LacOf(1), 2);

  // Bad input: a clear code, and the LAC stays.
  EXPECT_EQ(WriteLac(1, -7).code(), v1::INVALID);
  EXPECT_EQ(WriteLac(1, 9, "not-this-bookie").code(), v1::INSTANCE_MISMATCH);
  EXPECT_EQ(LacOf(1), 2);
  // A ledger the bookie holds nothing of gets no state.
  EXPECT_EQ(WriteLac(77, 5).code(), v1::NO_SUCH_LEDGER);
  {
    v1::ReadLacResponse lac;
    ASSERT_TRUE(ReadLacNow(77, /*fence=*/false, &lac).ok());
    EXPECT_EQ(lac.code(), v1::NO_SUCH_LEDGER);
  }

  // Later adds carrying a lower piggybacked LAC keep the explicit one.
  ASSERT_EQ(Add(1, 3, 1), std::vector<v1::Code>{v1::OK});  // carries lac 2
  EXPECT_EQ(LacOf(1), 2);
  ASSERT_EQ(Add(1, 4, 2), std::vector<v1::Code>(2, v1::OK));  // carries lac 4
  EXPECT_EQ(LacOf(1), 4);

  // In memory only: after a restart the piggybacked LAC is answered.
  EXPECT_EQ(WriteLac(1, 5).lac(), 5);
  Start(nullptr, /*same_dir=*/true);
  EXPECT_EQ(LacOf(1), 4);
}

TEST_F(BookieServiceTest, WriteLacWakesLongPollsAndIsRefusedOnAFencedLedger) {
  ASSERT_EQ(Add(1, 0, 2), std::vector<v1::Code>(2, v1::OK));  // lac 0
  auto poll = StartLongPoll(1, 0);
  EXPECT_FALSE(poll->done.WaitForNotificationWithTimeout(absl::Milliseconds(200)));
  EXPECT_EQ(WriteLac(1, 1).code(), v1::OK);  // no add: only the explicit LAC moves
  ASSERT_TRUE(poll->done.WaitForNotificationWithTimeout(absl::Seconds(10)))
      << "the long poll did not wake on the explicit LAC";
  ASSERT_TRUE(poll->status.ok()) << poll->status.error_message();
  EXPECT_EQ(poll->resp.code(), v1::OK);
  EXPECT_EQ(poll->resp.lac(), 1);
  EXPECT_EQ(poll->resp.last_entry_id(), 1);

  // A fenced ledger takes no LAC from its deposed writer.
  v1::ReadLacResponse fenced;
  ASSERT_TRUE(ReadLacNow(1, /*fence=*/true, &fenced).ok());
  ASSERT_EQ(fenced.code(), v1::OK);
  EXPECT_EQ(fenced.lac(), 1);  // the fencing read sees the explicit LAC too
  v1::WriteLacResponse refused = WriteLac(1, 5);
  EXPECT_EQ(refused.code(), v1::FENCED);
  EXPECT_EQ(refused.lac(), 1);
  EXPECT_EQ(LacOf(1), 1);
}

TEST_F(BookieServiceTest, FenceByReadLacAndRead) {
  ASSERT_EQ(Add(1, 0, 3), std::vector<v1::Code>(3, v1::OK));
  v1::ReadLacResponse lresp;
  ASSERT_TRUE(ReadLacNow(1, /*fence=*/true, &lresp).ok());
  EXPECT_EQ(lresp.code(), v1::OK);
  EXPECT_TRUE(lresp.fenced());
  EXPECT_EQ(lresp.lac(), 1);
  EXPECT_EQ(lresp.last_entry_id(), 2);
  EXPECT_EQ(Add(1, 3, 1), std::vector<v1::Code>{v1::FENCED});
  EXPECT_EQ(Add(1, 3, 1, /*recovery=*/true), std::vector<v1::Code>{v1::OK});

  // Fencing read of a ledger never seen: fenced, and explicit absence.
  v1::ReadRequest req;
  req.set_ledger_id(50);
  req.set_first_entry_id(0);
  req.set_count(1);
  req.set_fence(true);
  v1::ReadResponse resp;
  ASSERT_TRUE(Read(req, &resp).ok());
  EXPECT_EQ(resp.code(), v1::OK);
  ASSERT_EQ(resp.results_size(), 1);
  EXPECT_EQ(resp.results(0).code(), v1::NO_SUCH_ENTRY);
  EXPECT_EQ(Add(50, 0, 1), std::vector<v1::Code>{v1::FENCED});
}

TEST_F(BookieServiceTest, FenceFaultPoints) {
  ScopedFaultPoints faults;
  FaultPoints::Get().Arm("bookie.fence.drop_request",
                         [](std::string_view arg) { return arg == "bookie-under-test"; });
  v1::ReadLacRequest req;
  req.set_ledger_id(1);
  req.set_fence(true);
  req.set_wait_if_lac_at_most(-2);
  v1::ReadLacResponse resp;
  grpc::Status st = ReadLac(req, &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(Add(1, 0, 1), std::vector<v1::Code>{v1::OK});  // the request was lost: not fenced

  FaultPoints::Get().DisarmAll();
  FaultPoints::Get().ArmAlways("bookie.fence.drop_reply");
  v1::ReadRequest rreq;
  rreq.set_ledger_id(1);
  rreq.set_count(1);
  rreq.set_fence(true);
  v1::ReadResponse rresp;
  st = Read(rreq, &rresp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(Add(1, 1, 1), std::vector<v1::Code>{v1::FENCED});  // the fence took effect
}

TEST_F(BookieServiceTest, GetInfoReportsIdentityAndCounters) {
  ASSERT_EQ(Add(1, 0, 4), std::vector<v1::Code>(4, v1::OK));
  ASSERT_EQ(Add(2, 0, 1), std::vector<v1::Code>{v1::OK});
  v1::GetInfoResponse info = Info();
  EXPECT_EQ(info.bookie_id(), "bookie-under-test");
  EXPECT_EQ(info.instance_id(), server_->instance_id());
  EXPECT_EQ(info.state(), v1::WRITABLE);
  EXPECT_EQ(info.ledger_count(), 2u);
  EXPECT_EQ(info.entries_added(), 5u);
  EXPECT_GE(info.syncs(), 2u);
  EXPECT_GT(info.journal_bytes(), 0u);
}

TEST_F(BookieServiceTest, FailedSyncMakesBookieReadOnlyButReadable) {
  FaultInjectionEnv env(Env::Default());
  Start(&env);
  ASSERT_EQ(Add(1, 0, 2), std::vector<v1::Code>(2, v1::OK));
  env.FailNextSync();
  EXPECT_EQ(Add(1, 2, 2), std::vector<v1::Code>(2, v1::READ_ONLY));
  EXPECT_TRUE(server_->read_only());
  v1::GetInfoResponse info = Info();
  EXPECT_EQ(info.state(), v1::READ_ONLY_STATE);
  EXPECT_NE(info.read_only_reason().find("fdatasync"), std::string::npos)
      << info.read_only_reason();
  v1::ReadRequest req;
  req.set_ledger_id(1);
  req.set_count(4);
  v1::ReadResponse resp;
  ASSERT_TRUE(Read(req, &resp).ok());
  ASSERT_EQ(resp.results_size(), 4);
  EXPECT_EQ(resp.results(1).code(), v1::OK);
  EXPECT_EQ(resp.results(2).code(), v1::NO_SUCH_ENTRY);  // never acknowledged
  EXPECT_EQ(resp.results(3).code(), v1::NO_SUCH_ENTRY);
  // A fence cannot be made durable: the read says so instead of reading.
  req.set_fence(true);
  resp.Clear();
  ASSERT_TRUE(Read(req, &resp).ok());
  EXPECT_EQ(resp.code(), v1::READ_ONLY);
  server_.reset();  // before `env` goes away
}

// The storage's close answers a pending long poll (OK, with the LAC it
// has), before gRPC's shutdown deadline (2 s) would cancel it: a client
// then sees an answer, not CANCELLED.
TEST_F(BookieServiceTest, ShutdownAnswersPendingLongPolls) {
  ScopedFaultPoints faults;
  auto parked = std::make_shared<absl::Notification>();
  FaultPoints::Get().Arm("bookie.lac.parked", [parked](std::string_view) {
    if (!parked->HasBeenNotified()) parked->Notify();
    return false;
  });
  ASSERT_EQ(Add(1, 0, 1), std::vector<v1::Code>{v1::OK});
  auto poll = StartLongPoll(1, 5);  // waits up to 20 s
  ASSERT_TRUE(parked->WaitForNotificationWithTimeout(absl::Seconds(30)))
      << "the long poll never reached the bookie";
  ASSERT_FALSE(poll->done.HasBeenNotified());
  const absl::Time start = absl::Now();
  server_->Shutdown();
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  ASSERT_TRUE(poll->done.WaitForNotificationWithTimeout(absl::Seconds(5)));
  ASSERT_TRUE(poll->status.ok()) << poll->status.error_code() << ": "
                                 << poll->status.error_message();
  EXPECT_EQ(poll->resp.code(), v1::OK);
  EXPECT_EQ(poll->resp.last_entry_id(), 0);
}

}  // namespace
}  // namespace ledgerkv::bookie
