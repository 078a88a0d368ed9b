#include "kv_server/range/local_store.h"

#include <algorithm>
#include <filesystem>
#include <map>

#include "absl/strings/str_cat.h"
#include "base/fault_point.h"
#include "base/file.h"
#include "base/rocksdb_logger.h"
#include "base/status_macros.h"
#include "rocksdb/db.h"
#include "rocksdb/options.h"
#include "rocksdb/slice.h"
#include "rocksdb/snapshot.h"
#include "rocksdb/write_batch.h"

namespace ledgerkv::kv {
namespace {

constexpr char kMetaColumnFamily[] = "meta";
constexpr char kAppliedSeqnoKey[] = "applied_seqno";
constexpr char kRevisionKey[] = "revision";
constexpr char kKeyCountKey[] = "key_count";
constexpr char kBytesKey[] = "bytes";

absl::Status FromRocks(const rocksdb::Status& s, std::string_view context) {
  if (s.ok()) return absl::OkStatus();
  const std::string message =
      absl::StrCat(absl::string_view(context.data(), context.size()), ": ", s.ToString());
  if (s.IsCorruption()) return absl::DataLossError(message);
  if (s.IsShutdownInProgress()) return absl::UnavailableError(message);
  return absl::InternalError(message);
}

std::string Fixed64(uint64_t v) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  return out;
}

absl::StatusOr<uint64_t> ParseFixed64(const std::string& raw, const char* name) {
  if (raw.size() != 8) {
    return absl::DataLossError(absl::StrCat("meta key ", name, " has ", raw.size(), " bytes, want 8"));
  }
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(raw[i]);
  return v;
}

// A read of [start, end): rocksdb bounds that live as long as the options.
struct Bounded {
  Bounded(std::string_view start, std::string_view end) : lower(start), upper(end) {
    if (!start.empty()) read.iterate_lower_bound = &lower;
    if (!end.empty()) read.iterate_upper_bound = &upper;
  }
  rocksdb::Slice lower;
  rocksdb::Slice upper;
  rocksdb::ReadOptions read;
};

}  // namespace

