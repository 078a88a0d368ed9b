// BookieServer: a running bookie — storage, the Bookie gRPC service on a
// listening port, and (with a metadata store) its cookie, its ephemeral
// registration and ledger garbage collection. `ledgerkv bookie` runs one;
// tests start them in-process.
//
// Threads: gRPC's, the storage's (writer, checkpointer, LAC timer), a read
// pool, and with metadata a background thread for GC and registration
// updates. Public methods are thread-safe.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "base/file.h"
#include "metadata/metadata_store.h"

namespace grpc {
class Channel;
class ChannelArguments;
class Server;
class Status;
}  // namespace grpc

namespace ledgerkv::bookie {

class AddServer;
class BookieStorage;
class BookieServiceImpl;
namespace v1 {
class AddRequest;
class AddResponse;
}  // namespace v1

// An Add without gRPC (BookieServer::LocalAdd); the type of
// ledger::LocalAddFn (ledger/options.h).
using LocalAddFunction =
    std::function<void(const v1::AddRequest& request, v1::AddResponse* response,
                       std::function<void(const grpc::Status&)> done)>;

// Starts a call on an in-process channel (BookieServer::InProcessCallGate);
// the type of ledger::LocalCallGate (ledger/options.h).
using LocalCallGate = std::function<bool(absl::FunctionRef<void()> start)>;

struct BookieOptions {
  // Data directory (created if missing).
  std::string data_dir;
  // host:port to listen on; port 0 picks a free one (see address()).
  std::string listen = "127.0.0.1:0";
  // The address to publish (registration, bookie id): "HOST" (with the
  // bound port) or "HOST:PORT". Empty: `listen` with the bound port. With a
  // metadata store, a wildcard `listen` host (0.0.0.0, [::]) needs it
  // (docs/cluster.md, "Addresses: listen and advertise").
  std::string advertise;
  // The add port (docs/add-transport.md): host:port for Add requests over
  // plain TCP frames, which clients prefer to the Add RPC. Empty: the host
  // of `listen`, a free port. "off": none (clients use the Add RPC).
  std::string add_listen;
  // Add port limits (AddServerLimits): connections served at once (more are
  // closed, and their clients add over gRPC), how long a connection may
  // take to say hello, and the request bytes all connections together may
  // have with the storage. All positive.
  size_t add_port_max_connections = 1024;
  absl::Duration add_port_hello_timeout = absl::Seconds(10);
  int64_t add_port_max_in_flight_bytes = int64_t{256} << 20;
  // Default: the published address (address()).
  std::string bookie_id;
  // false: relaxed mode without fdatasync on adds (see docs/bookie-format.md).
  bool sync = true;
  // StorageOptions::group_commit_wait_max (docs/bookie-format.md, "Write
  // batches"); zero turns the group commit wait off.
  absl::Duration group_commit_wait_max = absl::Milliseconds(1);
  // StorageOptions::group_commit_forget_after_idle.
  absl::Duration group_commit_forget_after_idle = absl::Milliseconds(10);
  // StorageOptions::disk_high_watermark and friends (docs/bookie-format.md,
  // "Disk usage watermarks"): adds refused from `high` of the disk in use
  // until it is below `low`; 1.0 turns it off.
  double disk_high_watermark = 0.95;
  double disk_low_watermark = 0.90;
  absl::Duration disk_check_interval = absl::Seconds(1);
  // File layer for the journal (nullptr: Env::Default()). Must outlive the server.
  Env* env = nullptr;
  // Optional; must outlive the server. Enables the cookie check,
  // registration and garbage collection.
  metadata::MetadataStore* metadata = nullptr;
  std::string cluster = "default";
  absl::Duration gc_interval = absl::Minutes(5);
};

class BookieServer {
 public:
  // Opens the storage (replaying the journal), starts serving, and with
  // metadata checks the cookie and registers the bookie.
  // Errors: as BookieStorage::Open; UNAVAILABLE if it cannot listen on
  // options.listen; FAILED_PRECONDITION if the metadata cookie of this
  // bookie id names another instance (its data dir was wiped or belongs to
  // another bookie); metadata store errors.
  static absl::StatusOr<std::unique_ptr<BookieServer>> Start(BookieOptions options);

  // Shutdown().
  ~BookieServer();

  BookieServer(const BookieServer&) = delete;
  BookieServer& operator=(const BookieServer&) = delete;

  // The published address: where others dial the service (`advertise`, or
  // the listen host with the bound port).
  const std::string& address() const { return address_; }
  const std::string& bookie_id() const { return bookie_id_; }
  const std::string& instance_id() const { return instance_id_; }
  // The bound add port, 0 without one.
  int add_port() const;

