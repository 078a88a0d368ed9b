// Test fixture for kv_server/range/: real bookies (gRPC on 127.0.0.1, real
// fsync), the embedded metadata store, and a real RocksDB per range in a
// temporary directory; blocking wrappers around the Range write methods.
// Test-only.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "kv_server/range/range.h"
#include "ledger/ledger_client.h"
#include "ledger/ledger_test_util.h"
#include "proto/kv.pb.h"
#include "wal/log_metadata.h"

namespace ledgerkv::kv::testing {

using ledger::testing::TempDir;
using ledger::testing::TestCluster;
namespace v1 = ::ledgerkv::v1;

// Calls an async Range write method and waits for its answer.
template <typename Request, typename Response>
absl::StatusOr<Response> Call(Range& range,
                              void (Range::*method)(const Request&, Range::Callback<Response>),
                              const Request& request) {
  absl::Notification done;
  absl::StatusOr<Response> out = absl::UnknownError("no answer");
  (range.*method)(request, [&](absl::StatusOr<Response> r) {
    out = std::move(r);
    done.Notify();
  });
  done.WaitForNotification();
  return out;
}

inline v1::PutRequest PutReq(const std::string& key, const std::string& value) {
  v1::PutRequest r;
  r.set_key(key);
  r.set_value(value);
  return r;
}
inline v1::IncrementRequest IncReq(const std::string& key, int64_t delta) {
  v1::IncrementRequest r;
  r.set_key(key);
  r.set_delta(delta);
  return r;
}
inline v1::DeleteRequest DelReq(const std::string& key, const std::string& end = "") {
  v1::DeleteRequest r;
  r.set_key(key);
  r.set_end(end);
  return r;
}

inline absl::StatusOr<v1::PutResponse> Put(Range& r, const v1::PutRequest& req) {
  return Call(r, &Range::Put, req);
}
inline absl::StatusOr<v1::PutResponse> Put(Range& r, const std::string& key,
                                           const std::string& value) {
  return Call(r, &Range::Put, PutReq(key, value));
}
inline absl::StatusOr<v1::DeleteResponse> Delete(Range& r, const v1::DeleteRequest& req) {
  return Call(r, &Range::Delete, req);
}
inline absl::StatusOr<v1::IncrementResponse> Increment(Range& r, const std::string& key,
                                                       int64_t delta) {
  return Call(r, &Range::Increment, IncReq(key, delta));
}
inline absl::StatusOr<v1::TxnResponse> Txn(Range& r, const v1::TxnRequest& req) {
  return Call(r, &Range::Txn, req);
}
// The value of `key`, or nullopt if absent (fails the test on error).
inline std::optional<v1::KeyValue> GetKv(Range& r, const std::string& key) {
  v1::GetRequest req;
  req.set_key(key);
  auto got = r.Get(req);
  EXPECT_TRUE(got.ok()) << got.status();
  if (!got.ok() || !got->found()) return std::nullopt;
  return got->kv();
}
inline std::optional<std::string> GetValue(Range& r, const std::string& key) {
  auto kv = GetKv(r, key);
  if (!kv.has_value()) return std::nullopt;
  return kv->value();
}

class RangeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(dir_.path().empty());
    auto cluster = TestCluster::Start({.bookies = 3});
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = *std::move(cluster);
    NewClient();
    descriptor_.range_id = 7;
    descriptor_.table = "t";
    descriptor_.start = "";
    descriptor_.end = "";
  }

  void TearDown() override {
    client_.reset();
    cluster_.reset();
  }

  void NewClient() {
    // Generous: the machine running the tests may be loaded, and a slow
    // connect must not exclude every bookie.
    auto client = cluster_->NewClient(absl::Seconds(10));
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = *std::move(client);
  }

  // Options for a range whose local state lives in <tmp>/<name>.
  RangeOptions Options(const std::string& name = "local") {
    RangeOptions o;
    o.data_dir = absl::StrCat(dir_.path(), "/", name);
    o.log.client = client_.get();
    o.log.metadata = cluster_->store();
    o.snapshot.client = client_.get();
    o.snapshot.metadata = cluster_->store();
    // No policy snapshots unless a test asks for them.
    o.snapshot_log_bytes = int64_t{1} << 40;
    o.snapshot_interval = absl::InfiniteDuration();
    return o;
  }

  absl::StatusOr<std::unique_ptr<Range>> Open(const RangeOptions& options) {
    return Range::Open(options, descriptor_);
  }

  std::string LogName() const { return absl::StrCat("range-", descriptor_.range_id); }

  absl::StatusOr<meta::v1::LogMetadata> LogMetadata() {
    wal::LogOptions o;
    o.client = client_.get();
    o.metadata = cluster_->store();
    return wal::GetLogMetadata(o, LogName());
  }

  bool LedgerExists(uint64_t id) {
    return !absl::IsNotFound(client_->GetLedgerMetadata(id).status());
  }

  TempDir dir_;
  std::unique_ptr<TestCluster> cluster_;
  std::unique_ptr<ledger::LedgerClient> client_;
  RangeDescriptor descriptor_;
};

}  // namespace ledgerkv::kv::testing
