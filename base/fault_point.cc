#include "base/fault_point.h"

#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"

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

absl::Status FaultPoints::ArmFromSpec(std::string_view spec_view) {
  // absl::string_view is not std::string_view in Debian's Abseil.
  const absl::string_view spec(spec_view.data(), spec_view.size());
  std::vector<std::pair<std::string, Callback>> parsed;
  for (absl::string_view entry : absl::StrSplit(spec, ',', absl::SkipWhitespace())) {
    const std::pair<absl::string_view, absl::string_view> kv = absl::StrSplit(entry, '=');
    const std::string name(absl::StripAsciiWhitespace(kv.first));
    absl::string_view action = absl::StripAsciiWhitespace(kv.second);
    int64_t ms = 0;
    if (name.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("fault spec \"", entry, "\": no point name"));
    } else if (action == "once") {
      auto fired = std::make_shared<std::atomic<bool>>(false);
      parsed.emplace_back(name, [fired](std::string_view) { return !fired->exchange(true); });
    } else if (absl::ConsumePrefix(&action, "sleep:") && absl::SimpleAtoi(action, &ms) &&
               ms >= 0) {
      parsed.emplace_back(name, [ms](std::string_view) {
        absl::SleepFor(absl::Milliseconds(ms));
        return false;
      });
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("fault spec \"", entry, "\": want NAME=once or NAME=sleep:MS"));
    }
  }
  for (auto& [name, cb] : parsed) Arm(std::move(name), std::move(cb));
  return absl::OkStatus();
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
