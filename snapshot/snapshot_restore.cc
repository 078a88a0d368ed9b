// Restoring a snapshot ledger into a RocksDB column family
// (docs/snapshot-format.md, "Restore").
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <filesystem>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "base/crc32c.h"
#include "base/status_macros.h"
#include "ledger/ledger_client.h"
#include "rocksdb/comparator.h"
#include "rocksdb/db.h"
#include "rocksdb/options.h"
#include "rocksdb/sst_file_writer.h"
#include "snapshot/snapshot_format.h"
#include "snapshot/snapshot_io.h"

namespace ledgerkv::snapshot {
namespace {

namespace fs = std::filesystem;

// Sorted records into SST files of bounded size in a scratch directory.
// Every file it made and still holds is removed on destruction (after a
// successful ingestion with move_files RocksDB has already taken them).
class SstSink {
 public:
  SstSink(const rocksdb::Options& options, rocksdb::ColumnFamilyHandle* cf, std::string dir,
          std::string prefix, int64_t max_bytes)
      : options_(options), cf_(cf), dir_(std::move(dir)), prefix_(std::move(prefix)),
        max_bytes_(max_bytes) {}

  ~SstSink() {
    writer_.reset();
    for (const std::string& f : files_) {
      std::error_code ignored;
      fs::remove(f, ignored);
    }
    if (created_dir_) {
      std::error_code ignored;
      fs::remove(dir_, ignored);  // only if empty: another restore may use it
    }
  }

  SstSink(const SstSink&) = delete;
  SstSink& operator=(const SstSink&) = delete;

  absl::Status Add(std::string_view key, std::string_view value) {
    if (writer_ != nullptr && static_cast<int64_t>(writer_->FileSize()) >= max_bytes_) {
      RETURN_IF_ERROR(FinishFile());
    }
    if (writer_ == nullptr) RETURN_IF_ERROR(OpenFile());
    return FromRocks(writer_->Put(rocksdb::Slice(key.data(), key.size()),
                                  rocksdb::Slice(value.data(), value.size())),
                     "writing " + files_.back());
  }

  // Finishes the last file; returns every file, in key order.
  absl::StatusOr<std::vector<std::string>> Finish() {
    if (writer_ != nullptr) RETURN_IF_ERROR(FinishFile());
    return files_;
  }

 private:
  absl::Status OpenFile() {
    if (files_.empty()) {
      std::error_code ec;
      if (!fs::exists(dir_, ec)) {
        created_dir_ = fs::create_directories(dir_, ec);
        if (ec) {
          return absl::UnavailableError(
              absl::StrCat("creating scratch directory ", dir_, ": ", ec.message()));
        }
      }
    }
    files_.push_back(absl::StrCat(dir_, "/", prefix_, "-", files_.size(), ".sst"));
    writer_ = std::make_unique<rocksdb::SstFileWriter>(rocksdb::EnvOptions(), options_, cf_);
    return FromRocks(writer_->Open(files_.back()), "creating " + files_.back());
  }

  absl::Status FinishFile() {
    absl::Status s = FromRocks(writer_->Finish(), "finishing " + files_.back());
    writer_.reset();
    return s;
  }

