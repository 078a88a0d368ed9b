#include "ledger/bookie/lac_waiters.h"

namespace ledgerkv::bookie {

LacWaiters::LacWaiters() : timer_([this] { TimerLoop(); }) {}

LacWaiters::~LacWaiters() { Shutdown(); }

bool LacWaiters::Add(uint64_t ledger_id, int64_t at_most, absl::Time deadline, Callback* cb) {
  absl::MutexLock l(&mu_);
  if (shutdown_) return false;
  const uint64_t id = next_id_++;
  const bool earliest = by_deadline_.empty() || deadline < by_deadline_.begin()->first;
  waiters_.emplace(id, Waiter{ledger_id, at_most, deadline, std::move(*cb)});
  by_ledger_[ledger_id].insert(id);
  by_deadline_.emplace(deadline, id);
  if (earliest) cv_.Signal();
  return true;
}

LacWaiters::Callback LacWaiters::TakeLocked(uint64_t id) {
  auto it = waiters_.find(id);
  Callback cb = std::move(it->second.cb);
  by_deadline_.erase({it->second.deadline, id});
  auto lit = by_ledger_.find(it->second.ledger_id);
  lit->second.erase(id);
  if (lit->second.empty()) by_ledger_.erase(lit);
  waiters_.erase(it);
  return cb;
}

void LacWaiters::Notify(uint64_t ledger_id, int64_t lac) {
  std::vector<Callback> ready;
  {
    absl::MutexLock l(&mu_);
    auto lit = by_ledger_.find(ledger_id);
    if (lit == by_ledger_.end()) return;
    std::vector<uint64_t> ids;
    for (uint64_t id : lit->second) {
      if (waiters_.at(id).at_most < lac) ids.push_back(id);
    }
    for (uint64_t id : ids) ready.push_back(TakeLocked(id));
  }
  for (Callback& cb : ready) std::move(cb)(Wake::kAdvanced);
}

void LacWaiters::Shutdown() {
  std::vector<Callback> all;
  {
    absl::MutexLock l(&mu_);
    if (shutdown_) return;
    shutdown_ = true;
    cv_.Signal();
    while (!waiters_.empty()) all.push_back(TakeLocked(waiters_.begin()->first));
  }
  if (timer_.joinable()) timer_.join();
  for (Callback& cb : all) std::move(cb)(Wake::kShutdown);
}

size_t LacWaiters::size() const {
  absl::MutexLock l(&mu_);
  return waiters_.size();
}

void LacWaiters::TimerLoop() {
  mu_.Lock();
  while (!shutdown_) {
    const absl::Time now = absl::Now();
    std::vector<Callback> due;
    while (!by_deadline_.empty() && by_deadline_.begin()->first <= now) {
      due.push_back(TakeLocked(by_deadline_.begin()->second));
    }
    if (!due.empty()) {
      mu_.Unlock();
      for (Callback& cb : due) std::move(cb)(Wake::kTimeout);
      mu_.Lock();
      continue;
    }
    if (by_deadline_.empty()) {
      cv_.Wait(&mu_);
    } else {
      cv_.WaitWithDeadline(&mu_, by_deadline_.begin()->first);
    }
  }
  mu_.Unlock();
}

}  // namespace ledgerkv::bookie
