// Google Benchmark helpers that make a broken benchmark fail its process:
// SkipWithError alone leaves the exit code at 0, and a filter that matches
// nothing runs nothing and exits 0 too, so a ctest smoke run would pass
// either way. Header-only; each benchmark binary has one main.
#pragma once

#include <atomic>
#include <cstdio>
#include <string>

#include "benchmark/benchmark.h"

namespace ledgerkv::bench {

inline std::atomic<int>& BenchmarkFailures() {
  static std::atomic<int> failures{0};
  return failures;
}

// Marks this run of the benchmark failed (shown in its output) and makes
// RunBenchmarksStrictly return non-zero.
inline void FailBenchmark(benchmark::State& state, const std::string& why) {
  BenchmarkFailures().fetch_add(1);
  state.SkipWithError(why.c_str());
}

// RunSpecifiedBenchmarks, then the exit code: 1 if the filter matched no
// benchmark or any of them failed, 0 otherwise.
inline int RunBenchmarksStrictly() {
  const size_t ran = benchmark::RunSpecifiedBenchmarks();
  if (ran == 0) {
    std::fprintf(stderr, "no benchmark matched the filter\n");
    return 1;
  }
  const int failures = BenchmarkFailures().load();
  if (failures > 0) {
    std::fprintf(stderr, "%d benchmark run(s) failed\n", failures);
    return 1;
  }
  return 0;
}

}  // namespace ledgerkv::bench
