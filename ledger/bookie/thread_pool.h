// A fixed pool of threads running queued closures in FIFO order. The bookie
// service uses it for disk reads so that no gRPC callback thread blocks on
// I/O.
#pragma once

#include <deque>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/synchronization/mutex.h"

namespace ledgerkv::bookie {

class ThreadPool {
 public:
  using Task = absl::AnyInvocable<void() &&>;

  // Starts `threads` (>= 1) threads.
  explicit ThreadPool(int threads);
  // Runs every task already queued, then joins the threads.
  ~ThreadPool();

  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // Queues `task`. REQUIRES: the destructor has not started.
  void Schedule(Task task);

 private:
  void Loop();

  absl::Mutex mu_;
  std::deque<Task> tasks_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace ledgerkv::bookie
