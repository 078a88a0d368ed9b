// KvClient: the C++ client of the ledgerkv KV and Admin services
// (proto/kv.proto, docs/kv-api.md).
//
// - One gRPC channel per server address, created on first use and shared by
//   every call of this client (channels are thread-safe and expensive).
// - Every call has a deadline (CallOptions::deadline, else
//   ClientOptions::default_deadline) that covers all of its attempts.
// - Before each attempt the client checks that the channel to the chosen
//   server is connected (waiting for a connection attempt in progress). If
//   it is not, the request is not sent at all: that attempt fails
//   UNAVAILABLE "not sent", which is safe to retry for every call.
// - Retries only where they cannot apply a write twice:
//   reads (Get, Range, ListTables, DescribeTable) on any UNAVAILABLE;
//   writes (Put, Delete, Txn, Increment, CreateTable, DropTable) only on an
//   UNAVAILABLE carrying trailing metadata `ledgerkv-retry-safe: 1`, which
//   the server sends only when the request certainly reached no log, or
//   when the request was not sent (above). Everything else
//   (DEADLINE_EXCEEDED included) is returned as is: the outcome of a failed
//   write is unknown to the caller (IsRetrySafe() tells the exceptions).
// - Routing: `endpoint` may list several seed servers. A request for a key
//   goes to the owner of its range when the RangeMap knows one, else to the
//   current seed. `ledgerkv-owner: host:port` on an UNAVAILABLE switches the
//   range (and the retry) to that owner. An UNAVAILABLE without that hint
//   (server down, not connected, or refusing) forgets the owner it came
//   from and moves the current seed to the next one (round robin).
// - Errors: the gRPC status becomes an absl::Status with the same code and
//   message.
//
// Thread-safe: one KvClient may be used from many threads at once.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include "absl/strings/string_view.h"
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/range_map.h"
#include "proto/kv.pb.h"

namespace grpc {
class ClientContext;
class Status;
}  // namespace grpc

namespace ledgerkv::client {

// Trailing metadata keys of the retry convention (see the file comment).
inline constexpr char kRetrySafeMetadata[] = "ledgerkv-retry-safe";
inline constexpr char kOwnerMetadata[] = "ledgerkv-owner";

struct BackoffOptions {
  absl::Duration initial = absl::Milliseconds(50);
  absl::Duration max = absl::Seconds(1);
  double multiplier = 2.0;
};

struct ClientOptions {
  // host:port of a server, or a comma-separated list of them
  // ("a:1,b:2,c:3"; blanks around items are ignored): the seeds. In
  // standalone mode the one server. Requests without a known owner go to the
  // current seed, which starts at the first and moves to the next when it
  // fails without naming an owner.
  std::string endpoint;
  // Budget of one call, all attempts and backoff included.
  absl::Duration default_deadline = absl::Seconds(10);
  // Attempts per call (>= 1), redirects to a new owner included. With
  // several seeds a call may make max(max_attempts, seeds + 2) attempts:
  // every seed once, a redirect to the owner and one more.
  int max_attempts = 5;
  BackoffOptions backoff;
  // When true, a call finding no connected server keeps trying (seeds in
  // turn, within its deadline) instead of failing after max_attempts: such
  // attempts sent nothing and are not counted. Safe for writes too; it rides
  // through a server restart.
  bool wait_for_ready = false;
};

struct CallOptions {
  // Zero: ClientOptions::default_deadline. Negative (a caller's time left
  // that has run out): DEADLINE_EXCEEDED at once, nothing sent.
  absl::Duration deadline = absl::ZeroDuration();
};

// True when `status` (returned by a KvClient call) proves the call had no
// effect: an UNAVAILABLE whose last attempt was not sent or was marked
// retry-safe by the server (every earlier attempt of a write was too, or it
// would not have been retried). False for OK and every other error.
bool IsRetrySafe(const absl::Status& status);

class KvClient {
 public:
  // INVALID_ARGUMENT for an empty endpoint or an empty item in a
  // comma-separated list, max_attempts < 1 or a non-positive deadline. Connects lazily: a server that is down is only
  // noticed by the first call.
  static absl::StatusOr<std::unique_ptr<KvClient>> Create(ClientOptions options);
  ~KvClient();
  KvClient(const KvClient&) = delete;
  KvClient& operator=(const KvClient&) = delete;

  // KV service. Each returns the server's response, or its error status
  // (docs/kv-api.md lists the codes). Writes are retried only as described
  // above; after an error their effect is unknown unless the code says the
  // request was refused (INVALID_ARGUMENT, NOT_FOUND, FAILED_PRECONDITION,
  // OUT_OF_RANGE, RESOURCE_EXHAUSTED).
  absl::StatusOr<v1::PutResponse> Put(const v1::PutRequest& request, const CallOptions& opts = {});
  absl::StatusOr<v1::GetResponse> Get(const v1::GetRequest& request, const CallOptions& opts = {});
  absl::StatusOr<v1::RangeResponse> Range(const v1::RangeRequest& request,
                                          const CallOptions& opts = {});
  absl::StatusOr<v1::DeleteResponse> Delete(const v1::DeleteRequest& request,
                                            const CallOptions& opts = {});
  absl::StatusOr<v1::TxnResponse> Txn(const v1::TxnRequest& request, const CallOptions& opts = {});
  absl::StatusOr<v1::IncrementResponse> Increment(const v1::IncrementRequest& request,
                                                  const CallOptions& opts = {});

