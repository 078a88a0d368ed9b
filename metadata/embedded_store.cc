#include "metadata/embedded_store.h"

#include <algorithm>
#include <filesystem>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/fault_point.h"
#include "base/rocksdb_logger.h"
#include "base/status_macros.h"
#include "metadata/absl_compat.h"
#include "metadata/watch_hub.h"
#include "rocksdb/db.h"
#include "rocksdb/options.h"
#include "rocksdb/write_batch.h"

namespace ledgerkv::metadata {
namespace {

using internal::ToAbsl;

// Column families (docs/metadata.md, "Embedded store on disk").
constexpr char kKvColumnFamily[] = "kv";
// Keys in the default ("meta") column family.
constexpr char kFormatKey[] = "format";
constexpr char kRevisionKey[] = "revision";
constexpr char kFormatVersion[] = "1";

// A kv record: tag byte, fixed64 version, fixed64 session (0: persistent),
// then the user's value.
constexpr char kRecordTag = 1;
constexpr size_t kRecordHeader = 1 + 8 + 8;

void AppendFixed64(std::string* out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

uint64_t DecodeFixed64(const char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i)
    v |= static_cast<uint64_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}

std::string EncodeRecord(Version version, SessionId session, std::string_view value) {
  std::string out;
  out.reserve(kRecordHeader + value.size());
  out.push_back(kRecordTag);
  AppendFixed64(&out, static_cast<uint64_t>(version));
  AppendFixed64(&out, static_cast<uint64_t>(session));
  out.append(value);
  return out;
}

absl::Status RocksToStatus(const rocksdb::Status& s, std::string_view context) {
  if (s.ok()) return absl::OkStatus();
  std::string msg = absl::StrCat(ToAbsl(context), ": ", s.ToString());
  if (s.IsNotFound()) return absl::NotFoundError(msg);
  if (s.IsCorruption()) return absl::DataLossError(msg);
  if (s.IsIOError() || s.IsBusy() || s.IsTimedOut() || s.IsTryAgain()) {
    return absl::UnavailableError(msg);
  }
  if (s.IsInvalidArgument()) return absl::InvalidArgumentError(msg);
  if (s.IsNotSupported()) return absl::FailedPreconditionError(msg);
  return absl::InternalError(msg);
}

absl::Status CheckExpected(std::string_view key, Version actual, Version expected) {
  // Versions are > 0, so kMustNotExist (0) matches exactly an absent key.
  if (expected == kAnyVersion || actual == expected) return absl::OkStatus();
  return absl::AbortedError(
      absl::StrCat("version mismatch on ", ToAbsl(key), ": expected ",
                   expected == kMustNotExist ? std::string("absent") : absl::StrCat(expected),
                   ", found ", actual == 0 ? std::string("absent") : absl::StrCat(actual)));
}

absl::Status CheckKey(std::string_view key) {
  if (key.empty()) return absl::InvalidArgumentError("empty metadata key");
  return absl::OkStatus();
}

absl::Status CheckExpectedArg(Version expected) {
  if (expected < kAnyVersion) {
    return absl::InvalidArgumentError(absl::StrCat("invalid expected version ", expected));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<EmbeddedStore>> EmbeddedStore::Open(const std::string& dir) {
  return Open(dir, Options());
}

absl::StatusOr<std::unique_ptr<EmbeddedStore>> EmbeddedStore::Open(const std::string& dir,
                                                                   const Options& options) {
  const std::string context = absl::StrCat("cannot open embedded metadata store at ", dir);
  std::error_code ec;
  if (options.must_exist && !std::filesystem::exists(std::filesystem::path(dir) / "CURRENT", ec)) {
    return absl::NotFoundError(absl::StrCat(context, ": no store there (nothing was created)"));
  }
  std::filesystem::create_directories(dir, ec);
  if (!ec && !std::filesystem::is_directory(dir, ec) && !ec) {
    ec = std::make_error_code(std::errc::not_a_directory);
  }
  if (ec) return absl::ErrnoToStatus(ec.value(), context);

  rocksdb::DBOptions db_options;
  db_options.create_if_missing = !options.must_exist;
  db_options.create_missing_column_families = true;
  db_options.info_log = NewStderrRocksLogger(absl::StrCat("metadata store ", dir));
  db_options.info_log_level = rocksdb::InfoLogLevel::WARN_LEVEL;
  std::vector<rocksdb::ColumnFamilyDescriptor> families = {
      {rocksdb::kDefaultColumnFamilyName, rocksdb::ColumnFamilyOptions()},
      {kKvColumnFamily, rocksdb::ColumnFamilyOptions()},
  };
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::DB* raw = nullptr;
  RETURN_IF_ERROR(
      RocksToStatus(rocksdb::DB::Open(db_options, dir, families, &handles, &raw), context));
  std::unique_ptr<rocksdb::DB> db(raw);
  auto destroy_handles = [&] {
    for (rocksdb::ColumnFamilyHandle* h : handles)
      IgnoreError(RocksToStatus(db->DestroyColumnFamilyHandle(h), ""));
  };

  // A new database gets a format marker; an existing one must carry ours.
  std::string format;
  rocksdb::Status s = db->Get(rocksdb::ReadOptions(), handles[0], kFormatKey, &format);
  absl::Status status;
  Version revision = 0;
  if (s.IsNotFound()) {
    std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(rocksdb::ReadOptions(), handles[1]));
    it->SeekToFirst();
    if (!it->status().ok()) {
      status = RocksToStatus(it->status(), context);
    } else if (it->Valid()) {
      status =
          absl::FailedPreconditionError(absl::StrCat(context, ": holds data but no format marker"));
    } else {
      rocksdb::WriteOptions wo;
      wo.sync = true;
      status = RocksToStatus(db->Put(wo, handles[0], kFormatKey, kFormatVersion), context);
    }
  } else if (!s.ok()) {
    status = RocksToStatus(s, context);
  } else if (format != kFormatVersion) {
    status = absl::FailedPreconditionError(
        absl::StrCat(context, ": unknown format \"", format, "\" (expected ", kFormatVersion, ")"));
  } else {
    std::string raw_revision;
    s = db->Get(rocksdb::ReadOptions(), handles[0], kRevisionKey, &raw_revision);
    if (s.ok() && raw_revision.size() == 8) {
      revision = static_cast<Version>(DecodeFixed64(raw_revision.data()));
    } else if (s.ok()) {
      status = absl::DataLossError(absl::StrCat(context, ": corrupt revision record"));
    } else if (!s.IsNotFound()) {
      status = RocksToStatus(s, context);
    }
  }
  if (!status.ok()) {
    destroy_handles();
    return status;
  }

  std::unique_ptr<EmbeddedStore> store(
      new EmbeddedStore(dir, std::move(db), std::move(handles), revision));
  RETURN_IF_ERROR(store->Recover(options));
  return store;
}

EmbeddedStore::EmbeddedStore(std::string dir, std::unique_ptr<rocksdb::DB> db,
                             std::vector<rocksdb::ColumnFamilyHandle*> handles, Version revision)
    : dir_(std::move(dir)),
      db_(std::move(db)),
      meta_cf_(handles[0]),
      kv_cf_(handles[1]),
      revision_(revision) {}

absl::Status EmbeddedStore::Recover(const Options& options) {
  absl::MutexLock write_lock(&write_mu_);
  hub_ = WatchHub::Start(revision_, options.watch_history_events);
  reaper_ = std::thread([this] { ReaperLoop(); });

  // Sessions die with their process, so every ephemeral key on disk is stale.
  std::vector<Change> stale;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions(), kv_cf_));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    rocksdb::Slice raw = it->value();
    if (raw.size() < kRecordHeader || raw[0] != kRecordTag) {
      return absl::DataLossError(absl::StrCat("embedded metadata store ", dir_,
                                              ": corrupt record for key ", it->key().ToString()));
    }
    SessionId owner = static_cast<SessionId>(DecodeFixed64(raw.data() + 9));
    if (owner != kNoSession) {
      stale.push_back(Change{it->key().ToString(), true, "", kNoSession, owner});
    }
  }
  RETURN_IF_ERROR(RocksToStatus(it->status(), absl::StrCat("embedded metadata store ", dir_)));
  if (stale.empty()) return absl::OkStatus();
  return CommitLocked(std::move(stale)).status();
}

