#include "kv_server/catalog.h"

#include <algorithm>
#include <cstdio>
#include <optional>
#include <set>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "base/fault_point.h"
#include "base/status_macros.h"

namespace ledgerkv::kv {
namespace {

namespace meta = ::ledgerkv::meta::v1;

constexpr size_t kMaxTableNameBytes = 128;

bool TableNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '.' || c == '-';
}

std::string Escaped(std::string_view s) {
  return absl::CHexEscape(absl::string_view(s.data(), s.size()));
}

}  // namespace

absl::Status CheckTableName(std::string_view name) {
  if (name.empty()) return absl::InvalidArgumentError("table name is empty");
  if (name.size() > kMaxTableNameBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "table name of ", name.size(), " bytes exceeds the limit of ", kMaxTableNameBytes));
  }
  if (!std::all_of(name.begin(), name.end(), TableNameChar)) {
    return absl::InvalidArgumentError(
        absl::StrCat("table name \"", Escaped(name), "\" may only contain [A-Za-z0-9_.-]"));
  }
  return absl::OkStatus();
}

absl::Status CheckSplitKeys(const std::vector<std::string>& split_keys, const Limits& limits) {
  if (split_keys.size() + 1 > static_cast<size_t>(kMaxRangesPerTable)) {
    return absl::InvalidArgumentError(
        absl::StrCat(split_keys.size(), " split keys make ", split_keys.size() + 1,
                     " ranges; a table has at most ", kMaxRangesPerTable, " ranges"));
  }
  for (size_t i = 0; i < split_keys.size(); ++i) {
    const std::string& k = split_keys[i];
    if (k.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("split key ", i, " is empty"));
    }
    if (static_cast<int64_t>(k.size()) > limits.max_key_bytes) {
      return absl::InvalidArgumentError(absl::StrCat("split key ", i, " of ", k.size(),
                                                     " bytes exceeds max_key_bytes ",
                                                     limits.max_key_bytes));
    }
    if (i > 0 && !(split_keys[i - 1] < k)) {
      return absl::InvalidArgumentError(
          absl::StrCat("split keys must be strictly increasing: key ", i, " \"", Escaped(k),
                       "\" is not after key ", i - 1, " \"", Escaped(split_keys[i - 1]), "\""));
    }
  }
  return absl::OkStatus();
}

const meta::RangeSpec& RangeForKey(const meta::TableMetadata& table, std::string_view key) {
  // The last range whose start is <= key.
  const auto& ranges = table.ranges();
  auto it = std::upper_bound(
      ranges.begin(), ranges.end(), key,
      [](std::string_view k, const meta::RangeSpec& r) { return k < std::string_view(r.start()); });
  return it == ranges.begin() ? *it : *std::prev(it);
}

std::string DescribeRange(const meta::RangeSpec& range) {
  return absl::StrCat(range.range_id(), " [", Escaped(range.start()), ", ", Escaped(range.end()),
                      ")");
}

TableCatalog::TableCatalog(metadata::MetadataStore* store, std::string cluster, Limits limits)
    : store_(store), keys_(std::move(cluster)), limits_(limits) {}

absl::Status TableCatalog::Load() {
  absl::MutexLock op(&op_mu_);
  ASSIGN_OR_RETURN(std::vector<metadata::KeyValue> records, store_->List(keys_.Table("")));
  std::map<std::string, std::shared_ptr<const meta::TableMetadata>, std::less<>> tables;
  for (const metadata::KeyValue& kv : records) {
    auto table = std::make_shared<meta::TableMetadata>();
    if (!table->ParseFromString(kv.value) || table->ranges_size() == 0) {
      return absl::DataLossError(absl::StrCat("table record ", kv.key, " is not parseable"));
    }
    tables.emplace(table->name(), std::move(table));
  }
  absl::MutexLock l(&mu_);
  tables_ = std::move(tables);
  return absl::OkStatus();
}