  // Admin service. CreateTable and DescribeTable refresh the RangeMap with
  // the ranges they return; DropTable forgets the table.
  absl::StatusOr<v1::CreateTableResponse> CreateTable(const v1::CreateTableRequest& request,
                                                      const CallOptions& opts = {});
  absl::StatusOr<v1::DropTableResponse> DropTable(const v1::DropTableRequest& request,
                                                  const CallOptions& opts = {});
  absl::StatusOr<v1::ListTablesResponse> ListTables(const v1::ListTablesRequest& request = {},
                                                    const CallOptions& opts = {});
  absl::StatusOr<v1::DescribeTableResponse> DescribeTable(const v1::DescribeTableRequest& request,
                                                          const CallOptions& opts = {});

  // Range() repeatedly, passing each response's continuation back, until
  // there is none or `request.limit` keys (0: no limit) were collected.
  // `opts.deadline` applies to each page. Returns the keys in order, or the
  // first error (keys already read are dropped).
  absl::StatusOr<std::vector<v1::KeyValue>> ScanAll(v1::RangeRequest request,
                                                    const CallOptions& opts = {});

  // The endpoint as given (possibly a comma-separated list).
  const std::string& endpoint() const { return options_.endpoint; }
  // The seeds parsed from it, in order.
  const std::vector<std::string>& seeds() const { return seeds_; }
  // The seed that requests without a known owner go to now.
  std::string current_seed() const ABSL_LOCKS_EXCLUDED(mu_);
  RangeMap& range_map() { return range_map_; }

  // Number of attempts beyond the first made by this client so far (for
  // tests and metrics).
  int64_t retries() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Connection;  // a channel and its stubs (kv_client.cc)

  // Where a request is routed: by (table, key) through the RangeMap, or to
  // the current seed (or a redirect's owner) when `table` is empty.
  struct Route {
    absl::string_view table;
    absl::string_view key;
  };
  enum class Kind { kRead, kWrite };
  using Attempt = absl::FunctionRef<grpc::Status(Connection&, grpc::ClientContext*)>;

  KvClient(ClientOptions options, std::vector<std::string> seeds);

  // Where the next attempt goes: the known owner of the route's range, the
  // last redirect of a call without a table (`redirect`), else the current
  // seed.
  std::string Target(const Route& route, const std::string& redirect) const
      ABSL_LOCKS_EXCLUDED(mu_);

  // `address` failed without naming an owner: if it is the current seed,
  // the next seed becomes current (once, however many calls saw it fail).
  void SeedFailed(const std::string& address) ABSL_LOCKS_EXCLUDED(mu_);

  // True once the channel of `conn` is connected; false if it failed to
  // connect or was still connecting at `until`. A request is sent only after
  // true, so after false it certainly was not.
  static bool Connected(Connection& conn, absl::Time until);

  // The shared connection to `address`, created on first use.
  Connection& ConnectionTo(const std::string& address) ABSL_LOCKS_EXCLUDED(mu_);

  // Waits `pause` before a retry on `conn`, returning early once a channel
  // that was down is connected again.
  void Pause(Connection& conn, absl::Duration pause);

  // The key whose range a Range request reads first (forward: its start,
  // narrowed by the continuation; reverse: the range just below its end).
  std::string ScanRouteKey(const v1::RangeRequest& request) const;

  // Asks `address` for the layout of `table` (DescribeTable) and stores it
  // in the RangeMap; errors are ignored (routing then goes on by hints).
  void FetchLayout(absl::string_view table, const std::string& address, absl::Time deadline);

  // Runs `attempt` under the retry and routing rules above.
  absl::Status Invoke(const Route& route, Kind kind, const CallOptions& opts, Attempt attempt);

  // Constant after construction.
  const ClientOptions options_;
  const std::vector<std::string> seeds_;  // non-empty
  const int max_attempts_;                // max_attempts, widened for seeds

  RangeMap range_map_;

  mutable absl::Mutex mu_;
  // Connections are never removed, so references stay valid for the
  // client's lifetime.
  absl::flat_hash_map<std::string, std::unique_ptr<Connection>> connections_ ABSL_GUARDED_BY(mu_);
  int64_t retries_ ABSL_GUARDED_BY(mu_) = 0;
  size_t current_seed_ ABSL_GUARDED_BY(mu_) = 0;  // index into seeds_
};

}  // namespace ledgerkv::client
