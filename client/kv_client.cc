#include "client/kv_client.h"

#include <algorithm>
#include <random>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"
#include "grpcpp/support/status.h"
#include "proto/kv.grpc.pb.h"

namespace ledgerkv::client {

struct KvClient::Connection {
  std::string address;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::KV::Stub> kv;
  std::unique_ptr<v1::Admin::Stub> admin;
};

namespace {

// A call whose deadline (CallOptions) had already passed: nothing is sent.
absl::Status PassedDeadline() {
  return absl::DeadlineExceededError("the call's deadline had passed before it was sent");
}

// How long an attempt waits for a connection in progress before giving up
// on that server (nothing sent). Above gRPC's connect timeout here (the 1 s
// min reconnect backoff), so a connect that will fail has failed by then.
constexpr absl::Duration kConnectWait = absl::Seconds(2);

// Budget of the DescribeTable that learns a table's layout for routing.
constexpr absl::Duration kLayoutWait = absl::Seconds(2);

// Payload (type URL) on a returned status that proves the call had no
// effect; see IsRetrySafe.
constexpr char kRetrySafePayload[] = "ledgerkv-retry-safe";

absl::Status FromGrpc(const grpc::Status& s) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
}

// The value of trailing metadata `key`, or "".
std::string Trailer(const grpc::ClientContext& ctx, absl::string_view key) {
  const auto& md = ctx.GetServerTrailingMetadata();
  auto it = md.find(grpc::string_ref(key.data(), key.size()));
  if (it == md.end()) return "";
  return std::string(it->second.data(), it->second.size());
}

// Full jitter: a uniform pause in [d/2, d] so that clients retrying after
// one server restart do not arrive together.
absl::Duration Jitter(absl::Duration d) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  int64_t us = std::max<int64_t>(1, absl::ToInt64Microseconds(d));
  std::uniform_int_distribution<int64_t> dist(us / 2, us);
  return absl::Microseconds(dist(rng));
}

absl::string_view TxnRouteKey(const v1::TxnRequest& r) {
  if (r.compares_size() > 0) return r.compares(0).key();
  for (const auto* ops : {&r.success(), &r.failure()}) {
    for (const auto& op : *ops) {
      switch (op.op_case()) {
        case v1::TxnOp::kPut:
          return op.put().key();
        case v1::TxnOp::kGet:
          return op.get().key();
        case v1::TxnOp::kDelete:
          return op.delete_().key();
        case v1::TxnOp::kIncrement:
          return op.increment().key();
        case v1::TxnOp::OP_NOT_SET:
          break;
      }
    }
  }
  return "";
}

}  // namespace

bool IsRetrySafe(const absl::Status& status) {
  return absl::IsUnavailable(status) && status.GetPayload(kRetrySafePayload).has_value();
}

absl::StatusOr<std::unique_ptr<KvClient>> KvClient::Create(ClientOptions options) {
  if (options.endpoint.empty()) return absl::InvalidArgumentError("KvClient: empty endpoint");
  std::vector<std::string> seeds;
  for (absl::string_view item : absl::StrSplit(options.endpoint, ',')) {
    item = absl::StripAsciiWhitespace(item);
    if (item.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "KvClient: empty server in endpoint list \"", options.endpoint, "\""));
    }
    seeds.emplace_back(item);
  }
  if (options.max_attempts < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("KvClient: max_attempts must be >= 1, got ", options.max_attempts));
  }
  if (options.default_deadline <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("KvClient: default_deadline must be positive");
  }
  return std::unique_ptr<KvClient>(new KvClient(std::move(options), std::move(seeds)));
}

KvClient::KvClient(ClientOptions options, std::vector<std::string> seeds)
    : options_(std::move(options)),
      seeds_(std::move(seeds)),
      max_attempts_(seeds_.size() > 1
                        ? std::max(options_.max_attempts, static_cast<int>(seeds_.size()) + 2)
                        : options_.max_attempts) {}
KvClient::~KvClient() = default;

