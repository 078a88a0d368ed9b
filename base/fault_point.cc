#include "base/fault_point.h"

namespace ledgerkv {

FaultPoints& FaultPoints::Get() {
  static FaultPoints* instance = new FaultPoints();
  return *instance;
}

void FaultPoints::Arm(std::string name, Callback cb) {
  absl::MutexLock l(&mu_);
  points_[std::move(name)] = std::move(cb);
  armed_count_.store(static_cast<int>(points_.size()), std::memory_order_release);
}

void FaultPoints::ArmAlways(std::string name) {
  Arm(std::move(name), [](std::string_view) { return true; });
}

void FaultPoints::Disarm(std::string_view name) {
  absl::MutexLock l(&mu_);
  points_.erase(std::string(name));
  armed_count_.store(static_cast<int>(points_.size()), std::memory_order_release);
}

void FaultPoints::DisarmAll() {
  absl::MutexLock l(&mu_);
  points_.clear();
  armed_count_.store(0, std::memory_order_release);
}

bool FaultPoints::Hit(std::string_view name, std::string_view arg) {
  if (armed_count_.load(std::memory_order_acquire) == 0) return false;
  Callback cb;
  {
    absl::MutexLock l(&mu_);
    auto it = points_.find(std::string(name));
    if (it == points_.end()) return false;
    cb = it->second;
  }
  return cb(arg);
}

}  // namespace ledgerkv
