// LogWriter: batching, pipelined sends, ordered delivery, rolling, failure,
// truncation and close. Opening (epoch, recovery) is in log_open.cc.
#include "wal/log_writer.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "base/status_macros.h"
#include "google/protobuf/util/message_differencer.h"
#include "ledger/ledger_client.h"
#include "wal/log_metadata.h"

namespace ledgerkv::wal {

LogWriter::LogWriter(const LogOptions& options, std::string name, uint64_t epoch,
                     meta::v1::LogMetadata metadata, metadata::Version version,
                     std::unique_ptr<ledger::LedgerWriter> ledger)
    : options_(options),
      name_(std::move(name)),
      key_(metadata::Keys(options.cluster).Log(name_)),
      epoch_(epoch),
      first_seqno_(metadata.segments(metadata.segments_size() - 1).first_seqno()),
      meta_(std::move(metadata)),
      meta_version_(version),
      ledger_(std::move(ledger)),
      ledger_started_(absl::Now()),
      builder_(first_seqno_),
      last_acked_seqno_(first_seqno_ - 1) {
  control_thread_ = std::thread([this] { ControlLoop(); });
  delivery_thread_ = std::thread([this] { DeliveryLoop(); });
}

LogWriter::~LogWriter() {
  {
    absl::MutexLock l(&mu_);
    stop_ = true;
    FailLocked(absl::CancelledError(
        absl::StrCat("writer of log ", name_, " was destroyed before the record was acknowledged")));
  }
  control_thread_.join();
  std::shared_ptr<ledger::LedgerWriter> ledger;
  {
    absl::MutexLock l(&mu_);
    ledger = std::move(ledger_);
  }
  // Not closed: the next Open recovers it, as after a crash. Its pending
  // adds fail with CANCELLED and are ignored (error_ is set).
  ledger.reset();
  {
    absl::MutexLock l(&mu_);
    delivery_stop_ = true;
  }
  delivery_thread_.join();
}

void LogWriter::Append(std::string record, AppendCallback done) {
  absl::MutexLock l(&mu_);
  if (!error_.ok()) {
    deliveries_.push_back(Delivery{std::move(done), error_});
    return;
  }
  if (closing_) {
    deliveries_.push_back(Delivery{
        std::move(done), absl::FailedPreconditionError(absl::StrCat("log ", name_, " is closed"))});
    return;
  }
  if (static_cast<int64_t>(record.size()) > options_.max_record_bytes) {
    deliveries_.push_back(Delivery{
        std::move(done),
        absl::InvalidArgumentError(absl::StrCat("record of ", record.size(),
                                                " bytes exceeds the limit of ",
                                                options_.max_record_bytes, " (log ", name_, ")"))});
    return;
  }
  const absl::Time now = absl::Now();
  if (builder_.count() > 0 &&
      static_cast<int64_t>(builder_.bytes() + record.size() + kMaxRecordOverhead) >
          options_.max_batch_bytes) {
    CutLocked();
  }
  if (builder_.count() == 0) open_since_ = now;
  builder_.Add(record);
  open_callbacks_.push_back(std::move(done));
  MaybeCutLocked(now);
  PumpLocked();
}

absl::StatusOr<uint64_t> LogWriter::AppendAndWait(std::string record) {
  absl::Notification done;
  absl::StatusOr<uint64_t> result;
  Append(std::move(record), [&](absl::StatusOr<uint64_t> r) {
    result = std::move(r);
    done.Notify();
  });
  done.WaitForNotification();
  return result;
}

void LogWriter::MaybeCutLocked(absl::Time now) {
  if (builder_.count() == 0 || !error_.ok()) return;
  const size_t outstanding = in_flight_.size() + waiting_.size();
  // Nothing outstanding: leave at once, a lone writer waits for nobody.
  // Otherwise the batch grows while earlier entries are in flight (group
  // commit), up to its size or its delay.
  if (static_cast<int64_t>(builder_.bytes()) >= options_.max_batch_bytes || outstanding == 0 ||
      closing_ ||
      (now - open_since_ >= options_.max_batch_delay &&
       outstanding < static_cast<size_t>(options_.max_entries_in_flight))) {
    CutLocked();
  }
}

void LogWriter::CutLocked() {
  if (builder_.count() == 0) return;
  Batch batch;
  batch.first_seqno = builder_.first_seqno();
  batch.last_seqno = builder_.last_seqno();
  batch.payload = builder_.Finish();
  batch.callbacks = std::move(open_callbacks_);
  open_callbacks_.clear();
  waiting_.push_back(std::move(batch));
}

void LogWriter::PumpLocked() {
  while (!waiting_.empty() && ledger_ != nullptr && error_.ok() && ledger_error_.ok() &&
         !cutover_ && in_flight_.size() < static_cast<size_t>(options_.max_entries_in_flight)) {
    Batch& batch = waiting_.front();
    std::string payload = std::move(batch.payload);
    batch.payload.clear();
    ledger_bytes_ += static_cast<int64_t>(payload.size());
    // The age trigger counts from the ledger's first entry: an idle ledger
    // holds nothing old, so it is not rolled as soon as it gets a record.
    if (ledger_entries_++ == 0) ledger_started_ = absl::Now();
    in_flight_.push_back(std::move(batch));
    waiting_.pop_front();
    const uint64_t generation = ledger_generation_;
    // The ledger writer never runs `done` inline, and runs it (on the
    // thread that delivers its callbacks) without holding its lock, so
    // calling it under mu_ keeps entry
    // order equal to seqno order without a lock-order inversion.
    ledger_->AppendAsync(std::move(payload), [this, generation](absl::StatusOr<int64_t> entry) {
      OnEntryDone(generation, std::move(entry));
    });
  }
}

void LogWriter::OnEntryDone(uint64_t generation, absl::StatusOr<int64_t> entry) {
  ledger::LedgerWriter* acked_by = nullptr;
  if (!QueueAckedEntry(generation, std::move(entry), &acked_by)) return;
  // This runs in acked_by's callback, so it is alive (its destructor waits
  // for this thread). The batches just pumped leave before the callbacks
  // below do their work (the range applies to RocksDB), instead of after.
  if (acked_by != nullptr) acked_by->SendHeldAppends();
  DeliverInline();
}

bool LogWriter::QueueAckedEntry(uint64_t generation, absl::StatusOr<int64_t> entry,
                                ledger::LedgerWriter** acked_by) {
  absl::MutexLock l(&mu_);
  // After a failure every batch was failed already; an ack arriving after a
  // ledger error (never, as the ledger writer acks in order) is not trusted.
  if (generation != ledger_generation_ || !error_.ok() || in_flight_.empty()) return false;
  if (!entry.ok()) {
    if (ledger_error_.ok()) ledger_error_ = entry.status();
    return false;  // the control thread turns it into the log's error
  }
  if (!ledger_error_.ok()) return false;
  Batch batch = std::move(in_flight_.front());
  in_flight_.pop_front();
  uint64_t seqno = batch.first_seqno;
  for (AppendCallback& done : batch.callbacks) {
    deliveries_.push_back(Delivery{std::move(done), seqno++});
  }
  last_acked_seqno_ = batch.last_seqno;
  stats_.records += static_cast<int64_t>(batch.callbacks.size());
  ++stats_.entries;
  MaybeCutLocked(absl::Now());
  PumpLocked();
  *acked_by = ledger_.get();
  return true;
}

void LogWriter::FailLocked(absl::Status status) {
  if (!error_.ok()) return;
  error_ = std::move(status);
  for (std::deque<Batch>* batches : {&in_flight_, &waiting_}) {
    for (Batch& batch : *batches) {
      for (AppendCallback& done : batch.callbacks) deliveries_.push_back(Delivery{std::move(done), error_});
    }
    batches->clear();
  }
  for (AppendCallback& done : open_callbacks_) deliveries_.push_back(Delivery{std::move(done), error_});
  open_callbacks_.clear();
  builder_.Finish();
}

void LogWriter::SetRunEndHook(std::function<void()> hook) {
  absl::MutexLock l(&mu_);
  run_end_hook_ = std::move(hook);
}

void LogWriter::RunDeliveries(std::deque<Delivery> run, const std::function<void()>& run_end) {
  for (Delivery& d : run) d.done(std::move(d.result));
  if (run_end) run_end();
  absl::MutexLock l(&mu_);
  delivering_ = false;
}

void LogWriter::TakeRunLocked(std::deque<Delivery>* run, std::function<void()>* run_end) {
  run->swap(deliveries_);
  delivering_ = true;
  *run_end = run_end_hook_;
}

void LogWriter::DeliverInline() {
  for (;;) {
    std::deque<Delivery> run;
    std::function<void()> run_end;
    {
      absl::MutexLock l(&mu_);
      // Someone else is delivering: it (or the delivery thread) takes these
      // after its run, keeping the order.
      if (delivering_ || deliveries_.empty()) return;
      TakeRunLocked(&run, &run_end);
    }
    RunDeliveries(std::move(run), run_end);
  }
}

void LogWriter::DeliveryLoop() {
  for (;;) {
    std::deque<Delivery> run;
    std::function<void()> run_end;
    {
      absl::MutexLock l(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return !delivering_ && (!deliveries_.empty() || delivery_stop_);
      };
      mu_.Await(absl::Condition(&ready));
      if (deliveries_.empty()) return;  // stopping, and everything delivered
      TakeRunLocked(&run, &run_end);
    }
    RunDeliveries(std::move(run), run_end);
  }
}

bool LogWriter::RollDueLocked(absl::Time now) const {
  if (rolling_ || closing_ || !error_.ok() || !ledger_error_.ok() || ledger_entries_ == 0 ||
      now < next_roll_attempt_) {
    return false;
  }
  return ledger_bytes_ >= options_.roll_bytes || now - ledger_started_ >= options_.roll_age;
}

bool LogWriter::ControlWorkLocked() const {
  if (stop_ || (!ledger_error_.ok() && error_.ok())) return true;
  if (NextTimerLocked() < control_deadline_) return true;
  // The size trigger; the age trigger and delayed cuts come from the timer.
  return !rolling_ && !closing_ && error_.ok() && ledger_bytes_ >= options_.roll_bytes &&
         absl::Now() >= next_roll_attempt_;
}

absl::Time LogWriter::NextTimerLocked() const {
  absl::Time next = absl::InfiniteFuture();
  if (!error_.ok()) return next;
  if (builder_.count() > 0 &&
      in_flight_.size() + waiting_.size() < static_cast<size_t>(options_.max_entries_in_flight)) {
    next = std::min(next, open_since_ + options_.max_batch_delay);
  }
  if (!rolling_ && !closing_ && ledger_entries_ > 0 && options_.roll_age != absl::InfiniteDuration()) {
    next = std::min(next, std::max(ledger_started_ + options_.roll_age, next_roll_attempt_));
  }
  return next;
}

void LogWriter::ControlLoop() {
  for (;;) {
    absl::Status failed;
    uint64_t failed_ledger = 0;
    bool roll = false;
    {
      absl::MutexLock l(&mu_);
      control_deadline_ = NextTimerLocked();
      mu_.AwaitWithDeadline(absl::Condition(this, &LogWriter::ControlWorkLocked),
                            control_deadline_);
      control_deadline_ = absl::InfiniteFuture();
      if (stop_) return;
      const absl::Time now = absl::Now();
      if (!ledger_error_.ok() && error_.ok()) {
        failed = ledger_error_;
        failed_ledger = ledger_->id();
      } else {
        MaybeCutLocked(now);
        PumpLocked();
        if (RollDueLocked(now)) {
          rolling_ = true;
          roll = true;
        }
      }
    }
    if (!failed.ok()) {
      absl::Status error = LogErrorFor(failed, failed_ledger);
      absl::MutexLock l(&mu_);
      FailLocked(std::move(error));
      continue;
    }
    if (roll) Roll();
  }
}

absl::Status LogWriter::LogErrorFor(const absl::Status& ledger_error, uint64_t ledger_id) {
  if (absl::IsCancelled(ledger_error)) return ledger_error;
  if (absl::IsFailedPrecondition(ledger_error)) {
    // The ledger was fenced (or closed) by someone else: normally a new
    // writer that raised the epoch. Name it, for the operator and the test.
    auto log = LoadLog(*options_.metadata, key_, name_, /*include_deleting=*/true);
    if (log.ok() && log->metadata.epoch() != epoch_) return LogFencedError(name_, log->metadata.epoch());
    return absl::FailedPreconditionError(absl::StrCat(
        "log ", name_, " fenced: its ledger ", ledger_id, " was recovered or closed by another client (",
        ledger_error.message(), "; epoch ",
        log.ok() ? absl::StrCat(log->metadata.epoch()) : std::string(log.status().message()), ")"));
  }
  return absl::Status(ledger_error.code(), absl::StrCat("log ", name_, ": write to ledger ",
                                                        ledger_id, " failed: ",
                                                        ledger_error.message()));
}


void LogWriter::Roll() {
  // 1. The next ledger, while the current one keeps taking entries.
  ledger::CreateOptions create;
  create.ensemble_size = options_.ensemble_size;
  create.write_quorum = options_.write_quorum;
  create.ack_quorum = options_.ack_quorum;
  create.custom = {{"log", name_}, {"log_epoch", absl::StrCat(epoch_)}};
  auto created = options_.client->CreateLedger(create);
  if (!created.ok()) {
    // Not fatal: the current ledger still works; try again later.
    absl::MutexLock l(&mu_);
    rolling_ = false;
    next_roll_attempt_ = absl::Now() + absl::Seconds(1);
    return;
  }
  std::shared_ptr<ledger::LedgerWriter> next = *std::move(created);
  const uint64_t next_id = next->id();

  // 2. Cut over: stop sending, let the current ledger's entries complete.
  std::shared_ptr<ledger::LedgerWriter> old;
  uint64_t last = 0;
  {
    absl::MutexLock l(&mu_);
    cutover_ = true;
    auto drained = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return in_flight_.empty() || !error_.ok() || !ledger_error_.ok() || stop_;
    };
    mu_.Await(absl::Condition(&drained));
    if (error_.ok() && ledger_error_.ok() && !stop_) {
      old = ledger_;
      last = last_acked_seqno_;
    } else {
      cutover_ = false;
      rolling_ = false;
    }
  }
  // The new ledger is in no segment list, unless a segment switch with an
  // unknown outcome may have put it there: see DeleteUnlessTheLogMayNameIt.
  auto abandon = [&](absl::Status error, bool unknown_outcome = false,
                     metadata::Version expected = 0) {
    if (!error.ok()) {
      absl::MutexLock l(&mu_);
      FailLocked(std::move(error));
      cutover_ = false;
      rolling_ = false;
    }
    next.reset();
    DeleteUnlessTheLogMayNameIt(options_, key_, name_, next_id, unknown_outcome, expected);
  };
  if (old == nullptr) {  // failed or stopping meanwhile
    abandon(absl::OkStatus());
    return;
  }

