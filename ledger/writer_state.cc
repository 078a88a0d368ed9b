#include "ledger/writer_state.h"

#include <algorithm>
#include <bit>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/fault_point.h"
#include "ledger/entry_format.h"

namespace ledgerkv::ledger {

using bookie::v1::Code;

WriterState::WriterState(std::shared_ptr<ClientCore> core, VersionedLedger ledger,
                         std::vector<std::shared_ptr<BookieConn>> conns)
    : core_(std::move(core)),
      id_(ledger.metadata.id()),
      ensemble_size_(ledger.metadata.ensemble_size()),
      write_quorum_(ledger.metadata.write_quorum()),
      ack_quorum_(ledger.metadata.ack_quorum()),
      reply_token_(std::make_shared<ReplyToken>()) {
  {
    absl::MutexLock t(&reply_token_->mu);
    reply_token_->state = this;
  }
  absl::MutexLock l(&mu_);
  metadata_ = std::move(ledger.metadata);
  version_ = ledger.version;
  const meta::v1::Segment& segment = metadata_.segments(metadata_.segments_size() - 1);
  slots_.resize(ensemble_size_);
  for (int i = 0; i < ensemble_size_; ++i) {
    slots_[i].bookie_id = segment.bookies(i);
    slots_[i].instance_id = InstanceOf(segment, i);
    slots_[i].conn = conns[i];
    slots_[i].generation = ++generations_;
  }
}

WriterState::~WriterState() { Shutdown(); }

void WriterState::Start() {
  thread_ = std::thread([this] { Run(); });
}

WriterState::AddCall::~AddCall() {
  // Hand the shared entries back before the request would delete them.
  auto* entries = request.mutable_entries();
  while (!entries->empty()) static_cast<void>(entries->ReleaseLast());
}

void WriterState::AddCall::Include(std::shared_ptr<PendingAdd> add) {
  request.mutable_entries()->AddAllocated(&add->entry);
  adds.push_back(std::move(add));
}

void WriterState::Shutdown() {
  {
    absl::MutexLock l(&mu_);
    if (stop_) return;
    stop_ = true;
    SetErrorLocked(absl::CancelledError(absl::StrCat("writer of ledger ", id_,
                                                     " was destroyed before the add completed")),
                   changing_ensemble_);
  }
  // Waits for a delivery running on a reply thread (its callbacks are this
  // writer's), but not for one only queued there behind other work (say,
  // another writer's callback): it will find no state, and the writer's
  // thread delivers what is left.
  {
    absl::MutexLock t(&reply_token_->mu);
    reply_token_->state = nullptr;
  }
  if (thread_.joinable()) thread_.join();
  CancelAndDrainCalls();
}

void WriterState::CancelAndDrainCalls() {
  cancelling_.store(true);
  std::vector<std::shared_ptr<AddCall>> live;
  std::vector<std::shared_ptr<LacCall>> live_lac;
  {
    absl::MutexLock l(&mu_);
    live.reserve(live_calls_.size());
    for (const auto& [raw, call] : live_calls_) live.push_back(call);
    for (const auto& [raw, call] : live_lac_calls_) live_lac.push_back(call);
  }
  // Without mu_: gRPC may run the callback (OnAddDone locks mu_) inline from
  // TryCancel. A call not started yet is cancelled as soon as it starts, and
  // cancelling a finished call is a no-op. `live` keeps the contexts valid.
  for (const auto& call : live) {
    if (call->conn->add_channel) {
      // 0: not sent yet; SendAll cancels it (cancelling_).
      if (const uint64_t id = call->add_id.load(); id != 0) call->conn->add_channel->Cancel(id);
    } else {
      call->ctx.TryCancel();
    }
  }
  for (const auto& call : live_lac) call->ctx.TryCancel();
  // Tests: every call registered so far has been cancelled or will be.
  static_cast<void>(LEDGERKV_FAULT("ledger.writer.calls_cancelled"));
  live.clear();
  live_lac.clear();
  absl::MutexLock l(&mu_);
  auto returned = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return callbacks_pending_ == 0; };
  mu_.Await(absl::Condition(&returned));
}

int64_t WriterState::lac() const {
  absl::MutexLock l(&mu_);
  return lac_;
}

meta::v1::LedgerMetadata WriterState::metadata() const {
  absl::MutexLock l(&mu_);
  return metadata_;
}

WriterStats WriterState::stats() const {
  absl::MutexLock l(&mu_);
  return stats_;
}