absl::StatusOr<std::unique_ptr<LocalStore>> LocalStore::Open(const std::string& dir,
                                                             const Tuning& tuning) {
  std::error_code ec;
  // What a Destroy cut short by a crash left (it renamed the store away).
  std::filesystem::remove_all(dir + kWipedSuffix, ec);
  if (ec) {
    return absl::InternalError(absl::StrCat("cannot remove ", dir, kWipedSuffix, ": ", ec.message()));
  }
  const bool existed = std::filesystem::exists(dir + "/CURRENT", ec);
  std::filesystem::create_directories(dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create ", dir, ": ", ec.message()));

  rocksdb::DBOptions db_options;
  db_options.create_if_missing = true;
  db_options.create_missing_column_families = true;
  db_options.info_log = NewStderrRocksLogger(absl::StrCat("range store ", dir));
  db_options.info_log_level = rocksdb::InfoLogLevel::WARN_LEVEL;
  // The ledger log is the WAL; without our own WAL, RocksDB must flush the
  // memtables when it closes (it does unless told to avoid it).
  db_options.avoid_flush_during_shutdown = false;
  // Without a WAL, what survives a crash is what was flushed. The data and
  // the meta that names their seqno must be flushed together: RocksDB
  // otherwise flushes each column family when its own memtable fills, and
  // the meta (four keys per apply) fills first. A kill -9 then left a meta
  // on disk naming a seqno whose data was lost, and replay started after
  // it: acknowledged writes gone for good.
  db_options.atomic_flush = true;
  rocksdb::ColumnFamilyOptions meta_options;
  if (tuning.meta_write_buffer_bytes > 0) {
    meta_options.write_buffer_size = tuning.meta_write_buffer_bytes;
  }
  std::vector<rocksdb::ColumnFamilyDescriptor> families = {
      {rocksdb::kDefaultColumnFamilyName, rocksdb::ColumnFamilyOptions()},
      {kMetaColumnFamily, meta_options},
  };
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::DB* raw = nullptr;
  RETURN_IF_ERROR(FromRocks(rocksdb::DB::Open(db_options, dir, families, &handles, &raw),
                            absl::StrCat("open range db ", dir)));
  std::unique_ptr<LocalStore> store(new LocalStore(dir, existed));
  {
    absl::MutexLock l(&store->mu_);
    store->db_ = raw;
    store->data_cf_ = handles[0];
    store->meta_cf_ = handles[1];
  }
  ASSIGN_OR_RETURN(LocalMeta meta, store->ReadMeta(rocksdb::ReadOptions()));
  absl::MutexLock l(&store->meta_mu_);
  store->meta_ = meta;
  return store;
}

absl::Status LocalStore::Destroy(const std::string& dir) {
  // Renamed away first, then removed: remove_all in place, cut short by a
  // crash, could leave CURRENT without the files it names, a DB that no
  // longer opens, and the range would never open again (Open opens the
  // local DB before it could decide to rebuild it). After the rename `dir`
  // is simply absent: the next Open creates it empty, and the range
  // restores. A leftover of an earlier crash goes first.
  const std::string doomed = dir + kWipedSuffix;
  std::error_code ec;
  std::filesystem::remove_all(doomed, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot remove ", doomed, ": ", ec.message()));
  if (std::filesystem::exists(dir, ec)) {
    std::filesystem::rename(dir, doomed, ec);
    if (ec) {
      return absl::InternalError(absl::StrCat("cannot rename ", dir, ": ", ec.message()));
    }
    const std::string parent = std::filesystem::path(dir).parent_path().string();
    RETURN_IF_ERROR(Env::Default()->SyncDir(parent.empty() ? "." : parent));
    // Tests: a crash between the rename and the removal.
    if (LEDGERKV_FAULT("local_store.destroy.renamed", dir)) {
      return absl::InternalError("fault point local_store.destroy.renamed fired");
    }
    std::filesystem::remove_all(doomed, ec);
    if (ec) return absl::InternalError(absl::StrCat("cannot remove ", doomed, ": ", ec.message()));
  }
  std::filesystem::remove_all(dir + ".restore", ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot remove ", dir, ".restore: ", ec.message()));
  return absl::OkStatus();
}

LocalStore::~LocalStore() {
  absl::MutexLock l(&mu_);
  IgnoreError(CloseLocked());
}

LocalMeta LocalStore::meta() const {
  absl::MutexLock l(&meta_mu_);
  return meta_;
}

absl::Status LocalStore::CheckOpenLocked() const {
  if (db_ == nullptr) return absl::UnavailableError(absl::StrCat("range db ", dir_, " is closed"));
  return absl::OkStatus();
}

absl::StatusOr<std::optional<StoredValue>> LocalStore::Get(std::string_view key) {
  absl::ReaderMutexLock l(&mu_);
  RETURN_IF_ERROR(CheckOpenLocked());
  std::string raw;
  rocksdb::Status s =
      db_->Get(rocksdb::ReadOptions(), data_cf_, rocksdb::Slice(key.data(), key.size()), &raw);
  if (s.IsNotFound()) return std::optional<StoredValue>();
  RETURN_IF_ERROR(FromRocks(s, "range db get"));
  ASSIGN_OR_RETURN(StoredValue v, DecodeStoredValue(raw));
  return std::optional<StoredValue>(std::move(v));
}

absl::StatusOr<std::pair<std::optional<StoredValue>, int64_t>> LocalStore::GetWithRevision(
    std::string_view key) {
  absl::ReaderMutexLock l(&mu_);
  RETURN_IF_ERROR(CheckOpenLocked());
  const rocksdb::Snapshot* snap = db_->GetSnapshot();
  rocksdb::ReadOptions read;
  read.snapshot = snap;
  std::string raw;
  rocksdb::Status s = db_->Get(read, data_cf_, rocksdb::Slice(key.data(), key.size()), &raw);
  absl::StatusOr<LocalMeta> meta = ReadMetaLocked(read);
  db_->ReleaseSnapshot(snap);
  if (!meta.ok()) return meta.status();
  std::optional<StoredValue> value;
  if (!s.IsNotFound()) {
    RETURN_IF_ERROR(FromRocks(s, "range db get"));
    ASSIGN_OR_RETURN(StoredValue v, DecodeStoredValue(raw));
    value = std::move(v);
  }
  return std::make_pair(std::move(value), meta->revision);
}

absl::Status LocalStore::Visit(
    std::string_view start, std::string_view end,
    const std::function<bool(std::string_view key, StoredValue value)>& visit) {
  absl::ReaderMutexLock l(&mu_);
  RETURN_IF_ERROR(CheckOpenLocked());
  Bounded bounded(start, end);
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(bounded.read, data_cf_));
  for (it->Seek(bounded.lower); it->Valid(); it->Next()) {
    ASSIGN_OR_RETURN(StoredValue v, DecodeStoredValue(it->value().ToStringView()));
    if (!visit(it->key().ToStringView(), std::move(v))) return absl::OkStatus();
  }
  return FromRocks(it->status(), "range db iterate");
}

absl::StatusOr<ScanResult> LocalStore::Scan(const ScanSpec& spec, int64_t max_keys) {
  absl::ReaderMutexLock l(&mu_);
  RETURN_IF_ERROR(CheckOpenLocked());
  ScanResult result;
  const rocksdb::Snapshot* snap = db_->GetSnapshot();
  absl::Status status = ScanLocked(spec, max_keys, snap, &result);
  db_->ReleaseSnapshot(snap);
  RETURN_IF_ERROR(status);
  return result;
}

absl::Status LocalStore::ScanLocked(const ScanSpec& spec, int64_t max_keys,
                                    const rocksdb::Snapshot* snap, ScanResult* result) {
  const int64_t cap = spec.limit > 0 ? std::min(spec.limit, max_keys) : max_keys;
  Bounded bounded(spec.start, spec.end);
  bounded.read.snapshot = snap;
  ASSIGN_OR_RETURN(LocalMeta meta, ReadMetaLocked(bounded.read));
  result->revision = meta.revision;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(bounded.read, data_cf_));
  if (spec.reverse) {
    it->SeekToLast();
  } else {
    it->Seek(bounded.lower);
  }
  // Bytes of the keys and values copied so far, as they will be encoded
  // (the stored value holds the value and its revisions; the overhead is
  // the fields' tags and lengths), so that a scan of large values never
  // copies much more than its caller can send.
  constexpr int64_t kPerKeyOverhead = 12;
  int64_t bytes = 0;
  bool spent = false;
  for (; it->Valid(); spec.reverse ? it->Prev() : it->Next()) {
    ++result->count;
    if (spec.count_only) continue;
    if (spent || static_cast<int64_t>(result->kvs.size()) >= cap) {
      result->more = true;
      continue;
    }
    const int64_t size = static_cast<int64_t>(it->key().size()) + kPerKeyOverhead +
                         (spec.keys_only ? 0 : static_cast<int64_t>(it->value().size()));
    if (spec.max_bytes > 0 && !result->kvs.empty() && bytes + size > spec.max_bytes) {
      spent = true;
      result->more = true;
      continue;
    }
    bytes += size;
    ASSIGN_OR_RETURN(StoredValue v, DecodeStoredValue(it->value().ToStringView()));
    ledgerkv::v1::KeyValue& kv = result->kvs.emplace_back();
    kv.set_key(it->key().ToString());
    if (!spec.keys_only) kv.set_value(std::move(v.value));
    kv.set_create_revision(v.create_revision);
    kv.set_mod_revision(v.mod_revision);
    kv.set_version(v.version);
  }
  return FromRocks(it->status(), "range db scan");
}

absl::Status LocalStore::Apply(const std::vector<SequencedEffect>& effects) {
  if (effects.empty()) return absl::OkStatus();
  absl::ReaderMutexLock l(&mu_);
  RETURN_IF_ERROR(CheckOpenLocked());
  LocalMeta next = meta();
  rocksdb::WriteBatch batch;
  // Keys written earlier in this batch: their state is not in the DB yet.
  // Only an effect without a delta reads previous states.
  const bool track_written =
      effects.size() > 1 && std::any_of(effects.begin(), effects.end(),
                                        [](const SequencedEffect& e) { return !e.delta.has_value(); });
  std::map<std::string, std::optional<StoredValue>, std::less<>> written;
  for (const SequencedEffect& e : effects) {
    if (e.seqno <= next.applied_seqno) {
      return absl::InternalError(absl::StrCat("apply of seqno ", e.seqno, " after ",
                                              next.applied_seqno));
    }
    if (e.delta.has_value()) {
      next.key_count += e.delta->key_count;
      next.bytes += e.delta->bytes;
    }
    for (const range::v1::Mutation& m : e.effect->mutations()) {
      std::optional<StoredValue> after;
      if (m.has_value()) {
        after = StoredValue{.create_revision = m.create_revision(),
                            .mod_revision = m.mod_revision(),
                            .version = m.version(),
                            .value = m.value()};
        batch.Put(data_cf_, m.key(), EncodeStoredValue(*after));
      } else {
        batch.Delete(data_cf_, m.key());
      }
      if (!e.delta.has_value()) {
        std::optional<StoredValue> before;
        if (auto it = written.find(m.key()); it != written.end()) {
          before = it->second;
        } else {
          std::string raw;
          rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), data_cf_, m.key(), &raw);
          if (!s.IsNotFound()) {
            RETURN_IF_ERROR(FromRocks(s, "range db get"));
            ASSIGN_OR_RETURN(before, DecodeStoredValue(raw));
          }
        }
        next.key_count += (after.has_value() ? 1 : 0) - (before.has_value() ? 1 : 0);
        next.bytes += LiveBytes(m.key(), after) - LiveBytes(m.key(), before);
      }
      // An effect names each key once, so with a delta only later effects
      // of the batch can look here.
      if (track_written || !e.delta.has_value()) written[m.key()] = std::move(after);
    }
    next.applied_seqno = e.seqno;
    next.revision = e.effect->revision();
  }
  batch.Put(meta_cf_, kAppliedSeqnoKey, Fixed64(next.applied_seqno));
  batch.Put(meta_cf_, kRevisionKey, Fixed64(static_cast<uint64_t>(next.revision)));
  batch.Put(meta_cf_, kKeyCountKey, Fixed64(static_cast<uint64_t>(next.key_count)));
  batch.Put(meta_cf_, kBytesKey, Fixed64(static_cast<uint64_t>(next.bytes)));
  rocksdb::WriteOptions write;
  write.disableWAL = true;
  RETURN_IF_ERROR(FromRocks(db_->Write(write, &batch), "range db write"));
  absl::MutexLock ml(&meta_mu_);
  meta_ = next;
  return absl::OkStatus();
}

