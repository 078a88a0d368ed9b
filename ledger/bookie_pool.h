// BookiePool: one gRPC channel and stub per bookie address, shared by every
// writer, reader and recoverer of a LedgerClient, and the resolution of
// bookie ids (as stored in ledger metadata) to addresses through the bookie
// registrations in the metadata store.
//
// Thread-safe. ForAddress never blocks; ForBookie may read the metadata
// store and so must not be called from a gRPC callback. A thread of the
// pool closes connections nobody has used for a while (never a caller's
// thread: closing one joins its add channel's thread).
#pragma once

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/channel.h"
#include "grpcpp/support/status.h"
#include "ledger/add_channel.h"
#include "ledger/options.h"
#include "metadata/metadata_store.h"
#include "proto/bookie.grpc.pb.h"

namespace ledgerkv::ledger {

using LocalChannelFactory = decltype(ClientOptions::local_channel);
using LocalAddFactory = decltype(ClientOptions::local_add);

struct BookieConn {
  // Starts one call on `stub` by running `start` (which must not block).
  // For a bookie of this process, only while it serves: once it began
  // shutting down, returns false without running `start`, and the caller
  // completes the call UNAVAILABLE itself (ClientOptions::local_channel).
  bool StartCall(absl::FunctionRef<void()> start) const {
    if (!call_gate) {
      start();
      return true;
    }
    return call_gate(start);
  }

  std::string address;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<bookie::v1::Bookie::Stub> stub;
  // Set with an in-process channel: every call on `stub` starts through it
  // (StartCall).
  LocalCallGate call_gate;
  // Set for a bookie of this process (ClientOptions::local_add): writers
  // add through it instead of the stub.
  LocalAddFn local_add;
  // Set for a TCP bookie when ClientOptions::use_add_port: writers add
  // through the bookie's add port (docs/add-transport.md) instead of the stub.
  std::unique_ptr<AddChannel> add_channel;
};

// The status of a call that BookieConn::StartCall refused.
inline grpc::Status ShutDownStatus(const BookieConn& conn) {
  return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                      "bookie " + conn.address + " of this process has shut down");
}

class BookiePool {
 public:
  // REQUIRES: store outlives the pool. `local_channel` (may be empty) is
  // ClientOptions::local_channel: consulted before creating a TCP channel.
  // `use_add_port`: TCP connections add through the bookie's add port,
  // each (re)connect bounded by `connect_timeout`. A connection nobody but
  // the pool has held for `idle_close` is closed by the pool's thread
  // (ClientOptions::idle_connection_close), which looks every
  // `idle_close` / 4; InfiniteDuration: no thread, nothing closed.
  BookiePool(metadata::MetadataStore* store, metadata::Keys keys,
             LocalChannelFactory local_channel = nullptr, LocalAddFactory local_add = nullptr,
             bool use_add_port = true, absl::Duration connect_timeout = absl::Seconds(5),
             absl::Duration idle_close = absl::Minutes(10));

  ~BookiePool();
  BookiePool(const BookiePool&) = delete;
  BookiePool& operator=(const BookiePool&) = delete;

  // Returns the connection to `address`, creating its channel on first use:
  // the in-process channel `local_channel` gives for it, else a TCP channel.
  // TCP channels reconnect by themselves with a short backoff (a restarted
  // bookie is reachable again within about a second).
  std::shared_ptr<BookieConn> ForAddress(const std::string& address);

  // Returns the connection to bookie `bookie_id`, resolving its address from
  // its registration the first time (cached afterwards).
  // UNAVAILABLE if the bookie is not registered (it is down) or the store
  // cannot be read; DATA_LOSS if the registration does not parse.
  absl::StatusOr<std::shared_ptr<BookieConn>> ForBookie(const std::string& bookie_id);

  // Records the address of `bookie_id` (e.g. from a registration listing).
  void Learn(const std::string& bookie_id, const std::string& address);

  // For a bookie whose registration shows it up (a replacement just
  // chosen, perhaps at the address of one that failed): forgets the
  // reconnect backoffs this client keeps for `address` (its gRPC channel's
  // and its add channel's, which fail calls fast until they run out) and
  // waits, up to the connect timeout, for the channel to connect. Returns
  // whether it did. Blocking; a no-op for a bookie of this process.
  // (docs/ledger-protocol.md, "Ensemble change".)
  bool WaitUntilReachable(const std::string& address);

  // Forgets the cached address of `bookie_id`, so the next ForBookie
  // re-reads its registration (the bookie may have moved).
  void Forget(const std::string& bookie_id);

  // Tests: the connections the pool holds open.
  size_t connections_for_test();

 private:
  metadata::MetadataStore* const store_;
  const metadata::Keys keys_;
  const LocalChannelFactory local_channel_;
  const LocalAddFactory local_add_;
  const bool use_add_port_;
  const absl::Duration connect_timeout_;
  const absl::Duration idle_close_;

  struct Cached {
    std::shared_ptr<BookieConn> conn;
    // Since when only the pool holds `conn` (InfiniteFuture: someone else
    // held it at the last sweep).
    absl::Time idle_since = absl::InfiniteFuture();
  };
  // The pool's thread: every idle_close_ / 4, closes the connections idle
  // for idle_close_ (outside mu_: closing an add channel joins its thread).
  void ReapLoop();
  // Takes out of by_address_ the connections idle for idle_close_.
  std::vector<std::shared_ptr<BookieConn>> SweepIdleLocked(absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::Mutex mu_;
  absl::flat_hash_map<std::string, Cached> by_address_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread reaper_;
  absl::flat_hash_map<std::string, std::string> address_of_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ledgerkv::ledger