void WriterState::AppendAsync(std::string_view payload, LedgerWriter::AddCallback done) {
  std::vector<AddCall*> out;
  {
    absl::MutexLock l(&mu_);
    if (!error_.ok()) {
      to_deliver_.push_back(Delivery{std::move(done), error_});
      return;
    }
    if (static_cast<int64_t>(payload.size()) > core_->options.max_entry_bytes) {
      to_deliver_.push_back(Delivery{
          std::move(done), absl::InvalidArgumentError(absl::StrCat(
                               "entry of ", payload.size(), " bytes exceeds the limit of ",
                               core_->options.max_entry_bytes, " (ledger ", id_, ")"))});
      return;
    }
    if (closing_ || closed_) {
      to_deliver_.push_back(Delivery{
          std::move(done),
          absl::FailedPreconditionError(absl::StrCat("ledger ", id_, " is closed"))});
      return;
    }
    auto add = std::make_shared<PendingAdd>();
    add->entry_id = next_entry_id_++;
    appended_length_ += payload.size();
    add->cumulative_length = appended_length_;
    add->entry = MakeEntry(id_, add->entry_id, lac_, appended_length_, payload);
    // The entry tells the bookies lac_: no explicit write is due for it.
    told_lac_ = lac_;
    lac_untold_since_ = absl::InfiniteFuture();
    add->done = std::move(done);
    // Held back while this thread delivers a batch of callbacks (Deliver).
    const bool hold = delivering_ && deliverer_ == std::this_thread::get_id();
    const int first = static_cast<int>(add->entry_id % ensemble_size_);
    for (int k = 0; k < write_quorum_; ++k) {
      const int i = (first + k) % ensemble_size_;
      // A failed slot gets the entry from its replacement's resend.
      if (slots_[i].failed) continue;
      slots_[i].queue.push_back(add);
      if (hold) {
        held_slots_ |= uint64_t{1} << i;
      } else {
        PumpLocked(i, &out);
      }
    }
    pending_.push_back(std::move(add));
  }
  SendAll(std::move(out));
}

void WriterState::PumpLocked(int slot_index, std::vector<AddCall*>* out) {
  Slot& slot = slots_[slot_index];
  if (slot.failed || !error_.ok()) return;
  const ClientOptions& options = core_->options;
  const int max_in_flight = std::max(1, options.max_rpcs_in_flight_per_bookie);
  while (slot.in_flight < max_in_flight && !slot.queue.empty()) {
    auto call = std::make_shared<AddCall>();
    call->request.set_expected_instance_id(slot.instance_id);
    call->request.set_recovery(false);
    // Grown once, not entry by entry (the group commit cycle allocates per
    // entry and per request on the thread that sends).
    const int cap = static_cast<int>(std::min<size_t>(
        slot.queue.size(), static_cast<size_t>(std::max(1, options.max_entries_per_add_rpc))));
    call->request.mutable_entries()->Reserve(cap);
    call->adds.reserve(static_cast<size_t>(cap));
    int64_t bytes = 0;
    while (!slot.queue.empty() &&
           call->request.entries_size() < std::max(1, options.max_entries_per_add_rpc)) {
      const std::shared_ptr<PendingAdd>& add = slot.queue.front();
      const int64_t size = static_cast<int64_t>(add->entry.payload().size());
      if (call->request.entries_size() > 0 && bytes + size > options.max_bytes_per_add_rpc) break;
      bytes += size;
      call->Include(std::move(slot.queue.front()));
      slot.queue.pop_front();
    }
    call->conn = slot.conn;
    call->slot = slot_index;
    call->generation = slot.generation;
    ++slot.in_flight;
    ++stats_.add_rpcs;
    stats_.entries_sent += call->request.entries_size();
    ++callbacks_pending_;
    out->push_back(call.get());
    live_calls_.emplace(call.get(), std::move(call));
  }
}

