#include "ledger/bookie/add_server.h"

#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <system_error>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "base/add_protocol.h"
#include "base/fault_point.h"
#include "base/frame_conn.h"
#include "grpcpp/support/status.h"
#include "proto/add_wire.h"

namespace ledgerkv::bookie {
namespace {

// A connection stops reading requests while this many reply bytes wait
// for a peer that does not read them, or while this many request bytes
// are handed to the storage and not yet answered (a peer pipelining faster
// than the disk syncs). The whole bound per connection, receive buffer
// included, is in docs/add-transport.md ("Bounded memory").
constexpr size_t kMaxQueuedReplyBytes = size_t{64} << 20;
constexpr int64_t kMaxInFlightRequestBytes = int64_t{64} << 20;
// Until the peer said hello, a frame may be no longer than the hello.
constexpr size_t kMaxHelloBodyBytes = 64;

// Request bytes of one connection handed to the storage and not answered.
struct InFlight {
  std::atomic<int64_t> bytes{0};
};

}  // namespace

// Request bytes of every connection handed to the storage and not
// answered, and the connections waiting for that total to drop.
struct AddBudget {
  explicit AddBudget(int64_t limit) : limit(limit) {}

  // Called by a connection that found the budget spent: it is woken (once)
  // when the total drops below the limit.
  void Wait(const std::shared_ptr<FrameConn>& conn) {
    absl::MutexLock l(&mu);
    waiting.insert_or_assign(conn.get(), conn);
  }

  void Release(int64_t bytes_released) {
    const int64_t before = bytes.fetch_sub(bytes_released);
    if (before < limit || before - bytes_released >= limit) return;
    absl::flat_hash_map<const FrameConn*, std::weak_ptr<FrameConn>> woken;
    {
      absl::MutexLock l(&mu);
      woken.swap(waiting);
    }
    for (auto& [raw, weak] : woken) {
      if (std::shared_ptr<FrameConn> conn = weak.lock()) conn->Wake();
    }
  }

  const int64_t limit;
  std::atomic<int64_t> bytes{0};
  absl::Mutex mu;
  absl::flat_hash_map<const FrameConn*, std::weak_ptr<FrameConn>> waiting ABSL_GUARDED_BY(mu);
};

namespace {

struct ServerCall {
  std::shared_ptr<FrameConn> conn;
  std::shared_ptr<InFlight> in_flight;
  std::shared_ptr<AddBudget> budget;
  int64_t bytes = 0;      // counted in in_flight and budget
  std::string bookie_id;  // fault-point argument
  uint64_t id = 0;
  // The request's bytes (a copy of the frame body), which the parsed
  // request and the storage view until the call ends.
  std::string body;
  addwire::AddRequestRef request;
  std::vector<v1::Code> codes;  // set with an OK status
};

// Ends `call`: replies, releases its in-flight bytes (waking the
// connection's thread if that lets it read again), and deletes it.
void Finish(ServerCall* call, const grpc::Status& status);

void Reply(ServerCall* call, const grpc::Status& status) {
  // Tests: the add is done (stored or refused) but its reply is lost, as
  // when the network drops it or the bookie stalls.
  if (LEDGERKV_FAULT("bookie.add_port.drop_reply", call->bookie_id)) return;
  if (status.ok()) {
    // The AddResponse: one result per entry, in request order.
    std::vector<addwire::AddResultRef> results(call->codes.size());
    for (size_t i = 0; i < results.size() && i < call->request.entries.size(); ++i) {
      const addwire::EntryRef& e = call->request.entries[i];
      results[i] = addwire::AddResultRef{e.ledger_id, e.entry_id, call->codes[i]};
    }
    call->conn->Send(call->id, 0, addwire::AddResponseSize(results),
                     [&](char* p) { addwire::EncodeAddResponse(results, p); });
    return;
  }
  call->conn->Send(call->id, static_cast<uint32_t>(status.error_code()), status.error_message());
}

void Finish(ServerCall* call, const grpc::Status& status) {
  Reply(call, status);
  const int64_t before = call->in_flight->bytes.fetch_sub(call->bytes);
  if (before >= kMaxInFlightRequestBytes && before - call->bytes < kMaxInFlightRequestBytes) {
    call->conn->Wake();
  }
  call->budget->Release(call->bytes);
  delete call;
}

absl::StatusOr<std::pair<int, int>> Listen(const std::string& listen) {
  std::string host;
  int port = 0;
  if (!SplitHostPort(listen, &host, &port)) {
    return absl::InvalidArgumentError(absl::StrCat("add port: bad address \"", listen,
                                                   "\" (want host:port)"));
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  const std::string service = absl::StrCat(port);
  const int rc = ::getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints,
                               &found);
  if (rc != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("add port: cannot resolve \"", host, "\": ", ::gai_strerror(rc)));
  }
  int fd = -1;
  std::string error = "no address";
  for (addrinfo* ai = found; ai != nullptr && fd < 0; ai = ai->ai_next) {
    // Non-blocking: a connection that goes away between poll and accept
    // must not leave the accept thread blocked (Shutdown joins it).
    fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK,
                  ai->ai_protocol);
    if (fd < 0) {
      error = std::strerror(errno);
      continue;
    }
    int one = 1;
    (void)::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || ::listen(fd, 128) != 0) {
      error = std::strerror(errno);
      ::close(fd);
      fd = -1;
      continue;
    }
  }
  ::freeaddrinfo(found);
  if (fd < 0) {
    return absl::UnavailableError(absl::StrCat("add port: cannot listen on ", listen, ": ", error));
  }
  sockaddr_storage bound{};
  socklen_t bound_len = sizeof(bound);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &bound_len) != 0) {
    const int err = errno;
    ::close(fd);
    return absl::UnavailableError(absl::StrCat("add port: getsockname: ", std::strerror(err)));
  }
  const int bound_port = bound.ss_family == AF_INET
                             ? ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port)
                             : ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port);
  return std::make_pair(fd, bound_port);
}

}  // namespace

