#include "ledger/add_channel.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/add_protocol.h"
#include "base/frame_conn.h"
#include "grpcpp/channel.h"
#include "grpcpp/client_context.h"
#include "proto/bookie.grpc.pb.h"

namespace ledgerkv::ledger {
namespace {

constexpr absl::Duration kFirstBackoff = absl::Milliseconds(100);
constexpr absl::Duration kMaxBackoff = absl::Seconds(1);
// How often the thread wakes to enforce deadlines when nothing arrives.
constexpr absl::Duration kTick = absl::Milliseconds(100);
// How long adds go over the RPC after the bookie had no add port, or its
// add port could not be reached, before the channel asks again.
constexpr absl::Duration kRpcModeFor = absl::Seconds(30);

// On a channel's thread while it runs reply `done`s: what they asked to
// run after them (RunAfterReplies); null elsewhere.
thread_local std::vector<std::function<void()>>* tl_after_replies = nullptr;

}  // namespace

bool AddChannel::OnReplyThread() { return tl_after_replies != nullptr; }

void AddChannel::RunAfterReplies(std::function<void()> fn) {
  tl_after_replies->push_back(std::move(fn));
}

struct AddChannel::Stub {
  explicit Stub(std::shared_ptr<grpc::Channel> channel)
      : stub(bookie::v1::Bookie::NewStub(std::move(channel))) {}
  std::unique_ptr<bookie::v1::Bookie::Stub> stub;
};

struct AddChannel::RpcCall {
  grpc::ClientContext ctx;
  bookie::v1::AddResponse response;
};

AddChannel::AddChannel(std::string address, std::shared_ptr<grpc::Channel> channel,
                       absl::Duration connect_timeout)
    : address_(std::move(address)),
      stub_(std::make_unique<Stub>(std::move(channel))),
      connect_timeout_(connect_timeout) {
  int port = 0;
  if (!SplitHostPort(address_, &host_, &port)) host_ = address_;
  backoff_ = kFirstBackoff;
  thread_ = std::thread([this] { Loop(); });
}

AddChannel::~AddChannel() {
  std::vector<std::shared_ptr<RpcCall>> rpcs;
  {
    absl::MutexLock l(&mu_);
    stop_ = true;
    for (const auto& [id, call] : rpc_calls_) rpcs.push_back(call);
    if (conn_ != nullptr) conn_->Wake();
  }
  for (const auto& call : rpcs) call->ctx.TryCancel();
  thread_.join();
  // The thread may have moved a backlog to the RPC meanwhile.
  rpcs.clear();
  {
    absl::MutexLock l(&mu_);
    for (const auto& [id, call] : rpc_calls_) rpcs.push_back(call);
  }
  for (const auto& call : rpcs) call->ctx.TryCancel();
  // Forwarded RPCs end by themselves (cancelled above); wait for them, as
  // their callbacks touch this channel.
  absl::MutexLock l(&mu_);
  auto rpcs_done = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return rpc_calls_.empty(); };
  mu_.Await(absl::Condition(&rpcs_done));
}

void AddChannel::ResetBackoff() {
  absl::MutexLock l(&mu_);
  retry_after_ = absl::InfinitePast();
  backoff_ = kFirstBackoff;
}

uint64_t AddChannel::NewCallId() {
  absl::MutexLock l(&mu_);
  const uint64_t id = ++next_id_;
  in_transit_.insert(id);
  return id;
}

size_t AddChannel::cancel_marks_for_test() {
  absl::MutexLock l(&mu_);
  return cancelled_.size();
}

size_t AddChannel::queued_bytes_for_test() {
  absl::MutexLock l(&mu_);
  return conn_ == nullptr ? 0 : conn_->queued_bytes();
}

void AddChannel::SendLocked(FrameConn* conn, uint64_t id, const bookie::v1::AddRequest& request) {
  const size_t n = request.ByteSizeLong();
  // A false return (the connection broke) is handled by the thread: it
  // fails every pending call once it sees the break.
  conn->Send(id, 0, n, [&](char* p) {
    request.SerializeWithCachedSizesToArray(reinterpret_cast<uint8_t*>(p));
  });
}