EmbeddedStore::~EmbeddedStore() {
  {
    absl::MutexLock lock(&mu_);
    shutdown_ = true;
    reaper_cv_.SignalAll();
  }
  if (reaper_.joinable()) reaper_.join();
  if (hub_ != nullptr) hub_->Shutdown();
  IgnoreError(RocksToStatus(db_->DestroyColumnFamilyHandle(kv_cf_), ""));
  IgnoreError(RocksToStatus(db_->DestroyColumnFamilyHandle(meta_cf_), ""));
  IgnoreError(RocksToStatus(db_->Close(), ""));
}

absl::StatusOr<std::optional<EmbeddedStore::Record>> EmbeddedStore::ReadRecord(
    std::string_view key) {
  std::string raw;
  rocksdb::Status s =
      db_->Get(rocksdb::ReadOptions(), kv_cf_, rocksdb::Slice(key.data(), key.size()), &raw);
  if (s.IsNotFound()) return std::optional<Record>();
  RETURN_IF_ERROR(RocksToStatus(s, absl::StrCat("embedded metadata store: reading ", ToAbsl(key))));
  if (raw.size() < kRecordHeader || raw[0] != kRecordTag) {
    return absl::DataLossError(
        absl::StrCat("embedded metadata store ", dir_, ": corrupt record for key ", ToAbsl(key)));
  }
  Record r;
  r.version = static_cast<Version>(DecodeFixed64(raw.data() + 1));
  r.session = static_cast<SessionId>(DecodeFixed64(raw.data() + 9));
  r.value = raw.substr(kRecordHeader);
  return std::optional<Record>(std::move(r));
}

