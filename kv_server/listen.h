// Starting and stopping the KV and Admin gRPC server of a process
// (standalone and cluster mode share it).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace grpc {
class CallbackServerContext;
class Server;
class ServerUnaryReactor;
class Service;
}  // namespace grpc

namespace ledgerkv::kv {

// The calls a server is handling: every KV and Admin call counts from its
// handler's start until gRPC is done with it (CountedReactor's OnDone, after
// the response went out). An atomic, not a mutex: every call touches it
// twice. (A gRPC server interceptor would count without the services'
// help, but it cost ~2% of the server's CPU per put in an A/B run.)
class ActiveCalls {
 public:
  void Started() { count_.fetch_add(1, std::memory_order_relaxed); }
  void Ended() { count_.fetch_sub(1, std::memory_order_acq_rel); }
  int64_t count() const { return count_.load(std::memory_order_acquire); }
  // Waits (polling every 5 ms) until no call is active or `deadline`;
  // true if none is.
  bool WaitForNone(absl::Time deadline) const;

 private:
  std::atomic<int64_t> count_{0};
};

// A unary reactor for a handler of `ctx` that counts the call in `calls`
// until gRPC is done with it; the context's default reactor if `calls` is
// null. REQUIRES: `calls` outlives the server.
grpc::ServerUnaryReactor* CountedReactor(grpc::CallbackServerContext* ctx, ActiveCalls* calls);

struct Listening {
  std::unique_ptr<grpc::Server> server;
  // host:port with the bound port (when `listen` asked for port 0).
  std::string address;
  int port = 0;  // the bound port
};

// Builds and starts a gRPC server on `listen` (host:port; port 0 picks a
// free one) with `services` (not owned; they must outlive the server) and
// the receive limit `max_receive_bytes`. UNAVAILABLE "cannot listen on X".
absl::StatusOr<Listening> ListenAndServe(const std::string& listen,
                                         const std::vector<grpc::Service*>& services,
                                         int max_receive_bytes);

// Stops a server started by ListenAndServe whose services count their calls
// in `calls` (CountedReactor): no new call is accepted, the calls in
// progress get up to `grace` to finish (what is left then is
// cancelled), and as soon as none is left every connection is closed, idle
// ones included. grpc::Server::Shutdown alone also waits for each connected
// client to close its connection after the server's GOAWAY, which a client
// that is not polling its channel notices only at gRPC's next backup poll
// (every 5 s): a server with idle clients took ~4.5 s to stop.
void StopServing(grpc::Server* server, const ActiveCalls* calls, absl::Duration grace);

}  // namespace ledgerkv::kv