absl::StatusOr<meta::TableMetadata> TableCatalog::CreateTable(
    const std::string& name, const std::vector<std::string>& split_keys) {
  RETURN_IF_ERROR(CheckTableName(name));
  RETURN_IF_ERROR(CheckSplitKeys(split_keys, limits_));
  absl::MutexLock op(&op_mu_);
  {
    absl::MutexLock l(&mu_);
    if (tables_.contains(name)) {
      return absl::AlreadyExistsError(absl::StrCat("table ", name, " already exists"));
    }
  }
  meta::TableMetadata table;
  table.set_name(name);
  ASSIGN_OR_RETURN(uint64_t table_id, metadata::NextId(*store_, keys_.IdGen("table")));
  table.set_table_id(table_id);
  table.set_create_time_unix_ms(absl::ToUnixMillis(absl::Now()));
  // The create's intent first, then its range records, then the table
  // record in one Txn that also deletes the intent, if the intent is still
  // there. A crash before the commit leaves only unreferenced records (the
  // sweep removes them), never a table that points at missing ranges; and a
  // sweep that claims those records while this create is still running
  // deletes the intent first, so this commit then fails and nothing that
  // was swept is ever part of a table (docs/cluster.md, "Leftovers").
  const std::string intent = keys_.Creating(table_id);
  ASSIGN_OR_RETURN(metadata::Version intent_version,
                   store_->Put(intent, absl::StrCat(table.create_time_unix_ms()),
                               metadata::kMustNotExist));
  for (size_t i = 0; i <= split_keys.size(); ++i) {
    ASSIGN_OR_RETURN(uint64_t range_id, metadata::NextId(*store_, keys_.IdGen("range")));
    meta::RangeSpec* spec = table.add_ranges();
    spec->set_range_id(range_id);
    spec->set_start(i == 0 ? "" : split_keys[i - 1]);
    spec->set_end(i == split_keys.size() ? "" : split_keys[i]);
    meta::RangeMetadata record;
    record.set_range_id(range_id);
    record.set_table(name);
    record.set_start(spec->start());
    record.set_end(spec->end());
    record.set_create_unix_ms(table.create_time_unix_ms());
    record.set_table_id(table_id);
    RETURN_IF_ERROR(
        store_->Put(keys_.Range(range_id), record.SerializeAsString(), metadata::kMustNotExist)
            .status());
  }
  // A test hook: a create that stalls here, past the sweep's grace period.
  static_cast<void>(LEDGERKV_FAULT("catalog.create.before_commit"));
  metadata::TxnOp put_table;
  put_table.key = keys_.Table(name);
  put_table.value = table.SerializeAsString();
  metadata::TxnOp drop_intent;
  drop_intent.type = metadata::TxnOp::Type::kDelete;
  drop_intent.key = intent;
  ASSIGN_OR_RETURN(metadata::TxnResult committed,
                   store_->Txn({{keys_.Table(name), metadata::kMustNotExist}, {intent, intent_version}},
                               {put_table, drop_intent}));
  if (!committed.succeeded) {
    // Which compare failed: with the intent still ours, the table key (the
    // name was taken meanwhile, even if dropped again since); without it, a
    // sweep claimed this create's ranges.
    absl::StatusOr<metadata::VersionedValue> mine = store_->Get(intent);
    if (!mine.ok() && !absl::IsNotFound(mine.status())) return mine.status();
    if (mine.ok() && mine->version == intent_version) {
      // Created meanwhile through another server (this cache did not have
      // it yet): our range records are referenced by nothing. Best effort;
      // a leftover is garbage for the sweep, never part of a table.
      for (const meta::RangeSpec& spec : table.ranges()) {
        IgnoreError(store_->Delete(keys_.Range(spec.range_id()), metadata::kAnyVersion));
      }
      IgnoreError(store_->Delete(intent, intent_version));
      return absl::AlreadyExistsError(absl::StrCat("table ", name, " already exists"));
    }
    // The intent is gone: a sweep took this create for a crashed one and
    // claimed its range records. It cleans them; nothing was created.
    return absl::AbortedError(absl::StrCat(
        "table ", name, ": the create took longer than the sweep's grace period and its "
        "ranges were collected as leftovers; nothing was created, retry"));
  }
  absl::MutexLock l(&mu_);
  tables_[name] = std::make_shared<const meta::TableMetadata>(table);
  return table;
}

