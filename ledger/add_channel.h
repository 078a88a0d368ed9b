// AddChannel: a writer's Add requests to one bookie over the bookie's add
// port (docs/add-transport.md) instead of the Add RPC: the same request,
// the same reply and status, without gRPC's per-call cost, which on small
// machines is several disk syncs per round trip (docs/performance.md).
//
// One per bookie and client (BookieConn::add_channel), shared by every
// writer. It learns the add port from the bookie's GetInfo on every
// (re)connect, so a bookie restarted on another add port is found again;
// a bookie without one (an older build, or --add-listen off) gets the Add
// RPC, through the same interface.
//
// Threads: one per channel, connecting, reading replies and enforcing
// deadlines; replies' `done`s run on it, and after them what they queued
// with RunAfterReplies (a writer's user callbacks). Add, Cancel and
// NewCallId are thread-safe and never block.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/add_wire.h"

namespace grpc {
class Channel;
class Status;
}  // namespace grpc

namespace ledgerkv {
class FrameConn;
}

namespace ledgerkv::bookie::v1 {
class AddRequest;
class AddResponse;
}  // namespace ledgerkv::bookie::v1

namespace ledgerkv::ledger {

class AddChannel {
 public:
  using Done = std::function<void(const grpc::Status&)>;

  // `address`: the bookie's gRPC host:port (the add port is on its host).
  // `channel` (to that address) answers GetInfo and, for a bookie without
  // an add port, Add. `connect_timeout` bounds one (re)connect: GetInfo
  // plus the TCP connect.
  AddChannel(std::string address, std::shared_ptr<grpc::Channel> channel,
             absl::Duration connect_timeout);
  // Fails what is still pending (CANCELLED) and joins the thread.
  ~AddChannel();
  AddChannel(const AddChannel&) = delete;
  AddChannel& operator=(const AddChannel&) = delete;

  // An id for Add; unique in this channel, never 0. Every id handed out
  // must reach Add (until then the channel remembers it, so that a Cancel
  // that comes first is not lost).
  uint64_t NewCallId();

  // The results of one add: one per entry, in request order (the reply's
  // AddResponse, parsed without message objects, proto/add_wire.h).
  using Results = std::vector<addwire::AddResultRef>;
  // Appends the results of `response` (an Add RPC's) to `out`.
  static void AppendResults(const bookie::v1::AddResponse& response, Results* out);

  // Sends `request` (kept alive by the caller until `done`) and fills
  // `results` from the reply. `done` runs exactly once, on the channel's
  // thread, a gRPC thread or inline: OK once `results` is filled; else
  // UNAVAILABLE (no connection, or it broke: the request may or may not
  // have been stored), DEADLINE_EXCEEDED past `deadline`, CANCELLED by
  // Cancel, or the bookie's own error status.
  void Add(uint64_t id, const bookie::v1::AddRequest& request, Results* results,
           absl::Time deadline, Done done);

  // Whether this thread is a channel's, running the `done`s of replies it
  // read (a writer delivers its callbacks there instead of waking its own
  // thread: ClientOptions::callbacks_on_reply_thread).
  static bool OnReplyThread();
  // Runs `fn` on this channel thread once every reply read together with
  // the current one has run its `done`, so that work several replies make
  // ready (a writer's deliveries) runs once for all of them.
  // REQUIRES: OnReplyThread().
  static void RunAfterReplies(std::function<void()> fn);

  // Ends call `id` with CANCELLED if it is still pending (runs its `done`
  // inline, so the caller must not hold locks `done` takes). For an id
  // handed out but not added yet, leaves a mark: its Add then ends it at
  // once with CANCELLED. A no-op for a call that already ended.
  void Cancel(uint64_t id);

  // Forgets the backoff after a failed (re)connect: the next add connects
  // at once instead of failing fast. For a bookie known to be up again
  // (BookiePool::WaitUntilReachable).
  void ResetBackoff();

  // Cancels remembered for ids not added yet (tests: bounded by the ids in
  // transit, never by how many calls ended).
  size_t cancel_marks_for_test();
  // Request bytes the current connection holds unsent (0 without one).
  size_t queued_bytes_for_test();

 private:
  struct Pending {
    const bookie::v1::AddRequest* request = nullptr;
    Results* results = nullptr;
    absl::Time deadline;
    Done done;
    // When it was handed to the current connection (InfiniteFuture while
    // it waits in the backlog).
    absl::Time sent = absl::InfiniteFuture();
  };
  struct RpcCall;
  struct Stub;
  enum class Mode { kUnknown, kAddPort, kRpc };

  void Loop();
  // GetInfo, then a TCP connect to the add port. Sets *mode.
  absl::Status Connect(std::unique_ptr<FrameConn>* conn, Mode* mode);
  void SendLocked(FrameConn* conn, uint64_t id, const bookie::v1::AddRequest& request)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AddByRpc(uint64_t id, const bookie::v1::AddRequest& request, Results* results,
                absl::Time deadline, Done done);
  // Moves every pending call into `out` with `status`.
  void FailAllLocked(const grpc::Status& status, std::vector<std::pair<Done, grpc::Status>>* out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string address_;
  std::string host_;
  const std::unique_ptr<Stub> stub_;
  const absl::Duration connect_timeout_;

  absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 0;
  Mode mode_ ABSL_GUARDED_BY(mu_) = Mode::kUnknown;
  std::shared_ptr<FrameConn> conn_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, Pending> pending_ ABSL_GUARDED_BY(mu_);
  // Ids of pending calls waiting for a connection, in Add order.
  std::vector<uint64_t> backlog_ ABSL_GUARDED_BY(mu_);
  // After a failed connect, Add fails at once until this time.
  absl::Time retry_after_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  absl::Duration backoff_ ABSL_GUARDED_BY(mu_);
  absl::Status last_error_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, std::shared_ptr<RpcCall>> rpc_calls_ ABSL_GUARDED_BY(mu_);
  // Ids handed out (NewCallId) and not yet held by pending_ or rpc_calls_:
  // not added yet, or on their way to the RPC. Only these can take a
  // cancel mark; an id that ended is in neither, and Cancel ignores it.
  absl::flat_hash_set<uint64_t> in_transit_ ABSL_GUARDED_BY(mu_);
  // Ids of in_transit_ cancelled before they were added (see Cancel);
  // always a subset of in_transit_.
  absl::flat_hash_set<uint64_t> cancelled_ ABSL_GUARDED_BY(mu_);
  // In Mode::kRpc until this time.
  absl::Time rpc_until_ ABSL_GUARDED_BY(mu_);
  // Each reason to fall back to the RPC is printed once per channel.
  bool warned_unreachable_ ABSL_GUARDED_BY(mu_) = false;
  bool warned_closed_ ABSL_GUARDED_BY(mu_) = false;
  // Whether the current connection has delivered any reply yet.
  bool conn_answered_ ABSL_GUARDED_BY(mu_) = false;
  // When the current connection was made or last delivered a reply.
  absl::Time conn_heard_ ABSL_GUARDED_BY(mu_);
  // The current connection's bytes_written() when the thread last looked,
  // and when it last saw that grow (the socket taking request bytes).
  uint64_t conn_written_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time conn_took_bytes_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace ledgerkv::ledger
