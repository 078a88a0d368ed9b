// Test fixture for kv_server: a Standalone on a temporary directory (embedded
// store, real bookies with fsync, real RocksDB per range) serving gRPC on
// 127.0.0.1:<free port>, and generated stubs as the client. Test-only.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "kv_server/standalone.h"
#include "ledger/ledger_test_util.h"
#include "proto/kv.grpc.pb.h"

namespace ledgerkv::kv::testing {

namespace v1 = ::ledgerkv::v1;

// The trailing metadata value of `key`, or "".
inline std::string Trailer(const grpc::ClientContext& ctx, const std::string& key) {
  auto it = ctx.GetServerTrailingMetadata().find(key);
  if (it == ctx.GetServerTrailingMetadata().end()) return "";
  return std::string(it->second.data(), it->second.size());
}

class KvServerTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_NO_FATAL_FAILURE(StartServer()); }
  void TearDown() override { StopServer(); }

  // Options of the next StartServer (tests may change them first).
  StandaloneOptions Options() {
    StandaloneOptions o;
    o.data_dir = dir_.path();
    o.listen = "127.0.0.1:0";
    o.bookies = bookies_;
    o.snapshot_interval = absl::Hours(1);
    o.limits = limits_;
    return o;
  }

  void StartServer() {
    auto started = Standalone::Start(Options());
    ASSERT_TRUE(started.ok()) << started.status();
    server_ = std::move(*started);
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(64 << 20);
    args.SetMaxSendMessageSize(64 << 20);
    channel_ =
        grpc::CreateCustomChannel(server_->address(), grpc::InsecureChannelCredentials(), args);
    kv_ = v1::KV::NewStub(channel_);
    admin_ = v1::Admin::NewStub(channel_);
  }

  void StopServer() {
    kv_.reset();
    admin_.reset();
    channel_.reset();
    if (server_ != nullptr) server_->Shutdown();
    server_.reset();
  }

  void RestartServer() {
    StopServer();
    ASSERT_NO_FATAL_FAILURE(StartServer());
  }

  static void SetDeadline(grpc::ClientContext* ctx) {
    ctx->set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(20)));
  }

  grpc::Status Put(const std::string& table, const std::string& key, const std::string& value,
                   v1::PutResponse* response = nullptr) {
    v1::PutRequest req;
    req.set_table(table);
    req.set_key(key);
    req.set_value(value);
    v1::PutResponse resp;
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    grpc::Status s = kv_->Put(&ctx, req, response != nullptr ? response : &resp);
    return s;
  }

  // The value of `key`, "<absent>" if not found, "<error: ...>" on errors.
  std::string GetValue(const std::string& table, const std::string& key) {
    v1::GetRequest req;
    req.set_table(table);
    req.set_key(key);
    v1::GetResponse resp;
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    grpc::Status s = kv_->Get(&ctx, req, &resp);
    if (!s.ok()) return "<error: " + s.error_message() + ">";
    return resp.found() ? resp.kv().value() : "<absent>";
  }

  grpc::Status Scan(const v1::RangeRequest& req, v1::RangeResponse* resp) {
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    return kv_->Range(&ctx, req, resp);
  }

  grpc::Status CreateTable(const std::string& name, const std::vector<std::string>& splits,
                           v1::CreateTableResponse* response = nullptr) {
    v1::CreateTableRequest req;
    req.set_name(name);
    for (const auto& s : splits) req.add_split_keys(s);
    v1::CreateTableResponse resp;
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    return admin_->CreateTable(&ctx, req, response != nullptr ? response : &resp);
  }

  grpc::Status DropTable(const std::string& name) {
    v1::DropTableRequest req;
    req.set_name(name);
    v1::DropTableResponse resp;
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    return admin_->DropTable(&ctx, req, &resp);
  }

  grpc::Status Describe(const std::string& name, v1::DescribeTableResponse* resp) {
    v1::DescribeTableRequest req;
    req.set_name(name);
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    return admin_->DescribeTable(&ctx, req, resp);
  }

  std::vector<std::string> ListTables() {
    v1::ListTablesResponse resp;
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    grpc::Status s = admin_->ListTables(&ctx, v1::ListTablesRequest(), &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return {resp.names().begin(), resp.names().end()};
  }

  // Sum of the revisions of the table's ranges (changes iff a write
  // committed somewhere in the table).
  int64_t TableRevision(const std::string& table) {
    v1::DescribeTableResponse resp;
    grpc::Status s = Describe(table, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    int64_t sum = 0;
    for (const auto& r : resp.ranges()) sum += r.revision();
    return sum;
  }

  Limits limits_;
  int bookies_ = 1;
  ledger::testing::TempDir dir_;
  std::unique_ptr<Standalone> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::KV::Stub> kv_;
  std::unique_ptr<v1::Admin::Stub> admin_;
};

}  // namespace ledgerkv::kv::testing
