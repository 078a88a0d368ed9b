#include "kv_server/listen.h"

#include "absl/strings/str_cat.h"
#include "grpcpp/grpcpp.h"

namespace ledgerkv::kv {

absl::StatusOr<Listening> ListenAndServe(const std::string& listen,
                                         const std::vector<grpc::Service*>& services,
                                         int max_receive_bytes) {
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(listen, grpc::InsecureServerCredentials(), &port);
  for (grpc::Service* service : services) builder.RegisterService(service);
  builder.SetMaxReceiveMessageSize(max_receive_bytes);
  Listening out;
  out.server = builder.BuildAndStart();
  if (out.server == nullptr || port == 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", listen));
  }
  const size_t colon = listen.rfind(':');
  out.address =
      absl::StrCat(colon == std::string::npos ? listen : listen.substr(0, colon), ":", port);
  return out;
}

}  // namespace ledgerkv::kv
