// Bookie durability through kill -9 of a real `ledgerkv bookie` process
// (invariants L2 and L7 at the bookie level): everything acknowledged before
// the kill, entries and fence marks, is there after a restart. Also what
// the process does for itself at start (its descriptor limit).
#include <sys/resource.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/entry_checksum.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/bookie.grpc.pb.h"
#include "tests/process_util.h"

namespace ledgerkv {
namespace {

namespace pb = ::ledgerkv::bookie::v1;
using testing::BinaryPath;
using testing::FreePort;
using testing::Process;
using testing::TempDir;

class BookieProcess {
 public:
  BookieProcess(std::string data_dir, int port)
      : data_dir_(std::move(data_dir)), address_(absl::StrCat("127.0.0.1:", port)) {}

  void Start() {
    auto p = Process::Start({BinaryPath("kv_server/ledgerkv"), "bookie", "--data-dir", data_dir_,
                             "--listen", address_},
                            "listening on");
    ASSERT_TRUE(p.ok()) << p.status();
    proc_ = std::move(*p);
    // "bookie <id> listening on <addr> instance <instance_id>"
    std::vector<std::string> words = absl::StrSplit(proc_->ready_line(), ' ');
    ASSERT_GE(words.size(), 7u) << proc_->ready_line();
    instance_id_ = words[6];
    channel_ = grpc::CreateChannel(address_, grpc::InsecureChannelCredentials());
    stub_ = pb::Bookie::NewStub(channel_);
  }
  void Kill() { proc_->Kill(); }

  pb::Bookie::Stub& stub() { return *stub_; }
  const std::string& instance_id() const { return instance_id_; }
  std::string LogTail() const { return proc_ ? proc_->LogTail() : ""; }
  pid_t pid() const { return proc_->pid(); }