void WriterState::SendAll(std::vector<AddCall*> calls) {
  const absl::Time deadline = absl::Now() + core_->options.rpc_timeout;
  for (AddCall* call : calls) {
    // `call` stays owned by live_calls_ until its OnAddDone; `this` stays
    // alive until every OnAddDone returned (Shutdown waits for them).
    if (call->conn->local_add) {
      // A bookie of this process: its storage answers after the fdatasync,
      // on its journal thread (no deadline: a local disk that never answers
      // fails nothing else either; Shutdown waits for the answer).
      call->conn->local_add(call->request, &call->response, [this, call](const grpc::Status& s) {
        OnAddResponseDone(call, s);
      });
      continue;
    }
    if (call->conn->add_channel) {
      // The bookie's add port (docs/add-transport.md). The id is stored
      // first: `call` may be gone once Add returns.
      AddChannel& channel = *call->conn->add_channel;
      // Tests: hold a registered call here, before it has an id.
      static_cast<void>(LEDGERKV_FAULT("ledger.writer.add_channel_send"));
      const uint64_t id = channel.NewCallId();
      call->add_id.store(id);
      // Missed by a CancelAndDrainCalls that read add_id before the store:
      // the mark makes Add end it at once instead of at the deadline.
      if (cancelling_.load()) channel.Cancel(id);
      channel.Add(id, call->request, &call->results, deadline,
                  [this, call](const grpc::Status& status) { OnAddDone(call, status); });
      continue;
    }
    call->ctx.set_deadline(absl::ToChronoTime(deadline));
    const bool started = call->conn->StartCall([this, call] {
      call->conn->stub->async()->Add(
          &call->ctx, &call->request, &call->response,
          [this, call](grpc::Status status) { OnAddResponseDone(call, status); });
    });
    if (!started) OnAddDone(call, ShutDownStatus(*call->conn));
  }
}

void WriterState::OnAddResponseDone(AddCall* call, const grpc::Status& status) {
  if (status.ok()) AddChannel::AppendResults(call->response, &call->results);
  OnAddDone(call, status);
}

void WriterState::OnAddDone(AddCall* call, const grpc::Status& status) {
  std::vector<AddCall*> out;
  std::shared_ptr<AddCall> owned;
  bool deliver_here = false;
  {
    absl::MutexLock l(&mu_);
    auto it = live_calls_.find(call);
    owned = std::move(it->second);
    live_calls_.erase(it);
    HandleAddReplyLocked(*call, status, &out);
    // On an add channel's thread the callbacks this reply made ready run
    // there, after the replies read with it, instead of waking the writer's
    // thread for them (ClientOptions::callbacks_on_reply_thread). Not on a
    // gRPC thread or the in-process bookie's journal thread.
    if (core_->options.callbacks_on_reply_thread && !inline_scheduled_ && !delivering_ &&
        !stop_ && !changing_ensemble_ && HasDeliverableLocked() && AddChannel::OnReplyThread()) {
      inline_scheduled_ = true;
      deliver_here = true;
    }
  }
  // Released here, or by Shutdown if it still holds a copy to cancel it.
  // Either way the pool still holds the channel: it is not destroyed here.
  owned.reset();
  SendAll(std::move(out));
  if (deliver_here) {
    AddChannel::RunAfterReplies([token = reply_token_] {
      absl::MutexLock t(&token->mu);
      if (token->state != nullptr) token->state->DeliverOnReplyThread();
    });
  }
  // The last touch of `this`: Shutdown may destroy the state right after
  // mu_ is released (absl::Mutex allows it).
  absl::MutexLock l(&mu_);
  --callbacks_pending_;
}

void WriterState::HandleAddReplyLocked(const AddCall& call_ref, const grpc::Status& status,
                                       std::vector<AddCall*>* out) {
  const AddCall* call = &call_ref;
  Slot& slot = slots_[call->slot];
  if (slot.generation != call->generation) return;  // slot failed or replaced since
  --slot.in_flight;
  const std::string& bookie_id = slot.bookie_id;
  if (!status.ok()) {
    FailSlotLocked(call->slot, absl::StrCat("Add to bookie ", bookie_id, " failed: ",
                                            status.error_message(), " (gRPC code ",
                                            static_cast<int>(status.error_code()), ")"));
  } else {
    const AddChannel::Results& results = call->results;
    for (size_t k = 0; k < call->adds.size(); ++k) {
      const int64_t entry_id = call->adds[k]->entry_id;
      // Bookies answer one result per entry, in request order.
      const bool answered = k < results.size() && results[k].ledger_id == id_ &&
                            results[k].entry_id == entry_id;
      const Code code =
          answered ? static_cast<Code>(results[k].code) : Code::CODE_UNSPECIFIED;
      if (code == Code::OK) {
        AckLocked(*call->adds[k], call->slot);
      } else if (code == Code::FENCED) {
        fenced_ = true;
        SetErrorLocked(FencedError(id_), changing_ensemble_);
        // Only observed (tests wait for it); never changes the outcome.
        static_cast<void>(LEDGERKV_FAULT("ledger.writer.fenced_reply", std::to_string(id_)));
        break;
      } else {
        FailSlotLocked(call->slot,
                       absl::StrCat("bookie ", bookie_id, " answered ",
                                    answered ? bookie::v1::Code_Name(code) : "nothing",
                                    " for entry ", id_, ":", entry_id));
        break;
      }
    }
  }
  // While a batch of callbacks runs (on another thread), the appends it
  // made so far for this bookie wait in its queue: sending them now would
  // split the batch into two requests for it, and the split would persist.
  // (A queue the batch has not appended to is pumped as usual.)
  if (!delivering_ || (held_slots_ & (uint64_t{1} << call->slot)) == 0) {
    PumpLocked(call->slot, out);
  }
}