int64_t KvClient::retries() const {
  absl::MutexLock l(&mu_);
  return retries_;
}

std::string KvClient::current_seed() const {
  absl::MutexLock l(&mu_);
  return seeds_[current_seed_];
}

std::string KvClient::Target(const Route& route, const std::string& redirect) const {
  if (!route.table.empty()) {
    if (auto owner = range_map_.OwnerOf(route.table, route.key)) return *owner;
  } else if (!redirect.empty()) {
    return redirect;
  }
  return current_seed();
}

void KvClient::SeedFailed(const std::string& address) {
  absl::MutexLock l(&mu_);
  // Compare first: calls that all saw the same seed fail advance it once,
  // not once each (which could skip a live seed).
  if (seeds_[current_seed_] == address) current_seed_ = (current_seed_ + 1) % seeds_.size();
}

bool KvClient::Connected(Connection& conn, absl::Time until) {
  // try_to_connect: an IDLE channel (new, or after its connection closed)
  // starts connecting; the loop waits for that attempt's outcome. A channel
  // found in TRANSIENT_FAILURE is inside gRPC's reconnect backoff (up to
  // 1 s here) and would fail every call at once until it tries again:
  // wait for that next try instead, so that an attempt counted as "not
  // sent" stands for one real connection attempt that failed (a restarted
  // server is found before a read or write runs out of attempts).
  bool attempted = false;
  grpc_connectivity_state state = conn.channel->GetState(/*try_to_connect=*/true);
  while (state != GRPC_CHANNEL_READY) {
    if (state == GRPC_CHANNEL_SHUTDOWN) return false;
    if (state == GRPC_CHANNEL_TRANSIENT_FAILURE && attempted) return false;
    if (state == GRPC_CHANNEL_CONNECTING) attempted = true;
    if (!conn.channel->WaitForStateChange(state, absl::ToChronoTime(until))) return false;
    state = conn.channel->GetState(/*try_to_connect=*/true);
  }
  return true;
}

KvClient::Connection& KvClient::ConnectionTo(const std::string& address) {
  absl::MutexLock l(&mu_);
  auto& conn = connections_[address];
  if (conn == nullptr) {
    grpc::ChannelArguments args;
    // Come back quickly after a server restart instead of gRPC's default
    // reconnect backoff that grows to two minutes. (The "min" value is also
    // the connect timeout: keep it well above a loaded machine's accept
    // latency.)
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 1000);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
    // Requests may be up to the server's 4 MiB limit plus framing. Replies
    // have no limit here: a Txn of many gets, or a range delete with
    // prev_kv, can answer far more than a scan page, and a reply refused
    // here would turn an applied write into RESOURCE_EXHAUSTED, which
    // callers read as "refused, not applied" (docs/kv-api.md).
    args.SetMaxReceiveMessageSize(-1);
    args.SetMaxSendMessageSize(16 << 20);
    // Subchannels of this client only: gRPC otherwise shares them process-
    // wide, and a new client would inherit another's connection to a server
    // that died unnoticed (its first request then fails "Socket closed").
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    conn = std::make_unique<Connection>();
    conn->address = address;
    conn->channel = grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
    conn->kv = v1::KV::NewStub(conn->channel);
    conn->admin = v1::Admin::NewStub(conn->channel);
  }
  return *conn;
}

void KvClient::Pause(Connection& conn, absl::Duration pause) {
  // A fail-fast call that finds the channel down ends at once, and with it
  // the only poller of the reconnect attempt it started: the attempt then
  // waits for gRPC's 5 s backup poller. Watching the channel's state polls
  // the attempt, so the retry goes out as soon as the server is back.
  if (conn.channel->GetState(/*try_to_connect=*/true) == GRPC_CHANNEL_READY) {
    absl::SleepFor(pause);  // the server answered: back off for real
    return;
  }
  const absl::Time until = absl::Now() + pause;
  conn.channel->WaitForConnected(absl::ToChronoTime(until));
}

