// Resource figures of the bench itself and of the server under test, read
// from /proc (Linux).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"

namespace ledgerkv::bench {

struct MemoryStatus {
  int64_t rss_kb = 0;  // VmRSS: resident now
  int64_t hwm_kb = 0;  // VmHWM: peak resident since the process started
};

// VmRSS and VmHWM of `pid` from /proc/PID/status. NOT_FOUND if the process
// does not exist, INTERNAL if the fields are missing.
absl::StatusOr<MemoryStatus> ReadMemoryStatus(pid_t pid);

// User + system CPU time consumed so far by `pid` (all threads), from
// /proc/PID/stat. NOT_FOUND if the process does not exist.
absl::StatusOr<double> ReadCpuSeconds(pid_t pid);

// User + system CPU time of the calling process (getrusage).
double SelfCpuSeconds();

// Samples VmRSS of a process on its own thread until Stop(); remembers the
// largest value (VmHWM alone cannot tell the peak of one phase).
class RssSampler {
 public:
  // Starts sampling `pid` every `interval`.
  RssSampler(pid_t pid, absl::Duration interval);
  ~RssSampler();  // stops
  RssSampler(const RssSampler&) = delete;
  RssSampler& operator=(const RssSampler&) = delete;

  // Takes a last sample, stops the thread and returns the largest VmRSS seen
  // in KiB (0 if no sample succeeded). Idempotent.
  int64_t Stop();

 private:
  void Sample();

  const pid_t pid_;
  const absl::Duration interval_;
  absl::Notification stop_;
  std::thread thread_;
  // Written by thread_ until it is joined, then by Stop()'s caller.
  int64_t max_rss_kb_ = 0;
};

}  // namespace ledgerkv::bench