void WriterState::AckLocked(PendingAdd& add, int slot) {
  // An add delivered already, or failed with the writer, may still be acked.
  if (pending_.empty() || add.entry_id < pending_.front()->entry_id || !error_.ok()) return;
  const uint64_t bit = uint64_t{1} << slot;
  if (add.acked & bit) return;
  add.acked |= bit;
  ++add.ack_count;
  // Only observed (tests wait for replies to arrive); never changes the outcome.
  static_cast<void>(LEDGERKV_FAULT("ledger.writer.acked", absl::StrCat(id_, " ", add.entry_id)));
}

void WriterState::FailSlotLocked(int slot_index, std::string why) {
  Slot& slot = slots_[slot_index];
  if (slot.failed) return;
  slot.failed = true;
  slot.failure = std::move(why);
  slot.generation = ++generations_;
  slot.queue.clear();
  slot.in_flight = 0;
  failed_bookies_.insert({slot.bookie_id, slot.instance_id});
  core_->pool.Forget(slot.bookie_id);
}

void WriterState::SetErrorLocked(absl::Status status, bool change_in_doubt) {
  if (!error_.ok()) return;
  error_ = std::move(status);
  // Only observed (tests wait for it); never changes the outcome.
  static_cast<void>(LEDGERKV_FAULT("ledger.writer.failed", std::to_string(id_)));
  uint64_t doubtful = 0;
  if (change_in_doubt) {
    for (int i = 0; i < ensemble_size_; ++i) {
      if (slots_[i].failed) doubtful |= uint64_t{1} << i;
    }
  }
  // The acked head is durable on Qa bookies that every metadata version
  // still names (with a change in doubt, only bookies that stay in the
  // ensemble count): a recoverer finds it whatever it reads. Failing it
  // would report an entry as lost that recovery keeps.
  while (!pending_.empty() && std::popcount(pending_.front()->acked & ~doubtful) >= ack_quorum_) {
    DeliverHeadLocked();
  }
  for (auto& add : pending_) to_deliver_.push_back(Delivery{std::move(add->done), error_});
  pending_.clear();
  for (Slot& slot : slots_) slot.queue.clear();
}

void WriterState::DeliverHeadLocked() {
  std::shared_ptr<PendingAdd> add = std::move(pending_.front());
  pending_.pop_front();
  lac_ = add->entry_id;
  lac_length_ = add->cumulative_length;
  if (lac_untold_since_ == absl::InfiniteFuture()) lac_untold_since_ = absl::Now();
  to_deliver_.push_back(Delivery{std::move(add->done), add->entry_id});
}

bool WriterState::NeedEnsembleChangeLocked() const {
  if (!error_.ok() || changing_ensemble_ || closed_) return false;
  // A closing writer with nothing pending has no use for a new bookie, and
  // its close CAS must not race one.
  if (closing_ && pending_.empty()) return false;
  for (const Slot& slot : slots_) {
    if (slot.failed) return true;
  }
  return false;
}

bool WriterState::HasWorkLocked() const {
  // Another thread delivers: it takes whatever becomes ready meanwhile,
  // and this thread looks again once it is done.
  if (delivering_) return false;
  // Stopping: whatever is left is delivered here, even if a reply thread
  // was about to (it will find no state: Shutdown), so that Shutdown never
  // waits for a reply thread to get round to it.
  if (stop_) return true;
  // A reply thread is about to deliver.
  if (inline_scheduled_) return false;
  return NeedEnsembleChangeLocked() || HasDeliverableLocked();
}

bool WriterState::HasDeliverableLocked() const {
  if (!to_deliver_.empty()) return true;
  return !changing_ensemble_ && !pending_.empty() && pending_.front()->ack_count >= ack_quorum_;
}