void AddChannel::Add(uint64_t id, const bookie::v1::AddRequest& request, Results* results,
                     absl::Time deadline, Done done) {
  grpc::Status fail;
  {
    absl::MutexLock l(&mu_);
    if (mode_ == Mode::kRpc && absl::Now() >= rpc_until_) mode_ = Mode::kUnknown;
    if (cancelled_.erase(id) > 0) {
      fail = grpc::Status(grpc::StatusCode::CANCELLED, "add cancelled");
    } else if (stop_) {
      fail = grpc::Status(grpc::StatusCode::CANCELLED, "the bookie connection is closing");
    } else if (conn_ == nullptr && absl::Now() < retry_after_) {
      // As a gRPC channel in TRANSIENT_FAILURE: fail fast, retry later.
      fail = grpc::Status(grpc::StatusCode::UNAVAILABLE,
                          absl::StrCat("bookie ", address_, " add port unreachable: ",
                                       last_error_.message()));
    } else if (mode_ != Mode::kRpc) {
      in_transit_.erase(id);
      Pending& p = pending_[id];
      p = Pending{&request, results, deadline, std::move(done)};
      if (conn_ != nullptr) {
        p.sent = absl::Now();
        SendLocked(conn_.get(), id, request);
      } else {
        backlog_.push_back(id);  // the thread's Await on mu_ sees it and connects
      }
      return;
    }
    // Failed here, or in transit to AddByRpc (which takes it out).
    if (!fail.ok()) in_transit_.erase(id);
  }
  if (!fail.ok()) {
    done(fail);
    return;
  }
  AddByRpc(id, request, results, deadline, std::move(done));
}

void AddChannel::AddByRpc(uint64_t id, const bookie::v1::AddRequest& request, Results* results,
                          absl::Time deadline, Done done) {
  auto call = std::make_shared<RpcCall>();
  call->ctx.set_deadline(absl::ToChronoTime(deadline));
  bool cancelled;
  {
    absl::MutexLock l(&mu_);
    in_transit_.erase(id);
    cancelled = cancelled_.erase(id) > 0 || stop_;
    if (!cancelled) rpc_calls_.emplace(id, call);
  }
  if (cancelled) {
    done(grpc::Status(grpc::StatusCode::CANCELLED, "add cancelled"));
    return;
  }
  // rpc_calls_ holds `call` until the callback below takes it out.
  RpcCall* const rpc = call.get();
  stub_->stub->async()->Add(
      &rpc->ctx, &request, &rpc->response,
      [this, id, rpc, results, done = std::move(done)](grpc::Status status) {
        if (status.ok()) AppendResults(rpc->response, results);
        done(status);
        absl::MutexLock l(&mu_);
        rpc_calls_.erase(id);
      });
}

void AddChannel::AppendResults(const bookie::v1::AddResponse& response, Results* out) {
  out->reserve(out->size() + static_cast<size_t>(response.results_size()));
  for (const bookie::v1::AddResult& r : response.results()) {
    out->push_back(addwire::AddResultRef{r.ledger_id(), r.entry_id(), r.code()});
  }
}

void AddChannel::Cancel(uint64_t id) {
  Done done;
  std::shared_ptr<RpcCall> rpc;
  {
    absl::MutexLock l(&mu_);
    auto it = pending_.find(id);
    if (it != pending_.end()) {
      done = std::move(it->second.done);
      pending_.erase(it);
      // A backlogged id is skipped at connect (no longer pending).
    } else if (auto r = rpc_calls_.find(id); r != rpc_calls_.end()) {
      rpc = r->second;
    } else if (in_transit_.contains(id)) {
      // Handed out but not added yet, or between the backlog and the RPC:
      // Add or AddByRpc ends it at once. (An id that already ended is in
      // none of these and needs nothing.)
      cancelled_.insert(id);
    }
  }
  if (done) done(grpc::Status(grpc::StatusCode::CANCELLED, "add cancelled"));
  if (rpc != nullptr) rpc->ctx.TryCancel();
}

void AddChannel::FailAllLocked(const grpc::Status& status,
                               std::vector<std::pair<Done, grpc::Status>>* out) {
  for (auto& [id, p] : pending_) out->emplace_back(std::move(p.done), status);
  pending_.clear();
  backlog_.clear();
}

absl::Status AddChannel::Connect(std::unique_ptr<FrameConn>* conn, Mode* mode) {
  const absl::Time deadline = absl::Now() + connect_timeout_;
  bookie::v1::GetInfoRequest req;
  bookie::v1::GetInfoResponse info;
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(deadline));
  grpc::Status s = stub_->stub->GetInfo(&ctx, req, &info);
  if (!s.ok()) {
    return absl::UnavailableError(absl::StrCat("GetInfo: ", s.error_message()));
  }
  if (info.add_port() == 0) {
    *mode = Mode::kRpc;
    return absl::OkStatus();
  }
  absl::StatusOr<std::unique_ptr<FrameConn>> c =
      FrameConn::Connect(host_, static_cast<int>(info.add_port()), deadline - absl::Now(),
                         add_protocol::kMaxBodyBytes);
  if (!c.ok()) {
    // The bookie answers on gRPC but its add port cannot be reached (a
    // firewall or a container publishing one port): use the RPC rather
    // than fail a healthy bookie.
    bool first = false;
    {
      absl::MutexLock l(&mu_);
      first = !warned_unreachable_;
      warned_unreachable_ = true;
    }
    if (first) {
      absl::FPrintF(stderr,
                    "ledger client: bookie %s: add port %d unreachable (%s); adding over gRPC "
                    "instead, asking again every %d s\n",
                    address_, info.add_port(), c.status().message(),
                    absl::ToInt64Seconds(kRpcModeFor));
    }
    *mode = Mode::kRpc;
    return absl::OkStatus();
  }
  (*c)->Send(0, add_protocol::kHelloStatus, add_protocol::kHelloBody);
  *conn = std::move(*c);
  *mode = Mode::kAddPort;
  return absl::OkStatus();
}

