// The Admin gRPC service (proto/kv.proto): CreateTable, DropTable,
// ListTables, DescribeTable over a TableCatalog and a RangeHost.
//
// CreateTable and DropTable do metadata and ledger I/O and open or close
// ranges: they run on the service's own worker thread (one at a time), never
// in a reaction. ListTables and DescribeTable read caches and answer inline.
//
// DropTable refuses the built-in table `default` (FAILED_PRECONDITION): it is
// created at the first start and clients may rely on it existing.
#pragma once

#include <string>

#include "grpcpp/grpcpp.h"
#include "kv_server/catalog.h"
#include "kv_server/range_host.h"
#include "ledger/bookie/thread_pool.h"
#include "proto/kv.grpc.pb.h"

namespace ledgerkv::kv {

class ActiveCalls;

// The table every standalone server has.
inline constexpr char kDefaultTable[] = "default";

class AdminService final : public ledgerkv::v1::Admin::CallbackService {
 public:
  // `catalog` and `host` (and `calls`, if not null) must outlive the
  // service. `calls` counts the calls in progress (for StopServing).
  AdminService(TableCatalog* catalog, RangeHost* host, ActiveCalls* calls = nullptr);
  // Runs the queued operations, then joins the worker.
  ~AdminService() override;

  grpc::ServerUnaryReactor* CreateTable(grpc::CallbackServerContext* ctx,
                                        const ledgerkv::v1::CreateTableRequest* request,
                                        ledgerkv::v1::CreateTableResponse* response) override;
  grpc::ServerUnaryReactor* DropTable(grpc::CallbackServerContext* ctx,
                                      const ledgerkv::v1::DropTableRequest* request,
                                      ledgerkv::v1::DropTableResponse* response) override;
  grpc::ServerUnaryReactor* ListTables(grpc::CallbackServerContext* ctx,
                                       const ledgerkv::v1::ListTablesRequest* request,
                                       ledgerkv::v1::ListTablesResponse* response) override;
  grpc::ServerUnaryReactor* DescribeTable(grpc::CallbackServerContext* ctx,
                                          const ledgerkv::v1::DescribeTableRequest* request,
                                          ledgerkv::v1::DescribeTableResponse* response) override;

 private:
  // RangeInfo of every range of `table` (stats where the range is served).
  void FillRanges(const meta::v1::TableMetadata& table,
                  google::protobuf::RepeatedPtrField<ledgerkv::v1::RangeInfo>* out);

  TableCatalog* const catalog_;
  RangeHost* const host_;
  ActiveCalls* const calls_;
  bookie::ThreadPool worker_{1};
};

}  // namespace ledgerkv::kv
