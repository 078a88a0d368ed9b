// WriterState: the machinery behind LedgerWriter (see ledger_writer.h for the
// contract and docs/ledger-protocol.md for the rules). Internal to ledger/.
//
// Threads that touch it:
//  - callers of Append/AppendAsync/Close/lac/metadata;
//  - reply threads (OnAddDone: gRPC callback threads, add channel threads,
//    the in-process bookie's journal thread): they update state under mu_
//    and send more queued entries; they never touch the metadata store and
//    block only in user callbacks. An add channel's thread also delivers
//    completions its replies made ready (DeliverOnReplyThread), unless
//    ClientOptions::callbacks_on_reply_thread is off; other reply threads
//    never run user callbacks;
//  - the writer's own thread (Run): delivers the other completions (and
//    all of them with that option off), sends explicit LAC writes and
//    performs ensemble changes (placement + metadata CAS).
// One thread at a time delivers (delivering_), in entry-id order. A
// delivery queued on an add channel's thread reaches the state through
// reply_token_, which Shutdown clears, so it never outlives the state.
// Lifetime: RPC callbacks hold a plain pointer to the state, never a
// reference. Shutdown (run by ~LedgerWriter) cancels the Add RPCs still in
// flight and waits until every callback has returned, so the state, its
// ClientCore and the bookie channels are always released on the owner's
// thread. A gRPC callback that dropped the last reference to a channel would
// destroy the channel (and its callback completion queue) from inside one of
// its own callbacks, which gRPC does not survive ("ref_counted.h: prior > 0").
//
// Fault points (base/fault_point.h), argument = the ledger id in decimal:
//   ledger.writer.ensemble_change  hit on the writer's thread when an
//                                  ensemble change begins (acks are held
//                                  from here until it ends); a callback may
//                                  block to hold the change open;
//   ledger.writer.failed           hit once when the writer fails for good
//                                  (fenced, no replacement, destroyed), with
//                                  the writer's mutex held: the callback
//                                  must not call the writer.
// and, with the argument "<ledger id> <entry id>":
//   ledger.writer.acked            hit (never fires) when a bookie's OK for
//                                  an entry is counted toward its Qa, with
//                                  the writer's mutex held;
// and, without an argument:
//   ledger.writer.add_channel_send hit before a registered call to a bookie's
//                                  add port gets its id (on the thread that
//                                  sends it); a callback may block there;
//   ledger.writer.calls_cancelled  hit when the writer's destruction has
//                                  cancelled every call it could name.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/client_context.h"
#include "ledger/add_channel.h"
#include "ledger/client_core.h"
#include "ledger/ledger_writer.h"
#include "proto/bookie.pb.h"

namespace ledgerkv::ledger {

class WriterState {
 public:
  // `ledger` is the freshly created (OPEN, empty) ledger; conns[i] is the
  // connection to ensemble index i of its only segment.
  WriterState(std::shared_ptr<ClientCore> core, VersionedLedger ledger,
              std::vector<std::shared_ptr<BookieConn>> conns);
  ~WriterState();

  // Starts the writer thread. Called once, before any other method.
  void Start();
  // Fails everything pending with CANCELLED, joins the writer thread, then
  // cancels the Add RPCs in flight and waits for all their callbacks to
  // return. After it, no gRPC callback refers to this state. Idempotent.
  // REQUIRES: not called from a gRPC callback or an AddCallback.
  void Shutdown();

  void AppendAsync(std::string_view payload, LedgerWriter::AddCallback done);
  // LedgerWriter::SendHeldAppends.
  void SendHeldAppends() ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status Close();
  int64_t lac() const;
  meta::v1::LedgerMetadata metadata() const;
  WriterStats stats() const;

 private:
  struct PendingAdd {
    int64_t entry_id = 0;
    uint64_t cumulative_length = 0;
    bookie::v1::Entry entry;  // immutable once queued
    LedgerWriter::AddCallback done;
    uint64_t acked = 0;  // ensemble indices that acknowledged (guarded by mu_)
    int ack_count = 0;   // guarded by mu_
  };

  // One ensemble index of the current (last) segment.
  struct Slot {
    std::string bookie_id;
    std::string instance_id;
    std::shared_ptr<BookieConn> conn;
    // Bumped when the slot fails or gets a new bookie: replies of older
    // RPCs are ignored.
    uint64_t generation = 0;
    std::deque<std::shared_ptr<PendingAdd>> queue;  // waiting to be sent
    int in_flight = 0;
    bool failed = false;
    std::string failure;
  };

  // One Add RPC. The request does not own its entries: it points at the
  // PendingAdds' immutable Entry messages (one copy shared by the Qw
  // requests that carry it, instead of a copy of every payload per bookie)
  // and gives them back before it is destroyed. `adds` keeps them alive
  // until then. gRPC only reads the request (serialising a message from
  // several threads at once is safe: its cached sizes are atomics).
  struct AddCall {
    AddCall() = default;
    AddCall(const AddCall&) = delete;
    AddCall& operator=(const AddCall&) = delete;
    ~AddCall();
    void Include(std::shared_ptr<PendingAdd> add);

