// The ledgerkv-bench load generator: N logical clients, each with exactly
// one operation outstanding, spread over M gRPC connections and polled by a
// few completion-queue threads (not a thread per client).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "bench/latency_histogram.h"

namespace ledgerkv::bench {

enum class Target { kLedgerkv, kEtcd };
enum class Workload { kPut, kGet, kGetSerializable, kTxn, kMixed90, kMixed50, kScan };

// Parse/print the command-line names ("ledgerkv", "etcd"; "put", "get",
// "get-serializable", "txn", "mixed90", "mixed50", "scan").
absl::StatusOr<Target> ParseTarget(absl::string_view name);
absl::StatusOr<Workload> ParseWorkload(absl::string_view name);
std::string TargetName(Target target);
std::string WorkloadName(Workload workload);

// Keys are kKeyPrefix + the key's index, zero-padded to key_size bytes, so
// the whole key space is [kKeyPrefix, kKeyPrefixEnd).
inline constexpr char kKeyPrefix[] = "k";
inline constexpr char kKeyPrefixEnd[] = "l";
// Scans read this many keys from a random start.
inline constexpr int kScanLimit = 100;

struct LoadOptions {
  std::string endpoint;  // host:port
  Target target = Target::kLedgerkv;
  Workload workload = Workload::kPut;
  int clients = 16;  // logical clients, one op outstanding each
  int conns = 1;     // gRPC connections (channels with distinct args)
  int threads = 2;   // completion-queue polling threads (at most `clients`)
  int key_size = 16;
  int value_size = 256;
  int64_t keys = 10000;  // key space
  // Stop after `total` operations, or else after `duration`.
  int64_t total = 0;
  absl::Duration duration = absl::Seconds(10);
  std::string table = "default";  // ledgerkv only
  absl::Duration rpc_timeout = absl::Seconds(10);
  // Write every key once before a read/txn/scan workload (untimed).
  bool preload = true;
  pid_t server_pid = 0;  // 0: no server figures
  uint64_t seed = 1;
};

struct LoadResult {
  int64_t ops = 0;     // operations that succeeded (timed phase)
  int64_t errors = 0;  // operations that failed (any RPC error)
  double seconds = 0;  // timed phase, first start to last completion
  double ops_per_sec = 0;
  LatencyHistogram latency_ns;  // successful operations only
  int64_t cas_failed = 0;  // txn: compare did not hold (a concurrent writer won)
  int64_t misses = 0;      // get/txn read: key not found
  int64_t scanned_keys = 0;
  int64_t preloaded = 0;
  int threads = 0;  // polling threads actually used
  std::map<std::string, int64_t> errors_by_code;
  std::string first_error;
  double bench_cpu_seconds = 0;  // this process, timed phase
  // Server figures; -1 when no --server-pid or unreadable.
  double server_cpu_seconds = -1;  // timed phase
  int64_t server_hwm_kb = -1;      // VmHWM at the end
  int64_t server_max_rss_kb = -1;  // largest VmRSS sampled during the run

  double error_rate() const {
    return ops + errors == 0 ? 0 : static_cast<double>(errors) / (ops + errors);
  }
};

// Runs one benchmark. Errors: INVALID_ARGUMENT for bad options,
// UNAVAILABLE when the endpoint cannot be reached within rpc_timeout, the
// server's error when preparing or preloading fails. Failed operations of
// the timed phase are counted in the result, not returned.
absl::StatusOr<LoadResult> RunLoad(const LoadOptions& options);

// The key with index `index` (0 <= index < keys) for `key_size`.
std::string BenchKey(int64_t index, int key_size);

}  // namespace ledgerkv::bench
