// Long-poll support for ReadLac: callbacks waiting for a ledger's LAC to rise
// above a value, completed by the add path (Notify) or by a deadline timer,
// so that no gRPC thread ever blocks while a reader waits.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/functional/any_invocable.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace ledgerkv::bookie {

class LacWaiters {
 public:
  // Outcome passed to a waiter's callback.
  enum class Wake { kAdvanced, kTimeout, kShutdown };
  using Callback = absl::AnyInvocable<void(Wake) &&>;

  // Starts the timer thread.
  LacWaiters();
  // Calls Shutdown().
  ~LacWaiters();

  LacWaiters(const LacWaiters&) = delete;
  LacWaiters& operator=(const LacWaiters&) = delete;

  // Registers *cb (moved from) to run once: kAdvanced after
  // Notify(ledger_id, lac) with lac > at_most, kTimeout at `deadline`, or
  // kShutdown. Returns false, leaving *cb alone, after Shutdown (the caller
  // then runs it; Add never runs a callback itself, so it may be called
  // under the caller's locks).
  bool Add(uint64_t ledger_id, int64_t at_most, absl::Time deadline, Callback* cb);

  // The ledger's LAC is now `lac`: runs (on this thread) every waiter of the
  // ledger whose threshold it exceeds. Callbacks must be short.
  void Notify(uint64_t ledger_id, int64_t lac);

  // Runs every remaining callback with kShutdown and stops the timer.
  // Idempotent.
  void Shutdown();

  // Number of callbacks still waiting (tests).
  size_t size() const;

 private:
  struct Waiter {
    uint64_t ledger_id;
    int64_t at_most;
    absl::Time deadline;
    Callback cb;
  };

  void TimerLoop();
  // Removes waiter `id` and returns its callback.
  Callback TakeLocked(uint64_t id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  absl::CondVar cv_;  // an earlier deadline, or shutdown
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  std::map<uint64_t, Waiter> waiters_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, absl::flat_hash_set<uint64_t>> by_ledger_ ABSL_GUARDED_BY(mu_);
  std::set<std::pair<absl::Time, uint64_t>> by_deadline_ ABSL_GUARDED_BY(mu_);
  std::thread timer_;
};

}  // namespace ledgerkv::bookie
