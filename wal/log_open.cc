// LogWriter::Open: the opening (fencing) protocol of docs/wal-format.md:
// raise the epoch, recover the previous writer's ledger, append a new one.
#include <algorithm>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "google/protobuf/util/message_differencer.h"
#include "ledger/ledger_client.h"
#include "wal/batch_format.h"
#include "wal/log_metadata.h"
#include "wal/log_writer.h"

namespace ledgerkv::wal {
namespace {

absl::Status CheckWriterOptions(const LogOptions& options) {
  RETURN_IF_ERROR(CheckLogOptions(options));
  if (options.max_batch_bytes <= 0 || options.max_entries_in_flight < 1 ||
      options.max_record_bytes <= 0 || options.roll_bytes <= 0 ||
      options.max_batch_delay < absl::ZeroDuration() || options.roll_age <= absl::ZeroDuration() ||
      options.metadata_retries < 1) {
    return absl::InvalidArgumentError(
        "LogOptions: batch and roll limits must be positive, the batch delay not negative");
  }
  // Checked here as well as by the ledger client: a bad request must fail
  // before the epoch is raised, which would fence the current writer.
  if (!(options.ensemble_size >= options.write_quorum && options.write_quorum >= options.ack_quorum &&
        options.ack_quorum >= 1) ||
      options.ensemble_size > ledger::LedgerClient::kMaxEnsembleSize) {
    return absl::InvalidArgumentError(absl::StrCat(
        "LogOptions: need E >= Qw >= Qa >= 1 and E <= ", ledger::LedgerClient::kMaxEnsembleSize,
        ", got E=", options.ensemble_size,
        " Qw=", options.write_quorum, " Qa=", options.ack_quorum));
  }
  // The largest entry the writer makes: a batch of max_batch_bytes, or one
  // record alone with its framing. The ledger refuses anything larger, and
  // the writer would fail on the first such record instead of here.
  const int64_t largest_entry =
      std::max<int64_t>(options.max_batch_bytes,
                        static_cast<int64_t>(kBatchHeaderBytes + kMaxRecordOverhead) +
                            options.max_record_bytes);
  if (largest_entry > options.client->max_entry_bytes()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "LogOptions: entries of up to ", largest_entry, " bytes (max_record_bytes ",
        options.max_record_bytes, " plus framing, or max_batch_bytes ", options.max_batch_bytes,
        ") exceed the ledger client's max_entry_bytes ", options.client->max_entry_bytes()));
  }
  return absl::OkStatus();
}

// Step 1: raise the epoch by CAS (creating the log if needed). Whoever
// raises it last owns the log; two opens that race on the same version
// cannot both win, and the loser fails rather than raising again.
absl::StatusOr<VersionedLog> RaiseEpoch(const LogOptions& options, const std::string& key,
                                        const std::string& name) {
  for (int attempt = 1;; ++attempt) {
    VersionedLog current;
    current.version = metadata::kMustNotExist;
    auto loaded = LoadLog(*options.metadata, key, name, /*include_deleting=*/true);
    if (loaded.ok()) {
      current = *std::move(loaded);
    } else if (!absl::IsNotFound(loaded.status())) {
      return loaded.status();
    }
    if (current.metadata.deleting()) {
      // A dropped range's log (DeleteLog): never brought back to life.
      return absl::NotFoundError(absl::StrCat("log ", name, " is being deleted"));
    }
    VersionedLog next = current;
    next.metadata.set_epoch(current.metadata.epoch() + 1);
    auto stored = StoreLog(*options.metadata, key, next.metadata, current.version);
    if (stored.ok()) {
      next.version = *stored;
      return next;
    }
    if (!absl::IsAborted(stored.status())) {
      // Unknown outcome (a lost reply): do not guess whose epoch it is; the
      // caller retries Open, which raises it again.
      return absl::UnavailableError(absl::StrCat("log ", name, ": cannot raise the epoch: ",
                                                 stored.status().message()));
    }
    auto reread = LoadLog(*options.metadata, key, name, /*include_deleting=*/true);
    if (!reread.ok()) return reread.status();
    if (reread->metadata.epoch() != current.metadata.epoch()) {
      return absl::AbortedError(absl::StrCat("log ", name, " was opened concurrently by another writer (epoch ",
                                             reread->metadata.epoch(), ")"));
    }
    // Only the segments moved (the old writer rolled): raise on top of that.
    if (attempt >= options.metadata_retries) {
      return absl::UnavailableError(absl::StrCat("log ", name, ": epoch CAS kept losing"));
    }
  }
}