void WriterState::CollectDeliverableLocked() {
  // No ack while an ensemble change is in flight. The new segment starts at
  // the LAC taken when the change began; an entry delivered meanwhile would
  // fall into that segment with its copy on the replacement still missing,
  // and a recoverer reading the new segment could count the replacement's
  // "no such entry" towards calling an acknowledged entry absent (the hole
  // of BookKeeper issue 2614).
  if (changing_ensemble_) return;
  while (!pending_.empty() && pending_.front()->ack_count >= ack_quorum_) DeliverHeadLocked();
}

absl::Time WriterState::ExplicitLacDueLocked() const {
  const absl::Duration delay = core_->options.explicit_lac_delay;
  if (delay == absl::InfiniteDuration() || lac_ <= told_lac_ || !error_.ok() || closing_ ||
      closed_ || stop_ || changing_ensemble_) {
    return absl::InfiniteFuture();
  }
  return lac_untold_since_ + delay;
}

std::vector<WriterState::LacCall*> WriterState::AwaitWorkLocked() {
  auto woken = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return HasWorkLocked() || lac_due_moved_;
  };
  while (!HasWorkLocked()) {
    const absl::Time due = ExplicitLacDueLocked();
    // A delivery on a reply thread that leaves the writer idle sets
    // lac_due_moved_ when it makes the write due before this wait ends.
    lac_due_moved_ = false;
    writer_wakes_at_ = due;
    mu_.AwaitWithDeadline(absl::Condition(&woken), due);
    writer_wakes_at_ = absl::InfinitePast();
    if (HasWorkLocked()) break;
    if (ExplicitLacDueLocked() > absl::Now()) continue;  // not yet, or an append came meanwhile
    std::vector<LacCall*> calls;
    for (const Slot& slot : slots_) {
      if (slot.failed) continue;
      auto call = std::make_shared<LacCall>();
      call->request.set_expected_instance_id(slot.instance_id);
      call->request.set_ledger_id(id_);
      call->request.set_lac(lac_);
      call->conn = slot.conn;
      ++stats_.lac_writes;
      ++callbacks_pending_;
      calls.push_back(call.get());
      live_lac_calls_.emplace(call.get(), std::move(call));
    }
    told_lac_ = lac_;
    lac_untold_since_ = absl::InfiniteFuture();
    return calls;
  }
  return {};
}

void WriterState::SendLacCalls(std::vector<LacCall*> calls) {
  const absl::Time deadline = absl::Now() + core_->options.rpc_timeout;
  for (LacCall* call : calls) {
    // Owned by live_lac_calls_ until OnLacDone, like an AddCall.
    call->ctx.set_deadline(absl::ToChronoTime(deadline));
    const bool started = call->conn->StartCall([this, call] {
      call->conn->stub->async()->WriteLac(&call->ctx, &call->request, &call->response,
                                          [this, call](grpc::Status) { OnLacDone(call); });
    });
    if (!started) OnLacDone(call);
  }
}

void WriterState::OnLacDone(LacCall* call) {
  std::shared_ptr<LacCall> owned;
  {
    absl::MutexLock l(&mu_);
    auto it = live_lac_calls_.find(call);
    owned = std::move(it->second);
    live_lac_calls_.erase(it);
  }
  // Not acted on: a refused or lost write only delays tailers, and the next
  // add finds out about a fence or a failed bookie.
  owned.reset();
  absl::MutexLock l(&mu_);
  --callbacks_pending_;
}

void WriterState::Run() {
  for (;;) {
    std::vector<Delivery> deliveries;
    std::vector<LacCall*> lac_calls;
    bool change = false;
    {
      absl::MutexLock l(&mu_);
      lac_calls = AwaitWorkLocked();
      // (AwaitWorkLocked also returns for an explicit LAC write while
      // another thread delivers or is about to: then nothing else is done.)
      if (!delivering_ && (!inline_scheduled_ || stop_)) {
        CollectDeliverableLocked();
        deliveries.swap(to_deliver_);
        if (deliveries.empty()) {
          if (NeedEnsembleChangeLocked()) {
            changing_ensemble_ = true;
            change = true;
          } else if (stop_) {
            return;
          }
        } else {
          delivering_ = true;
          deliverer_ = std::this_thread::get_id();
        }
      }
    }
    if (!lac_calls.empty()) SendLacCalls(std::move(lac_calls));
    if (!deliveries.empty()) Deliver(std::move(deliveries));
    if (change) RunEnsembleChange();
  }
}