absl::StatusOr<meta::TableMetadata> TableCatalog::DropTable(const std::string& name,
                                                            const RangeCleanup& cleanup) {
  meta::TableMetadata table;
  std::optional<meta::TableMetadata> leftover;  // dropped before this call
  {
    absl::MutexLock op(&op_mu_);
    // The record in the store, not the cached one: the cache may be stale
    // (the table dropped and re-created through another server), and the
    // ranges cleaned below must be those of the record this deletes.
    for (int attempt = 1;; ++attempt) {
      absl::StatusOr<metadata::VersionedValue> got = store_->Get(keys_.Table(name));
      absl::Status deleted = got.status();
      if (got.ok()) {
        table.Clear();
        if (!table.ParseFromString(got->value) || table.ranges_size() == 0) {
          return absl::DataLossError(absl::StrCat("table record of ", name, " is not parseable"));
        }
        deleted = store_->Delete(keys_.Table(name), got->version);
      }
      if (absl::IsNotFound(deleted)) {
        // Gone from the store. If this cache still has it, its record went
        // in a drop whose reply was lost (this is its retry) or through
        // another server: clean what of its ranges is left, since nothing
        // else will in cluster mode.
        absl::MutexLock l(&mu_);
        auto it = tables_.find(name);
        if (it == tables_.end()) {
          return absl::NotFoundError(absl::StrCat("table ", name, " not found"));
        }
        leftover = *it->second;
        tables_.erase(it);
        table.Clear();  // filled below with the leftover ranges only
        break;
      }
      if (absl::IsAborted(deleted) && attempt < 3) continue;  // re-created meanwhile
      RETURN_IF_ERROR(deleted);
      break;
    }
    absl::MutexLock l(&mu_);
    tables_.erase(name);
  }
  if (leftover.has_value()) {
    for (const meta::RangeSpec& spec : leftover->ranges()) {
      if (!absl::IsNotFound(store_->Get(keys_.Range(spec.range_id())).status())) {
        table.add_ranges()->CopyFrom(spec);
      }
    }
  }
  // Outside op_mu_: a cleanup is several store and bookie calls per range,
  // and Load (a cluster server's control thread) must not wait for them.
  for (const meta::RangeSpec& spec : table.ranges()) {
    meta::RangeMetadata range;
    range.set_range_id(spec.range_id());
    range.set_table(name);
    range.set_start(spec.start());
    range.set_end(spec.end());
    absl::Status cleaned = cleanup(range);
    if (cleaned.ok()) {
      cleaned = store_->Delete(keys_.Range(spec.range_id()), metadata::kAnyVersion);
      if (absl::IsNotFound(cleaned)) cleaned = absl::OkStatus();
    }
    if (!cleaned.ok()) {
      absl::FPrintF(stderr,
                    "ledgerkv: drop table %s: cleanup of range %d failed (its range record "
                    "stays for the sweep): %s\n",
                    name, spec.range_id(), cleaned.ToString());
    }
  }
  if (leftover.has_value()) return absl::NotFoundError(absl::StrCat("table ", name, " not found"));
  return table;
}

