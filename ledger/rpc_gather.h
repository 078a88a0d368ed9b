// Gather: a set of asynchronous unary bookie calls (gRPC callback API) that a
// blocking caller (reader, recoverer) starts together and waits on until
// enough of them have answered. The caller may stop waiting early (a slow
// bookie must not stall it): destroying the Gather cancels the calls still
// in flight and waits for their callbacks to return.
//
// Lifetime: callbacks hold a plain pointer to the Gather, never a
// reference, so the Gather, its ClientContexts and its BookieConn references
// (the channels) are released on the owner's thread, never on a gRPC
// callback thread. Destroying the last grpc::Channel from one of its own
// callbacks tears down the callback completion queue under the running
// callback (a gRPC "ref_counted.h: prior > 0" abort).
//
// Use:
//   auto g = Gather<ReadLacRequest, ReadLacResponse>::Make();
//   Call* c = g->Add(tag, bookie_id);  c->request = ...;
//   g->Start(c, conn, timeout, [](auto* stub, auto* ctx, auto* req, auto* resp, auto cb) {
//     stub->async()->ReadLac(ctx, req, resp, std::move(cb)); });
//   g->Await([&] { return <enough, reading only done calls>; });
//
// A call's request is written before Start; its `status` and `response` may
// be read once `done` was seen true under mu() (Await and the predicate run
// under it), and never change afterwards.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "grpcpp/client_context.h"
#include "grpcpp/support/status.h"
#include "ledger/bookie_pool.h"

namespace ledgerkv::ledger {

template <typename Req, typename Resp>
class Gather {
 public:
  struct Call {
    int tag = 0;            // the caller's label (ensemble index, ...)
    std::string bookie_id;  // for messages and Forget on failure
    grpc::ClientContext ctx;
    Req request;
    Resp response;
    grpc::Status status;  // valid once done
    bool done = false;    // guarded by the Gather's mu()
    bool started = false;  // guarded by the Gather's mu(); sent to a bookie
    // When it was sent (InfinitePast: never). Set before it is sent.
    absl::Time sent_at = absl::InfinitePast();
    std::shared_ptr<BookieConn> conn;  // keeps the channel alive during the call
  };
  using Invoke = std::function<void(bookie::v1::Bookie::Stub*, grpc::ClientContext*,
                                    const Req*, Resp*, std::function<void(grpc::Status)>)>;

  static std::shared_ptr<Gather> Make() { return std::shared_ptr<Gather>(new Gather()); }

  Gather(const Gather&) = delete;
  Gather& operator=(const Gather&) = delete;

  // Cancels the calls still in flight and waits until every callback has
  // returned (bounded: cancellation is local, and every call has a deadline).
  // Runs on the owner's thread: no callback holds a reference.
  ~Gather() {
    std::vector<Call*> unfinished;
    {
      absl::MutexLock l(&mu_);
      for (const auto& call : calls_) {
        if (call->started && !call->done) unfinished.push_back(call.get());
      }
    }
    // Without mu_: gRPC may run a callback inline from TryCancel. The
    // contexts stay valid (owned here) and TryCancel of a finished call is
    // a no-op.
    for (Call* call : unfinished) call->ctx.TryCancel();
    absl::MutexLock l(&mu_);
    auto returned = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return callbacks_pending_ == 0; };
    mu_.Await(absl::Condition(&returned));
  }

  // Adds a call (before any Start). The pointer stays valid for the
  // Gather's lifetime.
  Call* Add(int tag, std::string bookie_id) {
    auto call = std::make_unique<Call>();
    call->tag = tag;
    call->bookie_id = std::move(bookie_id);
    Call* raw = call.get();
    absl::MutexLock l(&mu_);
    calls_.push_back(std::move(call));
    return raw;
  }

  // Sends `call` through `conn` with a deadline `timeout` from now.
  // REQUIRES: mu() not held (gRPC may complete a call inline).
  void Start(Call* call, std::shared_ptr<BookieConn> conn, absl::Duration timeout,
             const Invoke& invoke) {
    call->sent_at = absl::Now();
    call->ctx.set_deadline(absl::ToChronoTime(call->sent_at + timeout));
    call->conn = std::move(conn);
    {
      absl::MutexLock l(&mu_);
      call->started = true;
      ++callbacks_pending_;
    }
    // The callback's last action is releasing mu_; the destructor may free
    // the Gather right after (absl::Mutex allows that, as Notification does).
    auto done = [this, call](grpc::Status status) {
      absl::MutexLock l(&mu_);
      call->status = std::move(status);
      call->done = true;
      --callbacks_pending_;
    };
    const bool started = call->conn->StartCall([&] {
      invoke(call->conn->stub.get(), &call->ctx, &call->request, &call->response, done);
    });
    if (!started) done(ShutDownStatus(*call->conn));
  }

  // Completes `call` without sending it (its bookie could not be resolved).
  void Fail(Call* call, grpc::Status status) {
    absl::MutexLock l(&mu_);
    call->status = std::move(status);
    call->done = true;
  }

  // Waits until `enough` holds (evaluated under mu() after every reply) or
  // every call is done. Returns whether `enough` held.
  bool Await(const std::function<bool()>& enough) {
    return AwaitFor(enough, absl::InfiniteDuration());
  }

  // As Await, but waits at most `timeout` (InfiniteDuration: as Await).
  bool AwaitFor(const std::function<bool()>& enough, absl::Duration timeout) {
    absl::MutexLock l(&mu_);
    auto ready = [this, &enough]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return enough() || AllDoneLocked();
    };
    mu_.AwaitWithTimeout(absl::Condition(&ready), timeout);
    return enough();
  }

  // Waits for every call (each has a deadline, so this is bounded).
  void AwaitAll() {
    absl::MutexLock l(&mu_);
    auto all = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return AllDoneLocked(); };
    mu_.Await(absl::Condition(&all));
  }

  // Waits for every call, but at most `timeout`. Returns whether all are done.
  bool AwaitAllFor(absl::Duration timeout) {
    absl::MutexLock l(&mu_);
    auto all = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return AllDoneLocked(); };
    return mu_.AwaitWithTimeout(absl::Condition(&all), timeout);
  }

  absl::Mutex& mu() ABSL_LOCK_RETURNED(mu_) { return mu_; }
  // REQUIRES: mu() held, or every Start/Fail returned and AwaitAll returned.
  const std::vector<std::unique_ptr<Call>>& calls() const { return calls_; }

 private:
  Gather() = default;

  bool AllDoneLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (const auto& call : calls_) {
      if (!call->done) return false;
    }
    return true;
  }

  absl::Mutex mu_;
  std::vector<std::unique_ptr<Call>> calls_;  // appended under mu_ before any Start
  // Started calls whose callback has not returned yet.
  int callbacks_pending_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace ledgerkv::ledger
