// cluster-failover-bench: how long a cluster-mode range is unavailable for
// writes after its owner dies (issue 4), measured on real processes.
//
//   cluster-failover-bench [--runs N=5] [--lease-ttl-s S=5] [--bookies B=3]
//       [--servers M=2] [--ensemble E=3] [--write-quorum W=3] [--ack-quorum A=2]
//       [--warmup-s S=1] [--max-wait-s S=60] [-o text|json]
//
// Each run starts a fresh cluster (tests/cluster_util.h: etcd, B `ledgerkv
// bookie` and M `ledgerkv server` processes on loopback), writes through the
// client library (seeds: every server) one put at a time, then kill -9s the
// owner of table `default`'s range and measures, from the kill:
//   - assign: until etcd holds an assignment of the range to another server
//     (polled every 5 ms; bounded below by the dead owner's lease expiry);
//   - first ack: until the client library acknowledges the first put after
//     the kill (the new owner fenced the old log and serves; includes the
//     client's retry backoff, at most 1 s between attempts).
// The writer is parked at the kill, so no put is in flight when the owner
// dies: the first ack after the kill is certainly one the new owner served.
// At the end of each run every acknowledged put is read back (linearizable
// Get) and the missing ones are counted — a sanity check, not a test.
//
// A bench, not a test: nothing is asserted about the times. Exit status 0
// when every run measured a failover, 1 when one did not complete within
// --max-wait-s or lost acknowledged writes, 2 for bad arguments or when a
// cluster could not start (etcd missing, binaries not built).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/kv_client.h"
#include "tests/cluster_util.h"