AddServer::AddServer(int listen_fd, int port, AddEntriesFunction add, std::string bookie_id,
                     AddServerLimits limits)
    : listen_fd_(listen_fd),
      port_(port),
      wake_fd_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)),
      add_(std::move(add)),
      bookie_id_(std::move(bookie_id)),
      limits_(limits),
      budget_(std::make_shared<AddBudget>(limits.max_in_flight_bytes)) {}

absl::StatusOr<std::unique_ptr<AddServer>> AddServer::Start(const std::string& listen,
                                                            AddEntriesFunction add,
                                                            std::string bookie_id,
                                                            AddServerLimits limits) {
  if (limits.max_connections == 0 || limits.hello_timeout <= absl::ZeroDuration() ||
      limits.max_in_flight_bytes <= 0) {
    return absl::InvalidArgumentError(
        "add port: max_connections, hello_timeout and max_in_flight_bytes must be positive");
  }
  absl::StatusOr<std::pair<int, int>> bound = Listen(listen);
  if (!bound.ok()) return bound.status();
  std::unique_ptr<AddServer> s(new AddServer(bound->first, bound->second, std::move(add),
                                             std::move(bookie_id), limits));
  if (s->wake_fd_ < 0) {
    return absl::UnavailableError(absl::StrCat("add port: eventfd: ", std::strerror(errno)));
  }
  AddServer* raw = s.get();
  s->accept_thread_ = std::thread([raw] { raw->AcceptLoop(); });
  return s;
}

AddServer::~AddServer() {
  Shutdown();
  if (wake_fd_ >= 0) ::close(wake_fd_);
}

void AddServer::ReapLocked() {
  for (auto it = connections_.begin(); it != connections_.end();) {
    if ((*it)->finished) {
      (*it)->thread.join();  // it is past its last use of the server
      it = connections_.erase(it);
    } else {
      ++it;
    }
  }
}

void AddServer::AcceptLoop() {
  for (;;) {
    {
      absl::MutexLock l(&mu_);
      if (stopping_) return;
      ReapLocked();
    }
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
    const int n = ::poll(fds, 2, 1000);
    if (n <= 0 || !(fds[0].revents & POLLIN)) continue;
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE) {
        absl::FPrintF(stderr, "bookie add port: accept: %s\n", std::strerror(errno));
        ::poll(nullptr, 0, 100);  // out of descriptors: do not spin
      }
      continue;
    }
    absl::StatusOr<std::unique_ptr<FrameConn>> adopted =
        FrameConn::Adopt(fd, add_protocol::kMaxBodyBytes);
    if (!adopted.ok()) continue;
    absl::MutexLock l(&mu_);
    if (stopping_) return;  // `adopted` closes the socket
    // Connections that ended while this thread waited in poll no longer count.
    ReapLocked();
    if (connections_.size() >= limits_.max_connections) {
      absl::FPrintF(stderr, "bookie add port: %d connections already, closing a new one\n",
                    connections_.size());
      continue;
    }
    auto c = std::make_unique<Connection>();
    c->conn = std::shared_ptr<FrameConn>(std::move(*adopted));
    Connection* raw = c.get();
    try {
      c->thread = std::thread([this, raw] {
        Serve(raw->conn);
        absl::MutexLock l(&mu_);
        raw->finished = true;
      });
    } catch (const std::system_error& e) {
      // Out of threads (a pids cgroup, RLIMIT_NPROC): refuse this client,
      // whose channel then adds over gRPC, rather than end the bookie.
      absl::FPrintF(stderr, "bookie add port: no thread for a new connection (%s), closing it\n",
                    e.what());
      continue;
    }
    connections_.push_back(std::move(c));
  }
}

