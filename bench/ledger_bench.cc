// ledger-bench: appends to a ledger through the real ledger client and real
// bookies on loopback, and prints entries/s, MB/s and add latency next to
// the raw disk's limits measured in the same run (docs/performance.md).
//
//   ledger-bench [--dir DIR] [--seconds S] [--repeat N] [--quick]
//                [--filter SUBSTR] [--rpcs-in-flight N] [--entries-per-rpc N]
//                [--no-add-port] [--callbacks-on-writer-thread]
//
// --repeat N (default 3; 1 with --quick) measures the whole matrix N times,
// probing the disk again before each pass, and ends with the median of each
// row and of the disk figures, and the range of the per-pass ratios.
// --filter runs only the rows whose "config/entry/in-flight" name contains
// SUBSTR (e.g. "E1,Qw1,Qa1/100/64"), for profiling one of them.
// --rpcs-in-flight sets ClientOptions.max_rpcs_in_flight_per_bookie, and
// --entries-per-rpc ClientOptions.max_entries_per_add_rpc (default 512).
// --no-add-port sends adds over the Add RPC instead of the bookies' add
// ports (docs/add-transport.md), for comparing the two transports.
// --callbacks-on-writer-thread turns ClientOptions.callbacks_on_reply_thread
// off (every callback is handed to the writer's thread), for comparison.
// The ent/sync column is the number of entries per bookie journal sync
// (group commit), from the bookies' GetInfo counters. Everything is
// written in a fresh directory made inside DIR (default /tmp) and removed
// at the end. It starts with sync(2): other programs' dirty data, written
// back meanwhile, would disturb the probe and the rows unequally.
//
// Configurations: E=Qw=Qa=1 on one bookie, E=Qw=3,Qa=2 on three bookies;
// 100-byte and 64 KiB entries; 1 and 64 appends in flight.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
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

