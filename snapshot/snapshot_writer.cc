// Writing a snapshot ledger (docs/snapshot-format.md, "Writing").
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "base/crc32c.h"
#include "base/fault_point.h"
#include "base/status_macros.h"
#include "ledger/ledger_client.h"
#include "rocksdb/comparator.h"
#include "rocksdb/db.h"
#include "rocksdb/snapshot.h"
#include "snapshot/snapshot_format.h"
#include "snapshot/snapshot_io.h"

namespace ledgerkv::snapshot {
namespace {

// Bounds the payload bytes appended but not yet acknowledged, and keeps the
// first failure. AppendAsync callbacks (on whichever thread delivers the
// ledger writer's callbacks) only call Done, which never blocks.
class InFlight {
 public:
  explicit InFlight(int64_t max_bytes) : max_bytes_(max_bytes) {}

  // Waits until `bytes` more fit (a single payload larger than the bound
  // goes alone). Returns the first failure of an earlier append, if any.
  absl::Status Reserve(int64_t bytes) {
    absl::MutexLock l(&mu_);
    auto room = [this, bytes]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return !error_.ok() || count_ == 0 || bytes_ + bytes <= max_bytes_;
    };
    mu_.Await(absl::Condition(&room));
    if (!error_.ok()) return error_;
    bytes_ += bytes;
    ++count_;
    return absl::OkStatus();
  }

  void Done(int64_t bytes, const absl::Status& status) {
    absl::MutexLock l(&mu_);
    bytes_ -= bytes;
    --count_;
    if (!status.ok() && error_.ok()) error_ = status;
  }

  // Waits for every reserved append; returns the first failure.
  absl::Status WaitAll() {
    absl::MutexLock l(&mu_);
    auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return count_ == 0; };
    mu_.Await(absl::Condition(&idle));
    return error_;
  }

 private:
  const int64_t max_bytes_;
  absl::Mutex mu_;
  int64_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t count_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status error_ ABSL_GUARDED_BY(mu_);
};

// Streams the records at `read` into `writer`: header, data entries,
// footer; then seals the ledger.
absl::StatusOr<SnapshotInfo> WriteEntries(const SnapshotOptions& options, uint64_t range_id,
                                          const SnapshotHeader& header,
                                          const SnapshotSource& source,
                                          rocksdb::ColumnFamilyHandle* cf,
                                          const rocksdb::ReadOptions& read,
                                          ledger::LedgerWriter& writer) {
  // Shared with the callbacks, which may still be returning from Done
  // when WaitAll wakes up.
  auto in_flight = std::make_shared<InFlight>(options.max_bytes_in_flight);
  auto send = [&](std::string payload) -> absl::Status {
    const auto size = static_cast<int64_t>(payload.size());
    RETURN_IF_ERROR(in_flight->Reserve(size));
    writer.AppendAsync(std::move(payload), [in_flight, size](absl::StatusOr<int64_t> r) {
      in_flight->Done(size, r.status());
    });
    return absl::OkStatus();
  };
  // Nothing is reported before every append has completed.
  auto fail = [&](absl::Status s) {
    IgnoreError(in_flight->WaitAll());  // s is the error reported
    return s;
  };

  if (absl::Status s = send(EncodeHeader(header)); !s.ok()) return fail(s);

  SnapshotFooter footer;
  DataEntryBuilder entry;
  auto cut = [&]() -> absl::Status {
    std::string payload = entry.Finish();
    footer.crc32c = crc32c::Extend(footer.crc32c, RecordBytes(payload).data(),
                                   RecordBytes(payload).size());
    ++footer.data_entries;
    return send(std::move(payload));
  };

  std::unique_ptr<rocksdb::Iterator> it(source.db->NewIterator(read, cf));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    const std::string_view key(it->key().data(), it->key().size());
    const std::string_view value(it->value().data(), it->value().size());
    const size_t size = EncodedRecordSize(key, value);
    if (static_cast<int64_t>(size + kDataHeaderBytes) > options.max_entry_bytes) {
      return fail(absl::ResourceExhaustedError(
          absl::StrCat("a record of ", size, " bytes exceeds the largest snapshot entry (",
                       options.max_entry_bytes, " bytes)")));
    }
    if (entry.count() > 0 &&
        static_cast<int64_t>(entry.bytes() + size) > options.entry_target_bytes) {
      if (absl::Status s = cut(); !s.ok()) return fail(s);
    }
    entry.Add(key, value);
    ++footer.record_count;
    footer.bytes += key.size() + value.size();
  }
  if (!it->status().ok()) return fail(FromRocks(it->status(), "iterating the source"));
  it.reset();
  if (entry.count() > 0) {
    if (absl::Status s = cut(); !s.ok()) return fail(s);
  }
  // Test hook: a footer whose CRC does not match the data, to exercise the
  // restore's check and the fallback to an older snapshot.
  if (LEDGERKV_FAULT("snapshot.writer.bad_footer_crc")) footer.crc32c ^= 0x5a5a5a5a;
  // Restore refuses a header whose key count differs from the records, so
  // such a snapshot must never be published: it would only look like
  // corruption later, after the log below it was truncated.
  if (header.key_count >= 0 && static_cast<uint64_t>(header.key_count) != footer.record_count) {
    return fail(absl::FailedPreconditionError(absl::StrCat(
        "the source says ", header.key_count, " keys but ", footer.record_count,
        " records were copied; not publishing a snapshot that would not restore")));
  }
  if (absl::Status s = send(EncodeFooter(footer)); !s.ok()) return fail(s);
  RETURN_IF_ERROR(in_flight->WaitAll());
  RETURN_IF_ERROR(writer.Close());

  const int64_t last = writer.metadata().last_entry_id();
  if (last != static_cast<int64_t>(footer.data_entries) + 1) {
    return absl::InternalError(absl::StrCat("sealed at entry ", last, ", expected ",
                                            footer.data_entries + 1));
  }
  SnapshotInfo info;
  info.ledger_id = writer.id();
  info.range_id = range_id;
  info.revision = header.revision;
  info.seqno = header.seqno;
  info.record_count = footer.record_count;
  info.bytes = footer.bytes;
  return info;
}

}  // namespace

