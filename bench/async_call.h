// Unary gRPC calls on a completion queue, finished by a callback that runs
// on the thread polling that queue (bench/kv_load.cc polls each queue from
// one thread). The tag passed to the queue is always an AsyncCall*.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <utility>

#include <grpcpp/grpcpp.h>

#include "absl/functional/any_invocable.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace ledgerkv::bench {

class AsyncCall {
 public:
  virtual ~AsyncCall() = default;
  // Called once by the queue's poller with the event's `ok`; deletes itself.
  virtual void Complete(bool ok) = 0;
};

template <typename Response>
class UnaryCall final : public AsyncCall {
 public:
  using Done = absl::AnyInvocable<void(const grpc::Status&, Response&)>;

  // Starts `stub->PrepareAsyncX(context, request, cq)` (prepare = &Stub::PrepareAsyncX) with a deadline of
  // `timeout` from now; `done` runs on cq's poller with the final status and
  // the response (valid only when the status is OK).
  template <typename Stub, typename Request, typename Prepare>
  static void Start(Stub* stub, Prepare prepare, const Request& request, grpc::CompletionQueue* cq,
                    absl::Duration timeout, Done done) {
    auto* call = new UnaryCall(std::move(done));
    call->context_.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
    call->reader_ = std::invoke(prepare, stub, &call->context_, request, cq);
    call->reader_->StartCall();
    call->reader_->Finish(&call->response_, &call->status_, call);
  }

  void Complete(bool ok) override {
    // A unary Finish always completes with ok = true; the outcome is status_.
    done_(status_, response_);
    delete this;
  }

 private:
  explicit UnaryCall(Done done) : done_(std::move(done)) {}

  Done done_;
  grpc::ClientContext context_;
  Response response_;
  grpc::Status status_;
  std::unique_ptr<grpc::ClientAsyncResponseReader<Response>> reader_;
};

}  // namespace ledgerkv::bench
