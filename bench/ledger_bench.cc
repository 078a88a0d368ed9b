// ledger-bench: appends to a ledger through the real ledger client and real
// bookies on loopback, and prints entries/s, MB/s and add latency next to
// the raw disk's limits measured in the same run (docs/performance.md).
//
//   ledger-bench [--dir DIR] [--seconds S] [--quick]
//
// Configurations: E=Qw=Qa=1 on one bookie, E=Qw=3,Qa=2 on three bookies;
// 100-byte and 64 KiB entries; 1 and 64 appends in flight.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "bench/disk_probe.h"
#include "ledger/bookie/bookie_server.h"
#include "ledger/ledger_client.h"
#include "metadata/embedded_store.h"

namespace ledgerkv::bench {
namespace {

struct Result {
  double entries_per_sec = 0;
  double mb_per_sec = 0;
  double p50_us = 0;
  double p99_us = 0;
};

double Percentile(std::vector<double>& v, double p) {
  if (v.empty()) return 0;
  size_t k = static_cast<size_t>(p * (v.size() - 1));
  std::nth_element(v.begin(), v.begin() + k, v.end());
  return v[k];
}

// Keeps `in_flight` appends outstanding for `duration`, then drains.
absl::StatusOr<Result> RunOne(ledger::LedgerWriter& writer, size_t entry_size, int in_flight,
                              absl::Duration duration) {
  const std::string payload(entry_size, 'v');
  absl::Mutex mu;
  int outstanding = 0;
  int64_t completed = 0;
  absl::Status error;
  std::vector<double> latencies_us;
  latencies_us.reserve(1 << 20);

  absl::Time start = absl::Now();
  absl::Time end = start + duration;
  while (true) {
    {
      absl::MutexLock l(&mu);
      auto can_send = [&] { return outstanding < in_flight || !error.ok(); };
      mu.Await(absl::Condition(&can_send));
      if (!error.ok()) break;
      if (absl::Now() >= end) break;
      ++outstanding;
    }
    absl::Time sent = absl::Now();
    writer.AppendAsync(payload, [&, sent](absl::StatusOr<int64_t> id) {
      double us = absl::ToDoubleMicroseconds(absl::Now() - sent);
      absl::MutexLock l(&mu);
      --outstanding;
      if (!id.ok()) {
        if (error.ok()) error = id.status();
        return;
      }
      ++completed;
      latencies_us.push_back(us);
    });
  }
  absl::MutexLock l(&mu);
  auto drained = [&] { return outstanding == 0; };
  mu.Await(absl::Condition(&drained));
  if (!error.ok()) return error;
  double secs = absl::ToDoubleSeconds(absl::Now() - start);
  Result r;
  r.entries_per_sec = completed / secs;
  r.mb_per_sec = completed * static_cast<double>(entry_size) / 1e6 / secs;
  r.p50_us = Percentile(latencies_us, 0.50);
  r.p99_us = Percentile(latencies_us, 0.99);
  return r;
}

struct Cluster {
  std::unique_ptr<metadata::EmbeddedStore> store;
  std::vector<std::unique_ptr<bookie::BookieServer>> bookies;
  std::unique_ptr<ledger::LedgerClient> client;
};

absl::StatusOr<Cluster> StartCluster(const std::string& dir, int bookies) {
  Cluster c;
  auto store = metadata::EmbeddedStore::Open(dir + "/metadata");
  if (!store.ok()) return store.status();
  c.store = std::move(*store);
  for (int i = 0; i < bookies; ++i) {
    bookie::BookieOptions o;
    o.data_dir = absl::StrCat(dir, "/bookie", i);
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

int Main(int argc, char** argv) {
  std::string dir = "/tmp/ledgerkv-bench";
  absl::Duration seconds = absl::Seconds(3);
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--dir" && i + 1 < argc) {
      dir = argv[++i];
    } else if (a == "--seconds" && i + 1 < argc) {
      seconds = absl::Seconds(std::atof(argv[++i]));
    } else if (a == "--quick") {
      seconds = absl::Milliseconds(500);
    } else {
      std::fprintf(stderr, "usage: ledger-bench [--dir DIR] [--seconds S] [--quick]\n");
      return 2;
    }
  }
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);

  auto disk = MeasureDisk(dir, seconds);
  if (!disk.ok()) {
    std::fprintf(stderr, "disk probe: %s\n", disk.status().ToString().c_str());
    return 1;
  }
  std::printf("disk: %.0f fdatasync/s, %.0f MB/s sequential write\n", disk->fdatasyncs_per_sec,
              disk->seq_write_mb_per_sec);
  std::printf("%-14s %8s %9s %12s %9s %10s %10s\n", "config", "entry", "in-flight", "entries/s",
              "MB/s", "p50 us", "p99 us");

  struct Config {
    const char* name;
    int bookies, e, qw, qa;
  };
  const Config configs[] = {{"E1,Qw1,Qa1", 1, 1, 1, 1}, {"E3,Qw3,Qa2", 3, 3, 3, 2}};
  int run = 0;
  for (const Config& cfg : configs) {
    for (size_t size : {size_t{100}, size_t{65536}}) {
      for (int in_flight : {1, 64}) {
        std::string run_dir = absl::StrCat(dir, "/run", run++);
        auto cluster = StartCluster(run_dir, cfg.bookies);
        if (!cluster.ok()) {
          std::fprintf(stderr, "start: %s\n", cluster.status().ToString().c_str());
          return 1;
        }
        ledger::CreateOptions lo;
        lo.ensemble_size = cfg.e;
        lo.write_quorum = cfg.qw;
        lo.ack_quorum = cfg.qa;
        auto writer = cluster->client->CreateLedger(lo);
        if (!writer.ok()) {
          std::fprintf(stderr, "create: %s\n", writer.status().ToString().c_str());
          return 1;
        }
        auto r = RunOne(**writer, size, in_flight, seconds);
        if (!r.ok()) {
          std::fprintf(stderr, "run: %s\n", r.status().ToString().c_str());
          return 1;
        }
        std::printf("%-14s %8zu %9d %12.0f %9.1f %10.0f %10.0f", cfg.name, size, in_flight,
                    r->entries_per_sec, r->mb_per_sec, r->p50_us, r->p99_us);
        if (size == 100 && in_flight == 64) {
          std::printf("   %.1fx disk fdatasync/s", r->entries_per_sec / disk->fdatasyncs_per_sec);
        } else if (size == 65536 && in_flight == 64) {
          std::printf("   %.0f%% of disk seq write", 100 * r->mb_per_sec / disk->seq_write_mb_per_sec);
        }
        std::printf("\n");
        std::fflush(stdout);
        writer->reset();
        cluster->client.reset();
        cluster->bookies.clear();
        cluster->store.reset();
        std::filesystem::remove_all(run_dir);
      }
    }
  }
  return 0;
}

}  // namespace
}  // namespace ledgerkv::bench

int main(int argc, char** argv) { return ledgerkv::bench::Main(argc, argv); }
