// AddServer: the bookie's add port (docs/add-transport.md). It takes Add
// requests over plain TCP frames (base/frame_conn.h), parses each into
// views of its bytes (proto/add_wire.h) and hands it to the bookie's own
// Add (BookieServiceImpl::AddEntries: the same checks, fault points and
// storage call as the Add RPC, answered after the fdatasync), replying from
// the storage's commit path without a thread hand-off.
//
// Threads: one accepting, one per connection (reading requests, and
// writing replies the socket could not take at once).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/functional/any_invocable.h"
#include "absl/time/time.h"
#include "grpcpp/support/status.h"
#include "ledger/bookie/bookie_server.h"
#include "ledger/bookie/bookie_storage.h"

namespace ledgerkv {
class FrameConn;
}

namespace ledgerkv::bookie {

struct AddBudget;

// How the add port hands over a parsed request: BookieServer wires it to
// BookieServiceImpl::AddEntries, through its serving gate. `done` gets the
// status the Add RPC would end with and, when OK, one code per entry.
using AddEntriesDone =
    absl::AnyInvocable<void(const grpc::Status& status, std::vector<v1::Code> codes) &&>;
using AddEntriesFunction =
    std::function<void(std::string_view expected_instance_id, bool recovery,
                       std::vector<EntryView> entries, AddEntriesDone done)>;

struct AddServerLimits {
  // Connections beyond this many are closed at once (each costs a thread
  // and two descriptors). Positive.
  size_t max_connections = 1024;
  // A connection that has not said hello by then is closed. Positive.
  absl::Duration hello_timeout = absl::Seconds(10);
  // Request bytes handed to the storage and not yet answered, over all
  // connections: while the total is at or above this, no connection reads
  // (each also stops at 64 MiB of its own). Positive.
  int64_t max_in_flight_bytes = int64_t{256} << 20;
};

class AddServer {
 public:
  // Listens on `listen` (host:port, port 0 picks a free one) and serves
  // every request with `add`. UNAVAILABLE if it cannot listen. `bookie_id`
  // is the argument of its fault point:
  //   bookie.add_port.drop_reply    the add is done but its reply is lost;
  //   bookie.add_port.stop_reading  a greeted connection reads nothing more
  //                                 (checked at least every 500 ms).
  static absl::StatusOr<std::unique_ptr<AddServer>> Start(const std::string& listen,
                                                          AddEntriesFunction add,
                                                          std::string bookie_id,
                                                          AddServerLimits limits = {});
  ~AddServer();  // Shutdown()
  AddServer(const AddServer&) = delete;
  AddServer& operator=(const AddServer&) = delete;

  int port() const { return port_; }

  // Stops accepting, closes every connection and joins the threads. Adds
  // already handed to `add` still run their replies (which are dropped).
  // Idempotent.
  void Shutdown();

 private:
  AddServer(int listen_fd, int port, AddEntriesFunction add, std::string bookie_id,
            AddServerLimits limits);
  void AcceptLoop();
  // Joins the threads of connections that ended and forgets them.
  void ReapLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Serve(std::shared_ptr<FrameConn> conn);
  // Whether the server-wide request budget lets `conn` read now. If not,
  // `conn` is woken when the budget frees up.
  bool BudgetAllowsRead(const std::shared_ptr<FrameConn>& conn);

  const int listen_fd_;
  const int port_;
  const int wake_fd_;  // eventfd: wakes the accept loop on Shutdown
  const AddEntriesFunction add_;
  const std::string bookie_id_;
  const AddServerLimits limits_;
  // Shared with the calls, whose replies may run after the server is gone.
  const std::shared_ptr<AddBudget> budget_;

  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
  struct Connection {
    std::shared_ptr<FrameConn> conn;
    std::thread thread;
    bool finished = false;
  };
  std::vector<std::unique_ptr<Connection>> connections_ ABSL_GUARDED_BY(mu_);
  std::thread accept_thread_;
};

}  // namespace ledgerkv::bookie
