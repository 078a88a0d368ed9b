#include "metadata/etcd_store.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "grpcpp/client_context.h"
#include "metadata/absl_compat.h"
#include "metadata/etcd_connection.h"
#include "metadata/etcd_watch.h"
#include "proto/etcd/rpc.grpc.pb.h"

namespace ledgerkv::metadata {
namespace {

using internal::EtcdConnection;
using internal::EtcdWatch;
using internal::ToAbsl;
using Retry = EtcdConnection::Retry;

// How soon the keeper tries again after a failed refresh or revoke.
constexpr absl::Duration kRetryInterval = absl::Milliseconds(250);
// How often a manual session past its deadline is checked with etcd.
constexpr absl::Duration kExpiryPoll = absl::Milliseconds(250);
constexpr int kListAttempts = 3;

absl::Status CheckKey(std::string_view key) {
  if (key.empty()) return absl::InvalidArgumentError("empty metadata key");
  return absl::OkStatus();
}

absl::Status CheckExpectedArg(Version expected) {
  if (expected < kAnyVersion) {
    return absl::InvalidArgumentError(absl::StrCat("invalid expected version ", expected));
  }
  return absl::OkStatus();
}

// Adds the etcd compare for "`key`'s version is `expected`" (nothing for
// kAnyVersion). An absent key has create and mod revision 0.
void AddCompare(etcdserverpb::TxnRequest* txn, const std::string& key, Version expected) {
  if (expected == kAnyVersion) return;
  etcdserverpb::Compare* c = txn->add_compare();
  c->set_key(key);
  c->set_result(etcdserverpb::Compare::EQUAL);
  if (expected == kMustNotExist) {
    c->set_target(etcdserverpb::Compare::CREATE);
    c->set_create_revision(0);
  } else {
    c->set_target(etcdserverpb::Compare::MOD);
    c->set_mod_revision(expected);
  }
}

std::string VersionText(Version v) { return v == 0 ? std::string("absent") : absl::StrCat(v); }

absl::Status Mismatch(std::string_view key, Version expected, Version found) {
  return absl::AbortedError(absl::StrCat("version mismatch on ", ToAbsl(key), ": expected ",
                                         VersionText(expected), ", found ", VersionText(found)));
}

class EtcdWatchHandle : public WatchHandle {
 public:
  explicit EtcdWatchHandle(std::shared_ptr<EtcdWatch> watch) : watch_(std::move(watch)) {}
  ~EtcdWatchHandle() override { watch_->Cancel(); }
  void Cancel() override { watch_->Cancel(); }