void WriterState::DeliverOnReplyThread() {
  bool first = true;
  for (;;) {
    std::vector<Delivery> deliveries;
    {
      absl::MutexLock l(&mu_);
      if (first) inline_scheduled_ = false;
      first = false;
      // The writer's thread may have started a delivery or an ensemble
      // change first (a reply of another bookie, or a failure): it goes on
      // from there, and delivers after the change as it always does.
      // Otherwise this thread takes what is ready, and looks again after
      // running it (more acks may have come meanwhile).
      if (!delivering_ && !changing_ensemble_) {
        CollectDeliverableLocked();
        deliveries.swap(to_deliver_);
      }
      if (deliveries.empty()) {
        // Left idle by these callbacks: the writer's thread, asleep until
        // later (or for good), must write the LAC explicitly when it is due.
        if (ExplicitLacDueLocked() < writer_wakes_at_) lac_due_moved_ = true;
        return;
      }
      delivering_ = true;
      deliverer_ = std::this_thread::get_id();
    }
    Deliver(std::move(deliveries));
  }
}

void WriterState::Deliver(std::vector<Delivery> deliveries) {
  for (Delivery& d : deliveries) d.done(std::move(d.result));
  deliveries.clear();
  std::vector<AddCall*> out;
  {
    absl::MutexLock l(&mu_);
    // The vector goes back for the next batch, so that to_deliver_ does not
    // grow again from nothing every cycle.
    if (to_deliver_.empty() && to_deliver_.capacity() < deliveries.capacity()) {
      to_deliver_.swap(deliveries);
    }
    delivering_ = false;
    PumpHeldLocked(&out);
  }
  SendAll(std::move(out));
}

void WriterState::SendHeldAppends() {
  std::vector<AddCall*> out;
  {
    absl::MutexLock l(&mu_);
    if (!delivering_ || deliverer_ != std::this_thread::get_id()) return;
    PumpHeldLocked(&out);
  }
  SendAll(std::move(out));
}

void WriterState::PumpHeldLocked(std::vector<AddCall*>* out) {
  for (int i = 0; i < ensemble_size_; ++i) {
    if (held_slots_ & (uint64_t{1} << i)) PumpLocked(i, out);
  }
  held_slots_ = 0;
}