  const rocksdb::Options options_;
  rocksdb::ColumnFamilyHandle* const cf_;
  const std::string dir_;
  const std::string prefix_;
  const int64_t max_bytes_;
  bool created_dir_ = false;
  std::vector<std::string> files_;
  std::unique_ptr<rocksdb::SstFileWriter> writer_;
};

// A unique file prefix, so restores sharing a scratch directory never
// collide.
std::string FilePrefix(uint64_t ledger_id) {
  static std::atomic<uint64_t> counter{0};
  return absl::StrCat("snapshot-", ledger_id, "-", absl::ToUnixNanos(absl::Now()), "-",
                      counter.fetch_add(1));
}

absl::Status Mismatch(const std::string& what, uint64_t got, uint64_t want) {
  return absl::DataLossError(absl::StrCat(what, " is ", got, ", expected ", want));
}

// The restore proper; errors do not name the ledger yet (the caller adds
// it). Sets *snapshot_fault = false before every error of the target's.
absl::StatusOr<SnapshotInfo> Restore(const SnapshotOptions& options, const SnapshotInfo& expected,
                                     const RestoreTarget& target, bool* snapshot_fault) {
  *snapshot_fault = false;
  rocksdb::DB* db = target.db;
  rocksdb::ColumnFamilyHandle* cf =
      target.column_family != nullptr ? target.column_family : db->DefaultColumnFamily();
  const rocksdb::Comparator* cmp = cf->GetComparator();
  RETURN_IF_ERROR(CheckTargetEmpty(target));

  *snapshot_fault = true;
  auto opened = options.client->OpenLedger(expected.ledger_id, ledger::OpenMode::kNoRecovery);
  if (absl::IsNotFound(opened.status())) {
    return absl::DataLossError("the ledger does not exist (deleted?)");
  }
  if (!opened.ok()) return opened.status();
  ledger::LedgerReader& reader = **opened;
  // Published snapshots are sealed before the manifest names them; an open
  // one is not a snapshot. kNoRecovery: a restore never changes a ledger.
  if (!reader.closed()) return absl::DataLossError("the ledger is not sealed");
  const int64_t last = reader.last_readable();
  if (last < 1) {
    return absl::DataLossError(absl::StrCat("the ledger has ", last + 1,
                                            " entries; a snapshot has at least 2"));
  }

  ASSIGN_OR_RETURN(auto first_entry, reader.Read(0, 0));
  ASSIGN_OR_RETURN(SnapshotHeader header, DecodeHeader(first_entry[0].payload));
  if (header.range_id != expected.range_id) {
    return Mismatch("header range id", header.range_id, expected.range_id);
  }
  if (header.revision != expected.revision) {
    return Mismatch("header revision", header.revision, expected.revision);
  }
  if (header.seqno != expected.seqno) return Mismatch("header seqno", header.seqno, expected.seqno);
  if (header.comparator != cmp->Name()) {
    *snapshot_fault = false;
    return absl::FailedPreconditionError(
        absl::StrCat("the snapshot is ordered by comparator ", header.comparator,
                     ", the target column family by ", cmp->Name()));
  }

  // The footer first: a truncated or mislabelled ledger fails before any
  // data is read.
  ASSIGN_OR_RETURN(auto last_entry, reader.Read(last, last));
  ASSIGN_OR_RETURN(SnapshotFooter footer, DecodeFooter(last_entry[0].payload));
  if (footer.data_entries != static_cast<uint64_t>(last - 1)) {
    return Mismatch("footer data entry count", footer.data_entries, last - 1);
  }
  if (footer.record_count != expected.record_count) {
    return Mismatch("footer record count", footer.record_count, expected.record_count);
  }
  if (footer.bytes != expected.bytes) return Mismatch("footer bytes", footer.bytes, expected.bytes);

  SstSink sink(db->GetOptions(cf), cf, target.scratch_dir, FilePrefix(expected.ledger_id),
               options.max_sst_bytes);
  uint64_t records = 0;
  uint64_t bytes = 0;
  uint32_t crc = 0;
  std::string prev_key;  // last key of the previous window
  bool have_prev = false;

  // Read the next window while this one is decoded and written out.
  const int64_t window = options.restore_read_window;
  auto read_window = [&reader, last, window](int64_t first) {
    return reader.Read(first, std::min(first + window - 1, last - 1));
  };
  std::future<absl::StatusOr<std::vector<ledger::LedgerEntry>>> next;
  if (last > 1) next = std::async(std::launch::async, read_window, int64_t{1});
  for (int64_t first = 1; first < last; first += window) {
    absl::StatusOr<std::vector<ledger::LedgerEntry>> entries = next.get();
    if (!entries.ok()) return entries.status();
    if (first + window < last) {
      next = std::async(std::launch::async, read_window, first + window);
    }
    std::string_view prev = prev_key;
    for (const ledger::LedgerEntry& e : *entries) {
      absl::StatusOr<DecodedData> data = DecodeData(e.payload);
      if (!data.ok()) {
        return absl::DataLossError(absl::StrCat("entry ", e.entry_id, ": ", data.status().message()));
      }
      crc = crc32c::Extend(crc, data->record_bytes.data(), data->record_bytes.size());
      for (const RecordView& r : data->records) {
        if (have_prev && cmp->Compare(rocksdb::Slice(prev.data(), prev.size()),
                                      rocksdb::Slice(r.key.data(), r.key.size())) >= 0) {
          return absl::DataLossError(
              absl::StrCat("entry ", e.entry_id, ": records out of order after record ", records));
        }
        have_prev = true;
        prev = r.key;
        ++records;
        bytes += r.key.size() + r.value.size();
        *snapshot_fault = false;
        RETURN_IF_ERROR(sink.Add(r.key, r.value));
        *snapshot_fault = true;
      }
    }
    prev_key = std::string(prev);  // the views die with this window
  }

  if (records != footer.record_count) return Mismatch("record count", records, footer.record_count);
  if (bytes != footer.bytes) return Mismatch("record bytes", bytes, footer.bytes);
  if (crc != footer.crc32c) {
    return absl::DataLossError(absl::StrFormat("CRC32C of the records is %08x, footer says %08x",
                                               crc, footer.crc32c));
  }
  if (header.key_count >= 0 && static_cast<uint64_t>(header.key_count) != records) {
    return Mismatch("record count (header key count)", records, header.key_count);
  }

  // Verified: only now does anything become visible in the target.
  *snapshot_fault = false;
  ASSIGN_OR_RETURN(std::vector<std::string> files, sink.Finish());
  if (!files.empty()) {
    rocksdb::IngestExternalFileOptions ingest;
    ingest.move_files = true;  // hard links: no second copy of the data
    ingest.failed_move_fall_back_to_copy = true;
    RETURN_IF_ERROR(FromRocks(db->IngestExternalFile(cf, files, ingest), "ingesting"));
  }

  SnapshotInfo info;
  info.ledger_id = expected.ledger_id;
  info.range_id = header.range_id;
  info.revision = header.revision;
  info.seqno = header.seqno;
  info.record_count = records;
  info.bytes = bytes;
  return info;
}

}  // namespace

absl::Status CheckTargetEmpty(const RestoreTarget& target) {
  if (target.db == nullptr) return absl::InvalidArgumentError("RestoreTarget needs a db");
  rocksdb::ColumnFamilyHandle* cf = target.column_family != nullptr
                                        ? target.column_family
                                        : target.db->DefaultColumnFamily();
  rocksdb::ReadOptions read;
  read.total_order_seek = true;
  std::unique_ptr<rocksdb::Iterator> it(target.db->NewIterator(read, cf));
  it->SeekToFirst();
  RETURN_IF_ERROR(FromRocks(it->status(), "reading the restore target"));
  if (it->Valid()) {
    return absl::FailedPreconditionError(
        "the restore target column family is not empty (a restore must not mix with old state)");
  }
  return absl::OkStatus();
}

absl::StatusOr<SnapshotInfo> RestoreSnapshotLedger(const SnapshotOptions& options,
                                                   const SnapshotInfo& expected,
                                                   const RestoreTarget& target,
                                                   bool* snapshot_fault) {
  RestoreTarget resolved = target;
  if (resolved.db == nullptr) {
    *snapshot_fault = false;
    return absl::InvalidArgumentError("RestoreTarget needs a db");
  }
  if (resolved.scratch_dir.empty()) resolved.scratch_dir = resolved.db->GetName() + ".restore";
  absl::StatusOr<SnapshotInfo> info = Restore(options, expected, resolved, snapshot_fault);
  if (info.ok()) return info;
  return absl::Status(info.status().code(),
                      absl::StrCat("snapshot ledger ", expected.ledger_id, " (range ",
                                   expected.range_id, ", seqno ", expected.seqno,
                                   "): ", info.status().message()));
}

}  // namespace ledgerkv::snapshot