absl::Status LocalStore::ResetMeta(uint64_t applied_seqno, int64_t revision) {
  absl::ReaderMutexLock l(&mu_);
  RETURN_IF_ERROR(CheckOpenLocked());
  LocalMeta next{.applied_seqno = applied_seqno, .revision = revision};
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions(), data_cf_));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    ASSIGN_OR_RETURN(StoredValue v, DecodeStoredValue(it->value().ToStringView()));
    ++next.key_count;
    next.bytes += static_cast<int64_t>(it->key().size() + v.value.size());
  }
  RETURN_IF_ERROR(FromRocks(it->status(), "range db iterate"));
  rocksdb::WriteBatch batch;
  batch.Put(meta_cf_, kAppliedSeqnoKey, Fixed64(next.applied_seqno));
  batch.Put(meta_cf_, kRevisionKey, Fixed64(static_cast<uint64_t>(next.revision)));
  batch.Put(meta_cf_, kKeyCountKey, Fixed64(static_cast<uint64_t>(next.key_count)));
  batch.Put(meta_cf_, kBytesKey, Fixed64(static_cast<uint64_t>(next.bytes)));
  rocksdb::WriteOptions write;
  write.disableWAL = true;
  RETURN_IF_ERROR(FromRocks(db_->Write(write, &batch), "range db write"));
  absl::MutexLock ml(&meta_mu_);
  meta_ = next;
  return absl::OkStatus();
}

