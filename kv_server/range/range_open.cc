// Range::Open: recovery of a range (docs/range-server.md, "Recovery").
#include <future>
#include <iostream>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "kv_server/range/local_store.h"
#include "kv_server/range/range.h"
#include "kv_server/range/range_impl.h"
#include "snapshot/snapshot_store.h"
#include "wal/log_reader.h"
#include "wal/log_writer.h"

namespace ledgerkv::kv {
namespace {

// Replay applies this many records (or bytes) per WriteBatch.
constexpr size_t kReplayBatchRecords = 1024;
constexpr size_t kReplayBatchBytes = size_t{4} << 20;

std::string LogName(uint64_t range_id) { return absl::StrCat("range-", range_id); }

absl::Status CheckOptions(const RangeOptions& options, const RangeDescriptor& descriptor) {
  if (descriptor.range_id == 0) return absl::InvalidArgumentError("range id 0");
  if (!descriptor.end.empty() && descriptor.end <= descriptor.start) {
    return absl::InvalidArgumentError(absl::StrCat("range ", descriptor.range_id,
                                                   " has end <= start"));
  }
  if (options.data_dir.empty()) return absl::InvalidArgumentError("range data_dir is empty");
  if (options.log.client == nullptr || options.log.metadata == nullptr) {
    return absl::InvalidArgumentError("range log options need a ledger client and a store");
  }
  const Limits& l = options.limits;
  if (l.max_key_bytes < 1 || l.max_value_bytes < 0 || l.max_txn_ops < 1 ||
      l.max_request_bytes < 1 || l.max_keys_per_request < 1) {
    return absl::InvalidArgumentError("range limits must be positive");
  }
  if (options.snapshot_log_bytes < 1) {
    return absl::InvalidArgumentError("snapshot_log_bytes must be positive");
  }
  return absl::OkStatus();
}

// Replays log records (A, last] into `local`, in batches. Returns the
// number of records applied.
absl::StatusOr<int64_t> Replay(const RangeOptions& options, const RangeDescriptor& descriptor,
                               LocalStore& local, uint64_t last) {
  const uint64_t from = local.meta().applied_seqno + 1;
  if (from > last) return 0;
  ASSIGN_OR_RETURN(std::unique_ptr<wal::LogReader> reader,
                   wal::LogReader::Open(options.log, LogName(descriptor.range_id), from));
  std::vector<range::v1::Effect> effects;
  std::vector<uint64_t> seqnos;
  size_t bytes = 0;
  int64_t replayed = 0;
  int64_t revision = local.meta().revision;
  auto flush = [&]() -> absl::Status {
    std::vector<SequencedEffect> batch;
    batch.reserve(effects.size());
    for (size_t i = 0; i < effects.size(); ++i) batch.push_back({seqnos[i], &effects[i]});
    RETURN_IF_ERROR(local.Apply(batch));
    replayed += static_cast<int64_t>(effects.size());
    effects.clear();
    seqnos.clear();
    bytes = 0;
    return absl::OkStatus();
  };
  auto visit = [&](const wal::LogRecord& record) -> absl::Status {
    range::v1::Effect& effect = effects.emplace_back();
    if (!effect.ParseFromString(record.data)) {
      return absl::DataLossError(absl::StrCat("range ", descriptor.range_id, ": log record ",
                                              record.seqno, " is not an effect"));
    }
    // Revisions rise by one per committed write, whoever wrote it.
    if (effect.revision() <= revision) {
      return absl::DataLossError(absl::StrCat("range ", descriptor.range_id, ": log record ",
                                              record.seqno, " has revision ", effect.revision(),
                                              " after ", revision));
    }
    revision = effect.revision();
    seqnos.push_back(record.seqno);
    bytes += record.data.size();
    if (effects.size() >= kReplayBatchRecords || bytes >= kReplayBatchBytes) return flush();
    return absl::OkStatus();
  };
  // Reading the next chunk from the bookies overlaps with decoding and
  // applying the current one (reads were two thirds of replay time when
  // done in turn). One Next() runs at a time; the reader is not touched
  // while it runs.
  using Chunk = absl::StatusOr<std::vector<wal::LogRecord>>;
  auto fetch = [&reader, last]() -> Chunk { return reader->Next(last); };
  std::future<Chunk> next = std::async(std::launch::async, fetch);
  for (;;) {
    Chunk records = next.get();
    if (!records.ok()) return records.status();
    if (records->empty()) {
      if (reader->position() > last) break;
      return absl::OutOfRangeError(absl::StrCat("range ", descriptor.range_id, ": log ends at seqno ",
                                                reader->position() - 1, " before ", last));
    }
    const bool more = reader->position() <= last;
    if (more) next = std::async(std::launch::async, fetch);
    absl::Status visited;
    for (const wal::LogRecord& record : *records) {
      visited = visit(record);
      if (!visited.ok()) break;
    }
    if (!visited.ok()) {
      if (more) static_cast<void>(next.get());  // the reader must outlive the fetch
      return visited;
    }
    if (!more) break;
  }
  RETURN_IF_ERROR(flush());
  return replayed;
}

// Steps 2-4 of Open, once the log is recovered up to `log_end` (its first
// segment starting at `log_first`): keeps `local` if the log covers it,
// else restores the newest valid snapshot into it, then replays the log.
absl::StatusOr<RecoveryInfo> RecoverLocalState(const RangeOptions& options,
                                               const RangeDescriptor& descriptor,
                                               snapshot::SnapshotStore& snapshot_store,
                                               std::unique_ptr<LocalStore>& local,
                                               uint64_t log_end, uint64_t log_first) {
  snapshot::SnapshotStore* snapshots = &snapshot_store;
  // 2. Keep the local state if the log still covers it.
  const uint64_t id = descriptor.range_id;
  RecoveryInfo recovery;
  uint64_t applied = local->meta().applied_seqno;
  bool usable = local->existed();
  if (usable && applied == 0) {
    // Data under a meta at seqno 0 is not a prefix of the log: it is a
    // restore that crashed after ingesting its files (durable at once) and
    // before its meta was flushed. Replaying from seqno 1 on top of it
    // would miscount keys and bytes; restore again instead.
    ASSIGN_OR_RETURN(bool has_data, local->HasData());
    if (has_data) {
      std::cerr << "ledgerkv: range " << id << ": local state in " << options.data_dir
                << " has data but no applied seqno (an interrupted restore); restoring again"
                << std::endl;
      usable = false;
    }
  }
  if (usable && applied > log_end) {
    return absl::DataLossError(absl::StrCat(
        "range ", id, ": local state in ", options.data_dir, " is at seqno ", applied,
        ", ahead of the log, which ends at ", log_end,
        "; refusing to serve state the log does not hold"));
  }
  if (usable && log_first <= applied + 1) {
    recovery.recovered_from = applied > 0 ? "local" : "empty";
  } else {
    // 3. Start over from the newest valid snapshot.
    RETURN_IF_ERROR(local->Close());
    local.reset();
    RETURN_IF_ERROR(LocalStore::Destroy(options.data_dir));
    ASSIGN_OR_RETURN(local, LocalStore::Open(options.data_dir));
    snapshot::RestoreTarget target;
    target.db = local->db();
    target.column_family = local->data_cf();
    auto restored = snapshots->RestoreNewestValid(id, target);
    recovery.restore_failures = snapshots->stats().restore_failures;
    if (restored.ok()) {
      RETURN_IF_ERROR(
          local->ResetMeta(restored->seqno, static_cast<int64_t>(restored->revision)));
      // The restored data is on disk (ingested files) but the new meta is
      // only in the memtable: a crash now would leave data at S under a
      // meta at 0, which replay from seqno 1 would miscount. Flush both.
      RETURN_IF_ERROR(local->Flush());
      recovery.recovered_from = absl::StrCat("snapshot ", restored->ledger_id);
      recovery.snapshot_seqno = restored->seqno;
    } else if (absl::IsNotFound(restored.status())) {
      recovery.recovered_from = "empty";
    } else {
      return restored.status();
    }
    applied = local->meta().applied_seqno;
    if (applied > log_end) {
      return absl::DataLossError(absl::StrCat("range ", id, ": snapshot at seqno ", applied,
                                              " is ahead of the log, which ends at ", log_end));
    }
    if (log_first > applied + 1) {
      return absl::DataLossError(absl::StrCat(
          "range ", id, ": state is at seqno ", applied, " but the log starts at seqno ",
          log_first, "; no snapshot covers seqnos ", applied + 1, "..", log_first - 1));
    }
  }
  if (recovery.snapshot_seqno == 0) {
    // The newest published snapshot, for stats (the local state may be
    // newer than it).
    auto listed = snapshots->ListSnapshots(id);
    if (listed.ok() && !listed->empty()) recovery.snapshot_seqno = listed->back().seqno;
  }

  // 4. Replay (A, E].
  ASSIGN_OR_RETURN(recovery.replayed_records, Replay(options, descriptor, *local, log_end));
  return recovery;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Range>> Range::Open(const RangeOptions& options,
                                                   const RangeDescriptor& descriptor) {
  return Open(options, descriptor, nullptr);
}

absl::StatusOr<std::unique_ptr<Range>> Range::Open(const RangeOptions& options,
                                                   const RangeDescriptor& descriptor,
                                                   std::unique_ptr<wal::LogWriter> opened_log) {
  RETURN_IF_ERROR(CheckOptions(options, descriptor));
  const uint64_t id = descriptor.range_id;
  ASSIGN_OR_RETURN(std::unique_ptr<snapshot::SnapshotStore> snapshots,
                   snapshot::SnapshotStore::Create(options.snapshot));

  // The local DB first: RocksDB's lock refuses a second open of the same
  // directory (say, a reopen while the old Range object still lives)
  // before it could fence the log of a range this process still serves.
  ASSIGN_OR_RETURN(std::unique_ptr<LocalStore> local, LocalStore::Open(options.data_dir));

  // 1. Fence any previous owner (unless the caller did). The log ends at E.
  std::unique_ptr<wal::LogWriter> writer = std::move(opened_log);
  if (writer == nullptr) {
    ASSIGN_OR_RETURN(writer, wal::LogWriter::Open(options.log, LogName(id)));
  }
  const uint64_t log_end = writer->first_seqno() - 1;
  const meta::v1::LogMetadata log = writer->metadata();
  const uint64_t log_first = log.segments_size() > 0 ? log.segments(0).first_seqno() : 1;

  ASSIGN_OR_RETURN(RecoveryInfo recovery, RecoverLocalState(options, descriptor, *snapshots, local,
                                                           log_end, log_first));

  // 5. Serve.
  return std::unique_ptr<Range>(new RangeImpl(options, descriptor, std::move(writer),
                                              std::move(local), std::move(snapshots),
                                              std::move(recovery)));
}

absl::StatusOr<std::unique_ptr<Range>> Range::OpenForReads(const RangeOptions& options,
                                                           const RangeDescriptor& descriptor,
                                                           const absl::Status& why) {
  RETURN_IF_ERROR(CheckOptions(options, descriptor));
  ASSIGN_OR_RETURN(std::unique_ptr<snapshot::SnapshotStore> snapshots,
                   snapshot::SnapshotStore::Create(options.snapshot));
  // The local DB first, as in Open.
  ASSIGN_OR_RETURN(std::unique_ptr<LocalStore> local, LocalStore::Open(options.data_dir));
  // 1. Fence any previous owner, recover the log, create nothing.
  ASSIGN_OR_RETURN(wal::LogWriter::Recovered log,
                   wal::LogWriter::RecoverForReading(options.log, LogName(descriptor.range_id)));
  ASSIGN_OR_RETURN(RecoveryInfo recovery,
                   RecoverLocalState(options, descriptor, *snapshots, local, log.last_seqno,
                                     log.first_seqno));
  recovery.log_last_seqno = log.last_seqno;
  recovery.log_first_seqno = log.first_seqno;
  recovery.epoch = log.epoch;
  recovery.why_reads_only = why;
  return std::unique_ptr<Range>(new RangeImpl(options, descriptor, nullptr, std::move(local),
                                              std::move(snapshots), std::move(recovery)));
}

}  // namespace ledgerkv::kv