// `sent`: now. The callback captures 16 bytes (std::function keeps them
// without a heap allocation, as it keeps the log layer's), and its clock
// reading is the next append's send time.
void Issue(Load* load, absl::Time sent) {
  load->writer->AppendAsync(load->payload, [load, sent_ns = absl::ToUnixNanos(sent)](
                                               absl::StatusOr<int64_t> id) {
    const absl::Time now = absl::Now();
    const absl::Time sent = absl::FromUnixNanos(sent_ns);
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
    if (again) Issue(load, now);
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
  for (int i = 0; i < in_flight; ++i) Issue(&load, absl::Now());
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
absl::StatusOr<std::pair<uint64_t, uint64_t>> SyncsAndEntries(const std::string& address) {
  auto stub = bookie::v1::Bookie::NewStub(
      grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
  bookie::v1::GetInfoResponse info;
  if (const grpc::Status s = stub->GetInfo(&ctx, bookie::v1::GetInfoRequest(), &info); !s.ok()) {
    return absl::UnavailableError(absl::StrCat("GetInfo of bookie ", address, ": ", s.error_message()));
  }
  return std::make_pair(info.syncs(), info.entries_added());
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

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

struct Config {
  const char* name;
  int bookies, e, qw, qa;
};

// One row of the matrix, measured once.
struct Row {
  const Config* config = nullptr;
  size_t entry_size = 0;
  int in_flight = 0;
  Result result;
  double entries_per_sync = 0;
};

// The ratio a row is judged by: entries/s over the disk's fdatasync/s for
// 100-byte rows, MB/s over its sequential write MB/s otherwise.
double TargetRatio(const Row& row, const DiskLimits& disk) {
  return row.entry_size == 100 ? row.result.entries_per_sec / disk.fdatasyncs_per_sec
                               : row.result.mb_per_sec / disk.seq_write_mb_per_sec;
}

// The target column of a row (empty for rows without one). `ratio` as
// TargetRatio. `lone_syncs`: the p50 latency of a lone 100-byte add of the
// same config, in disk syncs of the same pass (0: not measured). 64 appends
// in flight complete at most 64 per round trip, and a round trip carrying
// 64 entries is no faster than one carrying a single entry, so 64 /
// lone_syncs estimates the most the batching could give: printed next to
// the ratio, it tells a missed target on a machine whose round trip is too
// slow for it apart from a regression. An estimate, not a bound: it uses
// the lone add's median, and a loaded add may be a little faster than that.
std::string TargetColumn(const Row& row, double ratio, double lone_syncs) {
  if (row.in_flight != 64) return "";
  if (row.entry_size == 100) {
    std::string out = absl::StrFormat("   %.1fx disk fdatasync/s", ratio);
    if (lone_syncs > 0) {
      absl::StrAppendFormat(&out, " (est. cap %.1fx: a lone add's p50 is %.1f syncs)",
                            64 / lone_syncs, lone_syncs);
    }
    return out;
  }
  return absl::StrFormat("   %.0f%% of disk seq write", 100 * ratio);
}

void PrintHeader() {
  std::printf("%-14s %8s %9s %12s %9s %10s %10s %9s\n", "config", "entry", "in-flight",
              "entries/s", "MB/s", "p50 us", "p99 us", "ent/sync");
}

void PrintRow(const Row& row, const DiskLimits& disk, double lone_add_us) {
  const Result& r = row.result;
  std::printf("%-14s %8zu %9d %12.0f %9.1f %10.0f %10.0f %9.1f%s\n", row.config->name,
              row.entry_size, row.in_flight, r.entries_per_sec, r.mb_per_sec, r.p50_us, r.p99_us,
              row.entries_per_sync,
              TargetColumn(row, TargetRatio(row, disk),
                           lone_add_us * disk.fdatasyncs_per_sec / 1e6)
                  .c_str());
  std::fflush(stdout);
}

// Measures one row on a fresh cluster in `run_dir`. The directory stays
// until the whole run is over (see MeasureDisk on removing files).
absl::StatusOr<Row> MeasureRow(const Config& cfg, size_t size, int in_flight,
                               absl::Duration seconds, const std::string& run_dir,
                               const ledger::ClientOptions& client_options) {
  Row row{&cfg, size, in_flight, {}, 0};
  auto cluster = StartCluster(run_dir, cfg.bookies, client_options);
  if (!cluster.ok()) return cluster.status();
  ledger::CreateOptions lo;
  lo.ensemble_size = cfg.e;
  lo.write_quorum = cfg.qw;
  lo.ack_quorum = cfg.qa;
  auto writer = cluster->client->CreateLedger(lo);
  if (!writer.ok()) return writer.status();
  std::vector<std::pair<uint64_t, uint64_t>> before;
  for (const auto& b : cluster->bookies) {
    auto counters = SyncsAndEntries(b->address());
    if (!counters.ok()) return counters.status();
    before.push_back(*counters);
  }
  auto r = RunOne(**writer, size, in_flight, seconds);
  if (!r.ok()) return r.status();
  row.result = *r;
  // Entries each bookie fdatasync made durable (group commit), over all bookies.
  uint64_t syncs = 0, entries = 0;
  for (size_t b = 0; b < cluster->bookies.size(); ++b) {
    auto after = SyncsAndEntries(cluster->bookies[b]->address());
    if (!after.ok()) return after.status();
    syncs += after->first - before[b].first;
    entries += after->second - before[b].second;
  }
  row.entries_per_sync = syncs > 0 ? static_cast<double>(entries) / syncs : 0.0;
  writer->reset();
  cluster->client.reset();
  cluster->bookies.clear();
  cluster->store.reset();
  return row;
}

int Main(int argc, char** argv) {
  // Where the disk is probed and the bookies keep their data: a fresh
  // directory made inside this one (so two runs never share one, and
  // nothing that was there before is touched).
  std::string parent = "/tmp";
  absl::Duration seconds = absl::Seconds(3);
  std::string filter;
  int repeat = 3;
  bool repeat_given = false;
  ledger::ClientOptions client_options;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--dir" && i + 1 < argc) {
      parent = argv[++i];
    } else if (a == "--seconds" && i + 1 < argc) {
      seconds = absl::Seconds(std::atof(argv[++i]));
    } else if (a == "--no-add-port") {
      client_options.use_add_port = false;
    } else if (a == "--callbacks-on-writer-thread") {
      client_options.callbacks_on_reply_thread = false;
    } else if (a == "--rpcs-in-flight" && i + 1 < argc) {
      client_options.max_rpcs_in_flight_per_bookie = std::atoi(argv[++i]);
    } else if (a == "--entries-per-rpc" && i + 1 < argc) {
      client_options.max_entries_per_add_rpc = std::atoi(argv[++i]);
    } else if (a == "--filter" && i + 1 < argc) {
      filter = argv[++i];
    } else if (a == "--repeat" && i + 1 < argc) {
      repeat = std::atoi(argv[++i]);
      repeat_given = true;
    } else if (a == "--quick") {
      seconds = absl::Milliseconds(500);
    } else {
      std::fprintf(stderr,
                   "usage: ledger-bench [--dir DIR] [--seconds S] [--repeat N] [--quick] "
                   "[--filter SUBSTR] [--rpcs-in-flight N] [--entries-per-rpc N] [--no-add-port] "
                   "[--callbacks-on-writer-thread]\n");
      return 2;
    }
  }
  if (!repeat_given && seconds < absl::Seconds(1)) repeat = 1;  // --quick: one pass
  if (repeat < 1) {
    std::fprintf(stderr, "--repeat must be at least 1\n");
    return 2;
  }
  std::error_code ignored;  // mkdtemp below reports a parent it cannot use
  std::filesystem::create_directories(parent, ignored);
  std::string dir = parent + "/ledgerkv-bench.XXXXXX";
  if (::mkdtemp(dir.data()) == nullptr) {
    std::fprintf(stderr, "cannot make a directory in %s: %s\n", parent.c_str(),
                 std::strerror(errno));
    return 1;
  }
  // Probe files and run directories are removed only here, at the end.
  struct RemoveAtExit {
    std::string dir;
    ~RemoveAtExit() {
      std::error_code ignored;
      std::filesystem::remove_all(dir, ignored);
    }
  } remove_at_exit{dir};

  // Data other programs left dirty would be written back by the kernel
  // during the first passes and slow the disk probe and the rows by
  // different amounts. Flush it first, so that both measure this disk at
  // rest. (Right after a CI run there was under 1 MB of it: the runs that
  // missed their target just after CI had another cause.)
  ::sync();

  static const Config kConfigs[] = {{"E1,Qw1,Qa1", 1, 1, 1, 1}, {"E3,Qw3,Qa2", 3, 3, 3, 2}};
  // rows[k] holds every measurement of row k, one per pass.
  std::vector<std::vector<Row>> rows;
  std::vector<DiskLimits> disks;
  int run = 0;
  for (int pass = 0; pass < repeat; ++pass) {
    // The disk is probed at the start of every pass: its fdatasync rate on
    // this kind of VM moves a lot from one minute to the next
    // (docs/performance.md), so one probe for the whole run would make
    // every ratio depend on one sample of it.
    auto disk = MeasureDisk(dir, seconds, /*keep_files=*/true);
    if (!disk.ok()) {
      std::fprintf(stderr, "disk probe: %s\n", disk.status().ToString().c_str());
      return 1;
    }
    disks.push_back(*disk);
    if (repeat > 1) std::printf("pass %d of %d\n", pass + 1, repeat);
    std::printf("disk: %.0f fdatasync/s, %.0f MB/s sequential write\n", disk->fdatasyncs_per_sec,
                disk->seq_write_mb_per_sec);
    PrintHeader();
    size_t k = 0;
    for (const Config& cfg : kConfigs) {
      double lone_add_us = 0;  // this config's 100 B, 1 in flight p50, this pass
      for (size_t size : {size_t{100}, size_t{65536}}) {
        for (int in_flight : {1, 64}) {
          if (absl::StrCat(cfg.name, "/", size, "/", in_flight).find(filter) == std::string::npos) {
            continue;
          }
          auto row = MeasureRow(cfg, size, in_flight, seconds, absl::StrCat(dir, "/run", run++),
                                client_options);
          if (!row.ok()) {
            std::fprintf(stderr, "%s/%zu/%d: %s\n", cfg.name, size, in_flight,
                         row.status().ToString().c_str());
            return 1;
          }
          if (size == 100 && in_flight == 1) lone_add_us = row->result.p50_us;
          PrintRow(*row, *disk, size == 100 ? lone_add_us : 0);
          if (rows.size() <= k) rows.emplace_back();
          rows[k++].push_back(*row);
        }
      }
    }
  }
  if (repeat == 1) return 0;

  // The summary: medians over the passes. A ratio is the median of the
  // per-pass ratios (each pass's rate over the disk figure probed right
  // before it), never a median rate over a median disk figure from other
  // passes; its range follows. The same for the estimated cap.
  std::vector<double> syncs_per_sec, seq_mb;
  for (const DiskLimits& d : disks) {
    syncs_per_sec.push_back(d.fdatasyncs_per_sec);
    seq_mb.push_back(d.seq_write_mb_per_sec);
  }
  std::printf("\nmedian of %d passes\n", repeat);
  std::printf("disk: %.0f fdatasync/s (passes: %.0f-%.0f), %.0f MB/s sequential write\n",
              Median(syncs_per_sec), *std::min_element(syncs_per_sec.begin(), syncs_per_sec.end()),
              *std::max_element(syncs_per_sec.begin(), syncs_per_sec.end()), Median(seq_mb));
  PrintHeader();
  // Per pass: a lone 100 B add's p50 in that pass's disk syncs, and of which config.
  std::vector<double> lone_syncs;
  const Config* lone_config = nullptr;
  for (const std::vector<Row>& measured : rows) {
    std::vector<double> eps, mbps, p50, p99, eps_sync, ratios;
    const Row& first = measured.front();
    const bool lone = first.entry_size == 100 && first.in_flight == 1;
    if (lone) {
      lone_syncs.clear();
      lone_config = first.config;
    }
    for (size_t pass = 0; pass < measured.size(); ++pass) {
      const Result& r = measured[pass].result;
      eps.push_back(r.entries_per_sec);
      mbps.push_back(r.mb_per_sec);
      p50.push_back(r.p50_us);
      p99.push_back(r.p99_us);
      eps_sync.push_back(measured[pass].entries_per_sync);
      ratios.push_back(TargetRatio(measured[pass], disks[pass]));
      if (lone) lone_syncs.push_back(r.p50_us * disks[pass].fdatasyncs_per_sec / 1e6);
    }
    std::string range;
    if (first.in_flight == 64) {
      const double lo = *std::min_element(ratios.begin(), ratios.end());
      const double hi = *std::max_element(ratios.begin(), ratios.end());
      range = first.entry_size == 100
                  ? absl::StrFormat(" (passes: %.1fx-%.1fx)", lo, hi)
                  : absl::StrFormat(" (passes: %.0f%%-%.0f%%)", 100 * lo, 100 * hi);
    }
    const double cap_syncs =
        first.config == lone_config && !lone_syncs.empty() ? Median(lone_syncs) : 0;
    std::printf("%-14s %8zu %9d %12.0f %9.1f %10.0f %10.0f %9.1f%s%s\n", first.config->name,
                first.entry_size, first.in_flight, Median(eps), Median(mbps), Median(p50),
                Median(p99), Median(eps_sync),
                TargetColumn(first, Median(ratios), cap_syncs).c_str(), range.c_str());
  }
  return 0;
}

}  // namespace
}  // namespace ledgerkv::bench

int main(int argc, char** argv) {
  ledgerkv::TuneProcessForServer();  // as in the ledgerkv binary
  return ledgerkv::bench::Main(argc, argv);
}