absl::StatusOr<bool> LocalStore::HasData() {
  absl::ReaderMutexLock l(&mu_);
  RETURN_IF_ERROR(CheckOpenLocked());
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions(), data_cf_));
  it->SeekToFirst();
  RETURN_IF_ERROR(FromRocks(it->status(), "range db iterate"));
  return it->Valid();
}

absl::Status LocalStore::Flush() {
  absl::ReaderMutexLock l(&mu_);
  RETURN_IF_ERROR(CheckOpenLocked());
  rocksdb::FlushOptions options;
  options.wait = true;
  return FromRocks(db_->Flush(options, {data_cf_, meta_cf_}), "range db flush");
}

absl::StatusOr<LocalMeta> LocalStore::ReadMeta(const rocksdb::ReadOptions& at) {
  absl::ReaderMutexLock l(&mu_);
  return ReadMetaLocked(at);
}

absl::StatusOr<LocalMeta> LocalStore::ReadMetaLocked(const rocksdb::ReadOptions& at) {
  RETURN_IF_ERROR(CheckOpenLocked());
  rocksdb::DB* db = db_;
  rocksdb::ColumnFamilyHandle* cf = meta_cf_;
  LocalMeta meta;
  const std::pair<const char*, uint64_t*> unsigned_keys[] = {
      {kAppliedSeqnoKey, &meta.applied_seqno}};
  const std::pair<const char*, int64_t*> signed_keys[] = {
      {kRevisionKey, &meta.revision}, {kKeyCountKey, &meta.key_count}, {kBytesKey, &meta.bytes}};
  auto read = [&](const char* name) -> absl::StatusOr<uint64_t> {
    std::string raw;
    rocksdb::Status s = db->Get(at, cf, name, &raw);
    if (s.IsNotFound()) return 0;
    RETURN_IF_ERROR(FromRocks(s, absl::StrCat("range db meta ", name)));
    return ParseFixed64(raw, name);
  };
  for (const auto& [name, out] : unsigned_keys) {
    ASSIGN_OR_RETURN(*out, read(name));
  }
  for (const auto& [name, out] : signed_keys) {
    ASSIGN_OR_RETURN(uint64_t v, read(name));
    *out = static_cast<int64_t>(v);
  }
  return meta;
}

absl::Status LocalStore::Close() {
  absl::MutexLock l(&mu_);
  return CloseLocked();
}

absl::Status LocalStore::CloseLocked() {
  if (db_ == nullptr) return absl::OkStatus();
  absl::Status status =
      FromRocks(db_->Flush(rocksdb::FlushOptions(), {data_cf_, meta_cf_}), "range db flush");
  IgnoreError(FromRocks(db_->DestroyColumnFamilyHandle(data_cf_), ""));
  IgnoreError(FromRocks(db_->DestroyColumnFamilyHandle(meta_cf_), ""));
  absl::Status closed = FromRocks(db_->Close(), "range db close");
  delete db_;
  db_ = nullptr;
  data_cf_ = nullptr;
  meta_cf_ = nullptr;
  return status.ok() ? closed : status;
}

}  // namespace ledgerkv::kv