// Step 2 for one OPEN segment: fence and close its ledger (the ledger
// recovery protocol), then read the last seqno from its last entry.
absl::StatusOr<uint64_t> RecoverSegment(ledger::LedgerClient& client,
                                        const meta::v1::LogSegment& segment,
                                        const std::string& name) {
  auto reader = client.OpenLedger(segment.ledger_id(), ledger::OpenMode::kRecover);
  if (absl::IsNotFound(reader.status())) {
    return absl::DataLossError(absl::StrCat("log ", name, ": ledger ", segment.ledger_id(),
                                            " of its open segment is missing"));
  }
  if (!reader.ok()) return reader.status();
  const int64_t last_entry = (*reader)->metadata().last_entry_id();
  if (last_entry < 0) return segment.first_seqno() - 1;

  auto annotate = [&](const absl::Status& s, int64_t entry) {
    return absl::Status(s.code(), absl::StrCat("log ", name, ": recovering ledger ",
                                               segment.ledger_id(), ", entry ", entry, ": ",
                                               s.message()));
  };
  auto header_of = [&](int64_t entry) -> absl::StatusOr<BatchHeader> {
    auto entries = (*reader)->Read(entry, entry);
    if (!entries.ok()) return annotate(entries.status(), entry);
    auto header = DecodeBatchHeader((*entries)[0].payload);
    if (!header.ok()) return annotate(header.status(), entry);
    return header;
  };
  ASSIGN_OR_RETURN(BatchHeader first, header_of(0));
  if (first.first_seqno != segment.first_seqno()) {
    return absl::DataLossError(absl::StrCat("log ", name, ": ledger ", segment.ledger_id(),
                                            " starts at seqno ", first.first_seqno,
                                            ", its segment at ", segment.first_seqno()));
  }
  ASSIGN_OR_RETURN(BatchHeader last, header_of(last_entry));
  if (last.first_seqno < first.first_seqno + static_cast<uint64_t>(last_entry)) {
    return absl::DataLossError(absl::StrCat("log ", name, ": ledger ", segment.ledger_id(),
                                            " entry ", last_entry, " starts at seqno ",
                                            last.first_seqno, ", too low for its position"));
  }
  return last.last_seqno();
}

// Step 2: recovers every OPEN segment of `log` and marks it CLOSED at its
// last seqno (in `log` only; nothing is stored), then checks the result.
absl::Status RecoverOpenSegments(const LogOptions& options, const std::string& name,
                                 meta::v1::LogMetadata* log) {
  for (meta::v1::LogSegment& segment : *log->mutable_segments()) {
    if (segment.state() == meta::v1::LogSegment::CLOSED) continue;
    ASSIGN_OR_RETURN(uint64_t last, RecoverSegment(*options.client, segment, name));
    segment.set_state(meta::v1::LogSegment::CLOSED);
    segment.set_last_seqno(last);
  }
  return CheckSegments(*log, name);
}

}  // namespace

absl::StatusOr<LogWriter::Recovered> LogWriter::RecoverForReading(const LogOptions& options,
                                                                   const std::string& name) {
  RETURN_IF_ERROR(CheckLogOptions(options));
  RETURN_IF_ERROR(CheckLogName(name));
  const std::string key = metadata::Keys(options.cluster).Log(name);
  ASSIGN_OR_RETURN(VersionedLog log, RaiseEpoch(options, key, name));
  meta::v1::LogMetadata recovered = log.metadata;
  RETURN_IF_ERROR(RecoverOpenSegments(options, name, &recovered));
  // Open's step 4 would fail if anyone raised the epoch since step 1; with
  // no step 4, look: the log must still be ours (and not being deleted).
  ASSIGN_OR_RETURN(VersionedLog now, LoadLog(*options.metadata, key, name,
                                             /*include_deleting=*/true));
  if (now.metadata.deleting()) {
    return absl::NotFoundError(absl::StrCat("log ", name, " is being deleted"));
  }
  if (now.metadata.epoch() != recovered.epoch()) {
    return absl::AbortedError(absl::StrCat("log ", name,
                                           " was opened concurrently by another writer (epoch ",
                                           now.metadata.epoch(), ")"));
  }
  Recovered out;
  out.last_seqno = NextSeqnoAfter(recovered) - 1;
  out.first_seqno = recovered.segments_size() > 0 ? recovered.segments(0).first_seqno() : 1;
  out.epoch = recovered.epoch();
  return out;
}

