#include "bench/kv_backend.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "bench/async_call.h"
#include "proto/etcd/rpc.grpc.pb.h"
#include "proto/kv.grpc.pb.h"

namespace ledgerkv::bench {
namespace {

// ---- ledgerkv.v1 ----

class LedgerkvBackend final : public KvBackend {
 public:
  LedgerkvBackend(std::vector<std::shared_ptr<grpc::Channel>> channels, std::string table,
                  absl::Duration timeout)
      : table_(std::move(table)), timeout_(timeout) {
    for (auto& channel : channels) {
      kv_.push_back(ledgerkv::v1::KV::NewStub(channel));
      admin_.push_back(ledgerkv::v1::Admin::NewStub(channel));
    }
  }

  absl::Status Prepare() override {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + timeout_));
    ledgerkv::v1::CreateTableRequest request;
    request.set_name(table_);
    ledgerkv::v1::CreateTableResponse response;
    grpc::Status status = admin_[0]->CreateTable(&context, request, &response);
    if (status.ok() || status.error_code() == grpc::StatusCode::ALREADY_EXISTS) {
      return absl::OkStatus();
    }
    return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                        absl::StrCat("CreateTable ", table_, ": ", status.error_message()));
  }

  void Put(int conn, grpc::CompletionQueue* cq, const std::string& key, const std::string& value,
           OpDone done) override {
    ledgerkv::v1::PutRequest request;
    request.set_table(table_);
    request.set_key(key);
    request.set_value(value);
    UnaryCall<ledgerkv::v1::PutResponse>::Start(
        kv_[conn].get(), &ledgerkv::v1::KV::Stub::PrepareAsyncPut, request, cq, timeout_,
        [done = std::move(done)](const grpc::Status& status, ledgerkv::v1::PutResponse&) mutable {
          done(OpResult{.status = status});
        });
  }

  void Get(int conn, grpc::CompletionQueue* cq, const std::string& key, bool serializable,
           OpDone done) override {
    ledgerkv::v1::GetRequest request;
    request.set_table(table_);
    request.set_key(key);
    request.set_consistency(serializable ? ledgerkv::v1::SERIALIZABLE
                                         : ledgerkv::v1::LINEARIZABLE);
    UnaryCall<ledgerkv::v1::GetResponse>::Start(
        kv_[conn].get(), &ledgerkv::v1::KV::Stub::PrepareAsyncGet, request, cq, timeout_,
        [done = std::move(done)](const grpc::Status& status,
                                 ledgerkv::v1::GetResponse& response) mutable {
          OpResult result{.status = status};
          if (status.ok() && response.found()) {
            result.found = true;
            result.mod_revision = response.kv().mod_revision();
          }
          done(std::move(result));
        });
  }

  void CompareAndPut(int conn, grpc::CompletionQueue* cq, const std::string& key,
                     const std::string& value, int64_t expected_mod_revision,
                     OpDone done) override {
    ledgerkv::v1::TxnRequest request;
    request.set_table(table_);
    ledgerkv::v1::Compare* compare = request.add_compares();
    compare->set_key(key);
    compare->set_target(ledgerkv::v1::Compare::MOD_REVISION);
    compare->set_result(ledgerkv::v1::Compare::EQUAL);
    compare->set_number(expected_mod_revision);
    ledgerkv::v1::PutRequest* put = request.add_success()->mutable_put();
    put->set_table(table_);
    put->set_key(key);
    put->set_value(value);
    UnaryCall<ledgerkv::v1::TxnResponse>::Start(
        kv_[conn].get(), &ledgerkv::v1::KV::Stub::PrepareAsyncTxn, request, cq, timeout_,
        [done = std::move(done)](const grpc::Status& status,
                                 ledgerkv::v1::TxnResponse& response) mutable {
          done(OpResult{.status = status, .succeeded = status.ok() && response.succeeded()});
        });
  }

  void Scan(int conn, grpc::CompletionQueue* cq, const std::string& start, const std::string& end,
            int64_t limit, OpDone done) override {
    ledgerkv::v1::RangeRequest request;
    request.set_table(table_);
    request.set_start(start);
    request.set_end(end);
    request.set_limit(limit);
    UnaryCall<ledgerkv::v1::RangeResponse>::Start(
        kv_[conn].get(), &ledgerkv::v1::KV::Stub::PrepareAsyncRange, request, cq, timeout_,
        [done = std::move(done)](const grpc::Status& status,
                                 ledgerkv::v1::RangeResponse& response) mutable {
          done(OpResult{.status = status, .kvs = status.ok() ? response.kvs_size() : 0});
        });
  }

 private:
  const std::string table_;
  const absl::Duration timeout_;
  std::vector<std::unique_ptr<ledgerkv::v1::KV::Stub>> kv_;
  std::vector<std::unique_ptr<ledgerkv::v1::Admin::Stub>> admin_;
};

