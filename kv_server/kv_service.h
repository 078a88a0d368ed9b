// The public KV gRPC service (proto/kv.proto, docs/kv-api.md) over a
// RangeLocator, with the callback API.
//
// Routing: a request goes to the range holding its key; a ranged Delete and
// a Txn must stay inside one range (INVALID_ARGUMENT naming the ranges
// otherwise); Range scans span ranges (table_scan.h). Writes call the
// Range's write methods and finish the reactor in their `done` (after the
// effect is durable and applied); reads are answered inline (local RocksDB
// only). No reaction blocks.
//
// Errors are gRPC statuses with the absl code and message; a status marked
// retry-safe (retry.h) adds trailing metadata `ledgerkv-retry-safe: 1` and
// `ledgerkv-owner` when an owner is known.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "grpcpp/grpcpp.h"
#include "kv_server/range/limits.h"
#include "kv_server/range_host.h"
#include "proto/kv.grpc.pb.h"

namespace ledgerkv::kv {

class ActiveCalls;

// Extra bytes allowed above limits.max_request_bytes by the gRPC receive
// limit, so that a request just over the limit reaches the service and is
// refused with INVALID_ARGUMENT naming max_request_bytes (larger ones are
// refused by gRPC itself with RESOURCE_EXHAUSTED).
inline constexpr int kRequestSlackBytes = 1 << 20;

// Converts `status` to a gRPC status (same code and message) and adds the
// retry-safety trailing metadata to `ctx`.
grpc::Status ToGrpcStatus(const absl::Status& status, grpc::CallbackServerContext* ctx);

// INVALID_ARGUMENT "request of N bytes exceeds max_request_bytes M".
absl::Status CheckRequestSize(const google::protobuf::Message& request, const Limits& limits);

class KvService final : public ledgerkv::v1::KV::CallbackService {
 public:
  // `locator` (and `calls`, if not null) must outlive the service.
  // `calls` counts the calls in progress (for StopServing).
  KvService(RangeLocator* locator, Limits limits, ActiveCalls* calls = nullptr);

  grpc::ServerUnaryReactor* Put(grpc::CallbackServerContext* ctx,
                                const ledgerkv::v1::PutRequest* request,
                                ledgerkv::v1::PutResponse* response) override;
  grpc::ServerUnaryReactor* Get(grpc::CallbackServerContext* ctx,
                                const ledgerkv::v1::GetRequest* request,
                                ledgerkv::v1::GetResponse* response) override;
  grpc::ServerUnaryReactor* Range(grpc::CallbackServerContext* ctx,
                                  const ledgerkv::v1::RangeRequest* request,
                                  ledgerkv::v1::RangeResponse* response) override;
  grpc::ServerUnaryReactor* Delete(grpc::CallbackServerContext* ctx,
                                   const ledgerkv::v1::DeleteRequest* request,
                                   ledgerkv::v1::DeleteResponse* response) override;
  grpc::ServerUnaryReactor* Txn(grpc::CallbackServerContext* ctx,
                                const ledgerkv::v1::TxnRequest* request,
                                ledgerkv::v1::TxnResponse* response) override;
  grpc::ServerUnaryReactor* Increment(grpc::CallbackServerContext* ctx,
                                      const ledgerkv::v1::IncrementRequest* request,
                                      ledgerkv::v1::IncrementResponse* response) override;

 private:
  // INVALID_ARGUMENT for an empty or oversized key (`what` names it).
  absl::Status CheckKey(const std::string& key, const char* what) const;
  // The single range a Txn touches, or INVALID_ARGUMENT naming two.
  absl::StatusOr<std::shared_ptr<kv::Range>> RouteTxn(const ledgerkv::v1::TxnRequest& request);
  // The single range of Delete [key, end).
  absl::StatusOr<std::shared_ptr<kv::Range>> RouteDelete(
      const ledgerkv::v1::DeleteRequest& request);

  RangeLocator* const locator_;
  const Limits limits_;
  ActiveCalls* const calls_;
};

}  // namespace ledgerkv::kv
