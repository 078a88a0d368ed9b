#include "kv_server/admin_service.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "kv_server/kv_service.h"
#include "kv_server/listen.h"

namespace ledgerkv::kv {
namespace {

namespace meta = ::ledgerkv::meta::v1;
namespace v1 = ::ledgerkv::v1;

}  // namespace

AdminService::AdminService(TableCatalog* catalog, RangeHost* host, ActiveCalls* calls)
    : catalog_(catalog), host_(host), calls_(calls) {}

AdminService::~AdminService() = default;

void AdminService::FillRanges(const meta::TableMetadata& table,
                              google::protobuf::RepeatedPtrField<v1::RangeInfo>* out) {
  const std::string owner = host_->owner();
  for (const meta::RangeSpec& spec : table.ranges()) {
    v1::RangeInfo* info = out->Add();
    info->set_range_id(spec.range_id());
    info->set_start(spec.start());
    info->set_end(spec.end());
    absl::StatusOr<RangeStats> stats = host_->Stats(spec.range_id());
    if (!stats.ok()) {
      // Not serving here: the owner elsewhere (cluster mode), no counters.
      info->set_owner(host_->OwnerOf(spec.range_id()));
      continue;
    }
    info->set_owner(owner);
    info->set_revision(stats->revision);
    info->set_key_count(stats->key_count);
    info->set_bytes(stats->bytes);
    info->set_log_first_seqno(stats->log_first_seqno);
    info->set_log_last_seqno(stats->applied_seqno);
    info->set_snapshot_seqno(stats->snapshot_seqno);
    info->set_epoch(stats->epoch);
    info->set_writes_refused(stats->writes_refused);
  }
}

grpc::ServerUnaryReactor* AdminService::CreateTable(grpc::CallbackServerContext* ctx,
                                                    const v1::CreateTableRequest* request,
                                                    v1::CreateTableResponse* response) {
  grpc::ServerUnaryReactor* reactor = CountedReactor(ctx, calls_);
  worker_.Schedule([this, ctx, request, response, reactor] {
    std::vector<std::string> splits(request->split_keys().begin(), request->split_keys().end());
    absl::StatusOr<meta::TableMetadata> table = catalog_->CreateTable(request->name(), splits);
    if (!table.ok()) {
      reactor->Finish(ToGrpcStatus(table.status(), ctx));
      return;
    }
    // A range that fails to open is retried in the background; the table
    // exists either way, so this still succeeds (DescribeTable shows it).
    IgnoreError(host_->OpenTable(*table));
    FillRanges(*table, response->mutable_ranges());
    reactor->Finish(grpc::Status::OK);
  });
  return reactor;
}

grpc::ServerUnaryReactor* AdminService::DropTable(grpc::CallbackServerContext* ctx,
                                                  const v1::DropTableRequest* request,
                                                  v1::DropTableResponse* response) {
  grpc::ServerUnaryReactor* reactor = CountedReactor(ctx, calls_);
  absl::Status refused = CheckTableName(request->name());
  if (refused.ok() && request->name() == kDefaultTable) {
    refused = absl::FailedPreconditionError(
        "table default cannot be dropped (it is the built-in table of every server)");
  }
  if (!refused.ok()) {
    reactor->Finish(ToGrpcStatus(refused, ctx));
    return reactor;
  }
  worker_.Schedule([this, ctx, request, reactor] {
    absl::StatusOr<meta::TableMetadata> dropped = catalog_->DropTable(
        request->name(),
        [this](const meta::RangeMetadata& range) { return host_->DestroyRange(range); });
    reactor->Finish(ToGrpcStatus(dropped.status(), ctx));
  });
  return reactor;
}

grpc::ServerUnaryReactor* AdminService::ListTables(grpc::CallbackServerContext* ctx,
                                                   const v1::ListTablesRequest* request,
                                                   v1::ListTablesResponse* response) {
  grpc::ServerUnaryReactor* reactor = CountedReactor(ctx, calls_);
  for (const auto& table : catalog_->List()) response->add_names(table->name());
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* AdminService::DescribeTable(grpc::CallbackServerContext* ctx,
                                                      const v1::DescribeTableRequest* request,
                                                      v1::DescribeTableResponse* response) {
  grpc::ServerUnaryReactor* reactor = CountedReactor(ctx, calls_);
  // Through the host, as KV calls are: in cluster mode a table created
  // through another server moments ago is "retry" (the catalog reloads),
  // not NOT_FOUND, which a client takes as "no such table".
  absl::Status bad = CheckTableName(request->name());
  absl::StatusOr<std::shared_ptr<const meta::TableMetadata>> table =
      bad.ok() ? host_->Table(request->name()) : bad;
  if (!table.ok()) {
    reactor->Finish(ToGrpcStatus(table.status(), ctx));
    return reactor;
  }
  response->set_name((*table)->name());
  FillRanges(**table, response->mutable_ranges());
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

}  // namespace ledgerkv::kv