absl::StatusOr<std::unique_ptr<LogWriter>> LogWriter::Open(const LogOptions& options,
                                                           std::string name) {
  RETURN_IF_ERROR(CheckWriterOptions(options));
  RETURN_IF_ERROR(CheckLogName(name));
  const std::string key = metadata::Keys(options.cluster).Log(name);

  // 1. Raise the epoch. From here on the old writer's metadata CASes (roll,
  // close, truncate) fail, and it stops at the next one.
  ASSIGN_OR_RETURN(VersionedLog log, RaiseEpoch(options, key, name));
  const uint64_t epoch = log.metadata.epoch();

  // 2. Recover every OPEN segment (normally only the last one). Recovery
  // fences its ledger on the bookies: the old writer's next add fails, and
  // every add it had acknowledged is kept (ledger invariants L2, L3, L5).
  meta::v1::LogMetadata next = log.metadata;
  RETURN_IF_ERROR(RecoverOpenSegments(options, name, &next));
  const uint64_t first_seqno = NextSeqnoAfter(next);

  // 3. A new ledger, named after the log and epoch so an orphan (a crash
  // before step 4) can be traced.
  ledger::CreateOptions create;
  create.ensemble_size = options.ensemble_size;
  create.write_quorum = options.write_quorum;
  create.ack_quorum = options.ack_quorum;
  create.custom = {{"log", name}, {"log_epoch", absl::StrCat(epoch)}};
  absl::StatusOr<std::unique_ptr<ledger::LedgerWriter>> created =
      options.client->CreateLedger(create);
  if (!created.ok()) {
    // Recovery worked; only a new ledger could not be made (say no
    // writable bookie): RecoverForReading would work now.
    absl::Status failed = created.status();
    failed.SetPayload(kNoNewLedgerPayload, absl::Cord("1"));
    return failed;
  }
  std::unique_ptr<ledger::LedgerWriter> writer = *std::move(created);
  meta::v1::LogSegment* added = next.add_segments();
  added->set_ledger_id(writer->id());
  added->set_first_seqno(first_seqno);
  added->set_state(meta::v1::LogSegment::OPEN);

  // 4. One CAS: recovered segments CLOSED, the new one OPEN. It fails if
  // anyone raised the epoch since step 1.
  metadata::Version version = log.version;  // what the last attempt expected
  bool unknown_outcome = false;             // a write failed UNAVAILABLE
  auto give_up = [&](absl::Status status) {
    const uint64_t id = writer->id();
    writer.reset();
    DeleteUnlessTheLogMayNameIt(options, key, name, id, unknown_outcome, version);
    return status;
  };
  for (int attempt = 1;; ++attempt) {
    auto stored = StoreLog(*options.metadata, key, next, version);
    if (stored.ok()) {
      version = *stored;
      break;
    }
    if (absl::IsUnavailable(stored.status())) unknown_outcome = true;
    if (!absl::IsAborted(stored.status()) && !absl::IsUnavailable(stored.status())) {
      return give_up(stored.status());
    }
    if (attempt >= options.metadata_retries) {
      return give_up(absl::UnavailableError(absl::StrCat(
          "log ", name, ": cannot append its new segment: ", stored.status().message())));
    }
    if (absl::IsUnavailable(stored.status())) absl::SleepFor(absl::Milliseconds(20 * attempt));
    auto reread = LoadLog(*options.metadata, key, name, /*include_deleting=*/true);
    if (!reread.ok()) {
      if (absl::IsUnavailable(reread.status())) continue;
      return give_up(reread.status());
    }
    if (reread->metadata.epoch() != epoch) {
      return give_up(absl::AbortedError(absl::StrCat("log ", name,
                                                     " was opened concurrently by another writer (epoch ",
                                                     reread->metadata.epoch(), ")")));
    }
    if (google::protobuf::util::MessageDifferencer::Equals(reread->metadata, next)) {
      version = reread->version;  // our write landed; its reply was lost
      break;
    }
    if (!google::protobuf::util::MessageDifferencer::Equals(reread->metadata, log.metadata)) {
      // Nobody else writes at our epoch: this should not happen.
      return give_up(absl::AbortedError(absl::StrCat("log ", name, " changed during open: ",
                                                     DescribeLog(reread->metadata, name))));
    }
    if (reread->version != version) {
      // The same content under another version: the record was deleted
      // (DeleteLog) and created again (another open) meanwhile. That is not
      // the log whose epoch we raised: naming our ledger in it would name a
      // ledger the orphan sweep may already be deleting, since the log it
      // was made for is gone (docs/wal-format.md, "Orphan ledgers").
      return give_up(absl::AbortedError(
          absl::StrCat("log ", name, " was deleted and created again during open")));
    }
    // Unchanged (the attempt failed UNAVAILABLE without landing): again.
  }
  return std::unique_ptr<LogWriter>(
      new LogWriter(options, std::move(name), epoch, std::move(next), version, std::move(writer)));
}

