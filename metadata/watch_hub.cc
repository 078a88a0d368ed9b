#include "metadata/watch_hub.h"

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace ledgerkv::metadata {

class WatchHub::Handle : public WatchHandle {
 public:
  Handle(std::shared_ptr<WatchHub> hub, std::shared_ptr<Watcher> watcher)
      : hub_(std::move(hub)), watcher_(std::move(watcher)) {}
  ~Handle() override { Cancel(); }
  void Cancel() override { hub_->Cancel(watcher_); }

 private:
  // The hub outlives the store if a handle does, so a late Cancel is safe.
  const std::shared_ptr<WatchHub> hub_;
  const std::shared_ptr<Watcher> watcher_;
};

WatchHub::WatchHub(Version start_revision, size_t history_events)
    : history_limit_(history_events), compacted_(start_revision), last_published_(start_revision) {}

std::shared_ptr<WatchHub> WatchHub::Start(Version start_revision, size_t history_events) {
  std::shared_ptr<WatchHub> hub(new WatchHub(start_revision, history_events));
  absl::MutexLock lock(&hub->mu_);
  // The thread holds a reference so that it may outlive the last owner when
  // Shutdown runs on the dispatcher thread itself (and has to detach).
  hub->dispatcher_ = std::thread([self = hub] { self->DispatchLoop(); });
  hub->dispatcher_id_ = hub->dispatcher_.get_id();
  return hub;
}

WatchHub::~WatchHub() { Shutdown(); }

void WatchHub::Shutdown() {
  std::thread thread;
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
    queue_.clear();
    work_cv_.SignalAll();
    thread = std::move(dispatcher_);
  }
  if (!thread.joinable()) return;
  if (thread.get_id() == std::this_thread::get_id()) {
    thread.detach();  // called from a callback: the loop exits when it returns
  } else {
    thread.join();
  }
}

void WatchHub::Publish(Version revision, std::vector<WatchEvent> events) {
  auto list = std::make_shared<const std::vector<WatchEvent>>(std::move(events));
  absl::MutexLock lock(&mu_);
  last_published_ = revision;
  history_.emplace_back(revision, list);
  history_size_ += list->size();
  while (history_size_ > history_limit_ && !history_.empty()) {
    compacted_ = history_.front().first;
    history_size_ -= history_.front().second->size();
    history_.pop_front();
  }
  if (stop_ || watchers_.empty()) return;
  queue_.push_back(Delivery{revision, std::move(list), nullptr});
  work_cv_.Signal();
}

absl::StatusOr<std::unique_ptr<WatchHandle>> WatchHub::Watch(std::string_view prefix,
                                                             Version from_version,
                                                             WatchCallback callback) {
  if (from_version < 0) {
    return absl::InvalidArgumentError(absl::StrCat("negative watch revision ", from_version));
  }
  if (!callback) return absl::InvalidArgumentError("watch without a callback");
  auto watcher = std::make_shared<Watcher>();
  watcher->prefix = std::string(prefix);
  watcher->callback = std::move(callback);

  absl::MutexLock lock(&mu_);
  if (stop_) return absl::UnavailableError("metadata store is shutting down");
  watcher->live_from = last_published_ + 1;
  if (from_version > 0) {
    if (from_version <= compacted_) {
      return absl::OutOfRangeError(absl::StrCat("watch from revision ", from_version,
                                                ": history starts at revision ", compacted_ + 1,
                                                "; list and watch anew"));
    }
    std::vector<WatchEvent> replay;
    for (const auto& [revision, events] : history_) {
      if (revision < from_version) continue;
      std::vector<WatchEvent> matching = Matching(*events, watcher->prefix);
      std::move(matching.begin(), matching.end(), std::back_inserter(replay));
    }
    if (!replay.empty()) {
      queue_.push_back(Delivery{last_published_,
                                std::make_shared<const std::vector<WatchEvent>>(std::move(replay)),
                                watcher});
      work_cv_.Signal();
    }
    watcher->live_from = std::max(watcher->live_from, from_version);
  }
  watchers_.push_back(watcher);
  return std::make_unique<Handle>(shared_from_this(), std::move(watcher));
}

void WatchHub::Cancel(const std::shared_ptr<Watcher>& watcher) {
  absl::MutexLock lock(&mu_);
  watcher->cancelled = true;
  watchers_.erase(std::remove(watchers_.begin(), watchers_.end(), watcher), watchers_.end());
  // On the dispatcher thread we are inside a callback (this watcher's or
  // another's): waiting would deadlock, and the cancelled flag already stops
  // every later delivery.
  if (std::this_thread::get_id() == dispatcher_id_) return;
  while (running_ == watcher.get()) idle_cv_.Wait(&mu_);
}

std::vector<WatchEvent> WatchHub::Matching(const std::vector<WatchEvent>& events,
                                           std::string_view prefix) {
  std::vector<WatchEvent> out;
  for (const WatchEvent& e : events) {
    if (std::string_view(e.key).starts_with(prefix)) out.push_back(e);
  }
  return out;
}

void WatchHub::DispatchLoop() {
  mu_.Lock();
  while (true) {
    while (!stop_ && queue_.empty()) work_cv_.Wait(&mu_);
    if (stop_) break;
    Delivery delivery = std::move(queue_.front());
    queue_.pop_front();
    std::vector<std::shared_ptr<Watcher>> targets;
    if (delivery.only != nullptr) {
      targets.push_back(delivery.only);
    } else {
      targets = watchers_;
    }
    for (const std::shared_ptr<Watcher>& w : targets) {
      if (stop_ || w->cancelled) continue;
      std::vector<WatchEvent> events;
      if (delivery.only != nullptr) {
        events = *delivery.events;  // filtered when the watch was created
      } else {
        if (delivery.revision < w->live_from) continue;
        events = Matching(*delivery.events, w->prefix);
      }
      if (events.empty()) continue;
      running_ = w.get();
      mu_.Unlock();
      w->callback(events);
      mu_.Lock();
      running_ = nullptr;
      idle_cv_.SignalAll();
    }
  }
  mu_.Unlock();
}

}  // namespace ledgerkv::metadata