 private:
  std::string data_dir_;
  std::string address_;
  std::string instance_id_;
  std::unique_ptr<Process> proc_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<pb::Bookie::Stub> stub_;
};

pb::Entry MakeEntry(uint64_t ledger, int64_t id, int64_t lac) {
  pb::Entry e;
  e.set_ledger_id(ledger);
  e.set_entry_id(id);
  e.set_lac(lac);
  e.set_payload(absl::StrCat("payload-", ledger, "-", id, std::string(id % 97, 'p')));
  e.set_checksum(EntryChecksum(ledger, id, lac, e.payload()));
  return e;
}

void SetDeadline(grpc::ClientContext& ctx, int seconds = 10) {
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(seconds));
}

pb::Code AddOne(pb::Bookie::Stub& stub, const pb::Entry& e, bool recovery) {
  pb::AddRequest req;
  req.set_recovery(recovery);
  *req.add_entries() = e;
  pb::AddResponse resp;
  grpc::ClientContext ctx;
  SetDeadline(ctx);
  grpc::Status s = stub.Add(&ctx, req, &resp);
  if (!s.ok() || resp.results_size() != 1) return pb::CODE_UNSPECIFIED;
  return resp.results(0).code();
}

pb::Code Fence(pb::Bookie::Stub& stub, uint64_t ledger) {
  pb::ReadLacRequest req;
  req.set_ledger_id(ledger);
  req.set_fence(true);
  req.set_wait_if_lac_at_most(-2);
  pb::ReadLacResponse resp;
  grpc::ClientContext ctx;
  SetDeadline(ctx);
  grpc::Status s = stub.ReadLac(&ctx, req, &resp);
  return s.ok() ? resp.code() : pb::CODE_UNSPECIFIED;
}

// Reads entry `id` and checks it is exactly what MakeEntry produced.
void ExpectEntry(pb::Bookie::Stub& stub, uint64_t ledger, int64_t id) {
  pb::ReadRequest req;
  req.set_ledger_id(ledger);
  req.set_first_entry_id(id);
  req.set_count(1);
  req.set_max_bytes(1 << 20);
  pb::ReadResponse resp;
  grpc::ClientContext ctx;
  SetDeadline(ctx);
  ASSERT_TRUE(stub.Read(&ctx, req, &resp).ok());
  ASSERT_EQ(resp.results_size(), 1) << "entry " << id;
  const pb::ReadResult& r = resp.results(0);
  ASSERT_EQ(r.code(), pb::OK) << "entry " << id << " of ledger " << ledger;
  EXPECT_EQ(r.entry().payload(), MakeEntry(ledger, id, 0).payload());
  EXPECT_EQ(r.entry().checksum(), EntryChecksum(ledger, id, r.entry().lac(), r.entry().payload()));
}

TEST(BookieProcessTest, L7_EntriesAndFenceMarksSurviveKill9) {
  TempDir dir;
  BookieProcess bookie(dir.path() + "/bookie", FreePort());
  ASSERT_NO_FATAL_FAILURE(bookie.Start());
  for (int64_t id = 0; id < 50; ++id) {
    ASSERT_EQ(AddOne(bookie.stub(), MakeEntry(1, id, id - 1), false), pb::OK);
  }
  ASSERT_EQ(Fence(bookie.stub(), 1), pb::OK);
  // A fence on a ledger this bookie has never seen must stick too.
  ASSERT_EQ(Fence(bookie.stub(), 7), pb::OK);
  std::string instance = bookie.instance_id();

  bookie.Kill();
  ASSERT_NO_FATAL_FAILURE(bookie.Start());
  EXPECT_EQ(bookie.instance_id(), instance) << "same data dir must keep its instance id";
  for (int64_t id = 0; id < 50; ++id) ExpectEntry(bookie.stub(), 1, id);
  EXPECT_EQ(AddOne(bookie.stub(), MakeEntry(1, 50, 49), false), pb::FENCED);
  EXPECT_EQ(AddOne(bookie.stub(), MakeEntry(7, 0, -1), false), pb::FENCED);
  // Recovery adds are still accepted on a fenced ledger.
  EXPECT_EQ(AddOne(bookie.stub(), MakeEntry(1, 50, 49), true), pb::OK);
}

TEST(BookieProcessTest, L2_EveryAcknowledgedAddSurvivesKill9MidStream) {
  TempDir dir;
  BookieProcess bookie(dir.path() + "/bookie", FreePort());
  ASSERT_NO_FATAL_FAILURE(bookie.Start());

  // Four writers, each its own ledger, keep adding until the kill; an id is
  // recorded only once its acknowledgement arrived.
  constexpr int kWriters = 4;
  std::vector<std::atomic<int64_t>> acked(kWriters);
  for (auto& a : acked) a = -1;
  std::atomic<bool> stop{false};
  std::vector<std::thread> writers;
  for (int w = 0; w < kWriters; ++w) {
    writers.emplace_back([&, w] {
      uint64_t ledger = 100 + w;
      for (int64_t id = 0; !stop.load(); ++id) {
        if (AddOne(bookie.stub(), MakeEntry(ledger, id, id - 1), false) != pb::OK) return;
        acked[w] = id;
      }
    });
  }
  // The kill comes mid-stream: after every writer had an acknowledgement
  // (however slow the machine), and a little more.
  const absl::Time give_up = absl::Now() + absl::Seconds(30);
  auto all_acked = [&] {
    for (const auto& a : acked) {
      if (a.load() < 0) return false;
    }
    return true;
  };
  while (!all_acked() && absl::Now() < give_up) absl::SleepFor(absl::Milliseconds(10));
  absl::SleepFor(absl::Milliseconds(300));
  bookie.Kill();
  stop = true;
  for (auto& t : writers) t.join();

  ASSERT_NO_FATAL_FAILURE(bookie.Start());
  int64_t total = 0;
  for (int w = 0; w < kWriters; ++w) {
    ASSERT_GE(acked[w].load(), 0) << "writer " << w << " got no acknowledgement at all";
    for (int64_t id = 0; id <= acked[w].load(); ++id) {
      ASSERT_NO_FATAL_FAILURE(ExpectEntry(bookie.stub(), 100 + w, id));
    }
    total += acked[w].load() + 1;
  }
  RecordProperty("acked_before_kill", static_cast<int>(total));
}

TEST(BookieProcessTest, WipedDataDirCannotPassAsTheSameInstance) {
  TempDir dir;
  int port = FreePort();
  BookieProcess bookie(dir.path() + "/bookie", port);
  ASSERT_NO_FATAL_FAILURE(bookie.Start());
  ASSERT_EQ(AddOne(bookie.stub(), MakeEntry(3, 0, -1), false), pb::OK);
  std::string old_instance = bookie.instance_id();
  bookie.Kill();
  std::filesystem::remove_all(dir.path() + "/bookie");

  ASSERT_NO_FATAL_FAILURE(bookie.Start());
  EXPECT_NE(bookie.instance_id(), old_instance);
  // A reader that knows the ledger lived on the old instance must get an
  // error, not "no such entry" (which recovery would count as a negative).
  pb::ReadRequest req;
  req.set_expected_instance_id(old_instance);
  req.set_ledger_id(3);
  req.set_first_entry_id(0);
  req.set_count(1);
  pb::ReadResponse resp;
  grpc::ClientContext ctx;
  SetDeadline(ctx);
  ASSERT_TRUE(bookie.stub().Read(&ctx, req, &resp).ok());
  EXPECT_EQ(resp.code(), pb::INSTANCE_MISMATCH);
  EXPECT_EQ(resp.results_size(), 0) << "a refused read still answered per entry";
}

// Every add port connection costs a bookie two descriptors: with a soft
// limit of 1024 (a common default) it would run out near 500 connections,
// and a bookie that cannot open its next journal file turns read-only. The
// server raises its soft limit to the hard one (base/process_tuning.h).
TEST(BookieProcessTest, ABookieRaisesItsDescriptorSoftLimitToTheHardLimit) {
  rlimit ours{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &ours), 0);
  if (ours.rlim_max <= 256) GTEST_SKIP() << "hard descriptor limit " << ours.rlim_max;
  // The child inherits a low soft limit from this process for a moment.
  rlimit low = ours;
  low.rlim_cur = 256;
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &low), 0);
  TempDir dir;
  BookieProcess bookie(dir.path() + "/bookie", FreePort());
  bookie.Start();
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &ours), 0);
  ASSERT_FALSE(::testing::Test::HasFatalFailure());

  std::ifstream limits(absl::StrCat("/proc/", bookie.pid(), "/limits"));
  std::string line;
  std::string soft;
  std::string hard;
  while (std::getline(limits, line)) {
    if (!absl::StartsWith(line, "Max open files")) continue;
    std::vector<std::string> words = absl::StrSplit(line, ' ', absl::SkipEmpty());
    ASSERT_GE(words.size(), 5u) << line;
    soft = words[3];
    hard = words[4];
  }
  ASSERT_FALSE(soft.empty()) << "no \"Max open files\" line";
  EXPECT_EQ(soft, hard) << "the bookie kept the soft limit it was started with (256)";
  EXPECT_NE(soft, "256");
}

}  // namespace
}  // namespace ledgerkv
