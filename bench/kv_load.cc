#include "bench/kv_load.h"

#include <algorithm>
#include <atomic>
#include <memory>
#include <random>
#include <thread>
#include <utility>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "bench/async_call.h"
#include "bench/kv_backend.h"
#include "bench/proc_stats.h"

namespace ledgerkv::bench {
namespace {

// Counters of one polling thread. Every callback of a client runs on its
// thread, so these need no lock; they are merged after the threads joined.
struct ThreadStats {
  LatencyHistogram latency_ns;
  int64_t ops = 0;
  int64_t errors = 0;
  int64_t cas_failed = 0;
  int64_t misses = 0;
  int64_t scanned_keys = 0;
  std::map<std::string, int64_t> errors_by_code;
  std::string first_error;
};

std::string CodeName(grpc::StatusCode code) {
  static constexpr const char* kNames[] = {
      "OK",        "CANCELLED",         "UNKNOWN",        "INVALID_ARGUMENT",   "DEADLINE_EXCEEDED",
      "NOT_FOUND", "ALREADY_EXISTS",    "PERMISSION_DENIED", "RESOURCE_EXHAUSTED",
      "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE",   "UNIMPLEMENTED",      "INTERNAL",
      "UNAVAILABLE", "DATA_LOSS",       "UNAUTHENTICATED"};
  const int index = static_cast<int>(code);
  if (index >= 0 && index < static_cast<int>(std::size(kNames))) return kNames[index];
  return absl::StrCat("CODE_", index);
}

// One pass of all clients until the stop condition: the untimed preload
// (every key written once) or the timed workload.
class Phase {
 public:
  enum class Kind { kPreload, kTimed };

  Phase(const LoadOptions& options, KvBackend* backend, Kind kind, const std::string& value)
      : options_(options), backend_(backend), kind_(kind), value_(value) {}

  // Blocks until every client stopped and every thread joined.
  void Run() {
    std::vector<std::unique_ptr<grpc::CompletionQueue>> cqs;
    for (int i = 0; i < options_.threads; ++i) {
      cqs.push_back(std::make_unique<grpc::CompletionQueue>());
    }
    stats_.resize(options_.threads);
    clients_.resize(options_.clients);
    for (int i = 0; i < options_.clients; ++i) {
      Client& c = clients_[i];
      c.conn = i % options_.conns;
      c.thread = i % options_.threads;
      c.cq = cqs[c.thread].get();
      c.rng.seed(options_.seed * 1000003 + i + (kind_ == Kind::kPreload ? 7919 : 0));
    }
    active_.store(options_.clients);
    std::vector<std::thread> threads;
    for (auto& cq : cqs) {
      threads.emplace_back([cq = cq.get()] {
        void* tag = nullptr;
        bool ok = false;
        while (cq->Next(&tag, &ok)) static_cast<AsyncCall*>(tag)->Complete(ok);
      });
    }
    start_ = absl::Now();
    deadline_ = start_ + options_.duration;
    for (Client& c : clients_) StartNext(&c);
    all_stopped_.WaitForNotification();
    for (auto& cq : cqs) cq->Shutdown();
    for (auto& thread : threads) thread.join();
  }

  const std::vector<ThreadStats>& stats() const { return stats_; }
  absl::Duration elapsed() const { return end_ - start_; }

 private:
  struct Client {
    int conn = 0;
    int thread = 0;
    grpc::CompletionQueue* cq = nullptr;
    std::mt19937_64 rng;
    absl::Time op_start;
  };

  int64_t RandomIndex(Client* c, int64_t bound) {
    return std::uniform_int_distribution<int64_t>(0, bound - 1)(c->rng);
  }

  // Starts the client's next operation, or stops the client.
  void StartNext(Client* c) {
    if (kind_ == Kind::kPreload) {
      const int64_t index = next_.fetch_add(1, std::memory_order_relaxed);
      if (index >= options_.keys) return Stopped();
      c->op_start = absl::Now();
      backend_->Put(c->conn, c->cq, BenchKey(index, options_.key_size), value_,
                    [this, c](OpResult r) { Record(c, r.status); });
      return;
    }
    if (options_.total > 0) {
      if (next_.fetch_add(1, std::memory_order_relaxed) >= options_.total) return Stopped();
    } else if (absl::Now() >= deadline_) {
      return Stopped();
    }
    c->op_start = absl::Now();
    const std::string key = BenchKey(RandomIndex(c, options_.keys), options_.key_size);
    switch (options_.workload) {
      case Workload::kPut:
        return Write(c, key);
      case Workload::kGet:
        return Read(c, key, /*serializable=*/false);
      case Workload::kGetSerializable:
        return Read(c, key, /*serializable=*/true);
      case Workload::kMixed90:
        return RandomIndex(c, 100) < 90 ? Read(c, key, false) : Write(c, key);
      case Workload::kMixed50:
        return RandomIndex(c, 100) < 50 ? Read(c, key, false) : Write(c, key);
      case Workload::kTxn:
        return CompareAndSet(c, key);
      case Workload::kScan: {
        const int64_t start = RandomIndex(c, std::max<int64_t>(1, options_.keys - kScanLimit + 1));
        backend_->Scan(c->conn, c->cq, BenchKey(start, options_.key_size), kKeyPrefixEnd,
                       kScanLimit, [this, c](OpResult r) {
                         stats_[c->thread].scanned_keys += r.kvs;
                         Record(c, r.status);
                       });
        return;
      }
    }
  }

