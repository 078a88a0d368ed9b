#include "ledger/bookie/index.h"

#include <cstring>
#include <filesystem>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/rocksdb_logger.h"
#include "base/status_macros.h"
#include "rocksdb/db.h"
#include "rocksdb/filter_policy.h"
#include "rocksdb/options.h"
#include "rocksdb/table.h"
#include "rocksdb/write_batch.h"

namespace ledgerkv::bookie {
namespace {

constexpr char kDeletedTag = 'd';
constexpr char kEntryTag = 'e';
constexpr char kLedgerTag = 'l';
constexpr size_t kEntryKeySize = 17;
constexpr size_t kLedgerKeySize = 9;
constexpr size_t kLocationSize = 20;
constexpr size_t kLedgerValueSize = 17;

void PutBigEndian64(char* dst, uint64_t v) {
  for (int i = 7; i >= 0; --i) {
    dst[i] = static_cast<char>(v & 0xff);
    v >>= 8;
  }
}

uint64_t GetBigEndian64(const char* src) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | static_cast<uint8_t>(src[i]);
  return v;
}

template <typename T>
void PutLe(char* dst, T v) {
  std::memcpy(dst, &v, sizeof(T));
}

template <typename T>
T GetLe(const char* src) {
  T v;
  std::memcpy(&v, src, sizeof(T));
  return v;
}

std::string EntryKey(uint64_t ledger_id, int64_t entry_id) {
  std::string k(kEntryKeySize, '\0');
  k[0] = kEntryTag;
  PutBigEndian64(k.data() + 1, ledger_id);
  PutBigEndian64(k.data() + 9, static_cast<uint64_t>(entry_id));
  return k;
}

std::string LedgerKey(uint64_t ledger_id) {
  std::string k(kLedgerKeySize, '\0');
  k[0] = kLedgerTag;
  PutBigEndian64(k.data() + 1, ledger_id);
  return k;
}

std::string DeletedKey(uint64_t ledger_id) {
  std::string k(kLedgerKeySize, '\0');
  k[0] = kDeletedTag;
  PutBigEndian64(k.data() + 1, ledger_id);
  return k;
}

bool DecodeLocation(rocksdb::Slice v, Location* loc) {
  if (v.size() != kLocationSize) return false;
  loc->file = GetLe<uint64_t>(v.data());
  loc->offset = GetLe<uint64_t>(v.data() + 8);
  loc->size = GetLe<uint32_t>(v.data() + 16);
  return true;
}

std::string EncodeLedgerState(const LedgerState& s) {
  std::string v(kLedgerValueSize, '\0');
  v[0] = s.fenced ? 1 : 0;
  PutLe<int64_t>(v.data() + 1, s.lac);
  PutLe<int64_t>(v.data() + 9, s.last_entry_id);
  return v;
}

bool DecodeLedgerState(rocksdb::Slice v, LedgerState* s) {
  if (v.size() != kLedgerValueSize) return false;
  s->fenced = (v[0] & 1) != 0;
  s->lac = GetLe<int64_t>(v.data() + 1);
  s->last_entry_id = GetLe<int64_t>(v.data() + 9);
  return true;
}

absl::Status ToStatus(const rocksdb::Status& s, const std::string& what) {
  if (s.ok()) return absl::OkStatus();
  std::string msg = absl::StrCat("index ", what, ": ", s.ToString());
  if (s.IsCorruption()) return absl::DataLossError(msg);
  if (s.IsIOError() && s.IsNoSpace()) return absl::ResourceExhaustedError(msg);
  if (s.IsIOError() && s.ToString().find("lock") != std::string::npos) {
    return absl::UnavailableError(msg);
  }
  return absl::InternalError(msg);
}

rocksdb::WriteOptions NoWal() {
  rocksdb::WriteOptions wo;
  wo.disableWAL = true;
  return wo;
}

}  // namespace

Index::Batch::Batch() : batch_(std::make_unique<rocksdb::WriteBatch>()) {}
Index::Batch::~Batch() = default;

void Index::Batch::PutEntry(uint64_t ledger_id, int64_t entry_id, const Location& loc) {
  // The hot path of every add: no allocations.
  char key[kEntryKeySize];
  key[0] = kEntryTag;
  PutBigEndian64(key + 1, ledger_id);
  PutBigEndian64(key + 9, static_cast<uint64_t>(entry_id));
  char value[kLocationSize];
  PutLe<uint64_t>(value, loc.file);
  PutLe<uint64_t>(value + 8, loc.offset);
  PutLe<uint32_t>(value + 16, loc.size);
  batch_->Put(rocksdb::Slice(key, sizeof(key)), rocksdb::Slice(value, sizeof(value)));
}

void Index::Batch::PutLedger(uint64_t ledger_id, const LedgerState& state) {
  batch_->Put(LedgerKey(ledger_id), EncodeLedgerState(state));
}

bool Index::Batch::empty() const { return batch_->Count() == 0; }

void Index::Batch::Clear() { batch_->Clear(); }

Index::Index(std::unique_ptr<rocksdb::DB> db) : db_(std::move(db)) {}

Index::~Index() = default;

