#include "metadata/etcd_connection.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"
#include "metadata/absl_compat.h"

namespace ledgerkv::metadata::internal {

std::string PrefixEnd(std::string_view prefix) {
  std::string end(prefix);
  while (!end.empty()) {
    unsigned char last = static_cast<unsigned char>(end.back());
    if (last < 0xff) {
      end.back() = static_cast<char>(last + 1);
      return end;
    }
    end.pop_back();  // "a\xff" + 1 == "b"
  }
  return std::string(1, '\0');
}

EtcdConnection::EtcdConnection(std::vector<std::string> addresses, absl::Duration op_timeout)
    : op_timeout_(op_timeout) {
  description_ = absl::StrCat("etcd at ", absl::StrJoin(addresses, ","));
  for (std::string& address : addresses) {
    grpc::ChannelArguments args;
    // Come back within a second of etcd's return instead of gRPC's default
    // backoff that grows to two minutes: sessions and watches resume then.
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
    // gRPC uses this as the connect timeout: long enough for a handshake
    // with an etcd that is busy starting up.
    args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 5000);
    // Notice a dead etcd host under an idle watch stream. etcd refuses pings
    // more often than every 5 s (--grpc-keepalive-min-time) and pings
    // without an open stream.
    args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 10000);
    args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 5000);
    args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 0);
    // Large listings come in pages, but a page of big values may pass 4 MiB.
    args.SetMaxReceiveMessageSize(256 << 20);
    // A channel of its own: a stopped etcd in one test must not leave a
    // shared, backed-off subchannel behind for the next store.
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    auto endpoint = std::make_unique<Endpoint>();
    endpoint->channel =
        grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
    endpoint->kv = etcdserverpb::KV::NewStub(endpoint->channel);
    endpoint->watch = etcdserverpb::Watch::NewStub(endpoint->channel);
    endpoint->lease = etcdserverpb::Lease::NewStub(endpoint->channel);
    endpoint->address = std::move(address);
    endpoints_.push_back(std::move(endpoint));
  }
}

absl::Status EtcdConnection::ToStatus(const grpc::Status& status, std::string_view address,
                                      std::string_view what) {
  if (status.ok()) return absl::OkStatus();
  const std::string detail = absl::StrCat(ToAbsl(what), ": ", status.error_message());
  switch (status.error_code()) {
    case grpc::StatusCode::UNAVAILABLE:
      return absl::UnavailableError(
          absl::StrCat("etcd at ", ToAbsl(address), " unavailable: ", detail));
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return absl::UnavailableError(
          absl::StrCat("etcd at ", ToAbsl(address), " did not answer in time: ", detail));
    case grpc::StatusCode::CANCELLED:
    case grpc::StatusCode::UNKNOWN:
    case grpc::StatusCode::INTERNAL: {
      const char* code = status.error_code() == grpc::StatusCode::CANCELLED ? "CANCELLED"
                         : status.error_code() == grpc::StatusCode::UNKNOWN ? "UNKNOWN"
                                                                            : "INTERNAL";
      return absl::UnavailableError(absl::StrCat("etcd at ", ToAbsl(address),
                                                 ": the call broke off (", code,
                                                 "; its outcome is unknown): ", detail));
    }
    default:
      return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                          absl::StrCat("etcd at ", ToAbsl(address), ": ", detail));
  }
}

bool EtcdConnection::WaitConnected(Endpoint& endpoint, absl::Time deadline) {
  grpc_connectivity_state state = endpoint.channel->GetState(/*try_to_connect=*/true);
  while (state != GRPC_CHANNEL_READY) {
    if (state == GRPC_CHANNEL_SHUTDOWN) return false;
    if (!endpoint.channel->WaitForStateChange(state, absl::ToChronoTime(deadline))) return false;
    state = endpoint.channel->GetState(/*try_to_connect=*/true);
  }
  return true;
}

absl::Status EtcdConnection::Call(std::string_view what, Retry retry, const RpcFn& rpc,
                                  absl::Duration timeout) {
  const absl::Time deadline =
      absl::Now() + (timeout > absl::ZeroDuration() ? timeout : op_timeout_);
  const size_t n = endpoints_.size();
  const size_t start = preferred();
  absl::Status last = absl::UnavailableError(absl::StrCat(description_, ": no endpoint"));
  for (size_t k = 0; k < n; ++k) {
    const size_t i = (start + k) % n;
    Endpoint& endpoint = *endpoints_[i];
    if (n > 1 && retry == Retry::kOnlyIfNotSent) {
      // Leave time for the endpoints after this one.
      const absl::Time connect_by = absl::Now() + (deadline - absl::Now()) / (n - k);
      if (!WaitConnected(endpoint, connect_by)) {
        last = absl::UnavailableError(absl::StrCat("etcd at ", endpoint.address,
                                                   " unavailable: ", ToAbsl(what),
                                                   ": not connected"));
        continue;
      }
    }
    grpc::ClientContext context;
    // With several endpoints each gets a share of the time, so a dead one
    // cannot use it all.
    const absl::Time attempt_deadline =
        retry == Retry::kIdempotent ? absl::Now() + (deadline - absl::Now()) / (n - k) : deadline;
    context.set_deadline(absl::ToChronoTime(attempt_deadline));
    // Wait for a connection rather than failing at once while the channel
    // is in TRANSIENT_FAILURE: gRPC 1.51 fail-fast calls do not get a
    // reconnection going, and a restarted etcd then stayed unreachable for
    // 10 s and more. The deadline still bounds the wait.
    context.set_wait_for_ready(true);
    const grpc::Status status = rpc(endpoint, &context);
    if (status.ok()) {
      set_preferred(i);
      return absl::OkStatus();
    }
    last = ToStatus(status, endpoint.address, what);
    if (!absl::IsUnavailable(last)) return last;  // etcd answered: an answer is an answer
    set_preferred(i + 1);
    // The request may have been applied: the caller must find out.
    if (retry == Retry::kOnlyIfNotSent) return last;
    if (absl::Now() >= deadline) return last;
  }
  return last;
}

}  // namespace ledgerkv::metadata::internal
