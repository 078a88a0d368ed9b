#include "kv_server/kv_service.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "kv_server/listen.h"
#include "kv_server/retry.h"
#include "kv_server/table_scan.h"

namespace ledgerkv::kv {
namespace {

namespace meta = ::ledgerkv::meta::v1;
namespace v1 = ::ledgerkv::v1;

// Responses stay below gRPC's default 4 MiB client receive limit.
constexpr int64_t kMaxScanResponseBytes = (4 << 20) - (64 << 10);

// Ranges of `table` overlapping [start, end) ("" end: the key space's end),
// in key order.
std::vector<const meta::RangeSpec*> Overlapping(const meta::TableMetadata& table,
                                                const std::string& start, const std::string& end) {
  std::vector<const meta::RangeSpec*> out;
  for (const meta::RangeSpec& spec : table.ranges()) {
    const bool after_start = spec.end().empty() || start < spec.end();
    const bool before_end = end.empty() || spec.start() < end;
    if (after_start && before_end) out.push_back(&spec);
  }
  return out;
}

absl::Status Spans(const char* what, const meta::RangeSpec& a, const meta::RangeSpec& b,
                   const std::string& table) {
  return absl::InvalidArgumentError(absl::StrCat(what, " spans ranges ", DescribeRange(a), " and ",
                                                 DescribeRange(b), " of table ", table,
                                                 "; all its keys must be in one range"));
}

// Reads never reach a log: an UNAVAILABLE read can always be retried.
absl::Status ReadError(absl::Status s) {
  if (absl::IsUnavailable(s) && !IsRetrySafe(s)) return RetrySafe(std::move(s));
  return s;
}

// Finishes `reactor` with `result`: on success moves the value into
// `response`.
template <typename T>
void FinishWith(grpc::CallbackServerContext* ctx, grpc::ServerUnaryReactor* reactor, T* response,
                absl::StatusOr<T> result) {
  if (result.ok()) {
    *response = std::move(*result);
    reactor->Finish(grpc::Status::OK);
  } else {
    reactor->Finish(ToGrpcStatus(result.status(), ctx));
  }
}

}  // namespace

grpc::Status ToGrpcStatus(const absl::Status& status, grpc::CallbackServerContext* ctx) {
  if (status.ok()) return grpc::Status::OK;
  if (IsRetrySafe(status)) {
    ctx->AddTrailingMetadata(kRetrySafeMetadata, "1");
    const std::string owner = OwnerOf(status);
    if (!owner.empty()) ctx->AddTrailingMetadata(kOwnerMetadata, owner);
  }
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

absl::Status CheckRequestSize(const google::protobuf::Message& request, const Limits& limits) {
  const size_t size = request.ByteSizeLong();
  if (static_cast<int64_t>(size) > limits.max_request_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "request of ", size, " bytes exceeds max_request_bytes ", limits.max_request_bytes));
  }
  return absl::OkStatus();
}

KvService::KvService(RangeLocator* locator, Limits limits, ActiveCalls* calls)
    : locator_(locator), limits_(limits), calls_(calls) {}

absl::Status KvService::CheckKey(const std::string& key, const char* what) const {
  if (key.empty()) return absl::InvalidArgumentError(absl::StrCat(what, " is empty"));
  if (static_cast<int64_t>(key.size()) > limits_.max_key_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, " of ", key.size(), " bytes exceeds max_key_bytes ", limits_.max_key_bytes));
  }
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* KvService::Put(grpc::CallbackServerContext* ctx,
                                         const v1::PutRequest* request, v1::PutResponse* response) {
  grpc::ServerUnaryReactor* reactor = CountedReactor(ctx, calls_);
  absl::StatusOr<std::shared_ptr<kv::Range>> range =
      [&]() -> absl::StatusOr<std::shared_ptr<kv::Range>> {
    RETURN_IF_ERROR(CheckRequestSize(*request, limits_));
    RETURN_IF_ERROR(CheckKey(request->key(), "key"));
    return locator_->Lookup(request->table(), request->key());
  }();
  if (!range.ok()) {
    reactor->Finish(ToGrpcStatus(range.status(), ctx));
    return reactor;
  }
  (*range)->Put(*request, [ctx, reactor, response](absl::StatusOr<v1::PutResponse> result) {
    FinishWith(ctx, reactor, response, std::move(result));
  });
  return reactor;
}