void KvClient::FetchLayout(absl::string_view table, const std::string& address,
                           absl::Time deadline) {
  // Its own short budget: an owner that hangs must not use up the call's.
  deadline = std::min(deadline, absl::Now() + kLayoutWait);
  Connection& conn = ConnectionTo(address);
  if (!Connected(conn, std::min(deadline, absl::Now() + kConnectWait))) return;
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(deadline));
  v1::DescribeTableRequest request;
  request.set_name(std::string(table));
  v1::DescribeTableResponse response;
  if (conn.admin->DescribeTable(&ctx, request, &response).ok()) {
    range_map_.Update(request.name(), response.ranges());
  }
}

absl::Status KvClient::Invoke(const Route& route, Kind kind, const CallOptions& opts,
                              Attempt attempt) {
  if (opts.deadline < absl::ZeroDuration()) return PassedDeadline();
  const absl::Duration budget =
      opts.deadline > absl::ZeroDuration() ? opts.deadline : options_.default_deadline;
  const absl::Time deadline = absl::Now() + budget;
  absl::Duration backoff = options_.backoff.initial;
  absl::Duration pause = absl::ZeroDuration();  // before the next attempt
  std::string redirect;  // owner named by the last answer, for calls without a route
  bool fetched_layout = false;
  absl::Status status;
  for (int counted = 0;;) {
    const std::string address = Target(route, redirect);
    Connection& conn = ConnectionTo(address);
    if (pause > absl::ZeroDuration()) Pause(conn, pause);

    // Send only over a connected channel. A fail-fast call to a server that
    // is down would also fail without being sent, but its UNAVAILABLE looks
    // like that of a request lost in a dying connection; checking the state
    // first is what makes "not sent" certain, and so safe to retry for a
    // write. (A connection that breaks after this check makes the request's
    // UNAVAILABLE an unknown outcome, as before.)
    const bool sent = Connected(conn, std::min(deadline, absl::Now() + kConnectWait));
    std::string owner;
    bool retry_safe = true;
    if (sent) {
      grpc::ClientContext ctx;
      ctx.set_deadline(absl::ToChronoTime(deadline));
      ctx.set_wait_for_ready(options_.wait_for_ready);
      status = FromGrpc(attempt(conn, &ctx));
      if (absl::IsNotFound(status) && !route.table.empty()) {
        // The table is gone (dropped): a table created again under its
        // name has new ranges, learned afresh.
        range_map_.ForgetTable(route.table);
      }
      if (status.ok() || !absl::IsUnavailable(status)) return status;
      owner = Trailer(ctx, kOwnerMetadata);
      retry_safe = Trailer(ctx, kRetrySafeMetadata) == "1";
    } else {
      status = absl::UnavailableError(
          absl::StrCat("no connection to ", address, " (request not sent)"));
    }
    if (retry_safe) status.SetPayload(kRetrySafePayload, absl::Cord("1"));

    bool moved = false;
    if (!owner.empty() && owner != address) {
      moved = true;
      if (route.table.empty()) {
        redirect = owner;
      } else {
        range_map_.LearnOwner(std::string(route.table), route.key, owner);
        // Without the table's layout the hint stands for the whole table,
        // and every request to another range would be redirected once
        // more. With a layout, the redirect says it is stale (a range moved,
        // or the table was dropped and created again with other splits: a
        // stale range spanning two new ones would have its owner flip
        // between their owners on every redirect). Either way: learn the
        // layout from the owner (once per call).
        if (!fetched_layout) {
          fetched_layout = true;
          FetchLayout(route.table, owner, deadline);
        }
      }
    } else if (owner.empty()) {
      // `address` did not serve and named no one: do not go back to it as
      // the owner, and if it was the seed, try the next seed.
      if (route.table.empty()) {
        if (redirect == address) redirect.clear();
      } else {
        range_map_.ForgetOwner(route.table, route.key, address);
      }
      SeedFailed(address);
    }
    if (kind == Kind::kWrite && !retry_safe) return status;
    // With wait_for_ready an attempt that found no connection does not
    // count: the call waits for a server until its deadline.
    if (sent || !options_.wait_for_ready) ++counted;
    if (counted >= max_attempts_) return status;
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) return status;
    pause = absl::ZeroDuration();
    if (!moved) {
      // Back off even when the next attempt goes elsewhere (another seed, or
      // a seed after a dead owner): when the owner died, the seeds name it
      // until its lease expires, and a tight seed -> dead owner loop would
      // spend every attempt in milliseconds.
      pause = Jitter(backoff);
      if (pause >= left) return status;
      backoff = std::min(options_.backoff.max, backoff * options_.backoff.multiplier);
    }
    absl::MutexLock l(&mu_);
    ++retries_;
  }
}

