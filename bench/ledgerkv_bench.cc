// ledgerkv-bench: the same KV workloads against ledgerkv or etcd.
//
//   ledgerkv-bench --endpoint HOST:PORT [--target ledgerkv|etcd]
//       put|get|get-serializable|txn|mixed|mixed90|mixed50|scan
//       [--clients N] [--conns M] [--threads T] [--key-size K] [--value-size V]
//       [--keys KEYSPACE] [--total T | --duration S] [--table NAME]
//       [--timeout S] [--no-preload] [--seed X] [--server-pid PID] [-o text|json]
//
// Exit status: 0 on success; 1 when the error rate is above 1% (the reason
// is printed on stderr); 2 for bad arguments or when the run could not start.
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/synchronization/mutex.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "bench/kv_load.h"

namespace ledgerkv::bench {
namespace {

constexpr double kMaxErrorRate = 0.01;

constexpr char kUsage[] =
    "usage: ledgerkv-bench --endpoint HOST:PORT [--target ledgerkv|etcd]\n"
    "    put|get|get-serializable|txn|mixed|mixed90|mixed50|scan\n"
    "    [--clients N=16] [--conns M=1] [--threads T=2] [--key-size K=16]\n"
    "    [--value-size V=256] [--keys KEYSPACE=10000] [--total T | --duration S=10]\n"
    "    [--table NAME=default] [--timeout S=10] [--no-preload] [--seed X]\n"
    "    [--server-pid PID] [-o text|json]\n";

std::string JsonString(absl::string_view s) {
  std::string out = "\"";
  for (char ch : s) {
    switch (ch) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      default:
        if (static_cast<unsigned char>(ch) < 0x20) {
          absl::StrAppendFormat(&out, "\\u%04x", ch);
        } else {
          out += ch;
        }
    }
  }
  return out + "\"";
}

double Micros(int64_t nanos) { return nanos / 1000.0; }

void PrintJson(const LoadOptions& o, const LoadResult& r) {
  std::string errors_by_code;
  for (const auto& [code, n] : r.errors_by_code) {
    absl::StrAppend(&errors_by_code, errors_by_code.empty() ? "" : ",", JsonString(code), ":", n);
  }
  const LatencyHistogram& h = r.latency_ns;
  std::cout << absl::StrFormat(
      "{\"target\":%s,\"workload\":%s,\"endpoint\":%s,\"clients\":%d,\"conns\":%d,"
      "\"threads\":%d,\"key_size\":%d,\"value_size\":%d,\"keys\":%d,\"preloaded\":%d,"
      "\"ops\":%d,\"errors\":%d,\"error_rate\":%.6f,\"seconds\":%.3f,\"ops_per_sec\":%.1f,"
      "\"latency_us\":{\"p50\":%.1f,\"p90\":%.1f,\"p99\":%.1f,\"p999\":%.1f,\"max\":%.1f,"
      "\"mean\":%.1f},\"cas_failed\":%d,\"misses\":%d,\"scanned_keys\":%d,"
      "\"bench_cpu_seconds\":%.3f,\"bench_cpu_us_per_op\":%.1f,\"server_cpu_seconds\":%.3f,"
      "\"server_vm_hwm_kb\":%d,\"server_max_rss_kb\":%d,\"errors_by_code\":{%s},"
      "\"first_error\":%s}\n",
      JsonString(TargetName(o.target)), JsonString(WorkloadName(o.workload)),
      JsonString(o.endpoint), o.clients, o.conns, r.threads, o.key_size, o.value_size, o.keys,
      r.preloaded, r.ops, r.errors, r.error_rate(), r.seconds, r.ops_per_sec,
      Micros(h.Quantile(0.5)), Micros(h.Quantile(0.9)), Micros(h.Quantile(0.99)),
      Micros(h.Quantile(0.999)), Micros(h.max()), h.mean() / 1000.0, r.cas_failed, r.misses,
      r.scanned_keys, r.bench_cpu_seconds,
      r.ops > 0 ? r.bench_cpu_seconds * 1e6 / r.ops : 0.0, r.server_cpu_seconds, r.server_hwm_kb,
      r.server_max_rss_kb, errors_by_code, JsonString(r.first_error));
}

void PrintText(const LoadOptions& o, const LoadResult& r) {
  const LatencyHistogram& h = r.latency_ns;
  std::cout << absl::StrFormat(
      "%s %s on %s: clients=%d conns=%d threads=%d key=%dB value=%dB keys=%d (preloaded %d)\n",
      TargetName(o.target), WorkloadName(o.workload), o.endpoint, o.clients, o.conns, r.threads,
      o.key_size, o.value_size, o.keys, r.preloaded);
  std::cout << absl::StrFormat("  %d ops in %.2f s = %.1f ops/s; errors %d (%.2f%%)\n", r.ops,
                               r.seconds, r.ops_per_sec, r.errors, 100 * r.error_rate());
  std::cout << absl::StrFormat(
      "  latency us: p50 %.0f  p90 %.0f  p99 %.0f  p99.9 %.0f  max %.0f  mean %.0f\n",
      Micros(h.Quantile(0.5)), Micros(h.Quantile(0.9)), Micros(h.Quantile(0.99)),
      Micros(h.Quantile(0.999)), Micros(h.max()), h.mean() / 1000.0);
  if (o.workload == Workload::kTxn) {
    std::cout << absl::StrFormat("  txn compare failed (lost race): %d\n", r.cas_failed);
  }
  if (r.misses > 0) std::cout << absl::StrFormat("  reads of absent keys: %d\n", r.misses);
  if (o.workload == Workload::kScan) {
    std::cout << absl::StrFormat("  keys scanned: %d\n", r.scanned_keys);
  }
  std::cout << absl::StrFormat("  bench cpu: %.2f s (%.1f us/op)\n", r.bench_cpu_seconds,
                               r.ops > 0 ? r.bench_cpu_seconds * 1e6 / r.ops : 0.0);
  if (o.server_pid > 0) {
    std::cout << absl::StrFormat(
        "  server pid %d: cpu %.2f s (%.1f us/op), VmHWM %.1f MiB, max VmRSS %.1f MiB\n",
        o.server_pid, r.server_cpu_seconds,
        r.ops > 0 ? r.server_cpu_seconds * 1e6 / r.ops : 0.0, r.server_hwm_kb / 1024.0,
        r.server_max_rss_kb / 1024.0);
  }
  for (const auto& [code, n] : r.errors_by_code) {
    std::cout << absl::StrFormat("  error %s: %d\n", code, n);
  }
  if (!r.first_error.empty()) std::cout << "  first error: " << r.first_error << "\n";
}

int Fail(const std::string& message) {
  std::cerr << "ledgerkv-bench: " << message << "\n" << kUsage;
  return 2;
}

int Main(int argc, char** argv) {
  // Debian's Abseil checks every lock acquisition for cycles (gRPC's mutexes
  // included): a few percent of the bench's CPU that a load generator
  // should not spend.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  LoadOptions options;
  std::string output = "text";
  bool have_workload = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&](std::string* out) {
      if (i + 1 >= argc) return false;
      *out = argv[++i];
      return true;
    };
    auto int_value = [&](auto* out) {
      std::string text;
      return value(&text) && absl::SimpleAtoi(text, out);
    };
    std::string text;
    bool ok = true;
    if (arg == "--endpoint") {
      ok = value(&options.endpoint);
    } else if (arg == "--target") {
      ok = value(&text);
      if (ok) {
        absl::StatusOr<Target> target = ParseTarget(text);
        if (!target.ok()) return Fail(std::string(target.status().message()));
        options.target = *target;
      }
    } else if (arg == "--clients") {
      ok = int_value(&options.clients);
    } else if (arg == "--conns") {
      ok = int_value(&options.conns);
    } else if (arg == "--threads") {
      ok = int_value(&options.threads);
    } else if (arg == "--key-size") {
      ok = int_value(&options.key_size);
    } else if (arg == "--value-size") {
      ok = int_value(&options.value_size);
    } else if (arg == "--keys") {
      ok = int_value(&options.keys);
    } else if (arg == "--total") {
      ok = int_value(&options.total);
    } else if (arg == "--duration" || arg == "--timeout") {
      double seconds = 0;
      ok = value(&text) && absl::SimpleAtod(text, &seconds);
      (arg == "--duration" ? options.duration : options.rpc_timeout) = absl::Seconds(seconds);
    } else if (arg == "--table") {
      ok = value(&options.table);
    } else if (arg == "--no-preload") {
      options.preload = false;
    } else if (arg == "--seed") {
      ok = int_value(&options.seed);
    } else if (arg == "--server-pid") {
      ok = int_value(&options.server_pid);
    } else if (arg == "-o" || arg == "--output") {
      ok = value(&output) && (output == "text" || output == "json");
    } else if (arg == "-h" || arg == "--help") {
      std::cout << kUsage;
      return 0;
    } else if (!arg.empty() && arg[0] != '-' && !have_workload) {
      absl::StatusOr<Workload> workload = ParseWorkload(arg);
      if (!workload.ok()) return Fail(std::string(workload.status().message()));
      options.workload = *workload;
      have_workload = true;
    } else {
      return Fail(absl::StrCat("unknown argument '", arg, "'"));
    }
    if (!ok) return Fail(absl::StrCat("bad or missing value for ", arg));
  }
  if (!have_workload) return Fail("missing workload");

  absl::StatusOr<LoadResult> result = RunLoad(options);
  if (!result.ok()) {
    std::cerr << "ledgerkv-bench: " << result.status() << "\n";
    return 2;
  }
  if (output == "json") {
    PrintJson(options, *result);
  } else {
    PrintText(options, *result);
  }
  if (result->error_rate() > kMaxErrorRate) {
    std::cerr << absl::StrFormat(
        "ledgerkv-bench: FAILED: error rate %.2f%% (%d of %d operations) is above %.0f%%; "
        "first error: %s\n",
        100 * result->error_rate(), result->errors, result->ops + result->errors,
        100 * kMaxErrorRate, result->first_error);
    return 1;
  }
  if (result->ops == 0) {
    std::cerr << "ledgerkv-bench: FAILED: no operation completed\n";
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace ledgerkv::bench

int main(int argc, char** argv) { return ledgerkv::bench::Main(argc, argv); }