  void Write(Client* c, const std::string& key) {
    backend_->Put(c->conn, c->cq, key, value_, [this, c](OpResult r) { Record(c, r.status); });
  }

  void Read(Client* c, const std::string& key, bool serializable) {
    backend_->Get(c->conn, c->cq, key, serializable, [this, c](OpResult r) {
      if (r.status.ok() && !r.found) ++stats_[c->thread].misses;
      Record(c, r.status);
    });
  }

  // Reads the key's mod revision, then puts only if it is unchanged: two
  // round trips, timed together as one operation.
  void CompareAndSet(Client* c, const std::string& key) {
    backend_->Get(c->conn, c->cq, key, /*serializable=*/false, [this, c, key](OpResult read) {
      if (!read.status.ok()) return Record(c, read.status);
      if (!read.found) ++stats_[c->thread].misses;
      backend_->CompareAndPut(c->conn, c->cq, key, value_, read.mod_revision,
                              [this, c](OpResult r) {
                                if (r.status.ok() && !r.succeeded) ++stats_[c->thread].cas_failed;
                                Record(c, r.status);
                              });
    });
  }

  // Runs on the client's polling thread.
  void Record(Client* c, const grpc::Status& status) {
    ThreadStats& s = stats_[c->thread];
    if (status.ok()) {
      ++s.ops;
      s.latency_ns.Record(absl::ToInt64Nanoseconds(absl::Now() - c->op_start));
    } else {
      ++s.errors;
      ++s.errors_by_code[CodeName(status.error_code())];
      if (s.first_error.empty()) {
        s.first_error = absl::StrCat(CodeName(status.error_code()), ": ", status.error_message());
      }
    }
    StartNext(c);
  }

  void Stopped() {
    if (active_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      end_ = absl::Now();
      all_stopped_.Notify();
    }
  }