absl::StatusOr<int> TableCatalog::Sweep(const RangeCleanup& cleanup, absl::Duration min_age,
                                        const std::function<bool()>& still_allowed) {
  struct Orphan {
    metadata::KeyValue kv;
    meta::RangeMetadata range;
  };
  std::vector<Orphan> orphans;
  std::vector<uint64_t> stale_intents;  // table ids; their versions in intent_versions
  // Versions as listed (kMustNotExist: absent), the fence of every claim.
  absl::flat_hash_map<std::string, metadata::Version> table_versions;
  absl::flat_hash_map<uint64_t, metadata::Version> intent_versions;
  absl::Status first;
  {
    absl::MutexLock op(&op_mu_);
    // From the store, not the cache: a table this server has not loaded yet
    // must count. The listings need not be consistent with each other: each
    // claim below re-checks, in one Txn, the versions they were based on.
    ASSIGN_OR_RETURN(std::vector<metadata::KeyValue> records, store_->List(keys_.RangesPrefix()));
    ASSIGN_OR_RETURN(std::vector<metadata::KeyValue> intents, store_->List(keys_.CreatingPrefix()));
    ASSIGN_OR_RETURN(std::vector<metadata::KeyValue> tables, store_->List(keys_.TablesPrefix()));
    std::set<uint64_t> referenced;
    std::set<uint64_t> table_ids;
    for (const metadata::KeyValue& kv : tables) {
      // Table names hold no '/': a deeper key is another cluster's (one
      // named "x/tables"), none of ours.
      if (kv.key.find('/', keys_.TablesPrefix().size()) != std::string::npos) continue;
      meta::TableMetadata table;
      if (!table.ParseFromString(kv.value) || table.ranges_size() == 0 ||
          kv.key != keys_.Table(table.name())) {
        // Never guess which ranges an unreadable table holds.
        return absl::DataLossError(absl::StrCat("table record ", kv.key, " is not parseable"));
      }
      for (const meta::RangeSpec& spec : table.ranges()) referenced.insert(spec.range_id());
      table_ids.insert(table.table_id());
      table_versions[kv.key] = kv.version;
    }
    const int64_t young_after = absl::ToUnixMillis(absl::Now() - min_age);
    auto young = [&](int64_t created_ms) {
      return min_age > absl::ZeroDuration() && created_ms > young_after;
    };
    // The id a key of the form prefix + 020 id names; nullopt for any other
    // key: another cluster's keys may share the prefix (one named
    // "x/ranges" or "x/creating"), and their values are none of ours.
    auto id_of = [](const std::string& key, const std::string& prefix,
                    const std::function<std::string(uint64_t)>& key_of) -> std::optional<uint64_t> {
      uint64_t id = 0;
      if (!absl::SimpleAtoi(key.substr(prefix.size()), &id) || key != key_of(id)) return std::nullopt;
      return id;
    };
    for (const metadata::KeyValue& kv : intents) {
      const std::optional<uint64_t> parsed =
          id_of(kv.key, keys_.CreatingPrefix(), [&](uint64_t id) { return keys_.Creating(id); });
      if (!parsed.has_value()) continue;
      const uint64_t id = *parsed;
      int64_t created_ms = 0;
      intent_versions[id] = kv.version;
      if (table_ids.contains(id)) continue;  // committed (the commit deletes it; defensive)
      if (absl::SimpleAtoi(kv.value, &created_ms) && young(created_ms)) continue;
      stale_intents.push_back(id);
    }
    {
      // Tables this catalog still has cached count too: a table dropped
      // through another server is cleaned by that drop, and this server
      // (the controller) may still assign its ranges until its watch
      // removes it; destroying them meanwhile could see one adopted again,
      // re-creating its log after the delete. A dropped table never comes
      // back (ids are not reused), so this only delays the sweep.
      absl::MutexLock l(&mu_);
      for (const auto& [name, table] : tables_) {
        for (const meta::RangeSpec& spec : table->ranges()) referenced.insert(spec.range_id());
      }
    }
    for (metadata::KeyValue& kv : records) {
      // The key's form first, before its value is parsed.
      const std::optional<uint64_t> parsed =
          id_of(kv.key, keys_.RangesPrefix(), [&](uint64_t id) { return keys_.Range(id); });
      if (!parsed.has_value()) continue;
      const uint64_t id = *parsed;
      meta::RangeMetadata range;
      if (!range.ParseFromString(kv.value) || range.range_id() != id) {
        if (first.ok()) {
          first = absl::DataLossError(absl::StrCat("range record ", kv.key, " is not parseable"));
        }
        continue;
      }
      if (referenced.contains(id)) continue;
      if (!range.sweeping()) {
        if (young(range.create_unix_ms())) continue;
        // A record of an older build has no intent to fence its create, and
        // such a create commits with a plain put: with creates running
        // elsewhere (min_age > 0), only the table key would fence it, which
        // an older build's commit does not compare. Left to a standalone
        // start or to the operator.
        if (min_age > absl::ZeroDuration() && range.table_id() == 0) continue;
      }
      orphans.push_back(Orphan{std::move(kv), std::move(range)});
    }
  }
  // A test hook: a create commits here, after the listings.
  static_cast<void>(LEDGERKV_FAULT("catalog.sweep.listed"));
  // Outside op_mu_, as DropTable's cleanups.
  int cleaned_count = 0;
  auto note = [&first](absl::Status s) {
    if (!s.ok() && first.ok()) first = std::move(s);
  };
  for (Orphan& o : orphans) {
    if (still_allowed && !still_allowed()) break;
    metadata::Version version = o.kv.version;
    if (!o.range.sweeping()) {
      // The claim: only while the record, its table's key and its create's
      // intent are as listed (so no table references the range, and its
      // create, if still running, can no longer commit: its Txn needs the
      // intent this deletes). Of a stalled create and a sweep, exactly one
      // succeeds.
      const std::string table_key = keys_.Table(o.range.table());
      auto t = table_versions.find(table_key);
      std::vector<metadata::TxnCompare> compares = {
          {o.kv.key, o.kv.version},
          {table_key, t == table_versions.end() ? metadata::kMustNotExist : t->second}};
      meta::RangeMetadata claimed = o.range;
      claimed.set_sweeping(true);
      metadata::TxnOp mark;
      mark.key = o.kv.key;
      mark.value = claimed.SerializeAsString();
      std::vector<metadata::TxnOp> ops = {mark};
      if (o.range.table_id() != 0) {
        const std::string intent = keys_.Creating(o.range.table_id());
        auto iv = intent_versions.find(o.range.table_id());
        const metadata::Version expected =
            iv == intent_versions.end() ? metadata::kMustNotExist : iv->second;
        compares.push_back({intent, expected});
        if (expected != metadata::kMustNotExist) {
          metadata::TxnOp drop;
          drop.type = metadata::TxnOp::Type::kDelete;
          drop.key = intent;
          ops.push_back(drop);
        }
      }
      absl::StatusOr<metadata::TxnResult> claim = store_->Txn(compares, ops);
      if (!claim.ok()) {
        note(claim.status());
        continue;
      }
      if (!claim->succeeded) continue;  // changed since the listing: next sweep
      if (o.range.table_id() != 0) intent_versions[o.range.table_id()] = metadata::kMustNotExist;
      version = claim->revision;
    }
    absl::Status cleaned = cleanup(o.range);
    if (cleaned.ok()) {
      cleaned = store_->Delete(o.kv.key, version);
      if (absl::IsNotFound(cleaned)) cleaned = absl::OkStatus();  // another sweeper's
    }
    if (cleaned.ok()) {
      ++cleaned_count;
    } else {
      note(cleaned);
    }
  }
  // Intents of creates that crashed (or stalled past the grace period)
  // before writing any range record, or whose records were claimed above.
  for (uint64_t id : stale_intents) {
    if (still_allowed && !still_allowed()) break;
    const metadata::Version version = intent_versions.at(id);
    if (version == metadata::kMustNotExist) continue;  // deleted by a claim
    absl::Status s = store_->Delete(keys_.Creating(id), version);
    if (!s.ok() && !absl::IsNotFound(s) && !absl::IsAborted(s)) note(s);
  }
  if (!first.ok()) return first;
  return cleaned_count;
}

absl::StatusOr<std::shared_ptr<const meta::TableMetadata>> TableCatalog::Get(
    std::string_view name) const {
  absl::MutexLock l(&mu_);
  auto it = tables_.find(name);
  if (it == tables_.end()) {
    return absl::NotFoundError(absl::StrCat("table ", Escaped(name), " not found"));
  }
  return it->second;
}

std::vector<std::shared_ptr<const meta::TableMetadata>> TableCatalog::List() const {
  absl::MutexLock l(&mu_);
  std::vector<std::shared_ptr<const meta::TableMetadata>> out;
  out.reserve(tables_.size());
  for (const auto& [name, table] : tables_) out.push_back(table);
  return out;
}

std::set<uint64_t> TableCatalog::ReferencedRanges() const {
  absl::MutexLock l(&mu_);
  std::set<uint64_t> ids;
  for (const auto& [name, table] : tables_) {
    for (const meta::RangeSpec& r : table->ranges()) ids.insert(r.range_id());
  }
  return ids;
}

}  // namespace ledgerkv::kv