grpc::ServerUnaryReactor* KvService::Get(grpc::CallbackServerContext* ctx,
                                         const v1::GetRequest* request, v1::GetResponse* response) {
  grpc::ServerUnaryReactor* reactor = CountedReactor(ctx, calls_);
  absl::StatusOr<v1::GetResponse> result = [&]() -> absl::StatusOr<v1::GetResponse> {
    RETURN_IF_ERROR(CheckRequestSize(*request, limits_));
    RETURN_IF_ERROR(CheckKey(request->key(), "key"));
    ASSIGN_OR_RETURN(std::shared_ptr<kv::Range> range,
                     locator_->Lookup(request->table(), request->key()));
    absl::StatusOr<v1::GetResponse> got = range->Get(*request);
    if (!got.ok()) return ReadError(got.status());
    return got;
  }();
  FinishWith(ctx, reactor, response, std::move(result));
  return reactor;
}

grpc::ServerUnaryReactor* KvService::Range(grpc::CallbackServerContext* ctx,
                                           const v1::RangeRequest* request,
                                           v1::RangeResponse* response) {
  grpc::ServerUnaryReactor* reactor = CountedReactor(ctx, calls_);
  absl::StatusOr<v1::RangeResponse> result = [&]() -> absl::StatusOr<v1::RangeResponse> {
    RETURN_IF_ERROR(CheckRequestSize(*request, limits_));
    return ScanTable(*locator_, *request, limits_, kMaxScanResponseBytes);
  }();
  FinishWith(ctx, reactor, response, std::move(result));
  return reactor;
}

absl::StatusOr<std::shared_ptr<kv::Range>> KvService::RouteDelete(
    const v1::DeleteRequest& request) {
  RETURN_IF_ERROR(CheckKey(request.key(), "key"));
  if (request.end().empty()) return locator_->Lookup(request.table(), request.key());
  if (request.end() <= request.key()) {
    return absl::InvalidArgumentError("delete range end must be after its key");
  }
  ASSIGN_OR_RETURN(std::shared_ptr<const meta::TableMetadata> table,
                   locator_->Table(request.table()));
  std::vector<const meta::RangeSpec*> ranges = Overlapping(*table, request.key(), request.end());
  if (ranges.size() > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("delete range spans ", ranges.size(), " ranges of table ", table->name(),
                     ", from ", DescribeRange(*ranges.front()), " to ",
                     DescribeRange(*ranges.back()), "; a range delete must stay inside one range"));
  }
  return locator_->Serving(*table, *ranges.front());
}

grpc::ServerUnaryReactor* KvService::Delete(grpc::CallbackServerContext* ctx,
                                            const v1::DeleteRequest* request,
                                            v1::DeleteResponse* response) {
  grpc::ServerUnaryReactor* reactor = CountedReactor(ctx, calls_);
  absl::StatusOr<std::shared_ptr<kv::Range>> range =
      [&]() -> absl::StatusOr<std::shared_ptr<kv::Range>> {
    RETURN_IF_ERROR(CheckRequestSize(*request, limits_));
    return RouteDelete(*request);
  }();
  if (!range.ok()) {
    reactor->Finish(ToGrpcStatus(range.status(), ctx));
    return reactor;
  }
  (*range)->Delete(*request, [ctx, reactor, response](absl::StatusOr<v1::DeleteResponse> result) {
    FinishWith(ctx, reactor, response, std::move(result));
  });
  return reactor;
}

