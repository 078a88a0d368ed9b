// EtcdWatch: one MetadataStore watch over an etcd Watch stream, with a
// thread of its own that reads the stream and runs the callback. Internal to
// metadata/ (EtcdStore::Watch).
//
// Resumption: when the stream breaks (etcd restarts, the connection drops)
// the thread reopens it, on the next endpoint, from the revision after the
// last one it delivered, so no change is lost or delivered twice. It retries
// until cancelled, giving each endpoint a share of the op timeout to
// connect, so a dead endpoint never holds the watch while another serves.
// The stream requires a leader (etcd's "hasleader"): a member cut off from
// its cluster ends it and the watch moves on, rather than staying silent
// while the majority commits. If etcd has compacted that revision meanwhile (or
// compacts history faster than the watch reads), the changes in between are
// gone: the watch ends and says so on stderr; a caller that must not miss
// changes re-lists and watches anew (the interface has no error callback).
#pragma once

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/client_context.h"
#include "metadata/etcd_connection.h"
#include "metadata/metadata_store.h"

namespace ledgerkv::metadata::internal {

class EtcdWatch : public std::enable_shared_from_this<EtcdWatch> {
 public:
  // Opens the stream and waits (up to the connection's op timeout) until
  // etcd confirms the watch: changes committed after Start returns are
  // delivered. `key_prefix` is the store's namespace, stripped from event
  // keys; `prefix` is the caller's. from_version 0: changes after the call.
  // UNAVAILABLE if no endpoint confirms the watch in time; OUT_OF_RANGE if
  // etcd reports from_version compacted.
  static absl::StatusOr<std::shared_ptr<EtcdWatch>> Start(std::shared_ptr<EtcdConnection> conn,
                                                          std::string key_prefix,
                                                          std::string prefix, Version from_version,
                                                          WatchCallback callback);

  ~EtcdWatch();

  // Stops callbacks; waits for a running callback unless called from it
  // (from the watch thread). Idempotent.
  void Cancel();

 private:
  EtcdWatch(std::shared_ptr<EtcdConnection> conn, std::string key_prefix, std::string prefix,
            Version from_version, WatchCallback callback);
  void Run();
  // One stream on endpoint `index`; returns when it breaks or the watch is
  // cancelled. Sets *fatal when the watch cannot continue (compaction) and
  // *confirmed once etcd created the watch.
  absl::Status RunStream(size_t index, bool* fatal, bool* confirmed);
  // Reports the outcome of creation to Start (once).
  void SetCreated(absl::Status status);
  bool cancelled();

  const std::shared_ptr<EtcdConnection> conn_;
  const std::string key_prefix_;
  const std::string prefix_;
  const WatchCallback callback_;
  // The next revision to deliver; 0 until etcd confirmed a watch "from now".
  // Only the watch thread touches it.
  Version next_revision_;

  absl::Mutex mu_;
  absl::CondVar cv_;  // created_, cancelled_
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  bool created_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status create_status_ ABSL_GUARDED_BY(mu_);
  absl::Status last_error_ ABSL_GUARDED_BY(mu_);  // of a try to create it
  grpc::ClientContext* context_ ABSL_GUARDED_BY(mu_) = nullptr;  // the open stream's
  std::thread thread_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ledgerkv::metadata::internal
