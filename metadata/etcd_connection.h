// EtcdConnection: the etcd store's gRPC channels (one per endpoint) and the
// one place where an RPC is sent, given a deadline, failed over to another
// endpoint and its gRPC status mapped to an absl::Status. Internal to
// metadata/ (EtcdStore and its watches share one connection).
#pragma once

#include <atomic>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "grpcpp/channel.h"
#include "grpcpp/client_context.h"
#include "grpcpp/support/status.h"
#include "proto/etcd/rpc.grpc.pb.h"

namespace ledgerkv::metadata::internal {

// The exclusive end of the etcd key range holding every key that starts
// with `prefix` (etcd's "prefix + 1" convention). "\0" (every key) when no
// such end exists (empty prefix, or only 0xff bytes).
std::string PrefixEnd(std::string_view prefix);

class EtcdConnection {
 public:
  struct Endpoint {
    std::string address;  // host:port
    std::shared_ptr<grpc::Channel> channel;
    std::unique_ptr<etcdserverpb::KV::Stub> kv;
    std::unique_ptr<etcdserverpb::Watch::Stub> watch;
    std::unique_ptr<etcdserverpb::Lease::Stub> lease;
  };
  // Whether an RPC may be sent again (to another endpoint) after it failed
  // in a way that leaves its outcome unknown.
  enum class Retry { kIdempotent, kOnlyIfNotSent };
  using RpcFn = std::function<grpc::Status(Endpoint& endpoint, grpc::ClientContext* context)>;

  // Creates lazily-connecting channels; never fails. REQUIRES: addresses
  // is not empty.
  EtcdConnection(std::vector<std::string> addresses, absl::Duration op_timeout);

  EtcdConnection(const EtcdConnection&) = delete;
  EtcdConnection& operator=(const EtcdConnection&) = delete;

  // Runs `rpc` within op_timeout, starting at the endpoint that answered
  // last; the call waits for a connection (wait_for_ready) until its
  // deadline. On UNAVAILABLE / DEADLINE_EXCEEDED a kIdempotent RPC moves on
  // to the next endpoint (each endpoint gets a share of the time); a
  // kOnlyIfNotSent RPC (a mutation) moves on only past endpoints that did
  // not connect within their share, where the request cannot have been
  // sent, so a mutation is never applied twice. Errors (see ToStatus) name
  // `what`.
  // `timeout` (if > 0) replaces op_timeout for this call.
  absl::Status Call(std::string_view what, Retry retry, const RpcFn& rpc,
                    absl::Duration timeout = absl::ZeroDuration());

  // Maps a gRPC status from `address` to an absl::Status whose message
  // names etcd, the endpoint and `what`. UNAVAILABLE and DEADLINE_EXCEEDED
  // both become UNAVAILABLE (etcd unreachable or too slow: the caller cannot
  // tell, and retries either way). So do CANCELLED, UNKNOWN and INTERNAL:
  // gRPC gives them for a stream reset or torn down on the way, after the
  // request may have reached etcd, and callers read UNAVAILABLE as "a
  // mutation's outcome is unknown" (the WAL then keeps a ledger its log may
  // name). Every other code is etcd's answer and is kept.
  static absl::Status ToStatus(const grpc::Status& status, std::string_view address,
                               std::string_view what);

  size_t size() const { return endpoints_.size(); }
  Endpoint& endpoint(size_t i) { return *endpoints_[i]; }
  // The endpoint to try first (the last one that answered).
  size_t preferred() const { return preferred_.load(std::memory_order_relaxed); }
  void set_preferred(size_t i) { preferred_.store(i % endpoints_.size()); }
  absl::Duration op_timeout() const { return op_timeout_; }
  // "etcd at a:1,b:2", for messages.
  const std::string& description() const { return description_; }

  // True once the endpoint's channel is connected (asking it to connect and
  // waiting until `deadline`); false if it did not connect in time (then a
  // request sent there would not have reached etcd).
  static bool WaitConnected(Endpoint& endpoint, absl::Time deadline);

 private:

  const absl::Duration op_timeout_;
  std::vector<std::unique_ptr<Endpoint>> endpoints_;
  std::string description_;
  std::atomic<size_t> preferred_{0};
};

}  // namespace ledgerkv::metadata::internal