namespace {

// One pass of DeleteLog. ABORTED if the record changed between the mark
// and the final delete (another DeleteLog of the same log marked it again).
absl::Status DeleteLogOnce(const LogOptions& options, const std::string& name,
                           const std::string& key) {
  // 1. Raise the epoch and mark the log deleting, in one CAS on the log as
  // it is (never creating it): the writer's next roll, close or truncate
  // fails, no writer can open it again (it reads as absent), and a retry
  // of this call still finds the segments to fence and delete.
  VersionedLog log;
  for (int attempt = 1;; ++attempt) {
    auto loaded = LoadLog(*options.metadata, key, name, /*include_deleting=*/true);
    if (absl::IsNotFound(loaded.status())) return absl::OkStatus();
    RETURN_IF_ERROR(loaded.status());
    log = *std::move(loaded);
    log.metadata.set_epoch(log.metadata.epoch() + 1);
    log.metadata.set_deleting(true);
    auto stored = StoreLog(*options.metadata, key, log.metadata, log.version);
    if (stored.ok()) {
      log.version = *stored;
      break;
    }
    if (!absl::IsAborted(stored.status()) || attempt >= options.metadata_retries) {
      return absl::Status(stored.status().code(),
                          absl::StrCat("log ", name, ": cannot mark it deleting: ",
                                       stored.status().message()));
    }
  }
  // 2. Fence the writer's ledger: recovery marks it fenced on its bookies,
  // so its next add fails.
  std::vector<uint64_t> ledgers(log.metadata.ledgers_to_delete().begin(),
                                log.metadata.ledgers_to_delete().end());
  for (const meta::v1::LogSegment& segment : log.metadata.segments()) {
    ledgers.push_back(segment.ledger_id());
    if (segment.state() == meta::v1::LogSegment::CLOSED) continue;
    auto fenced = options.client->OpenLedger(segment.ledger_id(), ledger::OpenMode::kRecover);
    if (!fenced.ok() && !absl::IsNotFound(fenced.status())) {
      return absl::Status(fenced.status().code(),
                          absl::StrCat("log ", name, ": cannot fence ledger ", segment.ledger_id(),
                                       " before deleting it: ", fenced.status().message()));
    }
  }
  // 3. The ledgers, then the record (a failure in between leaves the log
  // marked deleting; the next try finds the ledgers already gone).
  for (uint64_t ledger_id : ledgers) {
    absl::Status deleted = options.client->DeleteLedger(ledger_id);
    if (!deleted.ok() && !absl::IsNotFound(deleted)) {
      return absl::Status(deleted.code(), absl::StrCat("log ", name, ": delete ledger ", ledger_id,
                                                       ": ", deleted.message()));
    }
  }
  absl::Status deleted = options.metadata->Delete(key, log.version);
  if (absl::IsNotFound(deleted)) return absl::OkStatus();
  return deleted;
}

}  // namespace

absl::Status DeleteLog(const LogOptions& options, const std::string& name) {
  RETURN_IF_ERROR(CheckLogOptions(options));
  RETURN_IF_ERROR(CheckLogName(name));
  const std::string key = metadata::Keys(options.cluster).Log(name);
  for (int round = 1;; ++round) {
    absl::Status s = DeleteLogOnce(options, name, key);
    // Two servers cleaning the same dropped range mark it in turn: go round
    // again (what the other already deleted is skipped) rather than report
    // a failure the other one is about to repair.
    if (!absl::IsAborted(s) || round >= options.metadata_retries) return s;
  }
}

}  // namespace ledgerkv::wal
