// An exact in-memory model of one KV range (docs/kv-api.md, etcd-style
// revisions) for model tests: given the requests of a single sequential
// client, it answers what the server must answer and applies the same
// changes. Only the semantics the API documents are modelled; the test's
// generator avoids the corners it leaves open (see kv_model_process_test.cc).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/kv.pb.h"

namespace ledgerkv::testing {

class KvModel {
 public:
  struct Entry {
    std::string value;
    int64_t create_revision = 0;
    int64_t mod_revision = 0;
    int64_t version = 0;
  };

  // Each write returns the expected response (header.revision set,
  // header.range_id left 0) or the expected error code, and applies the
  // change when the server must apply it. A write that changes nothing takes
  // no revision.
  absl::StatusOr<ledgerkv::v1::PutResponse> Put(const ledgerkv::v1::PutRequest& req);
  ledgerkv::v1::DeleteResponse Delete(const ledgerkv::v1::DeleteRequest& req);
  absl::StatusOr<ledgerkv::v1::IncrementResponse> Increment(
      const ledgerkv::v1::IncrementRequest& req);
  // Ops of one branch must touch distinct keys (the test never sends
  // anything else); results carry no headers.
  absl::StatusOr<ledgerkv::v1::TxnResponse> Txn(const ledgerkv::v1::TxnRequest& req);

  ledgerkv::v1::GetResponse Get(const ledgerkv::v1::GetRequest& req) const;
  // [start, end) with limit; no continuation (the expected continuation is
  // only "non-empty when keys are left", which the caller checks from
  // `more`).
  ledgerkv::v1::RangeResponse Range(const ledgerkv::v1::RangeRequest& req, bool* more) const;

  // Replaces the whole state (after reconciling with what survived a crash).
  void Reset(const std::vector<ledgerkv::v1::KeyValue>& kvs, int64_t revision);

  // Value after adding `delta` to `key`'s counter (absent = 0), or the
  // documented error: FAILED_PRECONDITION (not an int64), OUT_OF_RANGE.
  absl::StatusOr<int64_t> Incremented(const std::string& key, int64_t delta) const;

  std::vector<ledgerkv::v1::KeyValue> All() const;
  int64_t revision() const { return revision_; }
  const std::map<std::string, Entry>& entries() const { return kvs_; }

 private:
  ledgerkv::v1::KeyValue ToKv(const std::string& key, const Entry& e) const;
  bool CompareHolds(const ledgerkv::v1::Compare& c) const;
  void Write(const std::string& key, std::string value, int64_t revision);

  std::map<std::string, Entry> kvs_;
  int64_t revision_ = 0;
};

}  // namespace ledgerkv::testing