namespace ledgerkv::bench {
namespace {

using Clock = std::chrono::steady_clock;

constexpr char kUsage[] =
    "usage: cluster-failover-bench [--runs N=5] [--lease-ttl-s S=5] [--bookies B=3]\n"
    "    [--servers M=2] [--ensemble E=3] [--write-quorum W=3] [--ack-quorum A=2]\n"
    "    [--warmup-s S=1] [--max-wait-s S=60] [-o text|json]\n";

double SecondsBetween(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

struct Options {
  int runs = 5;
  double warmup_s = 1;
  double max_wait_s = 60;
  bool json = false;
  testing::ClusterFlags cluster;
};

struct RunResult {
  bool ok = false;
  std::string error;
  std::string old_owner;
  std::string new_owner;
  uint64_t old_epoch = 0;
  uint64_t new_epoch = 0;
  double assign_s = 0;     // kill -> assignment away from the old owner
  double first_ack_s = 0;  // kill -> first acknowledged put
  int acked_before = 0;    // puts acknowledged before the kill
  int failed_calls = 0;    // Put calls that returned an error after the kill
  int lost = 0;            // acknowledged puts not readable at the end
  int acked_total = 0;
};

// One put at a time through the client library, like tests' AckedWriter,
// plus a hold: Park() returns once no put is in flight and none starts
// until Resume(), so the kill happens between puts. (AckedWriter exposes
// only the last ack time and cannot tell a put in flight at the kill.)
class ParkableWriter {
 public:
  static absl::StatusOr<std::unique_ptr<ParkableWriter>> Start(const std::string& endpoints) {
    client::ClientOptions o;
    o.endpoint = endpoints;
    // Same client settings as tests/cluster_util.h's AckedWriter.
    o.default_deadline = absl::Seconds(3);
    o.max_attempts = 10;
    auto c = client::KvClient::Create(o);
    if (!c.ok()) return c.status();
    std::unique_ptr<ParkableWriter> w(new ParkableWriter(std::move(*c)));
    w->thread_ = std::thread([p = w.get()] { p->Run(); });
    return w;
  }
  ~ParkableWriter() {
    {
      absl::MutexLock l(&mu_);
      stop_ = true;
      hold_ = false;
    }
    thread_.join();
  }

  void Park() {
    absl::MutexLock l(&mu_);
    hold_ = true;
    mu_.Await(absl::Condition(
        +[](ParkableWriter* w) ABSL_EXCLUSIVE_LOCKS_REQUIRED(w->mu_) { return !w->in_flight_; },
        this));
  }
  // Lets the writer go on; puts issued from now on count as "after" the
  // kill (first ack, failed calls).
  void Resume() {
    absl::MutexLock l(&mu_);
    after_ = true;
    hold_ = false;
  }
  int acked() {
    absl::MutexLock l(&mu_);
    return static_cast<int>(acked_.size());
  }
  // Waits until a put issued after Resume() is acknowledged; its ack time,
  // or nullopt after `timeout`.
  std::optional<Clock::time_point> WaitForFirstAckAfter(absl::Duration timeout) {
    absl::MutexLock l(&mu_);
    mu_.AwaitWithTimeout(
        absl::Condition(
            +[](ParkableWriter* w) ABSL_EXCLUSIVE_LOCKS_REQUIRED(w->mu_) {
              return w->first_ack_after_.has_value();
            },
            this),
        timeout);
    return first_ack_after_;
  }
  int failed_after() {
    absl::MutexLock l(&mu_);
    return failed_after_;
  }
  std::map<std::string, std::string> Acked() {
    absl::MutexLock l(&mu_);
    return acked_;
  }
  client::KvClient& client() { return *client_; }

 private:
  explicit ParkableWriter(std::unique_ptr<client::KvClient> c) : client_(std::move(c)) {}

  void Run() {
    for (int i = 0;; ++i) {
      {
        absl::MutexLock l(&mu_);
        mu_.Await(absl::Condition(
            +[](ParkableWriter* w) ABSL_EXCLUSIVE_LOCKS_REQUIRED(w->mu_) {
              return w->stop_ || !w->hold_;
            },
            this));
        if (stop_) return;
        in_flight_ = true;
      }
      v1::PutRequest put;
      put.set_table("default");
      put.set_key(absl::StrCat("w", i));
      put.set_value(absl::StrCat("v", i));
      const bool ok = client_->Put(put).ok();
      const Clock::time_point done = Clock::now();
      absl::MutexLock l(&mu_);
      in_flight_ = false;
      if (ok) {
        acked_[put.key()] = put.value();
        if (after_ && !first_ack_after_) first_ack_after_ = done;
      } else if (after_) {
        ++failed_after_;
      }
    }
  }

  std::unique_ptr<client::KvClient> client_;
  absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool hold_ ABSL_GUARDED_BY(mu_) = false;
  bool in_flight_ ABSL_GUARDED_BY(mu_) = false;
  bool after_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<Clock::time_point> first_ack_after_ ABSL_GUARDED_BY(mu_);
  int failed_after_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, std::string> acked_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

// Acknowledged puts that do not read back with their value.
int CountLost(client::KvClient& c, const std::map<std::string, std::string>& acked) {
  int lost = 0;
  for (const auto& [key, value] : acked) {
    v1::GetRequest get;
    get.set_table("default");
    get.set_key(key);
    client::CallOptions opts;
    opts.deadline = absl::Seconds(10);
    auto got = c.Get(get, opts);
    if (!got.ok() || !got->found() || got->kv().value() != value) ++lost;
  }
  return lost;
}

// One run. An error status means the cluster could not be set up (exit 2);
// a failover that did not complete is a RunResult with ok = false.
absl::StatusOr<RunResult> RunOnce(const Options& o) {
  auto cluster = testing::TestCluster::Start(o.cluster);
  if (!cluster.ok()) return cluster.status();
  testing::TestCluster& c = **cluster;
  absl::StatusOr<uint64_t> range = c.DefaultRange();
  if (!range.ok()) return range.status();
  auto owner = c.Assignment(*range);
  if (!owner.ok()) return owner.status();
  const int owner_index = c.ServerIndex(owner->server_id());
  if (owner_index < 0) return absl::InternalError("owner " + owner->server_id() + " unknown");

  RunResult r;
  r.old_owner = owner->server_id();
  r.old_epoch = owner->epoch();
  auto writer = ParkableWriter::Start(c.Endpoints());
  if (!writer.ok()) return writer.status();
  ParkableWriter& w = **writer;

  // Warm up: the client has found the owner and puts flow.
  const absl::Time warm_until = absl::Now() + absl::Seconds(o.warmup_s);
  const absl::Time warm_deadline = absl::Now() + absl::Seconds(o.max_wait_s);
  while ((absl::Now() < warm_until || w.acked() < 20) && absl::Now() < warm_deadline) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  if (w.acked() == 0) {
    r.error = "no put acknowledged before the kill";
    return r;
  }

  w.Park();
  r.acked_before = w.acked();
  const Clock::time_point kill = Clock::now();
  c.KillServer(owner_index);
  w.Resume();

  // The assignment moving, seen from etcd.
  const Clock::time_point give_up =
      kill + std::chrono::milliseconds(static_cast<int64_t>(o.max_wait_s * 1000));
  std::optional<Clock::time_point> assigned;
  while (Clock::now() < give_up) {
    auto a = c.Assignment(*range);
    const Clock::time_point seen = Clock::now();
    if (a.ok() && a->server_id() != r.old_owner) {
      assigned = seen;
      r.new_owner = a->server_id();
      r.new_epoch = a->epoch();
      break;
    }
    absl::SleepFor(absl::Milliseconds(5));
  }
  std::optional<Clock::time_point> first_ack = w.WaitForFirstAckAfter(
      absl::Seconds(std::max(0.0, SecondsBetween(Clock::now(), give_up))));
  r.failed_calls = w.failed_after();
  if (!assigned || !first_ack) {
    r.error = !assigned ? "range not reassigned" : "no put acknowledged after the kill";
    r.error += absl::StrFormat(" within %.0f s", o.max_wait_s);
    return r;
  }
  r.assign_s = SecondsBetween(kill, *assigned);
  r.first_ack_s = SecondsBetween(kill, *first_ack);
  // A few more puts on the new owner, then stop and read everything back.
  absl::SleepFor(absl::Milliseconds(200));
  w.Park();
  const std::map<std::string, std::string> acked = w.Acked();
  r.acked_total = static_cast<int>(acked.size());
  r.lost = CountLost(w.client(), acked);
  r.ok = r.lost == 0;
  if (!r.ok) r.error = absl::StrCat(r.lost, " acknowledged puts not readable");
  return r;
}

struct Summary {
  double min = 0, median = 0, max = 0;
};
Summary Summarize(std::vector<double> v) {
  Summary s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  s.min = v.front();
  s.max = v.back();
  s.median = v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
  return s;
}

std::string JsonSummary(const Summary& s) {
  return absl::StrFormat("{\"min\":%.3f,\"median\":%.3f,\"max\":%.3f}", s.min, s.median, s.max);
}

bool ParseInt(const char* s, int* out) { return absl::SimpleAtoi(s, out) && *out > 0; }
bool ParseDouble(const char* s, double* out) { return absl::SimpleAtod(s, out) && *out >= 0; }

int Main(int argc, char** argv) {
  Options o;
  o.cluster.lease_ttl_s = 5;  // the server's default
  // Every flag takes one value (-h aside).
  for (int i = 1; i < argc; i += 2) {
    const std::string a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : nullptr;
    bool ok = v != nullptr;
    if (a == "--runs" && ok) ok = ParseInt(v, &o.runs);
    else if (a == "--lease-ttl-s" && ok) ok = ParseInt(v, &o.cluster.lease_ttl_s);
    else if (a == "--bookies" && ok) ok = ParseInt(v, &o.cluster.bookies);
    else if (a == "--servers" && ok) ok = ParseInt(v, &o.cluster.servers) && o.cluster.servers >= 2;
    else if (a == "--ensemble" && ok) ok = ParseInt(v, &o.cluster.ensemble);
    else if (a == "--write-quorum" && ok) ok = ParseInt(v, &o.cluster.write_quorum);
    else if (a == "--ack-quorum" && ok) ok = ParseInt(v, &o.cluster.ack_quorum);
    else if (a == "--warmup-s" && ok) ok = ParseDouble(v, &o.warmup_s);
    else if (a == "--max-wait-s" && ok) ok = ParseDouble(v, &o.max_wait_s) && o.max_wait_s > 0;
    else if (a == "-o" && ok) {
      ok = std::string(v) == "json" || std::string(v) == "text";
      o.json = std::string(v) == "json";
    } else if (a == "-h" || a == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    } else {
      ok = false;
    }
    if (!ok) {
      std::fprintf(stderr, "cluster-failover-bench: bad argument '%s'\n%s", a.c_str(), kUsage);
      return 2;
    }
  }

  const bool text = !o.json;
  if (text) {
    std::printf("# kill -9 of the owner of table default's range -> assignment in etcd / first "
                "acknowledged put\n# %d bookies, %d servers, E=%d Qw=%d Qa=%d, lease TTL %d s, "
                "%d runs, %u cores\n",
                o.cluster.bookies, o.cluster.servers, o.cluster.ensemble,
                o.cluster.write_quorum, o.cluster.ack_quorum, o.cluster.lease_ttl_s, o.runs,
                std::thread::hardware_concurrency());
    std::fflush(stdout);
  }
  std::vector<RunResult> results;
  std::vector<double> assign, first_ack;
  int exit_code = 0;
  for (int run = 1; run <= o.runs; ++run) {
    absl::StatusOr<RunResult> r = RunOnce(o);
    if (!r.ok()) {
      std::fprintf(stderr, "cluster-failover-bench: run %d: cluster setup failed: %s\n", run,
                   r.status().ToString().c_str());
      return 2;
    }
    if (r->ok) {
      assign.push_back(r->assign_s);
      first_ack.push_back(r->first_ack_s);
    } else {
      exit_code = 1;
      std::fprintf(stderr, "cluster-failover-bench: run %d: %s\n", run, r->error.c_str());
    }
    if (text) {
      std::printf("run %d: assign %.3f s, first ack %.3f s, owner %s -> %s, epoch %llu -> %llu, "
                  "puts acked before kill %d, failed calls after kill %d, acked %d lost %d%s\n",
                  run, r->assign_s, r->first_ack_s, r->old_owner.c_str(),
                  r->new_owner.empty() ? "?" : r->new_owner.c_str(),
                  static_cast<unsigned long long>(r->old_epoch),
                  static_cast<unsigned long long>(r->new_epoch), r->acked_before,
                  r->failed_calls, r->acked_total, r->lost, r->ok ? "" : " FAILED");
      std::fflush(stdout);
    }
    results.push_back(*r);
  }
  const Summary sa = Summarize(assign), sf = Summarize(first_ack);
  if (text) {
    std::printf("assign    (s): min %.3f  median %.3f  max %.3f  (%zu runs)\n", sa.min, sa.median,
                sa.max, assign.size());
    std::printf("first ack (s): min %.3f  median %.3f  max %.3f  (%zu runs)\n", sf.min, sf.median,
                sf.max, first_ack.size());
    return exit_code;
  }
  std::string runs;
  for (const RunResult& r : results) {
    absl::StrAppendFormat(
        &runs,
        "%s{\"ok\":%s,\"assign_s\":%.3f,\"first_ack_s\":%.3f,\"old_owner\":\"%s\","
        "\"new_owner\":\"%s\",\"old_epoch\":%d,\"new_epoch\":%d,\"acked_before\":%d,"
        "\"failed_calls\":%d,\"acked\":%d,\"lost\":%d}",
        runs.empty() ? "" : ",", r.ok ? "true" : "false", r.assign_s, r.first_ack_s,
        r.old_owner, r.new_owner, r.old_epoch, r.new_epoch, r.acked_before, r.failed_calls,
        r.acked_total, r.lost);
  }
  absl::PrintF(
      "{\"bookies\":%d,\"servers\":%d,\"ensemble\":%d,\"write_quorum\":%d,\"ack_quorum\":%d,"
      "\"lease_ttl_s\":%d,\"runs\":[%s],\"assign_s\":%s,\"first_ack_s\":%s}\n",
      o.cluster.bookies, o.cluster.servers, o.cluster.ensemble, o.cluster.write_quorum,
      o.cluster.ack_quorum, o.cluster.lease_ttl_s, runs, JsonSummary(sa), JsonSummary(sf));
  return exit_code;
}

}  // namespace
}  // namespace ledgerkv::bench

int main(int argc, char** argv) { return ledgerkv::bench::Main(argc, argv); }
