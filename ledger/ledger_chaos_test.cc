// Randomised fault schedules against real bookies (gRPC on 127.0.0.1, real
// fsync): one writer appends with adds in flight while bookies stop and
// come back, fence requests or their replies are lost, the writer crashes or closes, a
// tailing reader follows the LAC, and one or two recoverers open the ledger
// with recovery. Whatever the schedule, afterwards:
//   L2/L5  every entry the writer saw acknowledged is <= the recovered last
//          entry and reads back with the payload the writer sent;
//   L5     the writer never gets an ack above that last entry;
//   L6     the tailing reader never saw a LAC above it, nor a wrong payload;
//   L9     every recoverer (and a winning writer close) agrees on it.
//
// Each schedule is drawn from a seed printed with any failure; reproduce one
// with LEDGERKV_CHAOS_SEED=<seed> LEDGERKV_CHAOS_ITERATIONS=1. The default
// is a fixed set of seeds so CI runs are repeatable; set
// LEDGERKV_CHAOS_ITERATIONS higher to search longer.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/fault_point.h"
#include "gtest/gtest.h"
#include "ledger/ledger_test_util.h"
#include "proto/metadata.pb.h"

namespace ledgerkv::ledger {
namespace {

using testing::Appender;
using testing::MaxOf;
using testing::PayloadFor;
using testing::Quorums;
using testing::TestCluster;

constexpr int kBookies = 5;

int64_t EnvInt(const char* name, int64_t fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::strtoll(v, nullptr, 10) : fallback;
}

// One drawn fault schedule.
struct Schedule {
  uint64_t seed = 0;
  int e = 3, qw = 2, qa = 2;
  int window = 16;
  int acks_before_faults = 50;
  // Bookies to stop before recovery starts, and one to stop while it runs:
  // an index into the ledger's first ensemble (0..E-1) or, at kBookies + i,
  // bookie i of the cluster (possibly not in the ensemble).
  std::vector<int> stop;
  int stop_mid = -1;
  absl::Duration stop_mid_after;
  bool restart_during = false;   // restart them while recovery is retried
  int deaf = -1;                 // as `stop`: the bookie whose fence requests are lost
  bool deaf_reply = false;       // ... or that fences but whose replies are lost
  bool writer_crash = false;     // the writer process dies (no close)
  bool writer_close = false;     // the writer closes, racing the recoverers
  int recoverers = 1;
  absl::Duration recover_after;  // delay between the faults and recovery

  std::string ToString() const {
    return absl::StrCat("seed=", seed, " E", e, ",Qw", qw, ",Qa", qa, " window=", window,
                        " acks_before=", acks_before_faults, " stop=[",
                        absl::StrJoin(stop, ","), "] stop_mid=", stop_mid, "@",
                        absl::FormatDuration(stop_mid_after), " restart_during=", restart_during,
                        " deaf=", deaf, deaf >= 0 && deaf_reply ? "(reply)" : "", " crash=", writer_crash, " close=", writer_close,
                        " recoverers=", recoverers,
                        " recover_after=", absl::FormatDuration(recover_after));
  }
};

Schedule Draw(uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  Schedule s;
  s.seed = seed;
  static constexpr int kQuorums[][3] = {{3, 2, 2}, {3, 3, 2}, {3, 3, 3}, {2, 2, 2},
                                        {3, 2, 1}, {4, 3, 2}, {3, 3, 1}};
  const auto& q = kQuorums[pick(0, std::size(kQuorums) - 1)];
  s.e = q[0];
  s.qw = q[1];
  s.qa = q[2];
  static constexpr int kWindows[] = {1, 4, 16, 64};
  s.window = kWindows[pick(0, 3)];
  s.acks_before_faults = pick(1, 120);
  // Stopped bookies keep their data: a stop is an outage, not a loss, so
  // any number may be down; recovery waits for them where it must.
  auto any_bookie = [&]() { return pick(0, 2) == 0 ? kBookies + pick(0, kBookies - 1) : pick(0, s.e - 1); };
  const int stops = pick(0, 2);
  for (int i = 0; i < stops; ++i) {
    const int b = any_bookie();
    if (std::find(s.stop.begin(), s.stop.end(), b) == s.stop.end()) s.stop.push_back(b);
  }
  if (pick(0, 1) == 1) {
    s.stop_mid = any_bookie();
    s.stop_mid_after = absl::Milliseconds(pick(0, 150));
  }
  s.restart_during = pick(0, 1) == 1;
  s.deaf = pick(0, 2) == 0 ? any_bookie() : -1;
  s.deaf_reply = pick(0, 1) == 1;
  const int ending = pick(0, 3);
  s.writer_crash = ending == 0;
  s.writer_close = ending == 1;
  s.recoverers = pick(1, 2);
  s.recover_after = absl::Milliseconds(pick(0, 200));
  return s;
}

// Follows the LAC with a reader opened without recovery, checking every
// entry it reads; remembers the highest LAC it was told.
class Tailer {
 public:
  Tailer(LedgerClient* client, uint64_t id) : client_(client), id_(id) {
    thread_ = std::thread([this] { Run(); });
  }
  ~Tailer() { Stop(); }
  void Stop() {
    stop_.store(true);
    if (thread_.joinable()) thread_.join();
  }
  int64_t max_lac() const { return max_lac_.load(); }
  int64_t read_up_to() const { return read_up_to_.load(); }
  std::vector<std::string> wrong() {
    absl::MutexLock l(&mu_);
    return wrong_;
  }

