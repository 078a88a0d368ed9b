// Replay rate of a range against its sustained put rate, same run
// (issue 3, docs/performance.md):
//
//   range-replay-bench [--dir DIR] [--log-mb N] [--value-size B] [--keys K]
//                      [--in-flight N] [--bookies N] [--quick]
//
// 1. Puts into one range (in-process bookies, E=Qw=Qa=--bookies, snapshots
//    off) until N MiB of records are in its log: the sustained put rate.
// 2. Clean restart with the local state kept: restart time (nothing to
//    replay beyond what RocksDB lost).
// 3. Restart with the local state wiped and no snapshot: the range replays
//    the whole log. Replay rate in records/s and MB/s, and its ratio to the
//    put rate (target >= 5x).
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/process_tuning.h"
#include "kv_server/range/range.h"
#include "ledger/bookie/bookie_server.h"
#include "ledger/ledger_client.h"
#include "metadata/embedded_store.h"

namespace ledgerkv {
namespace {

struct Flags {
  std::string dir = "/tmp/ledgerkv-replay-bench";
  int64_t log_mb = 1024;
  int value_size = 1000;
  int keys = 100000;
  int in_flight = 256;
  int bookies = 1;
};

int Usage() {
  std::fprintf(stderr,
               "usage: range-replay-bench [--dir DIR] [--log-mb N] [--value-size B] [--keys K]\n"
               "                          [--in-flight N] [--bookies N] [--quick]\n");
  return 2;
}

struct Cluster {
  std::unique_ptr<metadata::EmbeddedStore> store;
  std::vector<std::unique_ptr<bookie::BookieServer>> bookies;
  std::unique_ptr<ledger::LedgerClient> client;
};

absl::StatusOr<Cluster> StartCluster(const Flags& f) {
  Cluster c;
  auto store = metadata::EmbeddedStore::Open(f.dir + "/metadata");
  if (!store.ok()) return store.status();
  c.store = std::move(*store);
  for (int i = 0; i < f.bookies; ++i) {
    bookie::BookieOptions o;
    o.data_dir = absl::StrCat(f.dir, "/bookie", i);
    o.metadata = c.store.get();
    auto b = bookie::BookieServer::Start(o);
    if (!b.ok()) return b.status();
    c.bookies.push_back(std::move(*b));
  }
  ledger::ClientOptions co;
  co.metadata = c.store.get();
  auto client = ledger::LedgerClient::Create(co);
  if (!client.ok()) return client.status();
  c.client = std::move(*client);
  return c;
}

kv::RangeOptions MakeRangeOptions(const Flags& f, Cluster& c) {
  kv::RangeOptions o;
  o.data_dir = f.dir + "/range";
  o.log.client = c.client.get();
  o.log.metadata = c.store.get();
  o.log.ensemble_size = o.log.write_quorum = o.log.ack_quorum = f.bookies;
  o.snapshot.client = c.client.get();
  o.snapshot.metadata = c.store.get();
  o.snapshot.ensemble_size = o.snapshot.write_quorum = o.snapshot.ack_quorum = f.bookies;
  // Snapshots off: the whole log is replayed in phase 3.
  o.snapshot_log_bytes = INT64_MAX;
  o.snapshot_interval = absl::InfiniteDuration();
  return o;
}

struct PutPhase {
  int64_t records = 0;
  int64_t bytes = 0;
  double seconds = 0;
};

absl::StatusOr<PutPhase> RunPuts(kv::Range& range, const Flags& f) {
  const int64_t target = f.log_mb << 20;
  const std::string value(static_cast<size_t>(f.value_size), 'v');
  struct Window {
    int outstanding = 0;
    int limit = 0;
    bool Free() const { return outstanding < limit; }
    bool Idle() const { return outstanding == 0; }
  };
  absl::Mutex mu;
  Window w;
  w.limit = f.in_flight;
  absl::Status failure;
  PutPhase p;
  const absl::Time start = absl::Now();
  for (int64_t i = 0; p.bytes < target; ++i) {
    {
      absl::MutexLock l(&mu);
      mu.Await(absl::Condition(&w, &Window::Free));
      if (!failure.ok()) break;
      ++w.outstanding;
    }
    v1::PutRequest put;
    put.set_key(absl::StrFormat("key%08d", i % f.keys));
    put.set_value(value);
    p.bytes += static_cast<int64_t>(put.key().size() + value.size());
    ++p.records;
    range.Put(put, [&](absl::StatusOr<v1::PutResponse> r) {
      absl::MutexLock l(&mu);
      --w.outstanding;
      if (!r.ok() && failure.ok()) failure = r.status();
    });
  }
  {
    absl::MutexLock l(&mu);
    mu.Await(absl::Condition(&w, &Window::Idle));
    if (!failure.ok()) return failure;
  }
  p.seconds = absl::ToDoubleSeconds(absl::Now() - start);
  return p;
}

int Main(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> const char* { return i + 1 < argc ? argv[++i] : nullptr; };
    const char* v = nullptr;
    if (a == "--quick") {
      f.log_mb = 8;
      f.keys = 2000;
      continue;
    }
    if ((v = next()) == nullptr) return Usage();
    if (a == "--dir") {
      f.dir = v;
    } else if (a == "--log-mb") {
      f.log_mb = std::atoll(v);
    } else if (a == "--value-size") {
      f.value_size = std::atoi(v);
    } else if (a == "--keys") {
      f.keys = std::atoi(v);
    } else if (a == "--in-flight") {
      f.in_flight = std::atoi(v);
    } else if (a == "--bookies") {
      f.bookies = std::atoi(v);
    } else {
      return Usage();
    }
  }
  if (f.log_mb < 1 || f.value_size < 1 || f.keys < 1 || f.in_flight < 1 || f.bookies < 1) {
    return Usage();
  }
  std::filesystem::remove_all(f.dir);
  auto cluster = StartCluster(f);
  if (!cluster.ok()) {
    std::fprintf(stderr, "range-replay-bench: %s\n", cluster.status().ToString().c_str());
    return 1;
  }
  const kv::RangeOptions options = MakeRangeOptions(f, *cluster);
  kv::RangeDescriptor desc;
  desc.range_id = 1;
  desc.table = "bench";
  auto fail = [](const absl::Status& s) {
    std::fprintf(stderr, "range-replay-bench: %s\n", s.ToString().c_str());
    return 1;
  };