absl::StatusOr<Version> EmbeddedStore::CommitLocked(std::vector<Change> changes) {
  if (!failed_.ok()) return failed_;
  const Version revision = revision_ + 1;
  rocksdb::WriteBatch batch;
  std::vector<WatchEvent> events;
  events.reserve(changes.size());
  for (const Change& c : changes) {
    WatchEvent e;
    e.key = c.key;
    e.version = revision;
    if (c.is_delete) {
      batch.Delete(kv_cf_, c.key);
      e.type = WatchEvent::Type::kDelete;
    } else {
      batch.Put(kv_cf_, c.key, EncodeRecord(revision, c.session, c.value));
      e.type = WatchEvent::Type::kPut;
      e.value = c.value;
    }
    events.push_back(std::move(e));
  }
  std::string raw_revision;
  AppendFixed64(&raw_revision, static_cast<uint64_t>(revision));
  batch.Put(meta_cf_, kRevisionKey, raw_revision);

  rocksdb::WriteOptions wo;
  wo.sync = true;
  rocksdb::Status s = LEDGERKV_FAULT("metadata.embedded.write", dir_)
                          ? rocksdb::Status::IOError("injected fault metadata.embedded.write")
                          : db_->Write(wo, &batch);
  if (!s.ok()) {
    // The batch may or may not be on disk: refuse to guess (a later commit
    // would reuse the revision). Reopening the store recovers the truth.
    failed_ = absl::UnavailableError(absl::StrCat(
        "embedded metadata store ", dir_,
        " failed a write and refuses further mutations until reopened: ", s.ToString()));
    return failed_;
  }
  revision_ = revision;
  {
    absl::MutexLock lock(&mu_);
    for (const Change& c : changes) {
      if (c.old_session != kNoSession) {
        auto it = sessions_.find(c.old_session);
        if (it != sessions_.end()) it->second.keys.erase(c.key);
      }
      if (!c.is_delete && c.session != kNoSession) {
        auto it = sessions_.find(c.session);
        if (it != sessions_.end()) it->second.keys.insert(c.key);
      }
    }
  }
  hub_->Publish(revision, std::move(events));
  return revision;
}

absl::StatusOr<VersionedValue> EmbeddedStore::Get(std::string_view key) {
  RETURN_IF_ERROR(CheckKey(key));
  ASSIGN_OR_RETURN(std::optional<Record> record, ReadRecord(key));
  if (!record.has_value())
    return absl::NotFoundError(absl::StrCat("no metadata key ", ToAbsl(key)));
  return VersionedValue{std::move(record->value), record->version};
}

absl::StatusOr<Version> EmbeddedStore::Put(std::string_view key, std::string_view value,
                                           Version expected_version, SessionId session) {
  RETURN_IF_ERROR(CheckKey(key));
  RETURN_IF_ERROR(CheckExpectedArg(expected_version));
  absl::MutexLock write_lock(&write_mu_);
  if (!failed_.ok()) return failed_;
  if (session != kNoSession) {
    absl::MutexLock lock(&mu_);
    RETURN_IF_ERROR(CheckSessionLocked(session));
  }
  ASSIGN_OR_RETURN(std::optional<Record> current, ReadRecord(key));
  RETURN_IF_ERROR(CheckExpected(key, current ? current->version : 0, expected_version));
  std::vector<Change> changes;
  changes.push_back(Change{std::string(key), false, std::string(value), session,
                           current ? current->session : kNoSession});
  return CommitLocked(std::move(changes));
}