absl::Status FromRocks(const rocksdb::Status& s, const std::string& context) {
  if (s.ok()) return absl::OkStatus();
  std::string msg = absl::StrCat(context, ": ", s.ToString());
  if (s.IsNotFound()) return absl::NotFoundError(msg);
  if (s.IsCorruption()) return absl::DataLossError(msg);
  if (s.IsIOError() || s.IsBusy() || s.IsTimedOut() || s.IsTryAgain()) {
    return absl::UnavailableError(msg);
  }
  if (s.IsInvalidArgument()) return absl::InvalidArgumentError(msg);
  if (s.IsNotSupported()) return absl::FailedPreconditionError(msg);
  return absl::InternalError(msg);
}

absl::StatusOr<SnapshotInfo> WriteSnapshotLedger(const SnapshotOptions& options,
                                                 uint64_t range_id,
                                                 const SnapshotSource& source) {
  if (source.db == nullptr) return absl::InvalidArgumentError("SnapshotSource needs a db");
  rocksdb::ColumnFamilyHandle* cf =
      source.column_family != nullptr ? source.column_family : source.db->DefaultColumnFamily();

  // Released when the write is done, not before: the iterator reads at it.
  std::optional<rocksdb::ManagedSnapshot> owned;
  const rocksdb::Snapshot* at = source.snapshot;
  if (at == nullptr) {
    owned.emplace(source.db);
    at = owned->snapshot();
  }
  rocksdb::ReadOptions read;
  read.snapshot = at;
  // A full scan must not evict the range's working set from the block cache.
  read.fill_cache = false;
  // Every key, whatever prefix extractor the column family has.
  read.total_order_seek = true;
  read.readahead_size = size_t{2} << 20;

  SnapshotHeader header;
  header.range_id = range_id;
  header.ctime_unix_ms = absl::ToUnixMillis(absl::Now());
  header.comparator = cf->GetComparator()->Name();
  SnapshotPoint point = source.point;
  if (source.read_point) {
    auto read_point = source.read_point(read);
    if (!read_point.ok()) {
      return absl::Status(read_point.status().code(),
                          absl::StrCat("snapshot of range ", range_id, ": reading V and S: ",
                                       read_point.status().message()));
    }
    point = *read_point;
  }
  header.revision = point.revision;
  header.seqno = point.seqno;
  header.key_count = point.key_count;

  ledger::CreateOptions create;
  create.ensemble_size = options.ensemble_size;
  create.write_quorum = options.write_quorum;
  create.ack_quorum = options.ack_quorum;
  create.custom = {{"purpose", "snapshot"},
                   {"range_id", absl::StrCat(range_id)},
                   {"revision", absl::StrCat(point.revision)},
                   {"seqno", absl::StrCat(point.seqno)}};
  auto writer = options.client->CreateLedger(create);
  if (!writer.ok()) {
    return absl::Status(writer.status().code(),
                        absl::StrCat("snapshot of range ", range_id, ": creating its ledger: ",
                                     writer.status().message()));
  }
  const uint64_t ledger_id = (*writer)->id();
  absl::StatusOr<SnapshotInfo> info =
      WriteEntries(options, range_id, header, source, cf, read, **writer);
  if (info.ok()) return info;

  // Stop the writer (its pending adds fail) before deleting its ledger.
  writer->reset();
  absl::Status deleted = options.client->DeleteLedger(ledger_id);
  if (!deleted.ok() && !absl::IsNotFound(deleted)) {
    absl::FPrintF(stderr, "snapshot: range %d: could not delete failed snapshot ledger %d: %s\n",
                  range_id, ledger_id, deleted.ToString());
  }
  return absl::Status(info.status().code(),
                      absl::StrCat("snapshot of range ", range_id, " into ledger ", ledger_id,
                                   ": ", info.status().message()));
}

}  // namespace ledgerkv::snapshot