 private:
  void Run() {
    std::unique_ptr<LedgerReader> reader;
    int64_t next = 0;
    while (!stop_.load()) {
      if (reader == nullptr) {
        auto opened = client_->OpenLedger(id_, OpenMode::kNoRecovery);
        if (!opened.ok()) {
          absl::SleepFor(absl::Milliseconds(20));
          continue;
        }
        reader = *std::move(opened);
      }
      auto lac = reader->WaitForLac(next - 1, absl::Milliseconds(100));
      if (!lac.ok()) {
        // Timeouts and outages: try again. OUT_OF_RANGE: closed at or below
        // what was read, nothing more will come.
        if (!absl::IsDeadlineExceeded(lac.status())) absl::SleepFor(absl::Milliseconds(20));
        continue;
      }
      int64_t seen = max_lac_.load();
      while (*lac > seen && !max_lac_.compare_exchange_weak(seen, *lac)) {
      }
      if (*lac < next) continue;
      auto entries = reader->Read(next, *lac);
      if (!entries.ok()) {
        if (!absl::IsUnavailable(entries.status()) &&
            !absl::IsDeadlineExceeded(entries.status())) {
          Wrong(absl::StrCat("read ", next, "..", *lac, ": ", entries.status().ToString()));
        }
        continue;
      }
      for (const LedgerEntry& entry : *entries) {
        if (entry.entry_id != next || entry.payload != PayloadFor(entry.entry_id)) {
          Wrong(absl::StrCat("entry ", entry.entry_id, " (expected id ", next,
                             ") has the wrong payload or id"));
        }
        ++next;
      }
      read_up_to_.store(next - 1);
    }
  }
  void Wrong(std::string what) {
    absl::MutexLock l(&mu_);
    wrong_.push_back(std::move(what));
  }

