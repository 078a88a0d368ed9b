// ledger-bench: appends to a ledger through the real ledger client and real
// bookies on loopback, and prints entries/s, MB/s and add latency next to
// the raw disk's limits measured in the same run (docs/performance.md).
//
//   ledger-bench [--dir DIR] [--seconds S] [--quick] [--filter SUBSTR]
//                [--rpcs-in-flight N]
//
// --filter runs only the rows whose "config/entry/in-flight" name contains
// SUBSTR (e.g. "E1,Qw1,Qa1/100/64"), for profiling one of them.
// --rpcs-in-flight sets ClientOptions.max_rpcs_in_flight_per_bookie.
// The ent/sync column is the number of entries per bookie journal sync
// (group commit), from the bookies' GetInfo counters.
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
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/process_tuning.h"
#include "bench/disk_probe.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "ledger/bookie/bookie_server.h"
#include "ledger/ledger_client.h"
#include "metadata/embedded_store.h"
#include "proto/bookie.grpc.pb.h"

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

// The load: a closed loop that keeps `in_flight` appends outstanding. Each
// completion issues the next append from its callback (on the writer's
// thread, as a log layered on the ledger does), so the generator adds no
// thread hand-off per entry of its own to what is measured.
struct Load {
  ledger::LedgerWriter* writer = nullptr;
  std::string payload;
  absl::Time end;
  absl::Mutex mu;
  int outstanding ABSL_GUARDED_BY(mu) = 0;
  int64_t completed ABSL_GUARDED_BY(mu) = 0;
  absl::Status error ABSL_GUARDED_BY(mu);
  std::vector<double> latencies_us ABSL_GUARDED_BY(mu);
};

void Issue(Load* load) {
  const absl::Time sent = absl::Now();
  load->writer->AppendAsync(load->payload, [load, sent](absl::StatusOr<int64_t> id) {
    const absl::Time now = absl::Now();
    bool again = false;
    {
      absl::MutexLock l(&load->mu);
      if (!id.ok()) {
        if (load->error.ok()) load->error = id.status();
      } else {
        ++load->completed;
        load->latencies_us.push_back(absl::ToDoubleMicroseconds(now - sent));
        again = now < load->end;
      }
      if (!again) --load->outstanding;
    }
    if (again) Issue(load);
  });
}

// Keeps `in_flight` appends outstanding for `duration`, then drains.
absl::StatusOr<Result> RunOne(ledger::LedgerWriter& writer, size_t entry_size, int in_flight,
                              absl::Duration duration) {
  Load load;
  load.writer = &writer;
  load.payload = std::string(entry_size, 'v');
  const absl::Time start = absl::Now();
  load.end = start + duration;
  {
    absl::MutexLock l(&load.mu);
    load.latencies_us.reserve(1 << 21);
    load.outstanding = in_flight;
  }
  for (int i = 0; i < in_flight; ++i) Issue(&load);
  absl::MutexLock l(&load.mu);
  auto drained = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(load.mu) { return load.outstanding == 0; };
  load.mu.Await(absl::Condition(&drained));
  if (!load.error.ok()) return load.error;
  const double secs = absl::ToDoubleSeconds(absl::Now() - start);
  Result r;
  r.entries_per_sec = load.completed / secs;
  r.mb_per_sec = load.completed * static_cast<double>(entry_size) / 1e6 / secs;
  r.p50_us = Percentile(load.latencies_us, 0.50);
  r.p99_us = Percentile(load.latencies_us, 0.99);
  return r;
}

struct Cluster {
  std::unique_ptr<metadata::EmbeddedStore> store;
  std::vector<std::unique_ptr<bookie::BookieServer>> bookies;
  std::unique_ptr<ledger::LedgerClient> client;
};

// Syncs and entries of the bookie at `address` so far (GetInfo).
std::pair<uint64_t, uint64_t> SyncsAndEntries(const std::string& address) {
  auto stub = bookie::v1::Bookie::NewStub(
      grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
  bookie::v1::GetInfoResponse info;
  if (!stub->GetInfo(&ctx, bookie::v1::GetInfoRequest(), &info).ok()) return {0, 0};
  return {info.syncs(), info.entries_added()};
}

absl::StatusOr<Cluster> StartCluster(const std::string& dir, int bookies,
                                     const ledger::ClientOptions& client_options) {
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
  ledger::ClientOptions co = client_options;
  co.metadata = c.store.get();
  auto client = ledger::LedgerClient::Create(co);
  if (!client.ok()) return client.status();
  c.client = std::move(*client);
  return c;
}

int Main(int argc, char** argv) {
  std::string dir = "/tmp/ledgerkv-bench";
  absl::Duration seconds = absl::Seconds(3);
  std::string filter;
  ledger::ClientOptions client_options;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--dir" && i + 1 < argc) {
      dir = argv[++i];
    } else if (a == "--seconds" && i + 1 < argc) {
      seconds = absl::Seconds(std::atof(argv[++i]));
    } else if (a == "--rpcs-in-flight" && i + 1 < argc) {
      client_options.max_rpcs_in_flight_per_bookie = std::atoi(argv[++i]);
    } else if (a == "--filter" && i + 1 < argc) {
      filter = argv[++i];
    } else if (a == "--quick") {
      seconds = absl::Milliseconds(500);
    } else {
      std::fprintf(stderr, "usage: ledger-bench [--dir DIR] [--seconds S] [--quick] [--filter SUBSTR] "
                   "[--rpcs-in-flight N]\n");
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
  std::printf("%-14s %8s %9s %12s %9s %10s %10s %9s\n", "config", "entry", "in-flight",
              "entries/s", "MB/s", "p50 us", "p99 us", "ent/sync");

  struct Config {
    const char* name;
    int bookies, e, qw, qa;
  };
  const Config configs[] = {{"E1,Qw1,Qa1", 1, 1, 1, 1}, {"E3,Qw3,Qa2", 3, 3, 3, 2}};
  int run = 0;
  for (const Config& cfg : configs) {
    for (size_t size : {size_t{100}, size_t{65536}}) {
      for (int in_flight : {1, 64}) {
        if (absl::StrCat(cfg.name, "/", size, "/", in_flight).find(filter) == std::string::npos) {
          continue;
        }
        std::string run_dir = absl::StrCat(dir, "/run", run++);
        auto cluster = StartCluster(run_dir, cfg.bookies, client_options);
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
        std::vector<std::pair<uint64_t, uint64_t>> before;
        for (const auto& b : cluster->bookies) before.push_back(SyncsAndEntries(b->address()));
        auto r = RunOne(**writer, size, in_flight, seconds);
        if (!r.ok()) {
          std::fprintf(stderr, "run: %s\n", r.status().ToString().c_str());
          return 1;
        }
        // Entries each bookie fdatasync made durable (group commit), over all bookies.
        uint64_t syncs = 0, entries = 0;
        for (size_t b = 0; b < cluster->bookies.size(); ++b) {
          auto after = SyncsAndEntries(cluster->bookies[b]->address());
          syncs += after.first - before[b].first;
          entries += after.second - before[b].second;
        }
        std::printf("%-14s %8zu %9d %12.0f %9.1f %10.0f %10.0f %9.1f", cfg.name, size, in_flight,
                    r->entries_per_sec, r->mb_per_sec, r->p50_us, r->p99_us,
                    syncs > 0 ? static_cast<double>(entries) / syncs : 0.0);
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

int main(int argc, char** argv) {
  ledgerkv::TuneProcessForServer();  // as in the ledgerkv binary
  return ledgerkv::bench::Main(argc, argv);
}