    grpc::ClientContext ctx;
    // The AddChannel call id when sent through conn->add_channel (set
    // before the send, so that a cancel can name it).
    std::atomic<uint64_t> add_id{0};
    bookie::v1::AddRequest request;
    // The reply: `results` (one per entry, in request order) once the call
    // ended OK. The add channel fills it; the Add RPC and local_add fill
    // `response`, copied into `results` when they end.
    AddChannel::Results results;
    bookie::v1::AddResponse response;
    std::vector<std::shared_ptr<PendingAdd>> adds;  // in request order
    std::shared_ptr<BookieConn> conn;
    int slot = 0;
    uint64_t generation = 0;
  };

  // One explicit WriteLac RPC (docs/ledger-protocol.md). Its answer is
  // not acted on; it is owned by live_lac_calls_ until OnLacDone.
  struct LacCall {
    grpc::ClientContext ctx;
    bookie::v1::WriteLacRequest request;
    bookie::v1::WriteLacResponse response;
    std::shared_ptr<BookieConn> conn;
  };

  struct Delivery {
    LedgerWriter::AddCallback done;
    absl::StatusOr<int64_t> result;
  };

  void Run();
  // Runs `deliveries` (taken with delivering_ set, by this thread as
  // deliverer_); appends they make are sent together afterwards.
  void Deliver(std::vector<Delivery> deliveries) ABSL_LOCKS_EXCLUDED(mu_);
  // Scheduled by OnAddDone on an add channel's thread (inline_scheduled_),
  // run with reply_token_->mu held: delivers what is ready unless another
  // thread already does, until nothing is left.
  void DeliverOnReplyThread() ABSL_LOCKS_EXCLUDED(mu_);
  bool HasWorkLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Completions ready to run: failures queued, or an acked head (not
  // during an ensemble change).
  bool HasDeliverableLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Waits until HasWorkLocked, or until an explicit LAC write is due: then
  // returns the calls to send (registered and counted like Add calls).
  std::vector<LacCall*> AwaitWorkLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // When the bookies should be told lac_ explicitly (InfiniteFuture: not
  // now; the writer appends, is told already, failed, closes or changes
  // its ensemble).
  absl::Time ExplicitLacDueLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SendLacCalls(std::vector<LacCall*> calls) ABSL_LOCKS_EXCLUDED(mu_);
  void OnLacDone(LacCall* call) ABSL_LOCKS_EXCLUDED(mu_);
  bool NeedEnsembleChangeLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CollectDeliverableLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RunEnsembleChange() ABSL_LOCKS_EXCLUDED(mu_);
  // Waits before retry `attempt` of a metadata operation of an ensemble
  // change. Returns false if the writer is being shut down meanwhile.
  bool PauseBeforeRetry(int attempt) ABSL_LOCKS_EXCLUDED(mu_);
  // Delivers the head of pending_ as acknowledged (advances the LAC).
  void DeliverHeadLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ends the writer for good. The head of pending_ that already reached Qa
  // is still delivered as acknowledged (it is durable, and a recoverer's
  // fence read meets its ack quorum); every other pending add fails with
  // `status`. `change_in_doubt`: an ensemble change may have been written
  // to the metadata, so acks from the failed bookies it replaces do not
  // count (the new segment no longer names them).
  void SetErrorLocked(absl::Status status, bool change_in_doubt)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FailSlotLocked(int slot, std::string why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AckLocked(PendingAdd& add, int slot) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Moves queued entries of `slot` into Add RPCs (batched, capped), to be
  // sent by SendAll once mu_ is released.
  // Each call made is registered in live_calls_ (which owns it) and counted
  // in callbacks_pending_ until its OnAddDone returns.
  void PumpLocked(int slot, std::vector<AddCall*>* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Pumps the slots whose appends were held during a delivery.
  void PumpHeldLocked(std::vector<AddCall*>* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SendAll(std::vector<AddCall*> calls) ABSL_LOCKS_EXCLUDED(mu_);
  void OnAddDone(AddCall* call, const grpc::Status& status) ABSL_LOCKS_EXCLUDED(mu_);
  // OnAddDone for a call answered in `response` (the Add RPC, local_add):
  // copies its results into `results` first.
  void OnAddResponseDone(AddCall* call, const grpc::Status& status) ABSL_LOCKS_EXCLUDED(mu_);
  // Handles a reply under mu_; `out` gets follow-up calls to send.
  void HandleAddReplyLocked(const AddCall& call, const grpc::Status& status,
                            std::vector<AddCall*>* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Cancels every registered call and waits until callbacks_pending_ is 0.
  // REQUIRES: error_ set (no new call can be made).
  void CancelAndDrainCalls() ABSL_LOCKS_EXCLUDED(mu_);

  // Constant after construction.
  const std::shared_ptr<ClientCore> core_;
  const uint64_t id_;
  const int ensemble_size_;
  const int write_quorum_;
  const int ack_quorum_;
  // What a delivery queued on a reply thread holds instead of the state,
  // which Shutdown may destroy before it runs: Shutdown clears `state`
  // (waiting for a delivery that is running, not for one still queued).
  struct ReplyToken {
    absl::Mutex mu;
    WriterState* state ABSL_GUARDED_BY(mu) = nullptr;
  };
  const std::shared_ptr<ReplyToken> reply_token_;

  mutable absl::Mutex mu_;
  meta::v1::LedgerMetadata metadata_ ABSL_GUARDED_BY(mu_);
  metadata::Version version_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t next_entry_id_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t appended_length_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t lac_ ABSL_GUARDED_BY(mu_) = -1;
  uint64_t lac_length_ ABSL_GUARDED_BY(mu_) = 0;
  // The highest LAC the bookies were told: carried by an appended entry or
  // written explicitly.
  int64_t told_lac_ ABSL_GUARDED_BY(mu_) = -1;
  // Since when lac_ > told_lac_ with no append made (InfiniteFuture: not).
  absl::Time lac_untold_since_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  // Adds lac_+1 .. next_entry_id_-1, in order, not yet delivered.
  std::deque<std::shared_ptr<PendingAdd>> pending_ ABSL_GUARDED_BY(mu_);
  std::vector<Slot> slots_ ABSL_GUARDED_BY(mu_);
  uint64_t generations_ ABSL_GUARDED_BY(mu_) = 0;
  // Every bookie that failed under this writer, with the instance it was
  // recorded as: never chosen again as that instance (Exclusions).
  absl::flat_hash_set<std::pair<std::string, std::string>> failed_bookies_ ABSL_GUARDED_BY(mu_);
  // An ensemble change (metadata CAS) is in flight: nothing is delivered.
  bool changing_ensemble_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<Delivery> to_deliver_ ABSL_GUARDED_BY(mu_);
  // A thread (deliverer_: the writer's, or an add channel's) is running
  // callbacks taken from to_deliver_. Appends made by those callbacks (a
  // log layered on the ledger appends from them) are queued but not sent
  // until the batch of callbacks is done: the acks of one RPC then refill
  // the pipeline with one RPC per bookie, instead of a one-entry RPC
  // followed by everything else an RPC later.
  bool delivering_ ABSL_GUARDED_BY(mu_) = false;
  std::thread::id deliverer_ ABSL_GUARDED_BY(mu_);
  // A DeliverOnReplyThread is queued on an add channel's thread; the
  // writer's thread leaves deliveries to it meanwhile (unless stopping).
  bool inline_scheduled_ ABSL_GUARDED_BY(mu_) = false;
  // When the writer's thread, waiting for work, wakes by itself (to write
  // the LAC explicitly; InfiniteFuture: not by itself; InfinitePast: it is
  // not waiting). A delivery on a reply thread that makes that write due
  // earlier sets lac_due_moved_ to wake it.
  absl::Time writer_wakes_at_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  bool lac_due_moved_ ABSL_GUARDED_BY(mu_) = false;
  // Slots that got entries while sending was held back (delivering_).
  uint64_t held_slots_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  // The metadata of an ensemble change whose CAS was sent when the writer
  // ended without learning whether it landed (the store kept failing).
  // Close finds it landed when the stored segments are exactly these: the
  // ledger was then changed by this writer, not taken over, and is sealed.
  std::optional<meta::v1::LedgerMetadata> in_doubt_change_ ABSL_GUARDED_BY(mu_);
  bool fenced_ ABSL_GUARDED_BY(mu_) = false;
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  WriterStats stats_ ABSL_GUARDED_BY(mu_);
  // Add RPCs made and not yet completed (sent or about to be), owned here so
  // that Shutdown can cancel them; OnAddDone takes its call out.
  absl::flat_hash_map<AddCall*, std::shared_ptr<AddCall>> live_calls_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<LacCall*, std::shared_ptr<LacCall>> live_lac_calls_ ABSL_GUARDED_BY(mu_);
  // Calls made whose OnAddDone (OnLacDone) has not returned yet. The state
  // must not be destroyed before it is 0 (callbacks point at it).
  int callbacks_pending_ ABSL_GUARDED_BY(mu_) = 0;
  // Set when CancelAndDrainCalls starts. A call whose add_id it read as 0
  // (registered, not sent yet) sees this in SendAll and cancels itself:
  // both sides store, then load, so at least one of them sees the other.
  // This needs this flag and AddCall::add_id both accessed sequentially
  // consistent (the default order; do not relax either).
  std::atomic<bool> cancelling_{false};

  std::thread thread_;
};

}  // namespace ledgerkv::ledger