// ---- etcd v3 ----

class EtcdBackend final : public KvBackend {
 public:
  EtcdBackend(std::vector<std::shared_ptr<grpc::Channel>> channels, absl::Duration timeout)
      : timeout_(timeout) {
    for (auto& channel : channels) kv_.push_back(etcdserverpb::KV::NewStub(channel));
  }

  absl::Status Prepare() override { return absl::OkStatus(); }

  void Put(int conn, grpc::CompletionQueue* cq, const std::string& key, const std::string& value,
           OpDone done) override {
    etcdserverpb::PutRequest request;
    request.set_key(key);
    request.set_value(value);
    UnaryCall<etcdserverpb::PutResponse>::Start(
        kv_[conn].get(), &etcdserverpb::KV::Stub::PrepareAsyncPut, request, cq, timeout_,
        [done = std::move(done)](const grpc::Status& status, etcdserverpb::PutResponse&) mutable {
          done(OpResult{.status = status});
        });
  }

  void Get(int conn, grpc::CompletionQueue* cq, const std::string& key, bool serializable,
           OpDone done) override {
    etcdserverpb::RangeRequest request;
    request.set_key(key);
    request.set_serializable(serializable);
    UnaryCall<etcdserverpb::RangeResponse>::Start(
        kv_[conn].get(), &etcdserverpb::KV::Stub::PrepareAsyncRange, request, cq, timeout_,
        [done = std::move(done)](const grpc::Status& status,
                                 etcdserverpb::RangeResponse& response) mutable {
          OpResult result{.status = status};
          if (status.ok() && response.kvs_size() > 0) {
            result.found = true;
            result.mod_revision = response.kvs(0).mod_revision();
          }
          done(std::move(result));
        });
  }

  void CompareAndPut(int conn, grpc::CompletionQueue* cq, const std::string& key,
                     const std::string& value, int64_t expected_mod_revision,
                     OpDone done) override {
    etcdserverpb::TxnRequest request;
    etcdserverpb::Compare* compare = request.add_compare();
    compare->set_key(key);
    compare->set_target(etcdserverpb::Compare::MOD);
    compare->set_result(etcdserverpb::Compare::EQUAL);
    compare->set_mod_revision(expected_mod_revision);
    etcdserverpb::PutRequest* put = request.add_success()->mutable_request_put();
    put->set_key(key);
    put->set_value(value);
    UnaryCall<etcdserverpb::TxnResponse>::Start(
        kv_[conn].get(), &etcdserverpb::KV::Stub::PrepareAsyncTxn, request, cq, timeout_,
        [done = std::move(done)](const grpc::Status& status,
                                 etcdserverpb::TxnResponse& response) mutable {
          done(OpResult{.status = status, .succeeded = status.ok() && response.succeeded()});
        });
  }

  void Scan(int conn, grpc::CompletionQueue* cq, const std::string& start, const std::string& end,
            int64_t limit, OpDone done) override {
    etcdserverpb::RangeRequest request;
    request.set_key(start);
    request.set_range_end(end);
    request.set_limit(limit);
    UnaryCall<etcdserverpb::RangeResponse>::Start(
        kv_[conn].get(), &etcdserverpb::KV::Stub::PrepareAsyncRange, request, cq, timeout_,
        [done = std::move(done)](const grpc::Status& status,
                                 etcdserverpb::RangeResponse& response) mutable {
          done(OpResult{.status = status, .kvs = status.ok() ? response.kvs_size() : 0});
        });
  }

 private:
  const absl::Duration timeout_;
  std::vector<std::unique_ptr<etcdserverpb::KV::Stub>> kv_;
};

}  // namespace

std::unique_ptr<KvBackend> MakeLedgerkvBackend(std::vector<std::shared_ptr<grpc::Channel>> channels,
                                               std::string table, absl::Duration timeout) {
  return std::make_unique<LedgerkvBackend>(std::move(channels), std::move(table), timeout);
}

std::unique_ptr<KvBackend> MakeEtcdBackend(std::vector<std::shared_ptr<grpc::Channel>> channels,
                                           absl::Duration timeout) {
  return std::make_unique<EtcdBackend>(std::move(channels), timeout);
}

}  // namespace ledgerkv::bench