bool AddServer::BudgetAllowsRead(const std::shared_ptr<FrameConn>& conn) {
  if (budget_->bytes.load() < budget_->limit) return true;
  budget_->Wait(conn);
  // Again after registering: a release in between found nobody to wake.
  return budget_->bytes.load() < budget_->limit;
}

void AddServer::Serve(std::shared_ptr<FrameConn> conn) {
  bool greeted = false;
  const absl::Time hello_deadline = absl::Now() + limits_.hello_timeout;
  conn->set_first_frame_max_body_bytes(kMaxHelloBodyBytes);
  auto in_flight = std::make_shared<InFlight>();
  std::vector<FrameView> frames;
  for (;;) {
    frames.clear();
    // Tests: a bookie that has stopped reading (hung, or its disk stalled
    // with the in-flight bound reached) while its peer keeps sending. The
    // hello is always read (at most 80 bytes, no request): a client whose
    // hello went unanswered would take the bookie for one that refuses it.
    const bool read = conn->queued_bytes() < kMaxQueuedReplyBytes &&
                      in_flight->bytes.load() < kMaxInFlightRequestBytes &&
                      (!greeted || (!LEDGERKV_FAULT("bookie.add_port.stop_reading", bookie_id_) &&
                                    BudgetAllowsRead(conn)));
    absl::Duration wait = absl::Milliseconds(500);
    if (!greeted) wait = std::clamp(hello_deadline - absl::Now(), absl::ZeroDuration(), wait);
    absl::Status status = conn->Poll(wait, read, &frames);
    for (const FrameView& f : frames) {
      if (!greeted) {
        if (f.id != 0 || f.status != add_protocol::kHelloStatus || f.body != add_protocol::kHelloBody) {
          status = absl::InvalidArgumentError("not a ledgerkv add client");
          break;
        }
        greeted = true;
        continue;
      }
      if (f.status != 0 || f.id == 0) {
        status = absl::InvalidArgumentError("malformed request frame");
        break;
      }
      auto* call = new ServerCall;
      call->conn = conn;
      call->in_flight = in_flight;
      call->budget = budget_;
      call->bytes = static_cast<int64_t>(f.body.size());
      in_flight->bytes.fetch_add(call->bytes);
      budget_->bytes.fetch_add(call->bytes);
      call->id = f.id;
      if (FaultPoints::Get().AnyArmed()) call->bookie_id = bookie_id_;
      call->body.assign(f.body.data(), f.body.size());
      if (!addwire::ParseAddRequest(call->body, &call->request)) {
        Finish(call, grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "unparsable AddRequest"));
        continue;
      }
      std::vector<EntryView> entries(call->request.entries.size());
      for (size_t i = 0; i < entries.size(); ++i) {
        const addwire::EntryRef& e = call->request.entries[i];
        entries[i] = EntryView{e.ledger_id, e.entry_id, e.lac, e.checksum, e.payload};
      }
      // Answered once, on the storage's commit path (or inline); `call`
      // keeps the body (which the storage views) alive until then.
      add_(call->request.expected_instance_id, call->request.recovery, std::move(entries),
           [call](const grpc::Status& s, std::vector<v1::Code> codes) {
             call->codes = std::move(codes);
             Finish(call, s);
           });
    }
    if (!status.ok()) break;
    // A peer that connects and never says hello (or says half of it) does
    // not keep its thread and slot.
    if (!greeted && absl::Now() >= hello_deadline) break;
    absl::MutexLock l(&mu_);
    if (stopping_) break;
  }
  conn->Close();
}

void AddServer::Shutdown() {
  std::vector<std::unique_ptr<Connection>> connections;
  {
    absl::MutexLock l(&mu_);
    if (shut_down_) return;
    shut_down_ = true;
    stopping_ = true;
    for (const auto& c : connections_) c->conn->Close();  // wakes its Poll
  }
  if (wake_fd_ >= 0) {
    const uint64_t one = 1;
    (void)!::write(wake_fd_, &one, sizeof(one));
  }
  if (accept_thread_.joinable()) accept_thread_.join();
  // No new connection can even queue in the backlog now.
  ::close(listen_fd_);
  {
    absl::MutexLock l(&mu_);
    connections.swap(connections_);
  }
  for (auto& c : connections) c->thread.join();
}

}  // namespace ledgerkv::bookie