absl::StatusOr<v1::PutResponse> KvClient::Put(const v1::PutRequest& request,
                                              const CallOptions& opts) {
  v1::PutResponse response;
  absl::Status s = Invoke({request.table(), request.key()}, Kind::kWrite, opts,
                          [&](Connection& c, grpc::ClientContext* ctx) {
                            return c.kv->Put(ctx, request, &response);
                          });
  if (!s.ok()) return s;
  return response;
}

absl::StatusOr<v1::GetResponse> KvClient::Get(const v1::GetRequest& request,
                                              const CallOptions& opts) {
  v1::GetResponse response;
  absl::Status s = Invoke({request.table(), request.key()}, Kind::kRead, opts,
                          [&](Connection& c, grpc::ClientContext* ctx) {
                            return c.kv->Get(ctx, request, &response);
                          });
  if (!s.ok()) return s;
  return response;
}

std::string KvClient::ScanRouteKey(const v1::RangeRequest& request) const {
  // The continuation narrows the interval (docs/kv-api.md: byte 0 = 1,
  // byte 1 'F' or 'R', then the next start or the next end key). A token
  // that does not parse routes by the request alone; the server refuses it.
  const std::string& token = request.continuation();
  const bool parsed = token.size() >= 3 && token[0] == 1 && token[1] == (request.reverse() ? 'R' : 'F');
  if (!request.reverse()) {
    if (parsed) return std::max(request.start(), token.substr(2));
    return request.start();
  }
  std::string end = request.end();
  if (parsed && (end.empty() || token.compare(2, std::string::npos, end) < 0)) end = token.substr(2);
  return range_map_.StartOfRangeBelow(request.table(), end).value_or(request.start());
}

absl::StatusOr<v1::RangeResponse> KvClient::Range(const v1::RangeRequest& request,
                                                  const CallOptions& opts) {
  v1::RangeResponse response;
  // Routed by the range read first: a page that continues a scan starts
  // in the range where the previous page stopped, often another server's.
  // A reverse scan starts in the last range, which only the layout tells.
  CallOptions call = opts;
  if (opts.deadline < absl::ZeroDuration()) return PassedDeadline();
  if (request.reverse() && !range_map_.HasLayout(request.table())) {
    const absl::Duration budget =
        opts.deadline > absl::ZeroDuration() ? opts.deadline : options_.default_deadline;
    const absl::Time deadline = absl::Now() + budget;
    FetchLayout(request.table(), Target({request.table(), request.start()}, ""), deadline);
    // The fetch is part of the call: the rest gets what is left.
    call.deadline = std::max(deadline - absl::Now(), absl::Milliseconds(1));
  }
  const std::string route_key = ScanRouteKey(request);
  absl::Status s = Invoke({request.table(), route_key}, Kind::kRead, call,
                          [&](Connection& c, grpc::ClientContext* ctx) {
                            return c.kv->Range(ctx, request, &response);
                          });
  if (!s.ok()) return s;
  return response;
}

absl::StatusOr<v1::DeleteResponse> KvClient::Delete(const v1::DeleteRequest& request,
                                                    const CallOptions& opts) {
  v1::DeleteResponse response;
  absl::Status s = Invoke({request.table(), request.key()}, Kind::kWrite, opts,
                          [&](Connection& c, grpc::ClientContext* ctx) {
                            return c.kv->Delete(ctx, request, &response);
                          });
  if (!s.ok()) return s;
  return response;
}