  // A channel to this bookie's service that stays inside the process (gRPC's
  // in-process transport: no socket, no HTTP/2 framing), for a client in the
  // same process (ClientOptions::local_channel). Same service, same replies:
  // an add is still answered only after its fdatasync. Every call must start
  // through InProcessCallGate(): gRPC's in-process transport hands a starting
  // call to the server's side, which Shutdown closes, and a call started
  // after that crashes the process. Calls running when Shutdown begins fail.
  // nullptr once Shutdown marked the bookie shut down (calls on a channel
  // handed out before that are refused by the gate).
  std::shared_ptr<grpc::Channel> InProcessChannel(const grpc::ChannelArguments& args);

  // Runs `start` (which starts one call on an InProcessChannel) and returns
  // true while the bookie serves; once Shutdown began, returns false without
  // running it (the caller fails the call UNAVAILABLE). Shutdown waits for
  // the `start`s already running before it stops the server. May be called
  // at any time, also after the BookieServer is gone. `start` must not block.
  LocalCallGate InProcessCallGate();

  // The Add of this bookie as a function call, for a ledger client in the
  // same process (ClientOptions::local_add): the service's own Add (same
  // checks, same reply only after the fdatasync), without gRPC. After
  // Shutdown begins it answers UNAVAILABLE; adds already handed over are
  // answered by the storage's close. May be called at any time, also during
  // or after Shutdown. No deadline: the bookie is in this process, on this
  // host's disk; an fdatasync that never returns holds its adds (and the
  // bookie's own Shutdown) until it does, where an RPC would have timed out.
  LocalAddFunction LocalAdd();

  // Deregisters, answers every pending request, stops serving and closes
  // the storage (releasing the data directory). Idempotent.
  void Shutdown();

  // One garbage-collection round: takes the ledgers held, THEN lists the
  // ledgers in metadata; deletes those held but absent (leaving tombstones
  // that keep them fenced), then reclaims journal files (delete dead files,
  // compact those under half live, a bounded amount per round).
  // A failed listing deletes nothing and returns its error.
  // FAILED_PRECONDITION without a metadata store or after Shutdown.
  absl::Status RunGcOnce();

  // Whether the bookie has turned read-only (a failed write or sync).
  bool read_only() const;

 private:
  explicit BookieServer(BookieOptions options);

  absl::Status CheckCookie();
  // (Re)creates the session and publishes the registration (ephemeral, in
  // the session) in one transaction on "the cookie names this instance, as
  // read": a cookie deleted (`ledgerkv cluster delete-cookie`) or replaced
  // since the bookie checked it is never registered over.
  // FAILED_PRECONDITION then, and cookie_lost_ is set: the operator
  // declared this instance gone.
  absl::Status Register();
  void BackgroundLoop();

  // Constant after Start.
  const BookieOptions options_;
  std::string address_;
  std::string bookie_id_;
  std::string instance_id_;
  std::unique_ptr<BookieStorage> storage_;
  std::unique_ptr<BookieServiceImpl> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<AddServer> add_server_;
  // Lets LocalAdd functions and in-process calls outlive the service and
  // the gRPC server safely: Shutdown clears `service` and waits until no
  // local add or call start is inside the gate.
  struct LocalGate {
    std::atomic<BookieServiceImpl*> service{nullptr};
    std::atomic<int> active{0};
  };
  const std::shared_ptr<LocalGate> local_gate_ = std::make_shared<LocalGate>();

  // Held through Shutdown: a second caller (a signal thread and the
  // destructor) waits for the first to finish, then returns.
  absl::Mutex shutdown_mu_ ABSL_ACQUIRED_BEFORE(gc_mu_);
  absl::Mutex gc_mu_;  // one GC round at a time

  mutable absl::Mutex mu_;
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
  bool read_only_at_shutdown_ ABSL_GUARDED_BY(mu_) = false;
  metadata::SessionId session_ ABSL_GUARDED_BY(mu_) = metadata::kNoSession;
  // Register found the cookie deleted or naming another instance: the
  // bookie no longer registers and refuses adds (BackgroundLoop).
  bool cookie_lost_ ABSL_GUARDED_BY(mu_) = false;

  // Requests for the background thread. Shared with the session-expiry
  // callback, which the store may run even after this object is gone.
  struct Wakeup {
    absl::Mutex mu;
    absl::CondVar cv;
    bool stopping ABSL_GUARDED_BY(mu) = false;
    bool reregister ABSL_GUARDED_BY(mu) = false;
    bool read_only_changed ABSL_GUARDED_BY(mu) = false;
  };
  const std::shared_ptr<Wakeup> wakeup_ = std::make_shared<Wakeup>();
  std::thread background_;
};

}  // namespace ledgerkv::bookie
