// Starting the KV and Admin gRPC server of a process (standalone and
// cluster mode share it).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace grpc {
class Server;
class Service;
}  // namespace grpc

namespace ledgerkv::kv {

struct Listening {
  std::unique_ptr<grpc::Server> server;
  // host:port with the bound port (when `listen` asked for port 0).
  std::string address;
};

// Builds and starts a gRPC server on `listen` (host:port; port 0 picks a
// free one) with `services` (not owned; they must outlive the server) and
// the receive limit `max_receive_bytes`. UNAVAILABLE "cannot listen on X".
absl::StatusOr<Listening> ListenAndServe(const std::string& listen,
                                         const std::vector<grpc::Service*>& services,
                                         int max_receive_bytes);

}  // namespace ledgerkv::kv
