// Process-wide glibc malloc settings for server processes (ledgerkv, and
// the benchmarks that host bookies and ranges in-process).
//
// Ledger entries, log batches and gRPC messages are often 128 KiB - 4 MiB.
// With glibc's defaults such blocks are mmap'ed and unmapped on every use,
// or the heap top is trimmed back to the kernel right after they are
// freed, so every message pays page faults on fresh memory: on this
// machine that was half the CPU of a log replay (docs/performance.md).
// Keeping blocks below 32 MiB in the heap and trimming only above 64 MiB of
// free space doubled replay throughput and raised the put rate, for at
// most 64 MiB of free memory kept per arena.
#pragma once

#include <malloc.h>

namespace ledgerkv {

inline void TuneMallocForServer() {
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 64 << 20);
}

}  // namespace ledgerkv
