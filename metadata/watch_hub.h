// WatchHub: the embedded store's watch machinery. Keeps a bounded history of
// recent events (for Watch from an older revision) and delivers events to
// watchers on one dispatcher thread, in revision order, without holding any
// store lock while a callback runs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "metadata/metadata_store.h"

namespace ledgerkv::metadata {

class WatchHub : public std::enable_shared_from_this<WatchHub> {
 public:
  // Starts the dispatcher thread. Revisions <= `start_revision` are not in
  // the history (watching from them is OUT_OF_RANGE). At most
  // `history_events` events are kept for replay (whole revisions are
  // dropped, oldest first).
  static std::shared_ptr<WatchHub> Start(Version start_revision, size_t history_events);

  WatchHub(const WatchHub&) = delete;
  WatchHub& operator=(const WatchHub&) = delete;
  ~WatchHub();

  // Records the events of one committed revision and queues them for
  // delivery. REQUIRES: revisions are published in increasing order (the
  // store calls this under its write lock) and `events` is not empty.
  void Publish(Version revision, std::vector<WatchEvent> events);

  // MetadataStore::Watch. OUT_OF_RANGE if `from_version` is no longer in the
  // history; INVALID_ARGUMENT if it is negative; UNAVAILABLE after Shutdown.
  absl::StatusOr<std::unique_ptr<WatchHandle>> Watch(std::string_view prefix, Version from_version,
                                                     WatchCallback callback);

  // Stops the dispatcher (waits for a running callback unless called from
  // one); undelivered events are dropped. Idempotent.
  void Shutdown();

 private:
  struct Watcher {
    std::string prefix;
    WatchCallback callback;
    // Live events of revisions below this were either replayed or happened
    // before the Watch call.
    Version live_from = 0;
    bool cancelled = false;  // Guarded by WatchHub::mu_
  };
  using EventList = std::shared_ptr<const std::vector<WatchEvent>>;
  struct Delivery {
    Version revision = 0;
    EventList events;
    // Set for a replay: delivered to this watcher only, regardless of
    // live_from.
    std::shared_ptr<Watcher> only;
  };
  class Handle;

  WatchHub(Version start_revision, size_t history_events);
  void Cancel(const std::shared_ptr<Watcher>& watcher);
  void DispatchLoop();
  static std::vector<WatchEvent> Matching(const std::vector<WatchEvent>& events,
                                          std::string_view prefix);

  // Constant after construction.
  const size_t history_limit_;

  // Lock order: the store's locks before mu_. Never held while a callback runs.
  absl::Mutex mu_;
  absl::CondVar work_cv_;  // queue_ non-empty or stop_
  absl::CondVar idle_cv_;  // running_ changed
  // Recent revisions, oldest first; the total event count is history_size_.
  std::deque<std::pair<Version, EventList>> history_ ABSL_GUARDED_BY(mu_);
  size_t history_size_ ABSL_GUARDED_BY(mu_) = 0;
  // Every revision <= compacted_ is gone from history_.
  Version compacted_ ABSL_GUARDED_BY(mu_);
  Version last_published_ ABSL_GUARDED_BY(mu_);
  std::vector<std::shared_ptr<Watcher>> watchers_ ABSL_GUARDED_BY(mu_);
  std::deque<Delivery> queue_ ABSL_GUARDED_BY(mu_);
  const Watcher* running_ ABSL_GUARDED_BY(mu_) = nullptr;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread::id dispatcher_id_ ABSL_GUARDED_BY(mu_);
  std::thread dispatcher_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ledgerkv::metadata
