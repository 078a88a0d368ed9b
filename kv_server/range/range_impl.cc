#include "kv_server/range/range_impl.h"

#include <iostream>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"
#include "rocksdb/options.h"

namespace ledgerkv::kv {
namespace {

using ledgerkv::v1::DeleteResponse;
using ledgerkv::v1::IncrementResponse;
using ledgerkv::v1::PutResponse;
using ledgerkv::v1::TxnResponse;

void StampHeader(ledgerkv::v1::ResponseHeader* header, int64_t revision, uint64_t range_id) {
  header->set_revision(revision);
  header->set_range_id(range_id);
}

template <typename Response>
void SetHeader(Response* response, int64_t revision, uint64_t range_id) {
  StampHeader(response->mutable_header(), revision, range_id);
}

// A txn stamps its nested results too, with the txn's revision.
template <>
void SetHeader(TxnResponse* response, int64_t revision, uint64_t range_id) {
  StampHeader(response->mutable_header(), revision, range_id);
  for (ledgerkv::v1::TxnOpResult& r : *response->mutable_results()) {
    switch (r.result_case()) {
      case ledgerkv::v1::TxnOpResult::kPut:
        StampHeader(r.mutable_put()->mutable_header(), revision, range_id);
        break;
      case ledgerkv::v1::TxnOpResult::kGet:
        StampHeader(r.mutable_get()->mutable_header(), revision, range_id);
        break;
      case ledgerkv::v1::TxnOpResult::kDelete:
        StampHeader(r.mutable_delete_()->mutable_header(), revision, range_id);
        break;
      case ledgerkv::v1::TxnOpResult::kIncrement:
        StampHeader(r.mutable_increment()->mutable_header(), revision, range_id);
        break;
      case ledgerkv::v1::TxnOpResult::RESULT_NOT_SET:
        break;
    }
  }
}

absl::Status RunOp(WriteView& view, const ledgerkv::v1::TxnOp& op,
                   ledgerkv::v1::TxnOpResult* result) {
  switch (op.op_case()) {
    case ledgerkv::v1::TxnOp::kPut:
      return view.Put(op.put(), result->mutable_put());
    case ledgerkv::v1::TxnOp::kGet:
      return view.Get(op.get(), result->mutable_get());
    case ledgerkv::v1::TxnOp::kDelete:
      return view.Delete(op.delete_(), result->mutable_delete_());
    case ledgerkv::v1::TxnOp::kIncrement:
      return view.Increment(op.increment(), result->mutable_increment());
    case ledgerkv::v1::TxnOp::OP_NOT_SET:
      break;
  }
  return absl::InvalidArgumentError("txn op has no operation set");
}

}  // namespace

RangeImpl::RangeImpl(const RangeOptions& options, const RangeDescriptor& descriptor,
                     std::unique_ptr<wal::LogWriter> writer, std::unique_ptr<LocalStore> local,
                     std::unique_ptr<snapshot::SnapshotStore> snapshots, RecoveryInfo recovery)
    : options_(options),
      descriptor_(descriptor),
      validator_(options.limits, descriptor),
      writer_(std::move(writer)),
      local_(std::move(local)),
      snapshots_(std::move(snapshots)),
      recovery_(std::move(recovery)),
      first_seqno_(writer_ != nullptr ? writer_->first_seqno() : recovery_.log_last_seqno + 1) {
  const LocalMeta meta = local_->meta();
  {
    absl::MutexLock l(&mu_);
    last_revision_ = meta.revision;
    applied_seqno_ = meta.applied_seqno;
    snapshot_seqno_ = recovery_.snapshot_seqno;
    snapshot_failures_ = recovery_.restore_failures;
    last_snapshot_time_ = absl::Now();
    if (writer_ == nullptr) {
      // Reads only: failed from the start, without a failure to notify.
      log_first_seqno_ = recovery_.log_first_seqno;
      failed_ = true;
      reads_after_failure_ = true;
      failure_ = absl::UnavailableError(
          absl::StrCat("range ", descriptor_.range_id, ": its log cannot be opened for writing (",
                       recovery_.why_reads_only.ToString(), "); reads are answered"));
      return;
    }
    const meta::v1::LogMetadata log = writer_->metadata();
    log_first_seqno_ = log.segments_size() > 0 ? log.segments(0).first_seqno() : first_seqno_;
  }
  writer_->SetRunEndHook([this] { ApplyAcknowledged(); });
  policy_thread_ = std::thread([this] { PolicyLoop(); });
  notifier_thread_ = std::thread([this] { NotifierLoop(); });
}

RangeImpl::~RangeImpl() {
  {
    absl::MutexLock l(&mu_);
    destroying_ = true;
    closing_ = true;
  }
  StopThreads();
  // Writes not yet acknowledged fail (CANCELLED from the log, answered as
  // UNAVAILABLE by Fail); they may still be in the log, as after a crash.
  // The writer goes first: its callbacks use the local store.
  writer_.reset();
  if (notifier_thread_.joinable()) {
    // on_failed may destroy the range from the notifier thread itself;
    // that thread touches nothing of the range after the callback.
    if (notifier_thread_.get_id() == std::this_thread::get_id()) {
      notifier_thread_.detach();
    } else {
      notifier_thread_.join();
    }
  }
}

void RangeImpl::StopThreads() {
  {
    absl::MutexLock l(&mu_);
    stop_threads_ = true;
  }
  if (policy_thread_.joinable()) policy_thread_.join();
}

absl::Status RangeImpl::RefusalLocked() const {
  if (failed_) return failure_;
  if (closing_) {
    return absl::UnavailableError(absl::StrCat("range ", descriptor_.range_id, " is closing"));
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------
// Writes

template <typename Response>
void RangeImpl::Execute(Callback<Response> done,
                        const std::function<absl::Status(WriteView&, Response*)>& evaluate) {
  auto response = std::make_shared<Response>();
  Answer now;  // run after mu_ is released
  {
    absl::MutexLock l(&mu_);
    absl::Status refusal = RefusalLocked();
    // A range that answers reads only still evaluates a request, against
    // its local state (the whole state: nothing is pending, the overlay is
    // empty): one that would change nothing (a Txn of gets, a condition
    // that fails) is a read and is answered as one. One that would change
    // something is refused below. docs/range-server.md, "Reads while the
    // log cannot be written".
    const bool reads_only = !refusal.ok() && ServingReadsOnlyLocked();
    // Refused before evaluation (or, reads only, before it reached a log):
    // a client may resend it (docs/kv-api.md, "Retries"; the mark is the
    // payload kv_server/retry.h reads).
    refusal.SetPayload("ledgerkv-retry-safe", absl::Cord("1"));
    if (!refusal.ok() && !reads_only) {
      now = [done, refusal](const absl::Status&) { done(refusal); };
    } else {
      // Reads only: last_revision_ may count writes that failed with the log.
      const int64_t base_revision = reads_only ? local_->meta().revision : last_revision_;
      WriteView view(*local_, overlay_, base_revision + 1, options_.limits);
      absl::Status status = evaluate(view, response.get());
      std::string record;
      // Nothing of a refused view is kept: it is dropped with this scope.
      const bool refused = reads_only && status.ok() && view.changed();
      if (refused) {
        now = [done, refusal](const absl::Status&) { done(refusal); };
      } else if (status.ok() && view.changed()) {
        range::v1::Effect effect = view.BuildEffect();
        record = effect.SerializeAsString();
        if (static_cast<int64_t>(record.size()) > options_.log.max_record_bytes) {
          status = absl::ResourceExhaustedError(
              absl::StrCat("the write's log record is ", record.size(),
                           " bytes; limit max_record_bytes of the log is ",
                           options_.log.max_record_bytes));
        } else {
          // A change: revision, overlay, append (under mu_, so revision
          // order is seqno order).
          last_revision_ = view.revision();
          SetHeader(response.get(), last_revision_, descriptor_.range_id);
          auto write = std::make_shared<PendingWrite>();
          write->id = next_write_id_++;
          write->effect = std::move(effect);
          write->delta = view.stats_delta();
          write->record_bytes = static_cast<int64_t>(record.size());
          write->answer = [done, response](const absl::Status& s) {
            if (s.ok()) {
              done(std::move(*response));
            } else {
              done(s);
            }
          };
          for (const auto& [key, state] : view.changes()) {
            overlay_[key] = PendingState{.state = state, .write_id = write->id};
          }
          const uint64_t id = write->id;
          pending_.push_back(std::move(write));
          writer_->Append(std::move(record), [this, id](absl::StatusOr<uint64_t> seqno) {
            OnLogDone(id, std::move(seqno));
          });
        }
      }
      if (!refused && (!status.ok() || !view.changed())) {
        // No change: the answer reflects the pending view, so it waits
        // until every earlier pending write is durable and applied.
        Answer answer;
        if (status.ok()) {
          SetHeader(response.get(), base_revision, descriptor_.range_id);
          answer = [done, response](const absl::Status& s) {
            if (s.ok()) {
              done(std::move(*response));
            } else {
              done(s);
            }
          };
        } else {
          answer = [done, status](const absl::Status& s) { done(s.ok() ? status : s); };
        }
        if (options_.linearizable_read_check) {
          // Nothing reaches the log, so no fence stops a deposed owner
          // here: the answer (found values, a failed condition's actual
          // version) is a read of this server's state, and is given only
          // when a linearizable read would be, checked when it is given.
          answer = [check = options_.linearizable_read_check,
                    answer = std::move(answer)](const absl::Status& s) {
            if (s.ok()) {
              if (absl::Status lease = check(); !lease.ok()) return answer(lease);
            }
            answer(s);
          };
        }
        if (pending_.empty()) {
          now = std::move(answer);
        } else {
          pending_.back()->followers.push_back(std::move(answer));
        }
      }
    }
  }
  if (now) now(absl::OkStatus());
}

void RangeImpl::Put(const ledgerkv::v1::PutRequest& request, Callback<PutResponse> done) {
  absl::Status valid = validator_.CheckRequestBytes(request.ByteSizeLong());
  if (valid.ok()) valid = validator_.CheckPut(request);
  if (!valid.ok()) return done(valid);
  Execute<PutResponse>(std::move(done), [&request](WriteView& view, PutResponse* response) {
    return view.Put(request, response);
  });
}

void RangeImpl::Delete(const ledgerkv::v1::DeleteRequest& request,
                       Callback<DeleteResponse> done) {
  absl::Status valid = validator_.CheckRequestBytes(request.ByteSizeLong());
  if (valid.ok()) valid = validator_.CheckDelete(request);
  if (!valid.ok()) return done(valid);
  Execute<DeleteResponse>(std::move(done),
                          [&request](WriteView& view, DeleteResponse* response) {
                            return view.Delete(request, response);
                          });
}

void RangeImpl::Increment(const ledgerkv::v1::IncrementRequest& request,
                          Callback<IncrementResponse> done) {
  absl::Status valid = validator_.CheckRequestBytes(request.ByteSizeLong());
  if (valid.ok()) valid = validator_.CheckIncrement(request);
  if (!valid.ok()) return done(valid);
  Execute<IncrementResponse>(std::move(done),
                             [&request](WriteView& view, IncrementResponse* response) {
                               return view.Increment(request, response);
                             });
}

void RangeImpl::Txn(const ledgerkv::v1::TxnRequest& request, Callback<TxnResponse> done) {
  absl::Status valid = validator_.CheckRequestBytes(request.ByteSizeLong());
  if (valid.ok()) valid = validator_.CheckTxn(request);
  if (!valid.ok()) return done(valid);
  Execute<TxnResponse>(std::move(done), [&request](WriteView& view, TxnResponse* response) {
    bool succeeded = true;
    for (const ledgerkv::v1::Compare& c : request.compares()) {
      ASSIGN_OR_RETURN(bool holds, view.Compare(c));
      if (!holds) {
        succeeded = false;
        break;
      }
    }
    response->set_succeeded(succeeded);
    for (const ledgerkv::v1::TxnOp& op : succeeded ? request.success() : request.failure()) {
      RETURN_IF_ERROR(RunOp(view, op, response->add_results()));
    }
    return absl::OkStatus();
  });
}

void RangeImpl::OnLogDone(uint64_t id, absl::StatusOr<uint64_t> seqno) {
  if (!seqno.ok()) {
    // What the log acknowledged before the error is applied and answered
    // first, as if the error had come in a later run.
    ApplyAcknowledged();
    Fail(seqno.status(), /*log_failure=*/true);
    return;
  }
  std::shared_ptr<PendingWrite> write;
  {
    absl::MutexLock l(&mu_);
    // After a failure every pending write was already answered.
    if (failed_ || pending_.size() <= acknowledged_.size() ||
        pending_[acknowledged_.size()]->id != id) {
      return;
    }
    write = pending_[acknowledged_.size()];
  }
  if (*seqno != first_seqno_ + id - 1) {
    ApplyAcknowledged();
    Fail(absl::InternalError(absl::StrCat("write ", id, " got seqno ", *seqno, ", expected ",
                                          first_seqno_ + id - 1)));
    return;
  }
  acknowledged_.emplace_back(std::move(write), *seqno);
}

void RangeImpl::ApplyAcknowledged() {
  if (acknowledged_.empty()) return;
  std::vector<std::pair<std::shared_ptr<PendingWrite>, uint64_t>> run;
  run.swap(acknowledged_);
  {
    absl::MutexLock l(&mu_);
    if (failed_) return;  // answered by Fail
  }
  // Only the delivering thread (one at a time) writes the DB while serving;
  // the overlay still shows these writes' keys until the entries are dropped
  // below, so the sequencer never sees a state older than the pending view.
  // The same reasoning makes the evaluation-time deltas exact: each write was
  // resolved against the pending view, which is exactly the DB after every
  // earlier seqno, the state it is applied on here (in seqno order, in one
  // WriteBatch; replay recomputes the deltas by reading).
  std::vector<SequencedEffect> effects;
  effects.reserve(run.size());
  for (const auto& [write, seqno] : run) {
    effects.push_back(SequencedEffect{seqno, &write->effect, write->delta});
  }
  if (absl::Status applied = local_->Apply(effects); !applied.ok()) {
    Fail(applied);
    return;
  }
  {
    absl::MutexLock l(&mu_);
    if (failed_) return;  // answered by Fail
    for (const auto& [write, seqno] : run) {
      pending_.pop_front();
      for (const range::v1::Mutation& m : write->effect.mutations()) {
        auto it = overlay_.find(m.key());
        if (it != overlay_.end() && it->second.write_id == write->id) overlay_.erase(it);
      }
      applied_bytes_ += write->record_bytes;
    }
    applied_seqno_ = run.back().second;
  }
  for (const auto& [write, seqno] : run) {
    write->answer(absl::OkStatus());
    for (const Answer& follower : write->followers) follower(absl::OkStatus());
  }
}

void RangeImpl::Fail(const absl::Status& cause, bool log_failure) {
  std::deque<std::shared_ptr<PendingWrite>> failed;
  absl::Status why;
  {
    absl::MutexLock l(&mu_);
    if (failed_) return;
    failed_ = true;
    const bool fenced = cause.code() == absl::StatusCode::kFailedPrecondition &&
                        absl::StrContains(cause.message(), "fenced");
    if (fenced) {
      why = absl::UnavailableError(absl::StrCat("range ", descriptor_.range_id,
                                                ": log fenced by a newer owner (",
                                                cause.message(), ")"));
    } else if (destroying_) {
      why = absl::UnavailableError(absl::StrCat("range ", descriptor_.range_id,
                                                " stopped (", cause.message(), ")"));
    } else {
      why = absl::UnavailableError(
          absl::StrCat("range ", descriptor_.range_id, ": log failed (", cause.ToString(), ")"));
    }
    failure_ = why;
    // Every acknowledged write is applied (ApplyAcknowledged ran first, and
    // a write is answered only once applied), so the local state is still
    // the range's whole state. Not after a fence: a newer owner may write.
    reads_after_failure_ = log_failure && !fenced && !destroying_;
    failed.swap(pending_);
    // None of the pending view was applied; the next owner replays
    // whatever of it reached the log.
    overlay_.clear();
    notify_failed_ = !destroying_;
  }
  if (!absl::StrContains(why.message(), "stopped (")) {
    std::cerr << "ledgerkv: " << why.message() << std::endl;
  }
  for (const auto& write : failed) {
    write->answer(why);
    for (const Answer& follower : write->followers) follower(why);
  }
}

// ---------------------------------------------------------------------------
// Reads

bool RangeImpl::ServingReadsOnly() const {
  absl::MutexLock l(&mu_);
  return ServingReadsOnlyLocked();
}

absl::Status RangeImpl::CheckReadable(ledgerkv::v1::ReadConsistency consistency) const {
  {
    absl::MutexLock l(&mu_);
    if (!ServingReadsOnlyLocked()) RETURN_IF_ERROR(RefusalLocked());
  }
  if (consistency == ledgerkv::v1::LINEARIZABLE && options_.linearizable_read_check) {
    RETURN_IF_ERROR(options_.linearizable_read_check());
  }
  return absl::OkStatus();
}

absl::StatusOr<ledgerkv::v1::GetResponse> RangeImpl::Get(const ledgerkv::v1::GetRequest& request) {
  RETURN_IF_ERROR(validator_.CheckGet(request));
  RETURN_IF_ERROR(CheckReadable(request.consistency()));
  ASSIGN_OR_RETURN(auto read, local_->GetWithRevision(request.key()));
  ledgerkv::v1::GetResponse response;
  StampHeader(response.mutable_header(), read.second, descriptor_.range_id);
  response.set_found(read.first.has_value());
  if (read.first.has_value()) ToKeyValue(request.key(), *read.first, response.mutable_kv());
  return response;
}

absl::StatusOr<ScanResult> RangeImpl::Scan(const ScanSpec& spec) {
  RETURN_IF_ERROR(CheckReadable(spec.consistency));
  // Clip to the range (the caller should have).
  ScanSpec clipped = spec;
  if (clipped.start < descriptor_.start) clipped.start = descriptor_.start;
  if (!descriptor_.end.empty() && (clipped.end.empty() || clipped.end > descriptor_.end)) {
    clipped.end = descriptor_.end;
  }
  if (clipped.limit < 0) {
    return absl::InvalidArgumentError(absl::StrCat("scan limit ", clipped.limit, " is negative"));
  }
  if (!clipped.end.empty() && clipped.end <= clipped.start) {
    ScanResult empty;
    empty.revision = local_->meta().revision;
    return empty;
  }
  return local_->Scan(clipped, options_.limits.max_keys_per_request);
}

// ---------------------------------------------------------------------------
// Snapshots

bool RangeImpl::PolicyWakeLocked() const {
  return stop_threads_ || failed_ ||
         applied_bytes_ - bytes_at_snapshot_ >= options_.snapshot_log_bytes;
}

bool RangeImpl::PolicyWakeOrWriteLocked() const {
  return PolicyWakeLocked() || applied_seqno_ > snapshot_seqno_;
}

void RangeImpl::PolicyLoop() {
  mu_.Lock();
  for (;;) {
    if (stop_threads_ || failed_) break;
    const bool bytes_due = applied_bytes_ - bytes_at_snapshot_ >= options_.snapshot_log_bytes;
    const bool time_due = applied_seqno_ > snapshot_seqno_ &&
                          absl::Now() >= last_snapshot_time_ + options_.snapshot_interval;
    if (bytes_due || time_due) {
      mu_.Unlock();
      {
        absl::MutexLock s(&snapshot_mu_);
        IgnoreError(TakeSnapshotLocked());  // logged and counted inside
      }
      mu_.Lock();
      continue;
    }
    const absl::Time due = last_snapshot_time_ + options_.snapshot_interval;
    if (applied_seqno_ <= snapshot_seqno_ && absl::Now() >= due) {
      // The interval has passed with nothing new to copy: wait for a write,
      // not for a deadline that is already past (that spun a core on every
      // idle range).
      mu_.Await(absl::Condition(this, &RangeImpl::PolicyWakeOrWriteLocked));
    } else {
      mu_.AwaitWithDeadline(absl::Condition(this, &RangeImpl::PolicyWakeLocked), due);
    }
  }
  mu_.Unlock();
}

absl::Status RangeImpl::TakeSnapshotLocked() {
  int64_t bytes_mark = 0;
  {
    absl::MutexLock l(&mu_);
    bytes_mark = applied_bytes_;
  }
  absl::Status status = SnapshotAndTruncateLocked(bytes_mark);
  if (!status.ok()) {
    std::cerr << "ledgerkv: range " << descriptor_.range_id << ": snapshot failed: " << status
              << std::endl;
    absl::MutexLock l(&mu_);
    ++snapshot_failures_;
    // Try again after another interval or another snapshot_log_bytes, not
    // in a tight loop.
    last_snapshot_time_ = absl::Now();
    bytes_at_snapshot_ = bytes_mark;
  }
  return status;
}

absl::Status RangeImpl::SnapshotAndTruncateLocked(int64_t bytes_mark) {
  if (db_closed_) {
    return absl::UnavailableError(absl::StrCat("range ", descriptor_.range_id, " is closed"));
  }
  snapshot::SnapshotSource source;
  source.db = local_->db();
  source.column_family = local_->data_cf();
  LocalStore* local = local_.get();
  // V, S and the key count from the meta column family at the rocksdb
  // snapshot being copied, so they describe exactly the data in the
  // snapshot (writes go on meanwhile).
  // A count known to disagree with the data is left out (-1).
  auto read_point = [local](bool with_count) {
    return [local, with_count](
               const rocksdb::ReadOptions& at) -> absl::StatusOr<snapshot::SnapshotPoint> {
      ASSIGN_OR_RETURN(LocalMeta meta, local->ReadMeta(at));
      return snapshot::SnapshotPoint{.revision = static_cast<uint64_t>(meta.revision),
                                     .seqno = meta.applied_seqno,
                                     .key_count = with_count ? meta.key_count : -1};
    };
  };
  source.read_point = read_point(key_count_trusted_);
  absl::StatusOr<snapshot::SnapshotInfo> taken =
      snapshots_->TakeSnapshot(descriptor_.range_id, source);
  if (absl::IsFailedPrecondition(taken.status()) && key_count_trusted_) {
    // The writer refused a header count that differs from the records (so
    // the snapshot would not restore). The count has drifted; snapshots must
    // go on all the same, without it. A restore recounts.
    std::cerr << "ledgerkv: range " << descriptor_.range_id
              << ": snapshot refused: " << taken.status().message()
              << "; the range's key count has drifted: snapshots go on without it, and its "
                 "key_count stat is off until the range is next restored from a snapshot"
              << std::endl;
    key_count_trusted_ = false;
    source.read_point = read_point(false);
    taken = snapshots_->TakeSnapshot(descriptor_.range_id, source);
  }
  RETURN_IF_ERROR(taken.status());
  const snapshot::SnapshotInfo& info = *taken;
  {
    absl::MutexLock l(&mu_);
    snapshot_seqno_ = std::max(snapshot_seqno_, info.seqno);
    ++snapshots_taken_;
    last_snapshot_time_ = absl::Now();
    bytes_at_snapshot_ = bytes_mark;
  }
  ASSIGN_OR_RETURN(uint64_t oldest, snapshots_->OldestRetainedSeqno(descriptor_.range_id));
  // Every record <= oldest is in every retained snapshot.
  absl::Status truncated = writer_->Truncate(oldest + 1);
  const meta::v1::LogMetadata log = writer_->metadata();
  if (log.segments_size() > 0) {
    absl::MutexLock l(&mu_);
    log_first_seqno_ = log.segments(0).first_seqno();
  }
  return truncated;
}

absl::Status RangeImpl::SnapshotNow() {
  absl::MutexLock s(&snapshot_mu_);
  {
    absl::MutexLock l(&mu_);
    RETURN_IF_ERROR(RefusalLocked());
  }
  return TakeSnapshotLocked();
}

// ---------------------------------------------------------------------------
// Failure notification, Close, stats

void RangeImpl::NotifierLoop() {
  absl::Status why;
  {
    absl::MutexLock l(&mu_);
    auto wake = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      return notify_failed_ || stop_threads_;
    };
    mu_.Await(absl::Condition(&wake));
    if (stop_threads_ || !notify_failed_) return;
    why = failure_;
  }
  std::function<void(const absl::Status&)> on_failed = options_.on_failed;
  // From here on nothing of the range is touched: on_failed may destroy it.
  if (on_failed) on_failed(why);
}

absl::Status RangeImpl::Close() {
  absl::MutexLock c(&close_mu_);
  if (closed_) return close_status_;
  {
    absl::MutexLock l(&mu_);
    closing_ = true;
  }
  StopThreads();
  {
    absl::MutexLock l(&mu_);
    auto drained = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      return pending_.empty() || failed_;
    };
    mu_.Await(absl::Condition(&drained));
  }
  absl::MutexLock s(&snapshot_mu_);
  absl::Status log = writer_ != nullptr ? writer_->Close() : absl::OkStatus();
  absl::Status db = local_->Close();
  db_closed_ = true;
  {
    absl::MutexLock l(&mu_);
    if (failed_) log = failure_;
  }
  close_status_ = log.ok() ? db : log;
  closed_ = true;
  return close_status_;
}

RangeStats RangeImpl::stats() const {
  RangeStats stats;
  const LocalMeta meta = local_->meta();
  stats.revision = meta.revision;
  stats.key_count = meta.key_count;
  stats.bytes = meta.bytes;
  stats.applied_seqno = meta.applied_seqno;
  stats.epoch = writer_ != nullptr ? writer_->epoch() : recovery_.epoch;
  stats.replayed_records = recovery_.replayed_records;
  stats.recovered_from = recovery_.recovered_from;
  absl::MutexLock l(&mu_);
  stats.snapshot_seqno = snapshot_seqno_;
  stats.log_first_seqno = log_first_seqno_;
  stats.snapshots_taken = snapshots_taken_;
  stats.snapshot_failures = snapshot_failures_;
  stats.serving = RefusalLocked().ok();
  if (ServingReadsOnlyLocked()) stats.writes_refused = std::string(failure_.message());
  return stats;
}

}  // namespace ledgerkv::kv