  LedgerClient* const client_;
  const uint64_t id_;
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> max_lac_{-1};
  std::atomic<int64_t> read_up_to_{-1};
  absl::Mutex mu_;
  std::vector<std::string> wrong_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

// One recoverer: retries open-with-recovery until it succeeds or `deadline`.
struct RecoveryResult {
  absl::Status status = absl::UnavailableError("not run");
  int64_t last = -2;
  std::vector<std::string> unexpected_errors;
  int attempts = 0;
};

void Recover(LedgerClient* client, uint64_t id, absl::Time deadline, RecoveryResult* out) {
  while (absl::Now() < deadline) {
    ++out->attempts;
    auto reader = client->OpenLedger(id, OpenMode::kRecover);
    if (reader.ok()) {
      out->status = absl::OkStatus();
      out->last = (*reader)->last_readable();
      return;
    }
    out->status = reader.status();
    // Outages make recovery refuse (UNAVAILABLE) or time out; it must never
    // report data loss or anything else here: no byte was corrupted.
    if (!absl::IsUnavailable(reader.status()) && !absl::IsDeadlineExceeded(reader.status()) &&
        !absl::IsAborted(reader.status())) {
      out->unexpected_errors.push_back(reader.status().ToString());
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
}

void RunSchedule(TestCluster& cluster, const Schedule& s) {
  SCOPED_TRACE(s.ToString());
  ScopedFaultPoints faults;
  LKV_ASSIGN_OR_FAIL(auto writer_client, cluster.NewClient(absl::Seconds(1)));
  LKV_ASSIGN_OR_FAIL(auto writer, writer_client->CreateLedger(Quorums(s.e, s.qw, s.qa)));
  const uint64_t id = writer->id();
  const meta::v1::Segment first_segment = writer->metadata().segments(0);
  auto resolve = [&](int b) {
    return b >= kBookies ? b - kBookies : cluster.IndexOf(first_segment.bookies(b));
  };
  LKV_ASSIGN_OR_FAIL(auto tail_client, cluster.NewClient(absl::Seconds(1)));
  Tailer tailer(tail_client.get(), id);

  Appender appender(writer.get(), s.window);
  appender.WaitForAcks(s.acks_before_faults);
  ASSERT_TRUE(appender.first_error().ok()) << appender.first_error();

  // Faults.
  if (s.deaf >= 0) {
    const std::string deaf_id = cluster.bookie_id(resolve(s.deaf));
    FaultPoints::Get().Arm(s.deaf_reply ? "bookie.fence.drop_reply" : "bookie.fence.drop_request",
                           [deaf_id](std::string_view bookie) { return bookie == deaf_id; });
  }
  for (int b : s.stop) cluster.StopBookie(resolve(b));
  if (s.writer_crash) {
    appender.Halt();
    writer.reset();
  }
  absl::Status close_status = absl::UnknownError("not closed");
  std::thread closer;
  if (s.writer_close) {
    closer = std::thread([&] { close_status = writer->Close(); });
  }
  absl::SleepFor(s.recover_after);

  // Recoverers, each with its own client.
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  std::vector<std::unique_ptr<LedgerClient>> recover_clients;
  std::vector<RecoveryResult> results(s.recoverers);
  std::vector<std::thread> recoverers;
  for (int i = 0; i < s.recoverers; ++i) {
    LKV_ASSIGN_OR_FAIL(auto c, cluster.NewClient(absl::Seconds(1)));
    recover_clients.push_back(std::move(c));
  }
  for (int i = 0; i < s.recoverers; ++i) {
    recoverers.emplace_back(Recover, recover_clients[i].get(), id, deadline, &results[i]);
  }
  // The network heals and the bookies come back, either while recovery is
  // being retried or only after it has had a while to refuse.
  if (s.stop_mid >= 0) {
    absl::SleepFor(s.stop_mid_after);
    cluster.StopBookie(resolve(s.stop_mid));
  }
  absl::SleepFor(s.restart_during ? absl::Milliseconds(50) : absl::Milliseconds(600));
  FaultPoints::Get().DisarmAll();
  for (int b = 0; b < cluster.size(); ++b) {
    if (cluster.bookie(b) == nullptr) {
      const absl::Status restarted = cluster.RestartBookie(b);
      EXPECT_TRUE(restarted.ok()) << restarted;
    }
  }
  for (auto& t : recoverers) t.join();
  if (closer.joinable()) closer.join();

  // L9: every recoverer that finished agrees; at least one finished.
  int64_t last = -2;
  for (const RecoveryResult& r : results) {
    EXPECT_TRUE(r.unexpected_errors.empty()) << absl::StrJoin(r.unexpected_errors, "; ");
    ASSERT_TRUE(r.status.ok()) << "recovery never succeeded after " << r.attempts
                               << " attempts: " << r.status;
    if (last == -2) last = r.last;
    EXPECT_EQ(r.last, last) << "two recoverers disagree on the last entry";
  }
  LKV_ASSIGN_OR_FAIL(auto md, recover_clients[0]->GetLedgerMetadata(id));
  EXPECT_EQ(md.state(), meta::v1::CLOSED);
  EXPECT_EQ(md.last_entry_id(), last);
  if (s.writer_close && close_status.ok()) {
    EXPECT_EQ(writer->lac(), last) << "the writer's close won but recovery read another end";
  }

  // The writer, if alive, must end: fenced, closed or failed. L5: it never
  // sees an ack above `last`.
  if (writer != nullptr && !s.writer_close) {
    appender.WaitForError();
  }
  appender.Stop();
  std::vector<int64_t> acked = appender.acked();
  EXPECT_GE(static_cast<int64_t>(acked.size()), s.acks_before_faults);
  EXPECT_LE(MaxOf(acked), last) << "an acknowledged entry is beyond the recovered end";
  if (writer != nullptr) {
    auto late = writer->Append("late");
    EXPECT_FALSE(late.ok()) << "a deposed or closed writer got entry " << *late << " acked";
  }

  // L6 for the tailer: it never learned a LAC beyond the end, nor read a
  // wrong payload. It must have read the whole ledger too (a tailer that
  // read nothing would pass both): the recovered end is readable now.
  const absl::Time tail_deadline = absl::Now() + absl::Seconds(30);
  while (tailer.read_up_to() < last && absl::Now() < tail_deadline) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_EQ(tailer.read_up_to(), last) << "the tailer did not follow the ledger to its end";
  tailer.Stop();
  EXPECT_LE(tailer.max_lac(), last);
  const std::vector<std::string> wrong = tailer.wrong();
  EXPECT_TRUE(wrong.empty()) << absl::StrJoin(wrong, "; ");

  int attempts = 0;
  for (const RecoveryResult& r : results) attempts += r.attempts;
  std::printf("%s: acked %zu, last %lld, close %s, recovery attempts %d, tailer read up to %lld\n",
              s.ToString().c_str(), acked.size(), static_cast<long long>(last),
              s.writer_close ? close_status.ToString().c_str() : "-", attempts,
              static_cast<long long>(tailer.read_up_to()));

  // Every entry up to the end reads back with the writer's payload.
  LKV_ASSIGN_OR_FAIL(auto reader, recover_clients[0]->OpenLedger(id, OpenMode::kNoRecovery));
  ASSERT_TRUE(reader->closed());
  if (last >= 0) {
    auto entries = reader->Read(0, last);
    ASSERT_TRUE(entries.ok()) << entries.status();
    ASSERT_EQ(entries->size(), static_cast<size_t>(last + 1));
    uint64_t length = 0;
    for (int64_t i = 0; i <= last; ++i) {
      ASSERT_EQ((*entries)[i].payload, PayloadFor(i)) << "entry " << i;
      length += (*entries)[i].payload.size();
    }
    EXPECT_EQ(md.length(), length);
  }
}

TEST(LedgerChaosTest, L2_L5_L6_L9_RandomOutagesCrashesAndRecoverersLoseNoAcknowledgedEntry) {
  LKV_ASSIGN_OR_FAIL(auto cluster, TestCluster::Start({.bookies = kBookies}));
  const int64_t iterations = EnvInt("LEDGERKV_CHAOS_ITERATIONS", 12);
  const uint64_t first_seed = static_cast<uint64_t>(EnvInt("LEDGERKV_CHAOS_SEED", 1));
  for (int64_t i = 0; i < iterations; ++i) {
    const Schedule s = Draw(first_seed + static_cast<uint64_t>(i));
    RunSchedule(*cluster, s);
    if (::testing::Test::HasFatalFailure() || ::testing::Test::HasNonfatalFailure()) {
      ADD_FAILURE() << "reproduce with LEDGERKV_CHAOS_SEED=" << s.seed
                    << " LEDGERKV_CHAOS_ITERATIONS=1";
      return;
    }
    // Every bookie is up again for the next schedule.
    for (int b = 0; b < cluster->size(); ++b) {
      if (cluster->bookie(b) == nullptr) LKV_ASSERT_OK(cluster->RestartBookie(b));
    }
  }
}

}  // namespace
}  // namespace ledgerkv::ledger
