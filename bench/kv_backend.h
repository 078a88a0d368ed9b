// The same few KV operations against two servers: ledgerkv (proto/kv.proto)
// and etcd v3 (proto/etcd/rpc.proto), so that bench workloads are identical
// for both targets.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace ledgerkv::bench {

struct OpResult {
  grpc::Status status;
  bool found = false;         // Get: the key exists
  int64_t mod_revision = 0;   // Get: the key's mod revision (0 if absent)
  bool succeeded = true;      // CompareAndPut: the compare held and the put ran
  int64_t kvs = 0;            // Scan: keys returned
};
using OpDone = absl::AnyInvocable<void(OpResult)>;

// Every asynchronous method starts one operation on `cq` over connection
// `conn` (an index into the channels given at construction) and calls `done`
// exactly once, on the thread polling `cq`. Thread-safe.
class KvBackend {
 public:
  virtual ~KvBackend() = default;

  // Makes the server ready for the bench (ledgerkv: creates the table unless
  // it exists). Blocking. Returns the server's error otherwise.
  virtual absl::Status Prepare() = 0;

  virtual void Put(int conn, grpc::CompletionQueue* cq, const std::string& key,
                   const std::string& value, OpDone done) = 0;
  virtual void Get(int conn, grpc::CompletionQueue* cq, const std::string& key, bool serializable,
                   OpDone done) = 0;
  // Atomically: if key's mod revision == expected_mod_revision then put.
  // result.succeeded = false (not an error) when the compare failed.
  virtual void CompareAndPut(int conn, grpc::CompletionQueue* cq, const std::string& key,
                             const std::string& value, int64_t expected_mod_revision,
                             OpDone done) = 0;
  // Up to `limit` keys of [start, end), linearizable.
  virtual void Scan(int conn, grpc::CompletionQueue* cq, const std::string& start,
                    const std::string& end, int64_t limit, OpDone done) = 0;
};

// ledgerkv.v1.KV / Admin on `table`.
std::unique_ptr<KvBackend> MakeLedgerkvBackend(std::vector<std::shared_ptr<grpc::Channel>> channels,
                                               std::string table, absl::Duration timeout);
// etcdserverpb.KV.
std::unique_ptr<KvBackend> MakeEtcdBackend(std::vector<std::shared_ptr<grpc::Channel>> channels,
                                           absl::Duration timeout);

}  // namespace ledgerkv::bench
