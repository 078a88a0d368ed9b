// Process-wide settings for server processes (ledgerkv, and the benchmarks
// that host bookies and ranges in-process). Call TuneProcessForServer()
// first thing in main(), before any thread starts.
#pragma once

#include <malloc.h>
#include <sys/resource.h>

#include <cstdlib>
#include <string_view>

#include "absl/synchronization/mutex.h"

namespace ledgerkv {

// Ledger entries, log batches and gRPC messages are often 128 KiB - 4 MiB.
// With glibc's defaults such blocks are mmap'ed and unmapped on every use,
// or the heap top is trimmed back to the kernel right after they are
// freed, so every message pays page faults on fresh memory: on this
// machine that was half the CPU of a log replay (docs/performance.md).
// Keeping blocks below 32 MiB in the heap and trimming only above 64 MiB of
// free space doubled replay throughput and raised the put rate, for at
// most 64 MiB of free memory kept per arena.
inline void TuneMallocForServer() {
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 64 << 20);
}

// Debian's libabsl is built in debug mode, which turns on absl::Mutex's
// deadlock detector: a lock-order graph updated on every acquisition, 2.6%
// of the server's CPU under a put load (docs/performance.md). Servers turn
// it off. Unit tests (separate binaries) keep it, and the process tests
// keep it for the children they start by setting
// LEDGERKV_MUTEX_DEADLOCK_DETECTION=1 (tests/process_util.cc).
inline void TuneMutexForServer() {
  const char* detect = std::getenv("LEDGERKV_MUTEX_DEADLOCK_DETECTION");
  if (detect == nullptr || std::string_view(detect) != "1") {
    absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  }
}

// A server holds a descriptor per gRPC connection, two per add port
// connection (docs/add-transport.md) and one per open RocksDB file; the
// usual soft limit of 1024 runs out long before the add port's 1024
// connections, and a bookie that cannot open its next journal file turns
// read-only. The hard limit is the operator's ceiling: raise the soft one
// to it, as etcd and Go programs do. (A failure leaves the limit as it was.)
inline void RaiseFileLimitForServer() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur >= limit.rlim_max) return;
  // An unlimited hard limit is not a valid soft one for descriptors.
  limit.rlim_cur = limit.rlim_max == RLIM_INFINITY ? rlim_t{1} << 20 : limit.rlim_max;
  (void)setrlimit(RLIMIT_NOFILE, &limit);
}

inline void TuneProcessForServer() {
  TuneMallocForServer();
  TuneMutexForServer();
  RaiseFileLimitForServer();
}

}  // namespace ledgerkv
