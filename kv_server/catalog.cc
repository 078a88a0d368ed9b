#include "kv_server/catalog.h"

#include <algorithm>
#include <cstdio>
#include <optional>
#include <set>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
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
  // Range records first: a crash before the table record leaves only
  // unreferenced range records (Sweep removes them), never a table that
  // points at missing ranges.
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
    RETURN_IF_ERROR(
        store_->Put(keys_.Range(range_id), record.SerializeAsString(), metadata::kMustNotExist)
            .status());
  }
  absl::StatusOr<metadata::Version> put =
      store_->Put(keys_.Table(name), table.SerializeAsString(), metadata::kMustNotExist);
  if (absl::IsAborted(put.status())) {
    // Created meanwhile through another server (this cache did not have it
    // yet): our range records are referenced by nothing. Best effort; a
    // leftover is garbage for Sweep, never part of a table.
    for (const meta::RangeSpec& spec : table.ranges()) {
      IgnoreError(store_->Delete(keys_.Range(spec.range_id()), metadata::kAnyVersion));
    }
    return absl::AlreadyExistsError(absl::StrCat("table ", name, " already exists"));
  }
  RETURN_IF_ERROR(put.status());
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
                    "stays; standalone retries it at its next start): %s\n",
                    name, spec.range_id(), cleaned.ToString());
    }
  }
  if (leftover.has_value()) return absl::NotFoundError(absl::StrCat("table ", name, " not found"));
  return table;
}

absl::StatusOr<int> TableCatalog::Sweep(const RangeCleanup& cleanup) {
  absl::MutexLock op(&op_mu_);
  std::set<uint64_t> referenced;
  {
    absl::MutexLock l(&mu_);
    for (const auto& [name, table] : tables_) {
      for (const meta::RangeSpec& spec : table->ranges()) referenced.insert(spec.range_id());
    }
  }
  ASSIGN_OR_RETURN(std::vector<metadata::KeyValue> records, store_->List(keys_.Root() + "ranges/"));
  int cleaned_count = 0;
  absl::Status first;
  for (const metadata::KeyValue& kv : records) {
    meta::RangeMetadata range;
    if (!range.ParseFromString(kv.value)) {
      if (first.ok()) {
        first = absl::DataLossError(absl::StrCat("range record ", kv.key, " is not parseable"));
      }
      continue;
    }
    if (referenced.contains(range.range_id())) continue;
    absl::Status cleaned = cleanup(range);
    if (cleaned.ok()) {
      cleaned = store_->Delete(kv.key, kv.version);
      if (absl::IsNotFound(cleaned)) cleaned = absl::OkStatus();
    }
    if (cleaned.ok()) {
      ++cleaned_count;
    } else if (first.ok()) {
      first = cleaned;
    }
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
