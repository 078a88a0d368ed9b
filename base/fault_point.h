// Named fault points for tests (in the manner of RocksDB's sync_point.h).
//
// Code under test marks a place:  if (LEDGERKV_FAULT("bookie.fence.drop")) {...}
// A test arms it:                 FaultPoints::Get().Arm("bookie.fence.drop", fn);
// An unarmed point costs one atomic load. With LEDGERKV_FAULT_POINTS off
// (release builds) every point is the constant false.
#pragma once

#include <atomic>
#include <functional>
#include <string>
#include <string_view>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace ledgerkv {

class FaultPoints {
 public:
  // Returns true when the fault should fire. `arg` is an optional context
  // value (e.g. a bookie id) the callback can inspect.
  using Callback = std::function<bool(std::string_view arg)>;

  static FaultPoints& Get();

  // Arms `name`; the callback decides per hit whether the fault fires.
  void Arm(std::string name, Callback cb);
  // Arms `name` to fire on every hit.
  void ArmAlways(std::string name);
  // Arms points from `spec`, for tests that run the ledgerkv binary (its
  // LEDGERKV_FAULTS environment variable): comma-separated entries
  // "name=once" (fires at its first hit only) or "name=sleep:MS" (sleeps
  // MS milliseconds at every hit and never fires). INVALID_ARGUMENT names
  // a malformed entry; nothing is armed then.
  absl::Status ArmFromSpec(std::string_view spec);
  void Disarm(std::string_view name);
  void DisarmAll();

  // Returns whether `name` fires now.
  bool Hit(std::string_view name, std::string_view arg = {});

  // Whether any point is armed (LEDGERKV_FAULT checks this first, so that
  // its argument is not even computed in a run without faults).
  bool AnyArmed() const { return armed_count_.load(std::memory_order_acquire) > 0; }

 private:
  std::atomic<int> armed_count_{0};
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, Callback> points_ ABSL_GUARDED_BY(mu_);
};

// Disarms every fault point when it goes out of scope (use in tests).
class ScopedFaultPoints {
 public:
  ScopedFaultPoints() = default;
  ~ScopedFaultPoints() { FaultPoints::Get().DisarmAll(); }
  ScopedFaultPoints(const ScopedFaultPoints&) = delete;
  ScopedFaultPoints& operator=(const ScopedFaultPoints&) = delete;
};

}  // namespace ledgerkv

#if defined(LEDGERKV_FAULT_POINTS) && LEDGERKV_FAULT_POINTS
#define LEDGERKV_FAULT(name, ...)           \
  (::ledgerkv::FaultPoints::Get().AnyArmed() && \
   ::ledgerkv::FaultPoints::Get().Hit(name, ##__VA_ARGS__))
#else
#define LEDGERKV_FAULT(name, ...) (false)
#endif