absl::StatusOr<std::shared_ptr<kv::Range>> KvService::RouteTxn(const v1::TxnRequest& request) {
  ASSIGN_OR_RETURN(std::shared_ptr<const meta::TableMetadata> table,
                   locator_->Table(request.table()));
  const meta::RangeSpec* chosen = nullptr;
  auto visit = [&](const meta::RangeSpec& spec) -> absl::Status {
    if (chosen == nullptr) {
      chosen = &spec;
    } else if (chosen->range_id() != spec.range_id()) {
      return Spans("txn", *chosen, spec, table->name());
    }
    return absl::OkStatus();
  };
  auto visit_key = [&](const std::string& key, const char* what) -> absl::Status {
    RETURN_IF_ERROR(CheckKey(key, what));
    return visit(RangeForKey(*table, key));
  };
  for (const v1::Compare& c : request.compares())
    RETURN_IF_ERROR(visit_key(c.key(), "compare key"));
  for (const auto* ops : {&request.success(), &request.failure()}) {
    for (const v1::TxnOp& op : *ops) {
      switch (op.op_case()) {
        case v1::TxnOp::kPut:
          RETURN_IF_ERROR(visit_key(op.put().key(), "put key"));
          break;
        case v1::TxnOp::kGet:
          RETURN_IF_ERROR(visit_key(op.get().key(), "get key"));
          break;
        case v1::TxnOp::kIncrement:
          RETURN_IF_ERROR(visit_key(op.increment().key(), "increment key"));
          break;
        case v1::TxnOp::kDelete: {
          const v1::DeleteRequest& d = op.delete_();
          RETURN_IF_ERROR(visit_key(d.key(), "delete key"));
          if (!d.end().empty()) {
            if (d.end() <= d.key()) {
              return absl::InvalidArgumentError("txn delete range end must be after its key");
            }
            for (const meta::RangeSpec* spec : Overlapping(*table, d.key(), d.end())) {
              RETURN_IF_ERROR(visit(*spec));
            }
          }
          break;
        }
        case v1::TxnOp::OP_NOT_SET:
          return absl::InvalidArgumentError("txn op without an operation");
      }
    }
  }
  // A txn without keys still gets a revision header: the first range.
  if (chosen == nullptr) chosen = &table->ranges(0);
  return locator_->Serving(*table, *chosen);
}

grpc::ServerUnaryReactor* KvService::Txn(grpc::CallbackServerContext* ctx,
                                         const v1::TxnRequest* request, v1::TxnResponse* response) {
  grpc::ServerUnaryReactor* reactor = CountedReactor(ctx, calls_);
  absl::StatusOr<std::shared_ptr<kv::Range>> range =
      [&]() -> absl::StatusOr<std::shared_ptr<kv::Range>> {
    RETURN_IF_ERROR(CheckRequestSize(*request, limits_));
    return RouteTxn(*request);
  }();
  if (!range.ok()) {
    reactor->Finish(ToGrpcStatus(range.status(), ctx));
    return reactor;
  }
  (*range)->Txn(*request, [ctx, reactor, response](absl::StatusOr<v1::TxnResponse> result) {
    FinishWith(ctx, reactor, response, std::move(result));
  });
  return reactor;
}

grpc::ServerUnaryReactor* KvService::Increment(grpc::CallbackServerContext* ctx,
                                               const v1::IncrementRequest* request,
                                               v1::IncrementResponse* response) {
  grpc::ServerUnaryReactor* reactor = CountedReactor(ctx, calls_);
  absl::StatusOr<std::shared_ptr<kv::Range>> range =
      [&]() -> absl::StatusOr<std::shared_ptr<kv::Range>> {
    RETURN_IF_ERROR(CheckRequestSize(*request, limits_));
    RETURN_IF_ERROR(CheckKey(request->key(), "key"));
    return locator_->Lookup(request->table(), request->key());
  }();
  if (!range.ok()) {
    reactor->Finish(ToGrpcStatus(range.status(), ctx));
    return reactor;
  }
  (*range)->Increment(*request,
                      [ctx, reactor, response](absl::StatusOr<v1::IncrementResponse> result) {
                        FinishWith(ctx, reactor, response, std::move(result));
                      });
  return reactor;
}

}  // namespace ledgerkv::kv