void AddChannel::Loop() {
  std::vector<std::pair<Done, grpc::Status>> completions;
  std::vector<FrameView> frames;
  // Kept between batches, so that a steady stream of replies allocates
  // nothing here.
  std::vector<std::function<void()>> after, running;
  auto run = [&completions, &after, &running] {
    tl_after_replies = &after;
    for (auto& [done, status] : completions) done(status);
    completions.clear();
    while (!after.empty()) {
      running.swap(after);
      for (auto& fn : running) fn();
      running.clear();
    }
    tl_after_replies = nullptr;
  };
  mu_.Lock();
  while (!stop_) {
    if (conn_ == nullptr) {
      auto wanted = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stop_ || !backlog_.empty();
      };
      mu_.AwaitWithTimeout(absl::Condition(&wanted), kTick);
      if (stop_ || backlog_.empty()) continue;
      mu_.Unlock();
      std::unique_ptr<FrameConn> fresh;
      Mode mode = Mode::kUnknown;
      const absl::Status s = Connect(&fresh, &mode);
      mu_.Lock();
      if (stop_) break;
      if (!s.ok()) {
        last_error_ = s;
        retry_after_ = absl::Now() + backoff_;
        backoff_ = std::min(backoff_ * 2, kMaxBackoff);
        FailAllLocked(grpc::Status(grpc::StatusCode::UNAVAILABLE,
                                   absl::StrCat("bookie ", address_, " add port unreachable: ",
                                                s.message())),
                      &completions);
        mu_.Unlock();
        run();
        mu_.Lock();
        continue;
      }
      backoff_ = kFirstBackoff;
      mode_ = mode;
      if (mode == Mode::kRpc) rpc_until_ = absl::Now() + kRpcModeFor;
      std::vector<uint64_t> backlog;
      backlog.swap(backlog_);
      if (mode == Mode::kRpc) {
        // No add port: the backlog goes over the Add RPC.
        std::vector<std::pair<uint64_t, Pending>> moved;
        for (uint64_t id : backlog) {
          auto it = pending_.find(id);
          if (it == pending_.end()) continue;  // cancelled meanwhile
          moved.emplace_back(id, std::move(it->second));
          pending_.erase(it);
          in_transit_.insert(id);  // a Cancel until AddByRpc leaves a mark
        }
        mu_.Unlock();
        for (auto& [id, p] : moved) {
          AddByRpc(id, *p.request, p.results, p.deadline, std::move(p.done));
        }
        mu_.Lock();
        continue;
      }
      conn_ = std::shared_ptr<FrameConn>(std::move(fresh));
      conn_answered_ = false;
      conn_heard_ = absl::Now();
      conn_written_ = conn_->bytes_written();
      conn_took_bytes_ = conn_heard_;
      for (uint64_t id : backlog) {
        auto it = pending_.find(id);
        if (it == pending_.end()) continue;
        it->second.sent = conn_heard_;
        SendLocked(conn_.get(), id, *it->second.request);
      }
      continue;
    }
    std::shared_ptr<FrameConn> conn = conn_;
    absl::Time next_deadline = absl::InfiniteFuture();
    for (const auto& [id, p] : pending_) next_deadline = std::min(next_deadline, p.deadline);
    mu_.Unlock();

    frames.clear();
    const absl::Duration wait = std::clamp(next_deadline - absl::Now(), absl::ZeroDuration(), kTick);
    const absl::Status polled = conn->Poll(wait, /*read=*/true, &frames);
    for (const FrameView& f : frames) {
      Pending p;
      {
        absl::MutexLock l(&mu_);
        auto it = pending_.find(f.id);
        if (it == pending_.end()) continue;  // cancelled or timed out: a late reply
        p = std::move(it->second);
        pending_.erase(it);
      }
      grpc::Status status;
      if (f.status > static_cast<uint32_t>(grpc::StatusCode::UNAUTHENTICATED)) {
        status = grpc::Status(grpc::StatusCode::INTERNAL,
                              absl::StrCat("bookie ", address_, " replied with status ", f.status));
      } else if (f.status != 0) {
        status = grpc::Status(static_cast<grpc::StatusCode>(f.status), std::string(f.body));
      } else if (!addwire::ParseAddResponse(f.body, p.results)) {
        status = grpc::Status(grpc::StatusCode::INTERNAL,
                              absl::StrCat("bookie ", address_, " sent an unparsable AddResponse"));
      }
      completions.emplace_back(std::move(p.done), std::move(status));
    }

    mu_.Lock();
    if (conn_ == conn) {
      const absl::Time now = absl::Now();
      if (!frames.empty()) {
        conn_answered_ = true;
        conn_heard_ = now;
      }
      if (const uint64_t written = conn->bytes_written(); written != conn_written_) {
        conn_written_ = written;
        conn_took_bytes_ = now;
      }
    }
    std::vector<std::pair<uint64_t, Pending>> to_rpc;
    if (!polled.ok()) {
      if (conn_ == conn) conn_.reset();
      conn->Close();
      if (!conn_answered_) {
        // Closed before its first reply: the bookie refuses this client
        // (too many connections, a hello it does not speak, no thread to
        // serve it). Treat it as an unreachable add port: the adds sent on
        // it, and the next ones, go over the Add RPC, so a bookie healthy
        // on gRPC is not failed. (One it stored anyway is stored again,
        // the same bytes: the newest copy wins.) A bookie that died instead
        // fails them there.
        mode_ = Mode::kRpc;
        rpc_until_ = absl::Now() + kRpcModeFor;
        if (!warned_closed_) {
          warned_closed_ = true;
          absl::FPrintF(stderr,
                        "ledger client: bookie %s closed its add port connection before any "
                        "reply (%s); adding over gRPC instead, asking again every %d s\n",
                        address_, polled.message(), absl::ToInt64Seconds(kRpcModeFor));
        }
        for (auto& [id, p] : pending_) {
          to_rpc.emplace_back(id, std::move(p));
          in_transit_.insert(id);  // a Cancel until AddByRpc leaves a mark
        }
        pending_.clear();
        backlog_.clear();
      } else {
        // Whatever was in flight may or may not have been stored.
        FailAllLocked(grpc::Status(grpc::StatusCode::UNAVAILABLE,
                                   absl::StrCat("connection to bookie ", address_,
                                                " add port lost: ", polled.message())),
                      &completions);
      }
    }
    const absl::Time now = absl::Now();
    // The oldest send among the calls that timed out just now.
    absl::Time expired_sent = absl::InfiniteFuture();
    for (auto it = pending_.begin(); it != pending_.end();) {
      if (it->second.deadline <= now) {
        expired_sent = std::min(expired_sent, it->second.sent);
        completions.emplace_back(std::move(it->second.done),
                                 grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                                              absl::StrCat("add to bookie ", address_,
                                                           " timed out")));
        pending_.erase(it++);
      } else {
        ++it;
      }
    }
    // A bookie that has stopped reading: an add timed out with no reply on
    // this connection since it was sent, requests still wait unsent, and
    // the socket has taken none of their bytes for the last half of that
    // add's wait (at most the last second; the thread looks every 100 ms).
    // Those bytes would stay here until TCP gives up (minutes), whatever
    // their deadlines, and the calls still pending are on the same silent
    // connection. Close it: the memory goes now, those calls fail
    // UNAVAILABLE (may or may not be stored, as on any break), and the next
    // add reconnects (docs/add-transport.md, "Outcomes"). A bookie that is
    // slow but reading keeps taking bytes and is left alone.
    size_t stuck = 0;
    if (conn_ != nullptr && conn_ == conn && expired_sent != absl::InfiniteFuture() &&
        conn_heard_ <= expired_sent &&
        now - conn_took_bytes_ >= std::min(absl::Seconds(1), (now - expired_sent) / 2)) {
      stuck = conn_->queued_bytes();
    }
    if (stuck > 0) {
      conn_->Close();
      conn_.reset();
      FailAllLocked(
          grpc::Status(grpc::StatusCode::UNAVAILABLE,
                       absl::StrFormat("bookie %s stopped reading its add port connection (no "
                                       "reply for %s, %d request bytes unsent): connection "
                                       "closed",
                                       address_, absl::FormatDuration(now - expired_sent),
                                       stuck)),
          &completions);
    }
    if (!completions.empty() || !to_rpc.empty()) {
      mu_.Unlock();
      run();
      for (auto& [id, p] : to_rpc) {
        AddByRpc(id, *p.request, p.results, p.deadline, std::move(p.done));
      }
      mu_.Lock();
    }
  }
  if (conn_ != nullptr) conn_->Close();
  FailAllLocked(grpc::Status(grpc::StatusCode::CANCELLED, "the bookie connection is closing"),
                &completions);
  mu_.Unlock();
  run();
}

}  // namespace ledgerkv::ledger