  const LoadOptions& options_;
  KvBackend* const backend_;
  const Kind kind_;
  const std::string& value_;
  std::vector<Client> clients_;
  std::vector<ThreadStats> stats_;
  std::atomic<int64_t> next_{0};
  std::atomic<int> active_{0};
  absl::Time start_;
  absl::Time deadline_;
  absl::Time end_;  // written by the last client to stop, before all_stopped_
  absl::Notification all_stopped_;
};

absl::Status Validate(const LoadOptions& o) {
  if (o.endpoint.empty()) return absl::InvalidArgumentError("--endpoint is required");
  if (o.clients < 1 || o.conns < 1 || o.threads < 1) {
    return absl::InvalidArgumentError("--clients, --conns and --threads must be >= 1");
  }
  if (o.keys < 1) return absl::InvalidArgumentError("--keys must be >= 1");
  const size_t digits = std::to_string(o.keys - 1).size();
  if (o.key_size < static_cast<int>(sizeof(kKeyPrefix) - 1 + digits)) {
    return absl::InvalidArgumentError(absl::StrCat("--key-size ", o.key_size, " is too small for ",
                                                   o.keys, " keys (prefix + ", digits, " digits)"));
  }
  if (o.value_size < 0) return absl::InvalidArgumentError("--value-size must be >= 0");
  if (o.total <= 0 && o.duration <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("give --total > 0 or --duration > 0");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Target> ParseTarget(absl::string_view name) {
  if (name == "ledgerkv") return Target::kLedgerkv;
  if (name == "etcd") return Target::kEtcd;
  return absl::InvalidArgumentError(absl::StrCat("unknown target '", name, "' (ledgerkv|etcd)"));
}

absl::StatusOr<Workload> ParseWorkload(absl::string_view name) {
  // `mixed` is the name for the read-mostly mix.
  if (name == "mixed") return Workload::kMixed90;
  for (Workload w : {Workload::kPut, Workload::kGet, Workload::kGetSerializable, Workload::kTxn,
                     Workload::kMixed90, Workload::kMixed50, Workload::kScan}) {
    if (name == WorkloadName(w)) return w;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown workload '", name, "' (put|get|get-serializable|txn|mixed (= mixed90)|mixed90|mixed50|scan)"));
}

std::string TargetName(Target target) {
  return target == Target::kEtcd ? "etcd" : "ledgerkv";
}

std::string WorkloadName(Workload workload) {
  switch (workload) {
    case Workload::kPut: return "put";
    case Workload::kGet: return "get";
    case Workload::kGetSerializable: return "get-serializable";
    case Workload::kTxn: return "txn";
    case Workload::kMixed90: return "mixed90";
    case Workload::kMixed50: return "mixed50";
    case Workload::kScan: return "scan";
  }
  return "?";
}

std::string BenchKey(int64_t index, int key_size) {
  std::string digits = std::to_string(index);
  const size_t prefix = sizeof(kKeyPrefix) - 1;
  const size_t pad = key_size > static_cast<int>(prefix + digits.size())
                         ? key_size - prefix - digits.size()
                         : 0;
  return absl::StrCat(kKeyPrefix, std::string(pad, '0'), digits);
}

absl::StatusOr<LoadResult> RunLoad(const LoadOptions& requested) {
  if (absl::Status s = Validate(requested); !s.ok()) return s;
  // More polling threads than clients only add cross-thread wake-ups (gRPC
  // hands completions between pollers): ~2x the bench's CPU per op at 1
  // client with 2 threads.
  LoadOptions options = requested;
  options.threads = std::min(options.threads, options.clients);

  // Distinct channel args and a local subchannel pool: without them gRPC
  // would share one TCP connection between the channels.
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  for (int i = 0; i < options.conns; ++i) {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    args.SetInt("ledgerkv.bench_connection", i);
    args.SetMaxReceiveMessageSize(64 << 20);
    channels.push_back(
        grpc::CreateCustomChannel(options.endpoint, grpc::InsecureChannelCredentials(), args));
  }
  for (auto& channel : channels) {
    if (!channel->WaitForConnected(absl::ToChronoTime(absl::Now() + options.rpc_timeout))) {
      return absl::UnavailableError(absl::StrCat("cannot connect to ", options.endpoint, " within ",
                                                 absl::FormatDuration(options.rpc_timeout)));
    }
  }
  std::unique_ptr<KvBackend> backend =
      options.target == Target::kEtcd
          ? MakeEtcdBackend(channels, options.rpc_timeout)
          : MakeLedgerkvBackend(channels, options.table, options.rpc_timeout);
  if (absl::Status s = backend->Prepare(); !s.ok()) return s;

  std::string value(options.value_size, 'x');
  std::mt19937_64 rng(options.seed);
  for (char& ch : value) ch = static_cast<char>('a' + rng() % 26);

  std::unique_ptr<RssSampler> sampler;
  if (options.server_pid > 0) {
    sampler = std::make_unique<RssSampler>(options.server_pid, absl::Milliseconds(100));
  }

  LoadResult result;
  result.threads = options.threads;
  if (options.preload && options.workload != Workload::kPut) {
    Phase preload(options, backend.get(), Phase::Kind::kPreload, value);
    preload.Run();
    for (const ThreadStats& s : preload.stats()) {
      if (s.errors > 0) {
        return absl::UnavailableError(absl::StrCat("preload failed: ", s.first_error));
      }
      result.preloaded += s.ops;
    }
  }

  absl::StatusOr<double> server_cpu_before =
      options.server_pid > 0 ? ReadCpuSeconds(options.server_pid) : absl::NotFoundError("no pid");
  const double cpu_before = SelfCpuSeconds();
  Phase timed(options, backend.get(), Phase::Kind::kTimed, value);
  timed.Run();
  result.bench_cpu_seconds = SelfCpuSeconds() - cpu_before;
  if (server_cpu_before.ok()) {
    absl::StatusOr<double> after = ReadCpuSeconds(options.server_pid);
    if (after.ok()) result.server_cpu_seconds = *after - *server_cpu_before;
  }
  if (sampler != nullptr) {
    result.server_max_rss_kb = sampler->Stop();
    absl::StatusOr<MemoryStatus> memory = ReadMemoryStatus(options.server_pid);
    if (memory.ok()) result.server_hwm_kb = memory->hwm_kb;
  }

  for (const ThreadStats& s : timed.stats()) {
    result.ops += s.ops;
    result.errors += s.errors;
    result.cas_failed += s.cas_failed;
    result.misses += s.misses;
    result.scanned_keys += s.scanned_keys;
    result.latency_ns.Merge(s.latency_ns);
    for (const auto& [code, n] : s.errors_by_code) result.errors_by_code[code] += n;
    if (result.first_error.empty()) result.first_error = s.first_error;
  }
  result.seconds = absl::ToDoubleSeconds(timed.elapsed());
  result.ops_per_sec = result.seconds > 0 ? result.ops / result.seconds : 0;
  return result;
}

}  // namespace ledgerkv::bench
