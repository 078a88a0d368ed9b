// Starting and stopping the KV and Admin gRPC server of a process
// (standalone and cluster mode share it).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace grpc {
class Server;
class Service;
}  // namespace grpc

namespace ledgerkv::kv {

// The calls a server started by ListenAndServe is handling (a server
// interceptor counts them from arrival until the call is destroyed).
class ActiveCalls {
 public:
  void Started() ABSL_LOCKS_EXCLUDED(mu_);
  void Ended() ABSL_LOCKS_EXCLUDED(mu_);
  int64_t count() const ABSL_LOCKS_EXCLUDED(mu_);
  // Waits until no call is active or `deadline`; true if none is.
  bool WaitForNone(absl::Time deadline) const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  mutable absl::Mutex mu_;
  int64_t count_ ABSL_GUARDED_BY(mu_) = 0;
};

struct Listening {
  std::unique_ptr<grpc::Server> server;
  // host:port with the bound port (when `listen` asked for port 0).
  std::string address;
  std::shared_ptr<ActiveCalls> calls;
};

// Builds and starts a gRPC server on `listen` (host:port; port 0 picks a
// free one) with `services` (not owned; they must outlive the server) and
// the receive limit `max_receive_bytes`. UNAVAILABLE "cannot listen on X".
absl::StatusOr<Listening> ListenAndServe(const std::string& listen,
                                         const std::vector<grpc::Service*>& services,
                                         int max_receive_bytes);

// Stops a server started by ListenAndServe: no new call is accepted, the
// calls in progress get up to `grace` to finish (what is left then is
// cancelled), and as soon as none is left every connection is closed, idle
// ones included. grpc::Server::Shutdown alone also waits for each connected
// client to close its connection after the server's GOAWAY, which a client
// that is not polling its channel notices only at gRPC's next backup poll
// (every 5 s): a server with idle clients took ~4.5 s to stop.
void StopServing(grpc::Server* server, const ActiveCalls* calls, absl::Duration grace);

}  // namespace ledgerkv::kv