absl::StatusOr<std::unique_ptr<Index>> Index::Open(const std::string& path, bool may_create) {
  // RocksDB's CURRENT names its live MANIFEST: a database without it
  // (deleted, or never created) would be opened as a new, empty one.
  std::error_code ec;
  if (!may_create && !std::filesystem::exists(path + "/CURRENT", ec)) {
    return absl::DataLossError(absl::StrCat("index database ", path, " is missing",
                                            ec ? absl::StrCat(" (", ec.message(), ")") : ""));
  }
  // Created here rather than by RocksDB, which logs an ERROR about the
  // missing directory before creating it (on every new bookie).
  std::filesystem::create_directories(path, ec);
  if (ec) return absl::InternalError(absl::StrCat("create ", path, ": ", ec.message()));
  rocksdb::Options options;
  options.create_if_missing = may_create;
  // Without a WAL, a flush at close would be the only thing saving the
  // memtable; we checkpoint explicitly instead (and a crash must behave
  // like a close that skipped it, so that tests of replay are honest).
  options.avoid_flush_during_shutdown = true;
  options.max_background_jobs = 2;
  options.info_log = NewStderrRocksLogger(absl::StrCat("bookie index ", path));
  options.info_log_level = rocksdb::InfoLogLevel::WARN_LEVEL;
  rocksdb::BlockBasedTableOptions table;
  table.filter_policy.reset(rocksdb::NewBloomFilterPolicy(10));
  options.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table));
  rocksdb::DB* raw = nullptr;
  rocksdb::Status s = rocksdb::DB::Open(options, path, &raw);
  if (!s.ok()) return ToStatus(s, absl::StrCat("open ", path));
  return std::unique_ptr<Index>(new Index(std::unique_ptr<rocksdb::DB>(raw)));
}

absl::Status Index::Write(Batch& batch) {
  return ToStatus(db_->Write(NoWal(), batch.batch_.get()), "write");
}

absl::StatusOr<std::optional<Location>> Index::GetEntry(uint64_t ledger_id, int64_t entry_id) {
  std::string value;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), EntryKey(ledger_id, entry_id), &value);
  if (s.IsNotFound()) return std::optional<Location>();
  if (!s.ok()) return ToStatus(s, "get");
  Location loc;
  if (!DecodeLocation(value, &loc)) {
    return absl::DataLossError(absl::StrCat("index: malformed location for ledger ", ledger_id,
                                            " entry ", entry_id));
  }
  return std::optional<Location>(loc);
}

absl::Status Index::ForEachLedger(const std::function<void(uint64_t, const LedgerState&)>& fn) {
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
  const std::string start(1, kLedgerTag);
  for (it->Seek(start); it->Valid(); it->Next()) {
    rocksdb::Slice k = it->key();
    if (k.size() == 0 || k[0] != kLedgerTag) break;
    LedgerState st;
    if (k.size() != kLedgerKeySize || !DecodeLedgerState(it->value(), &st)) {
      return absl::DataLossError("index: malformed ledger state record");
    }
    fn(GetBigEndian64(k.data() + 1), st);
  }
  return ToStatus(it->status(), "scan");
}

absl::Status Index::ForEachEntry(
    const std::function<void(uint64_t, int64_t, const Location&)>& fn) {
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
  const std::string start(1, kEntryTag);
  for (it->Seek(start); it->Valid(); it->Next()) {
    rocksdb::Slice k = it->key();
    if (k.size() == 0 || k[0] != kEntryTag) break;
    Location loc;
    if (k.size() != kEntryKeySize || !DecodeLocation(it->value(), &loc)) {
      return absl::DataLossError("index: malformed entry record");
    }
    fn(GetBigEndian64(k.data() + 1), static_cast<int64_t>(GetBigEndian64(k.data() + 9)), loc);
  }
  return ToStatus(it->status(), "scan");
}

absl::Status Index::DeleteLedgers(absl::Span<const uint64_t> ledger_ids) {
  rocksdb::WriteBatch batch;
  for (uint64_t ledger_id : ledger_ids) {
    // Entry ids are non-negative, so [(id, 0), (id+1, 0)) covers them all;
    // for the largest id the range ends at the first ledger-state key.
    std::string begin = EntryKey(ledger_id, 0);
    std::string end = ledger_id == UINT64_MAX ? std::string(1, kEntryTag + 1)
                                              : EntryKey(ledger_id + 1, 0);
    batch.DeleteRange(begin, end);
    batch.Delete(LedgerKey(ledger_id));
    // In the same batch: no reader of the index sees the ledger gone
    // without its tombstone.
    batch.Put(DeletedKey(ledger_id), rocksdb::Slice());
  }
  return ToStatus(db_->Write(NoWal(), &batch), "delete ledgers");
}

absl::StatusOr<bool> Index::IsDeleted(uint64_t ledger_id) {
  std::string value;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), DeletedKey(ledger_id), &value);
  if (s.IsNotFound()) return false;
  RETURN_IF_ERROR(ToStatus(s, "tombstone lookup"));
  return true;
}

absl::Status Index::Flush() {
  rocksdb::FlushOptions fo;
  fo.wait = true;
  return ToStatus(db_->Flush(fo), "flush");
}

}  // namespace ledgerkv::bookie