 private:
  const std::shared_ptr<EtcdWatch> watch_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<EtcdStore>> EtcdStore::Create(EtcdOptions options) {
  if (options.endpoints.empty()) return absl::InvalidArgumentError("etcd store: no endpoints");
  for (const std::string& e : options.endpoints) {
    if (e.empty()) return absl::InvalidArgumentError("etcd store: empty endpoint");
  }
  if (options.dial_timeout <= absl::ZeroDuration() || options.op_timeout <= absl::ZeroDuration() ||
      options.list_page_size <= 0) {
    return absl::InvalidArgumentError(
        "etcd store: dial_timeout, op_timeout and list_page_size must be positive");
  }
  auto conn = std::make_shared<EtcdConnection>(options.endpoints, options.op_timeout);
  // Any member that answers a read will do; round-robin until the deadline.
  const absl::Time deadline = absl::Now() + options.dial_timeout;
  absl::Status last;
  bool connected = false;
  while (!connected) {
    for (size_t i = 0; i < conn->size() && !connected; ++i) {
      EtcdConnection::Endpoint& endpoint = conn->endpoint(i);
      grpc::ClientContext context;
      const absl::Duration share = std::min(options.dial_timeout, options.op_timeout) /
                                   static_cast<int64_t>(conn->size());
      context.set_deadline(absl::ToChronoTime(std::min(deadline, absl::Now() + share)));
      context.set_wait_for_ready(true);  // see EtcdConnection::Call
      etcdserverpb::RangeRequest request;
      request.set_key(std::string(1, '\0'));
      etcdserverpb::RangeResponse response;
      last = EtcdConnection::ToStatus(endpoint.kv->Range(&context, request, &response),
                                      endpoint.address, "connect");
      if (last.ok()) {
        conn->set_preferred(i);
        connected = true;
      }
    }
    if (connected) break;
    if (absl::Now() >= deadline) {
      return absl::UnavailableError(absl::StrCat("cannot reach ", conn->description(), " within ",
                                                 absl::FormatDuration(options.dial_timeout),
                                                 ": ", last.message()));
    }
    absl::SleepFor(absl::Milliseconds(100));
  }
  return std::unique_ptr<EtcdStore>(new EtcdStore(std::move(options), std::move(conn)));
}

EtcdStore::EtcdStore(EtcdOptions options, std::shared_ptr<internal::EtcdConnection> conn)
    : options_(std::move(options)), conn_(std::move(conn)) {
  keeper_ = std::thread([this] { KeeperLoop(); });
}

EtcdStore::~EtcdStore() {
  std::vector<std::shared_ptr<EtcdWatch>> watches;
  std::vector<SessionId> live;
  {
    absl::MutexLock lock(&mu_);
    shutdown_ = true;
    keeper_cv_.SignalAll();
    for (const auto& weak : watches_) {
      if (std::shared_ptr<EtcdWatch> w = weak.lock()) watches.push_back(std::move(w));
    }
    watches_.clear();
    for (const auto& [id, session] : sessions_) live.push_back(id);
    sessions_.clear();
  }
  for (const auto& w : watches) w->Cancel();
  if (keeper_.joinable()) keeper_.join();
  for (SessionId id : live) IgnoreError(Revoke(id));
}

const std::string& EtcdStore::description() const { return conn_->description(); }

std::string EtcdStore::FullKey(std::string_view key) const {
  return absl::StrCat(options_.key_prefix, ToAbsl(key));
}

std::string EtcdStore::UserKey(const std::string& full_key) const {
  return full_key.substr(std::min(options_.key_prefix.size(), full_key.size()));
}

absl::StatusOr<VersionedValue> EtcdStore::Get(std::string_view key) {
  RETURN_IF_ERROR(CheckKey(key));
  etcdserverpb::RangeRequest request;
  request.set_key(FullKey(key));
  etcdserverpb::RangeResponse response;
  RETURN_IF_ERROR(conn_->Call(absl::StrCat("get ", ToAbsl(key)), Retry::kIdempotent,
                              [&](EtcdConnection::Endpoint& e, grpc::ClientContext* ctx) {
                                return e.kv->Range(ctx, request, &response);
                              }));
  if (response.kvs_size() == 0) {
    return absl::NotFoundError(absl::StrCat("no metadata key ", ToAbsl(key)));
  }
  return VersionedValue{response.kvs(0).value(), response.kvs(0).mod_revision()};
}

absl::StatusOr<Version> EtcdStore::Put(std::string_view key, std::string_view value,
                                       Version expected_version, SessionId session) {
  RETURN_IF_ERROR(CheckKey(key));
  RETURN_IF_ERROR(CheckExpectedArg(expected_version));
  if (session != kNoSession) RETURN_IF_ERROR(CheckSession(session));
  const std::string full = FullKey(key);
  etcdserverpb::TxnRequest request;
  AddCompare(&request, full, expected_version);
  etcdserverpb::PutRequest* put = request.add_success()->mutable_request_put();
  put->set_key(full);
  put->set_value(std::string(value));
  put->set_lease(session);
  // On a failed compare, read the key to say what was found.
  request.add_failure()->mutable_request_range()->set_key(full);
  etcdserverpb::TxnResponse response;
  RETURN_IF_ERROR(conn_->Call(absl::StrCat("put ", ToAbsl(key)), Retry::kOnlyIfNotSent,
                              [&](EtcdConnection::Endpoint& e, grpc::ClientContext* ctx) {
                                return e.kv->Txn(ctx, request, &response);
                              }));
  if (!response.succeeded()) {
    Version found = 0;
    if (response.responses_size() == 1 && response.responses(0).response_range().kvs_size() > 0) {
      found = response.responses(0).response_range().kvs(0).mod_revision();
    }
    return Mismatch(key, expected_version, found);
  }
  return response.header().revision();
}

absl::Status EtcdStore::Delete(std::string_view key, Version expected_version) {
  RETURN_IF_ERROR(CheckKey(key));
  RETURN_IF_ERROR(CheckExpectedArg(expected_version));
  const std::string full = FullKey(key);
  etcdserverpb::TxnRequest request;
  AddCompare(&request, full, expected_version);
  request.add_success()->mutable_request_delete_range()->set_key(full);
  request.add_failure()->mutable_request_range()->set_key(full);
  etcdserverpb::TxnResponse response;
  RETURN_IF_ERROR(conn_->Call(absl::StrCat("delete ", ToAbsl(key)), Retry::kOnlyIfNotSent,
                              [&](EtcdConnection::Endpoint& e, grpc::ClientContext* ctx) {
                                return e.kv->Txn(ctx, request, &response);
                              }));
  const absl::Status not_found = absl::NotFoundError(absl::StrCat("no metadata key ", ToAbsl(key)));
  if (response.responses_size() != 1) {
    return absl::InternalError(absl::StrCat(conn_->description(), ": malformed txn response"));
  }
  if (response.succeeded()) {
    // Deleting nothing writes nothing in etcd (no new revision).
    if (response.responses(0).response_delete_range().deleted() == 0) return not_found;
    return absl::OkStatus();
  }
  const etcdserverpb::RangeResponse& current = response.responses(0).response_range();
  if (current.kvs_size() == 0) return not_found;
  return Mismatch(key, expected_version, current.kvs(0).mod_revision());
}

absl::StatusOr<std::vector<KeyValue>> EtcdStore::List(std::string_view prefix) {
  const std::string full = FullKey(prefix);
  const std::string end = internal::PrefixEnd(full);
  absl::Status last;
  for (int attempt = 0; attempt < kListAttempts; ++attempt) {
    std::vector<KeyValue> out;
    // etcd needs a non-empty key: "\0" starts at the first key.
    std::string start = full.empty() ? std::string(1, '\0') : full;
    Version at = 0;  // the first page's revision, for all the others
    while (true) {
      etcdserverpb::RangeRequest request;
      request.set_key(start);
      request.set_range_end(end);
      request.set_limit(options_.list_page_size);
      request.set_revision(at);
      etcdserverpb::RangeResponse response;
      last = conn_->Call(absl::StrCat("list ", ToAbsl(prefix)), Retry::kIdempotent,
                         [&](EtcdConnection::Endpoint& e, grpc::ClientContext* ctx) {
                           return e.kv->Range(ctx, request, &response);
                         });
      if (!last.ok()) break;
      if (at == 0) at = response.header().revision();
      for (const mvccpb::KeyValue& kv : response.kvs()) {
        out.push_back(KeyValue{UserKey(kv.key()), kv.value(), kv.mod_revision()});
      }
      if (!response.more() || response.kvs_size() == 0) return out;
      start = response.kvs(response.kvs_size() - 1).key();
      start.push_back('\0');  // the next key after the last one
    }
    // Compacted between pages: start over at a newer revision.
    if (!absl::IsOutOfRange(last)) return last;
  }
  return last;
}

absl::StatusOr<TxnResult> EtcdStore::Txn(const std::vector<TxnCompare>& compares,
                                         const std::vector<TxnOp>& ops) {
  for (const TxnCompare& c : compares) {
    RETURN_IF_ERROR(CheckKey(c.key));
    RETURN_IF_ERROR(CheckExpectedArg(c.expected_version));
  }
  absl::flat_hash_set<std::string_view> op_keys;
  for (const TxnOp& op : ops) {
    RETURN_IF_ERROR(CheckKey(op.key));
    if (!op_keys.insert(op.key).second) {
      return absl::InvalidArgumentError(absl::StrCat("txn has two ops on key ", op.key));
    }
    if (op.type == TxnOp::Type::kPut && op.session != kNoSession) {
      RETURN_IF_ERROR(CheckSession(op.session));
    }
  }
  etcdserverpb::TxnRequest request;
  for (const TxnCompare& c : compares) AddCompare(&request, FullKey(c.key), c.expected_version);
  for (const TxnOp& op : ops) {
    if (op.type == TxnOp::Type::kDelete) {
      // Deleting an absent key changes nothing, as the interface says.
      request.add_success()->mutable_request_delete_range()->set_key(FullKey(op.key));
    } else {
      etcdserverpb::PutRequest* put = request.add_success()->mutable_request_put();
      put->set_key(FullKey(op.key));
      put->set_value(op.value);
      put->set_lease(op.session);
    }
  }
  etcdserverpb::TxnResponse response;
  RETURN_IF_ERROR(conn_->Call("txn", Retry::kOnlyIfNotSent,
                              [&](EtcdConnection::Endpoint& e, grpc::ClientContext* ctx) {
                                return e.kv->Txn(ctx, request, &response);
                              }));
  return TxnResult{response.succeeded(), response.header().revision()};
}

absl::StatusOr<std::unique_ptr<WatchHandle>> EtcdStore::Watch(std::string_view prefix,
                                                              Version from_version,
                                                              WatchCallback callback) {
  if (from_version < 0) {
    return absl::InvalidArgumentError(absl::StrCat("negative watch revision ", from_version));
  }
  if (!callback) return absl::InvalidArgumentError("watch without a callback");
  if (from_version > 0) {
    // etcd confirms a watch from a compacted revision and cancels it only
    // later; a read at that revision says so at once.
    etcdserverpb::RangeRequest request;
    request.set_key(std::string(1, '\0'));
    request.set_revision(from_version);
    etcdserverpb::RangeResponse response;
    absl::Status s = conn_->Call("watch history check", Retry::kIdempotent,
                                 [&](EtcdConnection::Endpoint& e, grpc::ClientContext* ctx) {
                                   return e.kv->Range(ctx, request, &response);
                                 });
    if (absl::IsOutOfRange(s) && absl::StrContains(s.message(), "compacted")) {
      return absl::OutOfRangeError(absl::StrCat("watch from revision ", from_version, ": ",
                                                s.message(), "; list and watch anew"));
    }
    // A future revision is fine: its changes are delivered when they happen.
    if (!s.ok() && !absl::IsOutOfRange(s)) return s;
  }
  ASSIGN_OR_RETURN(std::shared_ptr<EtcdWatch> watch,
                   EtcdWatch::Start(conn_, options_.key_prefix, std::string(prefix), from_version,
                                    std::move(callback)));
  {
    absl::MutexLock lock(&mu_);
    if (shutdown_) {
      watch->Cancel();
      return absl::UnavailableError("etcd store is shutting down");
    }
    watches_.erase(std::remove_if(watches_.begin(), watches_.end(),
                                  [](const std::weak_ptr<EtcdWatch>& w) { return w.expired(); }),
                   watches_.end());
    watches_.push_back(watch);
  }
  return std::unique_ptr<WatchHandle>(std::make_unique<EtcdWatchHandle>(std::move(watch)));
}

absl::StatusOr<Version> EtcdStore::CurrentRevision() {
  etcdserverpb::RangeRequest request;
  request.set_key(std::string(1, '\0'));
  etcdserverpb::RangeResponse response;
  RETURN_IF_ERROR(conn_->Call("read revision", Retry::kIdempotent,
                              [&](EtcdConnection::Endpoint& e, grpc::ClientContext* ctx) {
                                return e.kv->Range(ctx, request, &response);
                              }));
  return response.header().revision();
}

// ---- Sessions ---------------------------------------------------------------

absl::Status EtcdStore::CheckSession(SessionId session) {
  absl::MutexLock lock(&mu_);
  if (!sessions_.contains(session)) {
    return absl::NotFoundError(absl::StrCat("session ", session, " does not exist or has ended"));
  }
  return absl::OkStatus();
}

absl::StatusOr<SessionId> EtcdStore::CreateSession(const SessionOptions& options) {
  if (options.ttl <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("session ttl must be positive, got ", absl::FormatDuration(options.ttl)));
  }
  etcdserverpb::LeaseGrantRequest request;
  request.set_ttl(
      std::max<int64_t>(1, static_cast<int64_t>(std::ceil(absl::ToDoubleSeconds(options.ttl)))));
  etcdserverpb::LeaseGrantResponse response;
  const absl::Time sent = absl::Now();
  RETURN_IF_ERROR(conn_->Call("lease grant", Retry::kOnlyIfNotSent,
                              [&](EtcdConnection::Endpoint& e, grpc::ClientContext* ctx) {
                                return e.lease->LeaseGrant(ctx, request, &response);
                              }));
  if (!response.error().empty() || response.id() <= 0 || response.ttl() <= 0) {
    return absl::InternalError(absl::StrCat(conn_->description(), ": lease grant failed: ",
                                            response.error(), " (id ", response.id(), ", ttl ",
                                            response.ttl(), ")"));
  }
  const SessionId id = response.id();
  {
    absl::MutexLock lock(&mu_);
    if (!shutdown_) {
      Session& s = sessions_[id];
      s.auto_keepalive = options.auto_keepalive;
      s.ttl = absl::Seconds(response.ttl());
      s.deadline = sent + s.ttl;
      s.next_refresh = sent + s.ttl / 3;
      s.on_expired = options.on_expired;
      keeper_cv_.Signal();
      return id;
    }
  }
  IgnoreError(Revoke(id));
  return absl::UnavailableError("etcd store is shutting down");
}

absl::Status EtcdStore::KeepAlive(SessionId session) {
  RETURN_IF_ERROR(CheckSession(session));
  const absl::Time sent = absl::Now();
  ASSIGN_OR_RETURN(std::vector<int64_t> ttls, SendKeepAlives({session}));
  absl::MutexLock lock(&mu_);
  auto it = sessions_.find(session);
  if (it == sessions_.end() || ttls[0] <= 0) {
    if (it != sessions_.end()) EndSessionLocked(session, /*revoke_later=*/false);
    return absl::NotFoundError(absl::StrCat("session ", session, " does not exist or has ended"));
  }
  it->second.deadline = sent + absl::Seconds(ttls[0]);
  return absl::OkStatus();
}

absl::Status EtcdStore::CloseSession(SessionId session) {
  {
    absl::MutexLock lock(&mu_);
    if (sessions_.erase(session) == 0) {
      return absl::NotFoundError(
          absl::StrCat("session ", session, " does not exist or has ended"));
    }
  }
  absl::Status revoked = Revoke(session);
  if (!revoked.ok() && !absl::IsNotFound(revoked)) {
    // The session is closed here either way; its lease (and keys) must not
    // outlive a failed revoke by a TTL, or longer if etcd restarts and renews
    // it: the keeper revokes it once etcd answers, like a lease given up.
    absl::MutexLock lock(&mu_);
    orphaned_leases_.push_back(session);
    orphan_retry_ = absl::Now() + kRetryInterval;
    keeper_cv_.Signal();
  }
  return revoked;
}

absl::StatusOr<std::vector<int64_t>> EtcdStore::SendKeepAlives(
    const std::vector<SessionId>& leases, absl::Duration timeout) {
  absl::flat_hash_map<SessionId, int64_t> answered;
  RETURN_IF_ERROR(conn_->Call(
      "lease keepalive", Retry::kIdempotent,
      [&](EtcdConnection::Endpoint& e, grpc::ClientContext* ctx) {
        answered.clear();
        auto stream = e.lease->LeaseKeepAlive(ctx);
        bool ok = true;
        for (SessionId id : leases) {
          etcdserverpb::LeaseKeepAliveRequest request;
          request.set_id(id);
          if (!(ok = stream->Write(request))) break;
        }
        // etcd answers each request in order (TTL 0 for an unknown lease).
        etcdserverpb::LeaseKeepAliveResponse response;
        while (ok && answered.size() < leases.size() && (ok = stream->Read(&response))) {
          answered[response.id()] = response.ttl();
        }
        if (ok) {
          stream->WritesDone();
        } else {
          ctx->TryCancel();
        }
        grpc::Status status = stream->Finish();
        if (!ok && status.ok()) {
          status = grpc::Status(grpc::StatusCode::UNAVAILABLE, "keepalive stream ended early");
        }
        return status;
      },
      timeout));
  std::vector<int64_t> ttls;
  for (SessionId id : leases) {
    auto it = answered.find(id);
    ttls.push_back(it == answered.end() ? 0 : it->second);
  }
  return ttls;
}

absl::StatusOr<int64_t> EtcdStore::TimeToLive(SessionId lease, absl::Duration timeout) {
  etcdserverpb::LeaseTimeToLiveRequest request;
  request.set_id(lease);
  etcdserverpb::LeaseTimeToLiveResponse response;
  absl::Status s = conn_->Call(
      "lease time-to-live", Retry::kIdempotent,
      [&](EtcdConnection::Endpoint& e, grpc::ClientContext* ctx) {
        return e.lease->LeaseTimeToLive(ctx, request, &response);
      },
      timeout);
  if (absl::IsNotFound(s)) return -1;
  RETURN_IF_ERROR(s);
  return response.ttl();
}

absl::Status EtcdStore::Revoke(SessionId lease, absl::Duration timeout) {
  etcdserverpb::LeaseRevokeRequest request;
  request.set_id(lease);
  etcdserverpb::LeaseRevokeResponse response;
  return conn_->Call(
      absl::StrCat("lease revoke ", lease), Retry::kOnlyIfNotSent,
      [&](EtcdConnection::Endpoint& e, grpc::ClientContext* ctx) {
        return e.lease->LeaseRevoke(ctx, request, &response);
      },
      timeout);
}

absl::Duration EtcdStore::KeeperCallTimeout() {
  absl::MutexLock lock(&mu_);
  const absl::Time now = absl::Now();
  absl::Time nearest = absl::InfiniteFuture();
  for (const auto& [id, s] : sessions_) {
    if (s.deadline > now) nearest = std::min(nearest, s.deadline);
  }
  return std::clamp(nearest - now, absl::Milliseconds(100), options_.op_timeout);
}

void EtcdStore::EndSessionLocked(SessionId id, bool revoke_later) {
  auto it = sessions_.find(id);
  if (it == sessions_.end()) return;
  if (it->second.on_expired) expired_callbacks_.push_back(std::move(it->second.on_expired));
  // etcd may renew every lease when it restarts: revoke it once reachable,
  // so the keys of a session given up here do not linger for another TTL.
  if (revoke_later) {
    orphaned_leases_.push_back(id);
    orphan_retry_ = absl::Now();
  }
  sessions_.erase(it);
  keeper_cv_.Signal();
}

void EtcdStore::KeeperLoop() {
  while (true) {
    std::vector<std::function<void()>> callbacks;
    bool due = false;
    {
      absl::MutexLock lock(&mu_);
      if (shutdown_) return;
      callbacks.swap(expired_callbacks_);
      const absl::Time now = absl::Now();
      absl::Time next = orphaned_leases_.empty() ? absl::InfiniteFuture() : orphan_retry_;
      for (const auto& [id, s] : sessions_) {
        next = std::min(next, s.deadline);
        if (s.auto_keepalive) next = std::min(next, s.next_refresh);
      }
      due = next <= now;
      if (callbacks.empty() && !due) {
        keeper_cv_.WaitWithDeadline(&mu_, next);
        continue;
      }
    }
    // Outside the lock: a callback may call the store.
    for (const auto& cb : callbacks) cb();
    if (due) KeeperPass();
  }
}

void EtcdStore::KeeperPass() {
  std::vector<SessionId> refresh;
  std::vector<SessionId> lapsed;
  std::vector<SessionId> orphans;
  {
    absl::MutexLock lock(&mu_);
    const absl::Time now = absl::Now();
    for (const auto& [id, s] : sessions_) {
      if (s.deadline <= now) {
        lapsed.push_back(id);
      } else if (s.auto_keepalive && s.next_refresh <= now) {
        refresh.push_back(id);
      }
    }
    if (orphan_retry_ <= now) orphans = orphaned_leases_;
  }

  // on_expired callbacks run from KeeperLoop between passes: once one is
  // queued, or another session's deadline has passed during this pass, the
  // pass stops before its next blocking call, so that the news of a lost
  // session never waits for a call about another one.
  auto news_waiting = [this] {
    absl::MutexLock lock(&mu_);
    return !expired_callbacks_.empty();
  };
  auto should_yield = [this] {
    absl::MutexLock lock(&mu_);
    if (!expired_callbacks_.empty()) return true;
    const absl::Time now = absl::Now();
    for (const auto& [id, s] : sessions_) {
      // A session without auto keepalive past its deadline is polled with
      // TimeToLive at each pass instead: it must not starve the others.
      if (s.auto_keepalive && s.deadline <= now) return true;
    }
    return false;
  };
  for (SessionId id : lapsed) {
    bool manual;
    {
      absl::MutexLock lock(&mu_);
      auto it = sessions_.find(id);
      if (it == sessions_.end()) continue;
      manual = !it->second.auto_keepalive;
      if (!manual) {
        // No refresh answered for a whole TTL: etcd may have expired the
        // lease and handed the session's keys to someone else.
        EndSessionLocked(id, /*revoke_later=*/true);
        continue;
      }
    }
    // Without auto keepalive the owner refreshes it; etcd decides when the
    // lease is gone (its keys are deleted by then).
    if (news_waiting()) return;  // the next pass checks it
    absl::StatusOr<int64_t> ttl = TimeToLive(id, KeeperCallTimeout());
    absl::MutexLock lock(&mu_);
    auto it = sessions_.find(id);
    if (it == sessions_.end()) continue;
    if (!ttl.ok()) {
      EndSessionLocked(id, /*revoke_later=*/true);  // unreachable past the deadline
    } else if (*ttl < 0) {
      EndSessionLocked(id, /*revoke_later=*/false);
    } else {
      // Still alive (refreshed by a KeepAlive racing with us), or expired
      // and not yet revoked by etcd (TTL 0, which etcd also answers in the
      // lease's last second): look again soon, not at once.
      it->second.deadline = absl::Now() + kExpiryPoll;
    }
  }

  if (!refresh.empty() && !should_yield()) {
    const absl::Time sent = absl::Now();
    // A hung etcd must not hold the keeper past any session's deadline (not
    // only those of this batch: one whose refresh failed waits for a retry
    // and is not in it): the owner has to hear that it lost the session by
    // then. The same bound holds for every call of this pass below.
    absl::StatusOr<std::vector<int64_t>> ttls = SendKeepAlives(refresh, KeeperCallTimeout());
    absl::MutexLock lock(&mu_);
    for (size_t i = 0; i < refresh.size(); ++i) {
      auto it = sessions_.find(refresh[i]);
      if (it == sessions_.end()) continue;  // closed meanwhile
      Session& s = it->second;
      if (!ttls.ok()) {
        // The deadline stays: a whole TTL of failures ends the session.
        s.next_refresh = absl::Now() + std::min(kRetryInterval, s.ttl / 3);
      } else if ((*ttls)[i] <= 0) {
        EndSessionLocked(refresh[i], /*revoke_later=*/false);
      } else {
        s.deadline = sent + absl::Seconds((*ttls)[i]);
        s.next_refresh = sent + absl::Seconds((*ttls)[i]) / 3;
      }
    }
  }

  for (SessionId id : orphans) {
    if (should_yield()) return;  // still queued: the next pass revokes it
    absl::Status s = Revoke(id, KeeperCallTimeout());
    absl::MutexLock lock(&mu_);
    if (s.ok() || absl::IsNotFound(s)) {
      orphaned_leases_.erase(std::remove(orphaned_leases_.begin(), orphaned_leases_.end(), id),
                             orphaned_leases_.end());
    } else {
      orphan_retry_ = absl::Now() + kRetryInterval;
    }
  }
}

}  // namespace ledgerkv::metadata
