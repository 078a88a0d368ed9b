#include "ledger/bookie_pool.h"

#include <iterator>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/add_protocol.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"
#include "proto/metadata.pb.h"

namespace ledgerkv::ledger {

BookiePool::BookiePool(metadata::MetadataStore* store, metadata::Keys keys,
                       LocalChannelFactory local_channel, LocalAddFactory local_add,
                       bool use_add_port, absl::Duration connect_timeout,
                       absl::Duration idle_close)
    : store_(store),
      keys_(std::move(keys)),
      local_channel_(std::move(local_channel)),
      local_add_(std::move(local_add)),
      use_add_port_(use_add_port),
      connect_timeout_(connect_timeout),
      idle_close_(idle_close) {
  if (idle_close_ != absl::InfiniteDuration()) reaper_ = std::thread([this] { ReapLoop(); });
}

BookiePool::~BookiePool() {
  {
    absl::MutexLock l(&mu_);
    stop_ = true;
  }
  if (reaper_.joinable()) reaper_.join();
}

void BookiePool::ReapLoop() {
  const absl::Duration period = idle_close_ / 4;
  while (true) {
    std::vector<std::shared_ptr<BookieConn>> idle;
    {
      absl::MutexLock l(&mu_);
      const absl::Time next = absl::Now() + period;
      auto stopping = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_; };
      mu_.AwaitWithDeadline(absl::Condition(&stopping), next);
      if (stop_) return;
      idle = SweepIdleLocked(absl::Now());
    }
    // Closed here, without mu_.
    idle.clear();
  }
}

std::vector<std::shared_ptr<BookieConn>> BookiePool::SweepIdleLocked(absl::Time now) {
  std::vector<std::shared_ptr<BookieConn>> closed;
  for (auto it = by_address_.begin(); it != by_address_.end();) {
    auto next = std::next(it);
    Cached& c = it->second;
    // Held by the pool alone: nobody can take a new reference but through
    // the pool, under mu_.
    if (c.conn.use_count() > 1) {
      c.idle_since = absl::InfiniteFuture();
    } else if (c.idle_since == absl::InfiniteFuture()) {
      c.idle_since = now;
    } else if (now - c.idle_since >= idle_close_) {
      closed.push_back(std::move(c.conn));
      by_address_.erase(it);
    }
    it = next;
  }
  return closed;
}

size_t BookiePool::connections_for_test() {
  absl::MutexLock l(&mu_);
  return by_address_.size();
}

std::shared_ptr<BookieConn> BookiePool::ForAddress(const std::string& address) {
  absl::MutexLock l(&mu_);
  Cached& cached = by_address_[address];
  cached.idle_since = absl::InfiniteFuture();
  std::shared_ptr<BookieConn>& conn = cached.conn;
  if (conn == nullptr) {
    grpc::ChannelArguments args;
    // Bookies are peers on a local network: come back quickly after a
    // restart instead of gRPC's default backoff that grows to two minutes.
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
    // gRPC uses the "min reconnect backoff" as the connect timeout (TCP
    // connect plus the server's HTTP/2 SETTINGS), not as a backoff. At
    // 100 ms a busy bookie (sanitizer build, loaded machine) failed the
    // handshake ("connection attempt timed out before receiving SETTINGS
    // frame"), the channel went TRANSIENT_FAILURE and a healthy bookie was
    // dropped from the ensemble. A refused connection still fails at once.
    args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 5000);
    // Batched reads may exceed the 4 MiB default, and one entry may be up
    // to the bookie's largest payload: an entry the bookie stored (and
    // acknowledged) must also travel back in a read, and again in a
    // recovery add, with room for the message's fields. The bookie's own
    // limit is the same.
    args.SetMaxReceiveMessageSize(static_cast<int>(add_protocol::kMaxBodyBytes));
    args.SetMaxSendMessageSize(static_cast<int>(add_protocol::kMaxBodyBytes));
    // A channel of its own per pool: a test's stopped bookie must not leave
    // a shared, backed-off subchannel behind for other clients.
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    conn = std::make_shared<BookieConn>();
    conn->address = address;
    if (local_channel_) {
      // A channel without its gate is not used: a call started after the
      // bookie stopped would crash the process (options.h).
      LocalChannel local = local_channel_(address, args);
      if (local.channel != nullptr && local.gate) {
        conn->channel = std::move(local.channel);
        conn->call_gate = std::move(local.gate);
      }
    }
    if (conn->channel != nullptr && local_add_) conn->local_add = local_add_(address);
    if (conn->channel == nullptr) {
      conn->channel = grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
      if (use_add_port_) {
        conn->add_channel = std::make_unique<AddChannel>(address, conn->channel, connect_timeout_);
      }
    }
    conn->stub = bookie::v1::Bookie::NewStub(conn->channel);
  }
  return conn;
}

absl::StatusOr<std::shared_ptr<BookieConn>> BookiePool::ForBookie(const std::string& bookie_id) {
  std::string cached;
  {
    absl::MutexLock l(&mu_);
    auto it = address_of_.find(bookie_id);
    if (it != address_of_.end()) cached = it->second;
  }
  if (!cached.empty()) return ForAddress(cached);
  auto got = store_->Get(keys_.Bookie(bookie_id));
  if (absl::IsNotFound(got.status())) {
    return absl::UnavailableError(absl::StrCat("bookie ", bookie_id, " is not registered (down?)"));
  }
  if (!got.ok()) {
    return absl::UnavailableError(absl::StrCat("cannot resolve bookie ", bookie_id, ": ",
                                               got.status().ToString()));
  }
  meta::v1::BookieRegistration registration;
  if (!registration.ParseFromString(got->value) || registration.address().empty()) {
    return absl::DataLossError(absl::StrCat("unparsable registration of bookie ", bookie_id));
  }
  Learn(bookie_id, registration.address());
  return ForAddress(registration.address());
}

bool BookiePool::WaitUntilReachable(const std::string& address) {
  std::shared_ptr<BookieConn> conn = ForAddress(address);
  if (conn->call_gate || conn->channel == nullptr) return true;  // in-process: no backoff
  grpc::experimental::ChannelResetConnectionBackoff(conn->channel.get());
  const bool connected = conn->channel->WaitForConnected(
      absl::ToChronoTime(absl::Now() + connect_timeout_));
  // After the wait: a connect the add channel started before it, failed
  // fast on the backing-off channel, must not leave a backoff behind.
  if (conn->add_channel != nullptr) conn->add_channel->ResetBackoff();
  return connected;
}

void BookiePool::Learn(const std::string& bookie_id, const std::string& address) {
  absl::MutexLock l(&mu_);
  address_of_[bookie_id] = address;
}

void BookiePool::Forget(const std::string& bookie_id) {
  absl::MutexLock l(&mu_);
  address_of_.erase(bookie_id);
}

}  // namespace ledgerkv::ledger