void WriterState::RunEnsembleChange() {
  // Tests hold the change open here (acks stay held meanwhile).
  static_cast<void>(LEDGERKV_FAULT("ledger.writer.ensemble_change", std::to_string(id_)));
  meta::v1::LedgerMetadata current;
  metadata::Version version;
  std::vector<int> failed;
  int64_t lac;
  // The bookies that stay are excluded by id; the failed ones (and earlier
  // failures) only as the instance that failed: the same bookie
  // re-provisioned since is a new, empty instance and qualifies like any
  // spare (with no spare, it is the only replacement there is).
  Exclusions exclude;
  std::string why;
  {
    absl::MutexLock l(&mu_);
    current = metadata_;
    version = version_;
    lac = lac_;
    for (int i = 0; i < ensemble_size_; ++i) {
      if (slots_[i].failed) {
        failed.push_back(i);
        if (why.empty()) why = slots_[i].failure;
        exclude.ExcludeInstance(slots_[i].bookie_id, slots_[i].instance_id);
      } else {
        exclude.ExcludeId(slots_[i].bookie_id);
      }
    }
    for (const auto& [id, instance] : failed_bookies_) exclude.ExcludeInstance(id, instance);
  }

  // Once a CAS was sent, it may have landed even if no reply said so.
  bool cas_sent = false;
  auto finish = [this, &cas_sent](absl::Status error, bool fenced) {
    absl::MutexLock l(&mu_);
    changing_ensemble_ = false;
    if (fenced) fenced_ = true;
    SetErrorLocked(std::move(error), cas_sent);
  };
  auto cancelled = [this] {
    return absl::CancelledError(
        absl::StrCat("writer of ledger ", id_, " was destroyed during an ensemble change"));
  };

  std::vector<BookieInfo> replacements;
  for (size_t k = 0; k < failed.size(); ++k) {
    // A transient store failure must not end the writer; a shortage of
    // bookies does (see docs/ledger-protocol.md).
    absl::StatusOr<BookieInfo> chosen;
    for (int attempt = 1;; ++attempt) {
      chosen = core_->placement.ChooseReplacement(exclude);
      if (chosen.ok() || !Placement::IsStoreFailure(chosen.status()) ||
          attempt >= core_->options.metadata_retries) {
        break;
      }
      if (!PauseBeforeRetry(attempt)) {
        finish(cancelled(), false);
        return;
      }
    }
    if (!chosen.ok()) {
      finish(absl::UnavailableError(absl::StrCat("ledger ", id_, ": cannot replace failed bookie (",
                                                 why, "): ", chosen.status().message())),
             false);
      return;
    }
    exclude.ExcludeId(chosen->bookie_id);
    replacements.push_back(*std::move(chosen));
  }

  // The new last segment starts right after the LAC (nothing above it was
  // delivered, and nothing is delivered until this CAS lands).
  auto build = [&](const meta::v1::LedgerMetadata& base) {
    meta::v1::LedgerMetadata next = base;
    meta::v1::Segment segment = base.segments(base.segments_size() - 1);
    while (segment.bookie_instances_size() < segment.bookies_size()) segment.add_bookie_instances("");
    for (size_t k = 0; k < failed.size(); ++k) {
      segment.set_bookies(failed[k], replacements[k].bookie_id);
      segment.set_bookie_instances(failed[k], replacements[k].instance_id);
    }
    if (segment.first_entry_id() == lac + 1) {
      *next.mutable_segments(next.segments_size() - 1) = segment;
    } else {
      segment.set_first_entry_id(lac + 1);
      *next.add_segments() = segment;
    }
    return next;
  };
  meta::v1::LedgerMetadata next = build(current);
  metadata::Version new_version = 0;
  for (int attempt = 0;; ++attempt) {
    // A writer that failed (fenced, destroyed) meanwhile will never send or
    // acknowledge another entry: recording a new ensemble for it would only
    // name bookies that receive nothing, and make its destructor wait on
    // the store. Its error already treated this change as in doubt.
    bool ended;
    {
      absl::MutexLock l(&mu_);
      ended = !error_.ok();
    }
    if (ended) {
      finish(cancelled(), false);  // keeps the writer's first error
      return;
    }
    cas_sent = true;
    auto stored = StoreLedger(*core_, next, version);  // retries transient errors itself
    if (stored.ok()) {
      new_version = *stored;
      break;
    }
    if (!absl::IsAborted(stored.status()) || attempt >= 10) {
      {
        // It may have landed: the store failed, or (after conflicts) an
        // earlier attempt's write landed and its reply was lost.
        absl::MutexLock l(&mu_);
        in_doubt_change_ = next;
      }
      finish(absl::UnavailableError(absl::StrCat("ledger ", id_,
                                                 ": cannot record an ensemble change: ",
                                                 stored.status().message())),
             false);
      return;
    }
    absl::StatusOr<VersionedLedger> reread;
    for (int read_attempt = 1;; ++read_attempt) {
      reread = LoadLedger(*core_, id_);
      if (reread.ok() || !absl::IsUnavailable(reread.status()) ||
          read_attempt >= core_->options.metadata_retries) {
        break;
      }
      if (!PauseBeforeRetry(read_attempt)) {
        finish(cancelled(), false);
        return;
      }
    }
    if (!reread.ok()) {
      {
        // The conflict may have been this writer's own write, landed by an
        // attempt whose reply was lost.
        absl::MutexLock l(&mu_);
        in_doubt_change_ = next;
      }
      finish(absl::UnavailableError(absl::StrCat("ledger ", id_,
                                                 ": cannot re-read metadata after a conflict: ",
                                                 reread.status().message())),
             false);
      return;
    }
    // Our write landed and its reply was lost. OPEN with exactly our new
    // segments can only be our own change (a recoverer moves the ledger to
    // IN_RECOVERY first), even if an unrelated field changed since.
    if (SameLedger(reread->metadata, next) ||
        (reread->metadata.state() == meta::v1::OPEN && SameSegments(reread->metadata, next))) {
      next = reread->metadata;
      new_version = reread->version;
      break;
    }
    if (reread->metadata.state() != meta::v1::OPEN || !SameSegments(reread->metadata, current)) {
      finish(FencedError(id_), true);
      return;
    }
    // Someone changed an unrelated field (custom metadata): apply on top.
    current = reread->metadata;
    version = reread->version;
    next = build(current);
  }

  // A replacement's registration shows it up: a backoff this client keeps
  // for its address from an earlier failure (the same bookie before it was
  // re-provisioned, or one restarted there) must not fail its first adds
  // fast. Acks stay held meanwhile (at most the connect timeout each).
  for (const BookieInfo& replacement : replacements) {
    core_->pool.WaitUntilReachable(replacement.address);
  }
  std::vector<AddCall*> out;
  {
    absl::MutexLock l(&mu_);
    changing_ensemble_ = false;
    metadata_ = next;
    version_ = new_version;
    ++stats_.ensemble_changes;
    for (size_t k = 0; k < failed.size(); ++k) {
      const int i = failed[k];
      core_->pool.Learn(replacements[k].bookie_id, replacements[k].address);
      Slot& slot = slots_[i];
      slot.bookie_id = replacements[k].bookie_id;
      slot.instance_id = replacements[k].instance_id;
      slot.conn = core_->pool.ForAddress(replacements[k].address);
      slot.generation = ++generations_;
      slot.failed = false;
      slot.failure.clear();
      slot.in_flight = 0;
      slot.queue.clear();
      // Every pending entry whose write set holds index i now lives on the
      // replacement; acks from the old bookie no longer count toward it.
      const uint64_t bit = uint64_t{1} << i;
      for (const auto& add : pending_) {
        if (!InWriteSet(add->entry_id, i, ensemble_size_, write_quorum_)) continue;
        if (add->acked & bit) {
          add->acked &= ~bit;
          --add->ack_count;
        }
        slot.queue.push_back(add);
      }
    }
    for (int i = 0; i < ensemble_size_; ++i) PumpLocked(i, &out);
  }
  SendAll(std::move(out));
}