absl::Status EmbeddedStore::Delete(std::string_view key, Version expected_version) {
  RETURN_IF_ERROR(CheckKey(key));
  RETURN_IF_ERROR(CheckExpectedArg(expected_version));
  absl::MutexLock write_lock(&write_mu_);
  if (!failed_.ok()) return failed_;
  ASSIGN_OR_RETURN(std::optional<Record> current, ReadRecord(key));
  if (!current.has_value())
    return absl::NotFoundError(absl::StrCat("no metadata key ", ToAbsl(key)));
  RETURN_IF_ERROR(CheckExpected(key, current->version, expected_version));
  std::vector<Change> changes;
  changes.push_back(Change{std::string(key), true, "", kNoSession, current->session});
  return CommitLocked(std::move(changes)).status();
}

absl::StatusOr<std::vector<KeyValue>> EmbeddedStore::List(std::string_view prefix) {
  // An iterator reads from an implicit snapshot: one point in time.
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions(), kv_cf_));
  const rocksdb::Slice want(prefix.data(), prefix.size());
  std::vector<KeyValue> out;
  for (it->Seek(want); it->Valid() && it->key().starts_with(want); it->Next()) {
    rocksdb::Slice raw = it->value();
    if (raw.size() < kRecordHeader || raw[0] != kRecordTag) {
      return absl::DataLossError(absl::StrCat("embedded metadata store ", dir_,
                                              ": corrupt record for key ", it->key().ToString()));
    }
    out.push_back(KeyValue{it->key().ToString(),
                           std::string(raw.data() + kRecordHeader, raw.size() - kRecordHeader),
                           static_cast<Version>(DecodeFixed64(raw.data() + 1))});
  }
  RETURN_IF_ERROR(RocksToStatus(it->status(),
                                absl::StrCat("embedded metadata store: listing ", ToAbsl(prefix))));
  return out;
}

absl::StatusOr<TxnResult> EmbeddedStore::Txn(const std::vector<TxnCompare>& compares,
                                             const std::vector<TxnOp>& ops) {
  for (const TxnCompare& c : compares) {
    RETURN_IF_ERROR(CheckKey(c.key));
    RETURN_IF_ERROR(CheckExpectedArg(c.expected_version));
  }
  absl::flat_hash_set<std::string_view> op_keys;
  for (const TxnOp& op : ops) {
    RETURN_IF_ERROR(CheckKey(op.key));
    if (!op_keys.insert(op.key).second) {
      return absl::InvalidArgumentError(absl::StrCat("txn has two ops on key ", op.key));
    }
  }

  absl::MutexLock write_lock(&write_mu_);
  if (!failed_.ok()) return failed_;
  for (const TxnCompare& c : compares) {
    ASSIGN_OR_RETURN(std::optional<Record> current, ReadRecord(c.key));
    if (!CheckExpected(c.key, current ? current->version : 0, c.expected_version).ok()) {
      return TxnResult{false, revision_};
    }
  }
  {
    absl::MutexLock lock(&mu_);
    for (const TxnOp& op : ops) {
      if (op.type == TxnOp::Type::kPut && op.session != kNoSession) {
        RETURN_IF_ERROR(CheckSessionLocked(op.session));
      }
    }
  }
  std::vector<Change> changes;
  for (const TxnOp& op : ops) {
    ASSIGN_OR_RETURN(std::optional<Record> current, ReadRecord(op.key));
    const SessionId old_session = current ? current->session : kNoSession;
    if (op.type == TxnOp::Type::kDelete) {
      // As in etcd, deleting an absent key inside a txn changes nothing.
      if (current.has_value()) changes.push_back(Change{op.key, true, "", kNoSession, old_session});
    } else {
      changes.push_back(Change{op.key, false, op.value, op.session, old_session});
    }
  }
  if (changes.empty()) return TxnResult{true, revision_};
  ASSIGN_OR_RETURN(Version revision, CommitLocked(std::move(changes)));
  return TxnResult{true, revision};
}

absl::StatusOr<std::unique_ptr<WatchHandle>> EmbeddedStore::Watch(std::string_view prefix,
                                                                  Version from_version,
                                                                  WatchCallback callback) {
  return hub_->Watch(prefix, from_version, std::move(callback));
}