  // 3. Seal the old ledger at its last acknowledged entry, then switch the
  // segment list in one CAS: old CLOSED with its last seqno, new OPEN.
  absl::Status closed = old->Close();
  if (!closed.ok()) {
    abandon(LogErrorFor(closed, old->id()));
    return;
  }
  absl::Status switched;
  bool unknown_outcome = false;
  metadata::Version expected = 0;
  {
    absl::MutexLock l(&meta_mu_);
    switched = UpdateMetadataLocked([&](meta::v1::LogMetadata& log) -> absl::StatusOr<bool> {
      meta::v1::LogSegment* tail = log.mutable_segments(log.segments_size() - 1);
      if (tail->ledger_id() != old->id() || tail->state() != meta::v1::LogSegment::OPEN) {
        return absl::InternalError(absl::StrCat("log ", name_, ": rolling ledger ", old->id(),
                                                " but the metadata says ", DescribeLog(log, name_)));
      }
      tail->set_state(meta::v1::LogSegment::CLOSED);
      tail->set_last_seqno(last);
      meta::v1::LogSegment* added = log.add_segments();
      added->set_ledger_id(next_id);
      added->set_first_seqno(last + 1);
      added->set_state(meta::v1::LogSegment::OPEN);
      return true;
    }, &unknown_outcome);
    expected = meta_version_;  // what the last attempt expected
  }
  if (!switched.ok()) {
    abandon(switched, unknown_outcome, expected);
    return;
  }
  {
    absl::MutexLock l(&mu_);
    ledger_ = std::move(next);
    ++ledger_generation_;
    ledger_bytes_ = 0;
    ledger_entries_ = 0;
    ledger_started_ = absl::Now();
    cutover_ = false;
    rolling_ = false;
    ++stats_.rolls;
    MaybeCutLocked(absl::Now());
    PumpLocked();
  }
  old.reset();  // joins its (idle) thread, outside mu_
}