bool WriterState::PauseBeforeRetry(int attempt) {
  absl::MutexLock l(&mu_);
  return !mu_.AwaitWithTimeout(absl::Condition(&stop_), MetadataBackoff(attempt));
}

absl::Status WriterState::Close() {
  meta::v1::LedgerMetadata closed;
  metadata::Version version;
  int64_t last;
  uint64_t length;
  {
    absl::MutexLock l(&mu_);
    if (closed_) return absl::OkStatus();
    closing_ = true;
    auto drained = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return pending_.empty() && !changing_ensemble_ && to_deliver_.empty() && !delivering_;
    };
    mu_.Await(absl::Condition(&drained));
    if (closed_) return absl::OkStatus();
    // Not error_: a writer that had failed otherwise (a bookie it could
    // not replace) keeps that first error, but once a bookie answered
    // FENCED the ledger is someone else's, and Close says so, as when its
    // CAS finds the ledger in recovery.
    if (fenced_) return FencedError(id_);
    closed = metadata_;
    version = version_;
    last = lac_;
    length = lac_length_;
    closed.set_state(meta::v1::CLOSED);
    closed.set_last_entry_id(lac_);
    closed.set_length(lac_length_);
  }
  metadata::Version new_version = 0;
  for (int attempt = 0;; ++attempt) {
    auto stored = StoreLedger(*core_, closed, version);
    if (stored.ok()) {
      new_version = *stored;
      break;
    }
    if (!absl::IsAborted(stored.status()) || attempt >= 10) {
      return absl::UnavailableError(absl::StrCat("cannot close ledger ", id_, ": ",
                                                 stored.status().message()));
    }
    auto reread = LoadLedger(*core_, id_);
    if (!reread.ok()) {
      return absl::UnavailableError(absl::StrCat("cannot close ledger ", id_, ": ",
                                                 reread.status().message()));
    }
    const meta::v1::LedgerMetadata& now = reread->metadata;
    if (SameLedger(now, closed) ||
        (now.state() == meta::v1::CLOSED && now.last_entry_id() == last)) {
      closed = now;
      new_version = reread->version;
      break;
    }
    if (now.state() != meta::v1::OPEN || !SameSegments(now, closed)) {
      absl::MutexLock l(&mu_);
      // This writer's own ensemble change, which it could not confirm
      // before it ended: not a takeover. Seal on top of it (its new
      // segment starts at most one past the LAC the close records).
      const bool own_change = now.state() == meta::v1::OPEN && in_doubt_change_.has_value() &&
                              SameSegments(now, *in_doubt_change_);
      if (!own_change) {
        fenced_ = true;
        SetErrorLocked(FencedError(id_), false);
        return FencedError(id_);
      }
    }
    closed = now;
    closed.set_state(meta::v1::CLOSED);
    closed.set_last_entry_id(last);
    closed.set_length(length);
    version = reread->version;
  }
  absl::MutexLock l(&mu_);
  closed_ = true;
  metadata_ = closed;
  version_ = new_version;
  return absl::OkStatus();
}

}  // namespace ledgerkv::ledger