absl::StatusOr<Version> EmbeddedStore::CurrentRevision() {
  // Read from the database rather than revision_ so that it is never below
  // a version a concurrent Get already returned, and never waits for a sync.
  std::string raw;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), meta_cf_, kRevisionKey, &raw);
  if (s.IsNotFound()) return Version{0};
  RETURN_IF_ERROR(RocksToStatus(s, "embedded metadata store: reading the revision"));
  if (raw.size() != 8) return absl::DataLossError("embedded metadata store: corrupt revision");
  return static_cast<Version>(DecodeFixed64(raw.data()));
}

absl::Status EmbeddedStore::CheckSessionLocked(SessionId session) {
  auto it = sessions_.find(session);
  // A session whose TTL ran out has ended even before the reaper gets to it.
  if (it == sessions_.end() || it->second.deadline <= absl::Now()) {
    return absl::NotFoundError(absl::StrCat("session ", session, " does not exist or has ended"));
  }
  return absl::OkStatus();
}

absl::StatusOr<SessionId> EmbeddedStore::CreateSession(const SessionOptions& options) {
  if (options.ttl <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("session ttl must be positive, got ", absl::FormatDuration(options.ttl)));
  }
  absl::MutexLock lock(&mu_);
  if (shutdown_) return absl::UnavailableError("embedded metadata store is shutting down");
  const SessionId id = next_session_++;
  Session& s = sessions_[id];
  s.ttl = options.ttl;
  s.deadline = options.auto_keepalive ? absl::InfiniteFuture() : absl::Now() + options.ttl;
  s.on_expired = options.on_expired;
  reaper_cv_.Signal();
  return id;
}

absl::Status EmbeddedStore::KeepAlive(SessionId session) {
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(CheckSessionLocked(session));
  Session& s = sessions_[session];
  // One process cannot lose its connection to itself: an auto-keepalive
  // session never expires, so its deadline stays infinite.
  if (s.deadline != absl::InfiniteFuture()) s.deadline = absl::Now() + s.ttl;
  return absl::OkStatus();
}

absl::Status EmbeddedStore::CloseSession(SessionId session) {
  absl::MutexLock write_lock(&write_mu_);
  Session ended;
  {
    absl::MutexLock lock(&mu_);
    RETURN_IF_ERROR(CheckSessionLocked(session));
    auto it = sessions_.find(session);
    ended = std::move(it->second);
    sessions_.erase(it);
  }
  return DeleteSessionKeysLocked(session, ended);
}

absl::Status EmbeddedStore::DeleteSessionKeysLocked(SessionId id, const Session& session) {
  std::vector<std::string> keys(session.keys.begin(), session.keys.end());
  std::sort(keys.begin(), keys.end());
  std::vector<Change> changes;
  for (std::string& key : keys) {
    ASSIGN_OR_RETURN(std::optional<Record> current, ReadRecord(key));
    if (current.has_value() && current->session == id) {
      changes.push_back(Change{std::move(key), true, "", kNoSession, id});
    }
  }
  if (changes.empty()) return absl::OkStatus();
  return CommitLocked(std::move(changes)).status();
}

void EmbeddedStore::ReaperLoop() {
  mu_.Lock();
  while (!shutdown_) {
    const absl::Time now = absl::Now();
    absl::Time next = absl::InfiniteFuture();
    bool due = false;
    for (const auto& [id, s] : sessions_) {
      if (s.deadline <= now) {
        due = true;
      } else {
        next = std::min(next, s.deadline);
      }
    }
    if (due) {
      mu_.Unlock();
      ExpireDueSessions();
      mu_.Lock();
      continue;
    }
    reaper_cv_.WaitWithDeadline(&mu_, next);
  }
  mu_.Unlock();
}

void EmbeddedStore::ExpireDueSessions() {
  std::vector<std::function<void()>> callbacks;
  {
    absl::MutexLock write_lock(&write_mu_);
    std::vector<std::pair<SessionId, Session>> ended;
    {
      absl::MutexLock lock(&mu_);
      if (shutdown_) return;
      const absl::Time now = absl::Now();
      for (auto& [id, s] : sessions_) {
        if (s.deadline <= now) ended.emplace_back(id, std::move(s));
      }
      for (const auto& e : ended) sessions_.erase(e.first);
    }
    for (auto& [id, s] : ended) {
      // A failed delete leaves the store failed (every later mutation says
      // so) and the keys are gone at the next Open; the session has ended
      // either way, so its owner is still told.
      IgnoreError(DeleteSessionKeysLocked(id, s));
      if (s.on_expired) callbacks.push_back(std::move(s.on_expired));
    }
  }
  for (const auto& cb : callbacks) cb();
}

}  // namespace ledgerkv::metadata