absl::Status LogWriter::UpdateMetadataLocked(const MetadataMutation& mutate,
                                             bool* unknown_outcome) {
  meta::v1::LogMetadata next = meta_;
  ASSIGN_OR_RETURN(bool changed, mutate(next));
  if (!changed) return absl::OkStatus();
  // A failure after an attempt whose outcome is unknown (UNAVAILABLE: the
  // write may still land) leaves `next` among the unsettled writes, which a
  // later call recognises as our own (below).
  bool sent_unknown = false;
  auto fail = [&](absl::Status status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(meta_mu_) {
    if (sent_unknown) unsettled_.push_back(next);
    return status;
  };
  absl::Duration backoff = absl::Milliseconds(20);
  for (int attempt = 1;; ++attempt) {
    auto stored = StoreLog(*options_.metadata, key_, next, meta_version_);
    if (stored.ok()) {
      meta_ = std::move(next);
      meta_version_ = *stored;
      unsettled_.clear();  // whatever landed before, this CAS was on top of it
      return absl::OkStatus();
    }
    const bool transient = absl::IsUnavailable(stored.status());
    sent_unknown |= transient;
    if (transient && unknown_outcome != nullptr) *unknown_outcome = true;
    if (!transient && !absl::IsAborted(stored.status())) return fail(stored.status());
    if (attempt >= options_.metadata_retries) {
      return fail(absl::UnavailableError(absl::StrCat("log ", name_, ": cannot update metadata: ",
                                                      stored.status().message())));
    }
    if (transient) {
      absl::SleepFor(backoff);
      backoff = std::min(backoff * 2, absl::Seconds(1));
    }
    // Lost a race (or a reply): see what is there now.
    // A log being deleted (DeleteLog) has its epoch raised too: read it,
    // so that this writer learns it is fenced.
    auto reread = LoadLog(*options_.metadata, key_, name_, /*include_deleting=*/true);
    if (!reread.ok()) {
      if (absl::IsUnavailable(reread.status())) continue;
      return fail(reread.status());
    }
    if (reread->metadata.epoch() != epoch_) return LogFencedError(name_, reread->metadata.epoch());
    if (google::protobuf::util::MessageDifferencer::Equals(reread->metadata, next)) {
      meta_ = std::move(next);  // our write landed; its reply was lost
      meta_version_ = reread->version;
      unsettled_.clear();
      return absl::OkStatus();
    }
    if (reread->version == meta_version_) continue;  // not applied (UNAVAILABLE): again
    // At our epoch nobody else writes the record (Open, RaiseEpoch and
    // DeleteLog all raise the epoch), so it is either a write of an earlier
    // call of ours that failed without knowing whether it landed (and then
    // did): redo our change on top of it; or a record deleted (DeleteLog)
    // and created again (another open, from epoch 1): not our log. Writing
    // our change into that could close, roll or truncate a log another
    // writer owns.
    bool ours = false;
    for (const meta::v1::LogMetadata& w : unsettled_) {
      ours |= google::protobuf::util::MessageDifferencer::Equals(reread->metadata, w);
    }
    if (!ours) return LogFencedError(name_, reread->metadata.epoch());
    meta_ = std::move(reread->metadata);
    meta_version_ = reread->version;
    unsettled_.clear();
    // This call's attempts expected the version before it: none can land.
    sent_unknown = false;
    next = meta_;
    ASSIGN_OR_RETURN(changed, mutate(next));
    if (!changed) return absl::OkStatus();
  }
}

absl::Status LogWriter::Truncate(uint64_t seqno) {
  absl::MutexLock meta_lock(&meta_mu_);
  absl::Status updated = UpdateMetadataLocked([&](meta::v1::LogMetadata& log) -> absl::StatusOr<bool> {
    // A prefix of CLOSED segments wholly below `seqno`; never the last one,
    // which holds the log's position (and is the OPEN one while we write).
    int drop = 0;
    while (drop + 1 < log.segments_size() &&
           log.segments(drop).state() == meta::v1::LogSegment::CLOSED &&
           log.segments(drop).last_seqno() < seqno) {
      ++drop;
    }
    if (drop == 0) return false;
    for (int i = 0; i < drop; ++i) log.add_ledgers_to_delete(log.segments(i).ledger_id());
    log.mutable_segments()->DeleteSubrange(0, drop);
    return true;
  });
  if (absl::IsFailedPrecondition(updated)) {
    absl::MutexLock l(&mu_);
    FailLocked(updated);
  }
  RETURN_IF_ERROR(updated);

  // Metadata first, ledgers second: a reader that still finds a segment
  // finds its ledger; bookies reclaim a ledger once its metadata is gone.
  // This also retries deletions an earlier truncation could not finish.
  std::vector<uint64_t> deleted;
  absl::Status first_error;
  for (uint64_t id : meta_.ledgers_to_delete()) {
    absl::Status s = options_.client->DeleteLedger(id);
    if (s.ok() || absl::IsNotFound(s)) {
      deleted.push_back(id);
    } else if (first_error.ok()) {
      first_error = absl::UnavailableError(
          absl::StrCat("log ", name_, ": cannot delete truncated ledger ", id, ": ", s.message()));
    }
  }
  if (!deleted.empty()) {
    absl::Status forgot = UpdateMetadataLocked([&](meta::v1::LogMetadata& log) -> absl::StatusOr<bool> {
      const size_t before = log.ledgers_to_delete_size();
      auto* ids = log.mutable_ledgers_to_delete();
      ids->erase(std::remove_if(ids->begin(), ids->end(),
                                [&](uint64_t id) {
                                  return std::find(deleted.begin(), deleted.end(), id) != deleted.end();
                                }),
                 ids->end());
      return static_cast<size_t>(log.ledgers_to_delete_size()) != before;
    });
    if (first_error.ok()) first_error = forgot;
  }
  return first_error;
}

absl::Status LogWriter::Close() {
  std::shared_ptr<ledger::LedgerWriter> ledger;
  uint64_t last = 0;
  auto wait_delivered = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto delivered = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return deliveries_.empty() && !delivering_;
    };
    mu_.Await(absl::Condition(&delivered));
  };
  {
    absl::MutexLock l(&mu_);
    if (closed_) return absl::OkStatus();
    closing_ = true;
    MaybeCutLocked(absl::Now());
    PumpLocked();
    auto flushed = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      if (!error_.ok()) return true;
      return !rolling_ && ledger_error_.ok() && builder_.count() == 0 && waiting_.empty() &&
             in_flight_.empty();
    };
    mu_.Await(absl::Condition(&flushed));
    if (!error_.ok()) {
      wait_delivered();
      return error_;
    }
    ledger = ledger_;
    last = last_acked_seqno_;
  }
  absl::Status status = ledger->Close();
  if (!status.ok()) status = LogErrorFor(status, ledger->id());
  if (status.ok()) {
    absl::MutexLock meta_lock(&meta_mu_);
    status = UpdateMetadataLocked([&](meta::v1::LogMetadata& log) -> absl::StatusOr<bool> {
      meta::v1::LogSegment* tail = log.mutable_segments(log.segments_size() - 1);
      if (tail->ledger_id() != ledger->id()) {
        return absl::InternalError(absl::StrCat("log ", name_, ": closing ledger ", ledger->id(),
                                                " but the metadata says ", DescribeLog(log, name_)));
      }
      if (tail->state() == meta::v1::LogSegment::CLOSED) return false;  // a concurrent Close
      tail->set_state(meta::v1::LogSegment::CLOSED);
      tail->set_last_seqno(last);
      return true;
    });
  }
  absl::MutexLock l(&mu_);
  if (!status.ok()) {
    FailLocked(status);
  } else {
    closed_ = true;
    FailLocked(absl::FailedPreconditionError(absl::StrCat("log ", name_, " is closed")));
  }
  wait_delivered();
  return status;
}

LogWriterStats LogWriter::stats() const {
  absl::MutexLock l(&mu_);
  return stats_;
}

meta::v1::LogMetadata LogWriter::metadata() const {
  absl::MutexLock l(&meta_mu_);
  return meta_;
}

}  // namespace ledgerkv::wal
