#include "metadata/etcd_watch.h"

#include <algorithm>
#include <cstdio>
#include <utility>

#include "absl/strings/str_cat.h"
#include "metadata/absl_compat.h"

namespace ledgerkv::metadata::internal {
namespace {

constexpr absl::Duration kMinBackoff = absl::Milliseconds(100);
constexpr absl::Duration kMaxBackoff = absl::Seconds(1);
// The least time an endpoint gets to connect before the next one is tried,
// and how often a wait for a connection looks for Cancel.
constexpr absl::Duration kMinConnectWait = absl::Milliseconds(200);
constexpr absl::Duration kCancelSlice = absl::Milliseconds(100);

}  // namespace

EtcdWatch::EtcdWatch(std::shared_ptr<EtcdConnection> conn, std::string key_prefix,
                     std::string prefix, Version from_version, WatchCallback callback)
    : conn_(std::move(conn)),
      key_prefix_(std::move(key_prefix)),
      prefix_(std::move(prefix)),
      callback_(std::move(callback)),
      next_revision_(from_version) {}

absl::StatusOr<std::shared_ptr<EtcdWatch>> EtcdWatch::Start(std::shared_ptr<EtcdConnection> conn,
                                                            std::string key_prefix,
                                                            std::string prefix,
                                                            Version from_version,
                                                            WatchCallback callback) {
  const absl::Duration timeout = conn->op_timeout();
  std::shared_ptr<EtcdWatch> watch(new EtcdWatch(std::move(conn), std::move(key_prefix),
                                                 std::move(prefix), from_version,
                                                 std::move(callback)));
  absl::Status status;
  {
    absl::MutexLock lock(&watch->mu_);
    // The thread owns a reference: it may outlive every handle when the
    // watch is cancelled from its own callback.
    watch->thread_ = std::thread([self = watch] { self->Run(); });
    const absl::Time deadline = absl::Now() + timeout;
    while (!watch->created_) {
      if (watch->cv_.WaitWithDeadline(&watch->mu_, deadline)) break;
    }
    if (!watch->created_) {
      status = absl::UnavailableError(absl::StrCat(
          watch->conn_->description(), " did not confirm a watch on \"", watch->prefix_,
          "\" within ", absl::FormatDuration(timeout),
          watch->last_error_.ok() ? "" : "; last: ", watch->last_error_.message()));
    } else {
      status = watch->create_status_;
    }
  }
  if (!status.ok()) {
    watch->Cancel();
    return status;
  }
  return watch;
}

EtcdWatch::~EtcdWatch() { Cancel(); }

void EtcdWatch::Cancel() {
  std::thread thread;
  {
    absl::MutexLock lock(&mu_);
    cancelled_ = true;
    if (context_ != nullptr) context_->TryCancel();
    cv_.SignalAll();
    thread = std::move(thread_);
  }
  if (!thread.joinable()) return;
  if (thread.get_id() == std::this_thread::get_id()) {
    thread.detach();  // inside a callback: the loop ends when it returns
  } else {
    thread.join();
  }
}

bool EtcdWatch::cancelled() {
  absl::MutexLock lock(&mu_);
  return cancelled_;
}

void EtcdWatch::SetCreated(absl::Status status) {
  absl::MutexLock lock(&mu_);
  if (created_) return;
  created_ = true;
  create_status_ = std::move(status);
  cv_.SignalAll();
}

void EtcdWatch::Run() {
  absl::Duration backoff = kMinBackoff;
  size_t index = conn_->preferred();
  while (!cancelled()) {
    bool fatal = false;
    bool confirmed = false;
    const absl::Status status = RunStream(index, &fatal, &confirmed);
    if (cancelled()) break;
    bool created;
    {
      absl::MutexLock lock(&mu_);
      created = created_;
    }
    if (!created) {
      // Start is waiting: a fatal error ends it; anything else (an endpoint
      // down, a member without a leader while an election runs) is tried
      // again on the next endpoint until Start's timeout, which names it.
      if (fatal) {
        SetCreated(status);
        break;
      }
      absl::MutexLock lock(&mu_);
      last_error_ = status;
    } else if (fatal) {
      std::fprintf(stderr, "ledgerkv: watch on \"%s\" ended: %s\n", prefix_.c_str(),
                   status.ToString().c_str());
      break;
    }
    if (confirmed) backoff = kMinBackoff;
    index = (index + 1) % conn_->size();
    absl::MutexLock lock(&mu_);
    const absl::Time until = absl::Now() + backoff;
    while (!cancelled_) {
      if (cv_.WaitWithDeadline(&mu_, until)) break;
    }
    backoff = std::min(backoff * 2, kMaxBackoff);
  }
  // No callback runs after this point: let the object die on this thread if
  // the last reference is ours.
  absl::MutexLock lock(&mu_);
  if (thread_.joinable() && thread_.get_id() == std::this_thread::get_id()) thread_.detach();
}

absl::Status EtcdWatch::RunStream(size_t index, bool* fatal, bool* confirmed) {
  EtcdConnection::Endpoint& endpoint = conn_->endpoint(index);
  // Open the stream only once the endpoint is connected. A stream that
  // waited for a connection (wait_for_ready) would wait for a dead endpoint
  // without end, however long another one had been serving; one sent at
  // once would fail while gRPC is still connecting. Each endpoint gets its
  // share of the op timeout, waited for in slices so Cancel is not held up.
  const absl::Duration share = std::max(conn_->op_timeout() / conn_->size(), kMinConnectWait);
  const absl::Time connect_by = absl::Now() + share;
  bool connected = false;
  while (!connected && !cancelled() && absl::Now() < connect_by) {
    connected = EtcdConnection::WaitConnected(endpoint,
                                              std::min(connect_by, absl::Now() + kCancelSlice));
  }
  if (!connected) {
    if (cancelled()) return absl::CancelledError("watch cancelled");
    return absl::UnavailableError(absl::StrCat("etcd at ", endpoint.address,
                                               " unavailable: watch: not connected within ",
                                               absl::FormatDuration(share)));
  }
  grpc::ClientContext context;
  // Connected: a stream that cannot start fails at once and the next
  // endpoint is tried.
  context.set_wait_for_ready(false);
  // Require a leader (etcd's "hasleader" metadata): a member cut off from
  // the rest of its cluster refuses the watch, and cancels it once it has
  // been without a leader for a while, with UNAVAILABLE "etcdserver: no
  // leader". Without it, a watch on a partitioned member stays open and
  // silent while the majority commits changes it never delivers.
  context.AddMetadata("hasleader", "true");
  {
    absl::MutexLock lock(&mu_);
    if (cancelled_) return absl::CancelledError("watch cancelled");
    context_ = &context;
  }
  std::unique_ptr<grpc::ClientReaderWriter<etcdserverpb::WatchRequest, etcdserverpb::WatchResponse>>
      stream = endpoint.watch->Watch(&context);

  const std::string full = key_prefix_ + prefix_;
  etcdserverpb::WatchRequest request;
  etcdserverpb::WatchCreateRequest* create = request.mutable_create_request();
  // etcd needs a non-empty key: "\0" with range end "\0" is every key.
  create->set_key(full.empty() ? std::string(1, '\0') : full);
  create->set_range_end(PrefixEnd(full));
  create->set_start_revision(next_revision_);

  absl::Status result;
  bool ended_by_etcd = false;
  if (!stream->Write(request)) {
    ended_by_etcd = true;  // the call is over; Finish has its status
  } else {
    etcdserverpb::WatchResponse response;
    while (true) {
      if (!stream->Read(&response)) {
        ended_by_etcd = true;
        break;
      }
      if (response.compact_revision() != 0) {
        *fatal = true;
        result = absl::OutOfRangeError(absl::StrCat(
            "watch from revision ", next_revision_, ": ", conn_->description(),
            " compacted its history up to revision ", response.compact_revision(),
            "; list and watch anew"));
        break;
      }
      if (response.canceled()) {
        result = absl::UnavailableError(absl::StrCat(conn_->description(), " cancelled a watch: ",
                                                     response.cancel_reason()));
        break;
      }
      if (response.created()) {
        if (next_revision_ == 0) next_revision_ = response.header().revision() + 1;
        *confirmed = true;
        SetCreated(absl::OkStatus());
        continue;
      }
      if (response.events_size() == 0) continue;
      std::vector<WatchEvent> events;
      events.reserve(response.events_size());
      for (const mvccpb::Event& e : response.events()) {
        WatchEvent event;
        event.type = e.type() == mvccpb::Event::DELETE ? WatchEvent::Type::kDelete
                                                        : WatchEvent::Type::kPut;
        event.key = e.kv().key().substr(std::min(key_prefix_.size(), e.kv().key().size()));
        if (event.type == WatchEvent::Type::kPut) event.value = e.kv().value();
        event.version = e.kv().mod_revision();
        events.push_back(std::move(event));
      }
      next_revision_ = events.back().version + 1;
      {
        absl::MutexLock lock(&mu_);
        if (cancelled_) break;
      }
      // Cancel from another thread waits for this to return (join).
      callback_(events);
    }
  }
  {
    absl::MutexLock lock(&mu_);
    context_ = nullptr;
  }
  // Cancel only a stream this side leaves: one that etcd ended carries
  // etcd's status (such as "no leader"), and a cancel before Finish would
  // replace it with CANCELLED.
  if (!ended_by_etcd) context.TryCancel();
  const grpc::Status finish = stream->Finish();
  if (!result.ok()) return result;
  absl::Status status = EtcdConnection::ToStatus(finish, endpoint.address, "watch");
  if (status.ok() || absl::IsCancelled(status)) {
    status = absl::UnavailableError(
        absl::StrCat("etcd at ", endpoint.address, " ended a watch stream"));
  }
  return status;
}

}  // namespace ledgerkv::metadata::internal