  auto range = kv::Range::Open(options, desc);
  if (!range.ok()) return fail(range.status());
  auto puts = RunPuts(**range, f);
  if (!puts.ok()) return fail(puts.status());
  if (absl::Status s = (*range)->Close(); !s.ok()) return fail(s);
  range->reset();

  // Clean restart, local state kept.
  absl::Time t = absl::Now();
  range = kv::Range::Open(options, desc);
  if (!range.ok()) return fail(range.status());
  const double restart_s = absl::ToDoubleSeconds(absl::Now() - t);
  const int64_t restart_replayed = (*range)->stats().replayed_records;
  if (absl::Status s = (*range)->Close(); !s.ok()) return fail(s);
  range->reset();

  // Local state wiped, no snapshot: the whole log is replayed.
  std::filesystem::remove_all(options.data_dir);
  t = absl::Now();
  range = kv::Range::Open(options, desc);
  if (!range.ok()) return fail(range.status());
  const double replay_s = absl::ToDoubleSeconds(absl::Now() - t);
  const kv::RangeStats st = (*range)->stats();
  if (st.replayed_records != puts->records) {
    return fail(absl::InternalError(absl::StrCat("replayed ", st.replayed_records,
                                                 " records, expected ", puts->records)));
  }
  if (st.key_count != std::min<int64_t>(f.keys, puts->records)) {
    return fail(absl::InternalError(absl::StrCat("key count after replay ", st.key_count)));
  }
  static_cast<void>((*range)->Close());

  const double put_rate = puts->records / puts->seconds;
  const double replay_rate = st.replayed_records / replay_s;
  std::printf("range-replay-bench: %d bookie(s), %d-byte values, %d keys, %d puts in flight\n",
              f.bookies, f.value_size, f.keys, f.in_flight);
  std::printf("  puts:    %lld records, %.1f MB in %.2f s: %.0f records/s, %.1f MB/s\n",
              static_cast<long long>(puts->records), puts->bytes / 1e6, puts->seconds, put_rate,
              puts->bytes / 1e6 / puts->seconds);
  std::printf("  restart (local state kept): %.2f s, %lld records replayed\n", restart_s,
              static_cast<long long>(restart_replayed));
  std::printf("  replay (local state wiped): %lld records in %.2f s: %.0f records/s, %.1f MB/s\n",
              static_cast<long long>(st.replayed_records), replay_s, replay_rate,
              puts->bytes / 1e6 / replay_s);
  std::printf("  replay / put rate: %.1fx (target >= 5x)\n", replay_rate / put_rate);
  return 0;
}

}  // namespace
}  // namespace ledgerkv

int main(int argc, char** argv) {
  ledgerkv::TuneProcessForServer();  // as in the ledgerkv binary
  return ledgerkv::Main(argc, argv);
}