absl::StatusOr<v1::TxnResponse> KvClient::Txn(const v1::TxnRequest& request,
                                              const CallOptions& opts) {
  v1::TxnResponse response;
  absl::Status s = Invoke({request.table(), TxnRouteKey(request)}, Kind::kWrite, opts,
                          [&](Connection& c, grpc::ClientContext* ctx) {
                            return c.kv->Txn(ctx, request, &response);
                          });
  if (!s.ok()) return s;
  return response;
}

absl::StatusOr<v1::IncrementResponse> KvClient::Increment(const v1::IncrementRequest& request,
                                                          const CallOptions& opts) {
  v1::IncrementResponse response;
  absl::Status s = Invoke({request.table(), request.key()}, Kind::kWrite, opts,
                          [&](Connection& c, grpc::ClientContext* ctx) {
                            return c.kv->Increment(ctx, request, &response);
                          });
  if (!s.ok()) return s;
  return response;
}

absl::StatusOr<v1::CreateTableResponse> KvClient::CreateTable(
    const v1::CreateTableRequest& request, const CallOptions& opts) {
  v1::CreateTableResponse response;
  absl::Status s = Invoke({}, Kind::kWrite, opts, [&](Connection& c, grpc::ClientContext* ctx) {
    return c.admin->CreateTable(ctx, request, &response);
  });
  if (!s.ok()) return s;
  range_map_.Update(request.name(), response.ranges());
  return response;
}

absl::StatusOr<v1::DropTableResponse> KvClient::DropTable(const v1::DropTableRequest& request,
                                                          const CallOptions& opts) {
  v1::DropTableResponse response;
  absl::Status s = Invoke({}, Kind::kWrite, opts, [&](Connection& c, grpc::ClientContext* ctx) {
    return c.admin->DropTable(ctx, request, &response);
  });
  range_map_.ForgetTable(request.name());
  if (!s.ok()) return s;
  return response;
}

absl::StatusOr<v1::ListTablesResponse> KvClient::ListTables(const v1::ListTablesRequest& request,
                                                            const CallOptions& opts) {
  v1::ListTablesResponse response;
  absl::Status s = Invoke({}, Kind::kRead, opts, [&](Connection& c, grpc::ClientContext* ctx) {
    return c.admin->ListTables(ctx, request, &response);
  });
  if (!s.ok()) return s;
  return response;
}

absl::StatusOr<v1::DescribeTableResponse> KvClient::DescribeTable(
    const v1::DescribeTableRequest& request, const CallOptions& opts) {
  v1::DescribeTableResponse response;
  absl::Status s = Invoke({}, Kind::kRead, opts, [&](Connection& c, grpc::ClientContext* ctx) {
    return c.admin->DescribeTable(ctx, request, &response);
  });
  if (absl::IsNotFound(s)) range_map_.ForgetTable(request.name());
  if (!s.ok()) return s;
  range_map_.Update(request.name(), response.ranges());
  return response;
}

absl::StatusOr<std::vector<v1::KeyValue>> KvClient::ScanAll(v1::RangeRequest request,
                                                            const CallOptions& opts) {
  const int64_t limit = request.limit();
  std::vector<v1::KeyValue> out;
  while (true) {
    if (limit > 0) request.set_limit(limit - static_cast<int64_t>(out.size()));
    auto page = Range(request, opts);
    if (!page.ok()) return page.status();
    for (auto& kv : *page->mutable_kvs()) out.push_back(std::move(kv));
    if (page->continuation().empty()) return out;
    if (page->kvs_size() == 0 && page->continuation() == request.continuation()) {
      return absl::InternalError("Range returned the same continuation without progress");
    }
    if (limit > 0 && static_cast<int64_t>(out.size()) >= limit) {
      out.resize(static_cast<size_t>(limit));
      return out;
    }
    request.set_continuation(page->continuation());
  }
}

}  // namespace ledgerkv::client
