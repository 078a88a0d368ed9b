#include "kv_server/listen.h"

#include <atomic>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "grpc/grpc.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/support/server_interceptor.h"

namespace ledgerkv::kv {
namespace {

// Counts a call from its creation to its destruction (gRPC destroys a
// call's interceptors with the call).
class CountingInterceptor final : public grpc::experimental::Interceptor {
 public:
  explicit CountingInterceptor(std::shared_ptr<ActiveCalls> calls) : calls_(std::move(calls)) {
    calls_->Started();
  }
  ~CountingInterceptor() override { calls_->Ended(); }
  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    methods->Proceed();
  }

 private:
  const std::shared_ptr<ActiveCalls> calls_;
};

class CountingInterceptorFactory final
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit CountingInterceptorFactory(std::shared_ptr<ActiveCalls> calls)
      : calls_(std::move(calls)) {}
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo*) override {
    return new CountingInterceptor(calls_);
  }

 private:
  const std::shared_ptr<ActiveCalls> calls_;
};

}  // namespace

void ActiveCalls::Started() {
  absl::MutexLock l(&mu_);
  ++count_;
}

void ActiveCalls::Ended() {
  absl::MutexLock l(&mu_);
  --count_;
}

int64_t ActiveCalls::count() const {
  absl::MutexLock l(&mu_);
  return count_;
}

bool ActiveCalls::WaitForNone(absl::Time deadline) const {
  absl::MutexLock l(&mu_);
  auto none = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return count_ == 0; };
  return mu_.AwaitWithDeadline(absl::Condition(&none), deadline);
}

absl::StatusOr<Listening> ListenAndServe(const std::string& listen,
                                         const std::vector<grpc::Service*>& services,
                                         int max_receive_bytes) {
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(listen, grpc::InsecureServerCredentials(), &port);
  for (grpc::Service* service : services) builder.RegisterService(service);
  builder.SetMaxReceiveMessageSize(max_receive_bytes);
  Listening out;
  out.calls = std::make_shared<ActiveCalls>();
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> creators;
  creators.push_back(std::make_unique<CountingInterceptorFactory>(out.calls));
  builder.experimental().SetInterceptorCreators(std::move(creators));
  out.server = builder.BuildAndStart();
  if (out.server == nullptr || port == 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", listen));
  }
  const size_t colon = listen.rfind(':');
  out.address =
      absl::StrCat(colon == std::string::npos ? listen : listen.substr(0, colon), ":", port);
  return out;
}

void StopServing(grpc::Server* server, const ActiveCalls* calls, absl::Duration grace) {
  if (server == nullptr) return;
  const absl::Time deadline = absl::Now() + grace;
  std::atomic<bool> stopped{false};
  // Once no call is left, closes the connections that keep Shutdown
  // waiting. Repeated until Shutdown returns: a connection accepted just
  // before Shutdown closed the listener is closed by the next round.
  std::thread closer([&] {
    if (calls != nullptr) calls->WaitForNone(deadline);
    while (!stopped.load()) {
      grpc_server_cancel_all_calls(server->c_server());
      absl::SleepFor(absl::Milliseconds(50));
    }
  });
  server->Shutdown(absl::ToChronoTime(deadline));
  stopped.store(true);
  closer.join();
}

}  // namespace ledgerkv::kv
