#include "kv_server/range_host.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"
#include "kv_server/retry.h"
#include "kv_server/range/local_store.h"
#include "ledger/ledger_client.h"
#include "snapshot/snapshot_store.h"
#include "wal/log_metadata.h"
#include "wal/log_writer.h"

namespace ledgerkv::kv {
namespace {

namespace meta = ::ledgerkv::meta::v1;

std::string LogName(uint64_t range_id) { return absl::StrCat("range-", range_id); }

// Keeps the first error.
void Note(absl::Status& first, const absl::Status& s) {
  if (first.ok() && !s.ok()) first = s;
}

constexpr char kRestoreSuffix[] = ".restore";

// Whether `name` is an entry RangeHost creates in ranges_dir: a range id in
// canonical decimal (RangeDir), or that followed by ".restore" (snapshot
// restore scratch dir, SnapshotOptions) or by ".wiped" (a local store a
// crash stopped LocalStore::Destroy from removing). Anything else is not
// ours.
bool ParseRangeDirName(std::string name, uint64_t* id) {
  if (absl::EndsWith(name, kRestoreSuffix)) {
    name.resize(name.size() - (sizeof(kRestoreSuffix) - 1));
  } else if (absl::EndsWith(name, LocalStore::kWipedSuffix)) {
    name.resize(name.size() - (sizeof(LocalStore::kWipedSuffix) - 1));
  }
  if (name.empty() || name.size() > 20 || name[0] == '0') return false;
  for (char c : name) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return false;
  }
  return absl::SimpleAtoi(name, id);  // false on overflow
}

// A real directory (not a symlink to one, not a file).
bool IsPlainDir(const std::filesystem::path& path) {
  std::error_code ec;
  return std::filesystem::symlink_status(path, ec).type() == std::filesystem::file_type::directory;
}

}  // namespace

RangeHostOptions MakeRangeHostOptions(const ServingOptions& o) {
  RangeHostOptions ho;
  ho.ranges_dir = o.data_dir + "/ranges";
  RangeOptions& ro = ho.range;
  // The log and the snapshots live in ledgers placed alike.
  auto place = [&o](auto& ledgers) {
    ledgers.client = o.client;
    ledgers.metadata = o.store;
    ledgers.cluster = o.cluster;
    ledgers.ensemble_size = o.ensemble_size;
    ledgers.write_quorum = o.write_quorum;
    ledgers.ack_quorum = o.ack_quorum;
  };
  place(ro.log);
  place(ro.snapshot);
  ro.log.roll_bytes =
      std::clamp<int64_t>(o.snapshot_log_bytes / 2, int64_t{256} << 10, int64_t{64} << 20);
  ro.snapshot_log_bytes = o.snapshot_log_bytes;
  ro.snapshot_interval = o.snapshot_interval;
  ro.limits = o.limits;
  return ho;
}

absl::StatusOr<std::shared_ptr<Range>> RangeLocator::Lookup(std::string_view table,
                                                            std::string_view key) {
  ASSIGN_OR_RETURN(std::shared_ptr<const meta::TableMetadata> t, Table(table));
  return Serving(*t, RangeForKey(*t, key));
}

absl::StatusOr<std::unique_ptr<RangeHost>> RangeHost::Create(TableCatalog* catalog,
                                                             RangeHostOptions options) {
  if (catalog == nullptr || options.range.log.client == nullptr ||
      options.range.log.metadata == nullptr || options.ranges_dir.empty()) {
    return absl::InvalidArgumentError(
        "RangeHost needs a catalog, a ledger client, a metadata store and a ranges dir");
  }
  ASSIGN_OR_RETURN(std::unique_ptr<snapshot::SnapshotStore> snapshots,
                   snapshot::SnapshotStore::Create(options.range.snapshot));
  std::unique_ptr<RangeHost> host(new RangeHost(catalog, std::move(options), std::move(snapshots)));
  RangeHost* raw = host.get();
  host->reopen_thread_ = std::thread([raw] { raw->ReopenLoop(); });
  return host;
}

RangeHost::RangeHost(TableCatalog* catalog, RangeHostOptions options,
                     std::unique_ptr<snapshot::SnapshotStore> snapshots)
    : catalog_(catalog), options_(std::move(options)), snapshots_(std::move(snapshots)) {}

RangeHost::~RangeHost() { Shutdown(); }

std::string RangeHost::RangeDir(uint64_t range_id) const {
  return absl::StrCat(options_.ranges_dir, "/", range_id);
}

std::vector<std::string> RangeHost::LocalDirs(uint64_t range_id) const {
  const std::string dir = RangeDir(range_id);
  return {dir, dir + kRestoreSuffix, dir + LocalStore::kWipedSuffix};
}

bool RangeHost::AddSlot(const RangeDescriptor& descriptor) {
  absl::MutexLock l(&mu_);
  if (shutdown_ || slots_.contains(descriptor.range_id)) return false;
  Slot& slot = slots_[descriptor.range_id];
  slot.descriptor = descriptor;
  slot.state = State::kOpening;
  slot.backoff = options_.min_backoff;
  return true;
}

int RangeHost::OpenAll() {
  int serving = 0;
  for (const auto& table : catalog_->List()) {
    for (const meta::RangeSpec& spec : table->ranges()) {
      RangeDescriptor d{spec.range_id(), table->name(), spec.start(), spec.end()};
      if (AddSlot(d) && OpenSlot(d.range_id).ok()) ++serving;
    }
  }
  return serving;
}

absl::Status RangeHost::OpenTable(const meta::TableMetadata& table) {
  absl::Status first;
  for (const meta::RangeSpec& spec : table.ranges()) {
    RangeDescriptor d{spec.range_id(), table.name(), spec.start(), spec.end()};
    if (AddSlot(d)) Note(first, OpenSlot(d.range_id));
  }
  return first;
}

absl::Status RangeHost::OpenSlot(uint64_t id, std::unique_ptr<wal::LogWriter> log) {
  RangeOptions options = options_.range;
  RangeDescriptor descriptor;
  uint64_t generation;
  {
    absl::MutexLock l(&mu_);
    // Range::Open must not meet a directory half removed.
    AwaitNotSweepingLocked(id);
    auto it = slots_.find(id);
    if (it == slots_.end()) return absl::UnavailableError("range host is shutting down");
    Slot& slot = it->second;
    descriptor = slot.descriptor;
    generation = next_generation_++;
    slot.generation = generation;
    slot.error = absl::OkStatus();
  }
  // Cluster mode: the range is not (or no longer) this server's to open.
  auto not_assigned_here = [&] {
    {
      absl::MutexLock l(&mu_);
      auto it = slots_.find(id);
      if (it != slots_.end() && it->second.generation == generation) slots_.erase(it);
      cv_.SignalAll();
    }
    return RetrySafe(absl::UnavailableError(
        absl::StrCat("range ", id, " of table ", descriptor.table, " is not assigned here")));
  };
  if (options_.may_open && !options_.may_open(id)) return not_assigned_here();
  options.data_dir = RangeDir(id);
  options.on_failed = [this, id, generation](const absl::Status& why) {
    OnFailed(id, generation, why);
  };
  const bool had_log = log != nullptr;
  absl::StatusOr<std::unique_ptr<Range>> opened =
      had_log ? Range::Open(options, descriptor, std::move(log)) : Range::Open(options, descriptor);
  // The log was recovered but no ledger could be created for a writer
  // (say no writable bookie: a full disk): answer reads of the recovered
  // state meanwhile, until a reopen attempt opens the log
  // (ReopenSlotLocked). Not for other failures: recovering for reading
  // would only fail the same way, after the same timeouts.
  std::shared_ptr<Range> reads_only;
  bool try_reads = !opened.ok() && !had_log &&
                   opened.status().GetPayload(wal::LogWriter::kNoNewLedgerPayload).has_value();
  if (try_reads) {
    absl::MutexLock l(&mu_);
    try_reads = !shutdown_;
  }
  // Cluster mode: the open may have taken RPC timeouts; the range must
  // still be ours before its log is fenced again.
  if (try_reads && options_.may_open) try_reads = options_.may_open(id);
  if (try_reads) {
    absl::StatusOr<std::unique_ptr<Range>> r =
        Range::OpenForReads(options, descriptor, opened.status());
    if (r.ok()) {
      reads_only = std::move(*r);
      absl::FPrintF(stderr, "ledgerkv: range %d of table %s answers reads; writes wait for its log\n",
                    id, descriptor.table);
    } else {
      absl::FPrintF(stderr, "ledgerkv: range %d of table %s: cannot open it for reads either: %s\n",
                    id, descriptor.table, r.status().ToString());
    }
  }

  // Cluster mode, once more: Range::Open (without a log) and OpenForReads
  // fenced the log by an epoch CAS after the check above, and may have
  // waited out RPC timeouts first (a pause, etcd out of reach). If the
  // lease or the assignment went meanwhile, another server may own the
  // range now, and this instance, which fenced it, must not serve. Checked
  // after the CAS, a valid lease means no later owner can have been
  // assigned before it, so any later owner's CAS comes after this one and
  // fences it.
  if (options_.may_open && (opened.ok() || reads_only != nullptr) && !options_.may_open(id)) {
    std::shared_ptr<Range> moved = opened.ok() ? std::shared_ptr<Range>(std::move(*opened))
                                               : std::move(reads_only);
    IgnoreError(moved->Close());
    absl::FPrintF(stderr,
                  "ledgerkv: range %d of table %s: no longer assigned here (or the lease is in "
                  "doubt) once opened; closed it\n",
                  id, descriptor.table);
    return not_assigned_here();
  }

  std::shared_ptr<Range> unwanted;
  absl::Status result = opened.status();
  {
    absl::MutexLock l(&mu_);
    cv_.SignalAll();
    auto it = slots_.find(id);
    if (opened.ok()) {
      std::shared_ptr<Range> range = std::move(*opened);
      if (shutdown_ || it == slots_.end()) {
        unwanted = std::move(range);
        result = absl::UnavailableError("range host is shutting down");
      } else if (!it->second.error.ok()) {
        // on_failed fired before Open returned.
        result = it->second.error;
        to_close_.push_back(std::move(range));
        FailLocked(it->second, result);
      } else {
        it->second.state = State::kServing;
        it->second.range = std::move(range);
        it->second.backoff = options_.min_backoff;
      }
    } else if (it != slots_.end()) {
      FailLocked(it->second, opened.status());
      if (!shutdown_) it->second.range = std::move(reads_only);  // null if none
    }
    if (reads_only != nullptr) unwanted = std::move(reads_only);
  }
  if (unwanted != nullptr) IgnoreError(unwanted->Close());
  if (!result.ok()) {
    absl::FPrintF(stderr, "ledgerkv: range %d of table %s: open failed (will retry): %s\n", id,
                  descriptor.table, result.ToString());
  }
  return result;
}

void RangeHost::FailLocked(Slot& slot, const absl::Status& why) {
  slot.state = State::kFailed;
  slot.error = why;
  slot.retry_at = absl::Now() + slot.backoff;
  slot.backoff = std::min(slot.backoff * 2, options_.max_backoff);
  cv_.SignalAll();
}

void RangeHost::AwaitNotSweepingLocked(uint64_t id) {
  while (sweeping_.contains(id)) cv_.Wait(&mu_);
}

void RangeHost::BeginClosingLocked(uint64_t id) { ++closing_[id]; }

void RangeHost::EndClosingLocked(uint64_t id) {
  auto it = closing_.find(id);
  if (it != closing_.end() && --it->second == 0) {
    closing_.erase(it);
    cv_.SignalAll();  // DestroyRange waits for closes in progress
  }
}

void RangeHost::OnFailed(uint64_t id, uint64_t generation, const absl::Status& why) {
  absl::MutexLock l(&mu_);
  auto it = slots_.find(id);
  if (it == slots_.end() || it->second.generation != generation) return;
  Slot& slot = it->second;
  absl::FPrintF(stderr, "ledgerkv: range %d of table %s stopped serving (reopening): %s\n", id,
                slot.descriptor.table, why.ToString());
  if (slot.state == State::kOpening) {
    // Open has not returned yet: OpenSlot sees the error and fails the slot.
    slot.error = why;
    return;
  }
  if (slot.state != State::kServing) return;
  if (slot.range->ServingReadsOnly()) {
    // Its local state is whole and nobody else writes: it answers reads
    // (and refuses writes, retry-safe) until a new log is open.
    absl::FPrintF(stderr,
                  "ledgerkv: range %d of table %s still answers reads; writes wait for a new log\n",
                  id, slot.descriptor.table);
  } else {
    to_close_.push_back(std::move(slot.range));
    slot.range.reset();
  }
  FailLocked(slot, why);
}

void RangeHost::ReopenSlotLocked(uint64_t id) {
  Slot& slot = slots_.at(id);
  // kOpening from here: Release and DestroyRange wait for the attempt (a
  // log opened while the range is destroyed would outlive it), and
  // Serving still hands out a failed instance that answers reads.
  slot.state = State::kOpening;
  std::shared_ptr<Range> readable = slot.range;
  std::unique_ptr<wal::LogWriter> log;
  if (readable != nullptr) {
    const std::string table = slot.descriptor.table;
    mu_.Unlock();
    // Cluster mode: a range that moved (or a lease in doubt) is not fenced
    // from here; OpenSlot below drops it after closing the instance.
    const bool may = !options_.may_open || options_.may_open(id);
    absl::StatusOr<std::unique_ptr<wal::LogWriter>> opened =
        may ? wal::LogWriter::Open(options_.range.log, LogName(id))
            : absl::StatusOr<std::unique_ptr<wal::LogWriter>>(nullptr);
    mu_.Lock();
    if (shutdown_) {
      // Shutdown (waiting for this thread) closes the instance.
      if (opened.ok() && *opened != nullptr) {
        mu_.Unlock();
        IgnoreError((*opened)->Close());
        opened->reset();
        mu_.Lock();
      }
      return;
    }
    Slot& again = slots_.at(id);  // nobody removes a slot in kOpening
    if (!opened.ok()) {
      // UNAVAILABLE: still no writable bookie, or the store failing; the
      // instance keeps answering reads. Anything else may mean another
      // writer has the log (ABORTED: opened concurrently; NOT_FOUND: being
      // deleted): stop answering.
      const bool keep = absl::IsUnavailable(opened.status()) && again.range != nullptr;
      absl::FPrintF(stderr, "ledgerkv: range %d of table %s: its log cannot be opened (%s): %s\n",
                    id, table,
                    keep ? "reads are still answered; will retry" : "stopped answering reads",
                    opened.status().ToString());
      if (!keep && again.range != nullptr) to_close_.push_back(std::move(again.range));
      FailLocked(again, opened.status());
      return;
    }
    log = std::move(*opened);
    again.range.reset();
    BeginClosingLocked(id);
  }
  mu_.Unlock();
  if (readable != nullptr) {
    // Its local DB must be closed before the new instance opens it. Its log
    // failed already, so closing writes nothing to it.
    IgnoreError(readable->Close());
    readable.reset();
    absl::MutexLock l(&mu_);
    EndClosingLocked(id);
  }
  IgnoreError(OpenSlot(id, std::move(log)));  // logs its own failure
  mu_.Lock();
}

void RangeHost::ReopenLoop() {
  mu_.Lock();
  while (!shutdown_) {
    if (!to_close_.empty()) {
      std::vector<std::shared_ptr<Range>> closing = std::move(to_close_);
      to_close_.clear();
      std::vector<uint64_t> ids;
      for (const auto& range : closing) ids.push_back(range->descriptor().range_id);
      for (uint64_t id : ids) BeginClosingLocked(id);
      mu_.Unlock();
      for (auto& range : closing) IgnoreError(range->Close());
      closing.clear();
      mu_.Lock();
      for (uint64_t id : ids) EndClosingLocked(id);
      continue;
    }
    const absl::Time now = absl::Now();
    absl::Time next = absl::InfiniteFuture();
    uint64_t due = 0;
    for (auto& [id, slot] : slots_) {
      if (slot.state != State::kFailed) continue;
      if (slot.retry_at <= now) {
        due = id;
        break;
      }
      next = std::min(next, slot.retry_at);
    }
    if (due != 0) {
      ReopenSlotLocked(due);
      continue;
    }
    cv_.WaitWithDeadline(&mu_, next);
  }
  mu_.Unlock();
}

absl::Status RangeHost::DestroyRange(const meta::RangeMetadata& range) {
  const uint64_t id = range.range_id();
  if (options_.before_destroy) RETURN_IF_ERROR(options_.before_destroy(id));
  std::shared_ptr<Range> serving;
  std::vector<std::shared_ptr<Range>> stale;
  {
    absl::MutexLock l(&mu_);
    serving = TakeReadableWhileOpeningLocked(id);
  }
  CloseTaken(id, std::move(serving));
  {
    absl::MutexLock l(&mu_);
    // An open in progress would recreate the log: let it finish first. A
    // sweep removing the directory too: let it finish (one remover at a
    // time). And a close in progress (a failed instance on the reopen
    // thread, a release): its RocksDB still uses the directory. A failed
    // instance still answering reads during a reopen attempt is closed
    // first (CloseTaken, above this block).
    while (sweeping_.contains(id) || closing_.contains(id) ||
           (slots_.contains(id) && slots_.at(id).state == State::kOpening)) {
      cv_.Wait(&mu_);
    }
    auto it = slots_.find(id);
    if (it != slots_.end()) {
      serving = std::move(it->second.range);
      slots_.erase(it);
    }
    // A failed instance not yet taken by the reopen thread: closed here.
    for (auto c = to_close_.begin(); c != to_close_.end();) {
      if ((*c)->descriptor().range_id == id) {
        stale.push_back(std::move(*c));
        c = to_close_.erase(c);
      } else {
        ++c;
      }
    }
    BeginClosingLocked(id);
  }
  absl::Status first;
  if (serving != nullptr) stale.push_back(std::move(serving));
  for (std::shared_ptr<Range>& range : stale) {
    absl::Status closed = range->Close();
    // A failed log is expected here (that range stopped serving anyway).
    if (!closed.ok()) {
      absl::FPrintF(stderr, "ledgerkv: range %d: close before drop: %s\n", id, closed.ToString());
    }
    range.reset();
  }
  Note(first, DeleteLog(id));
  Note(first, snapshots_->RemoveRange(id));
  for (const std::string& path : LocalDirs(id)) {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
    // The scratch and leftover dirs are best effort, as before.
    if (ec && path == RangeDir(id)) {
      Note(first, absl::InternalError(absl::StrCat("remove ", path, ": ", ec.message())));
    }
  }
  absl::MutexLock l(&mu_);
  EndClosingLocked(id);
  return first;
}

absl::Status RangeHost::DeleteLog(uint64_t range_id) {
  // Fences the log's writer first: in cluster mode the range's owner may be
  // another server that has not noticed the drop yet, and must not get
  // another write acknowledged into a range that no longer exists.
  return wal::DeleteLog(options_.range.log, LogName(range_id));
}

absl::StatusOr<RangeStats> RangeHost::Stats(uint64_t range_id) {
  std::shared_ptr<Range> range;
  {
    absl::MutexLock l(&mu_);
    auto it = slots_.find(range_id);
    if (it != slots_.end()) range = it->second.range;
  }
  if (range == nullptr) {
    return RetrySafe(absl::UnavailableError(
        absl::StrCat("range ", range_id, " is not being served (recovering)")));
  }
  return range->stats();
}

void RangeHost::Adopt(const RangeDescriptor& descriptor) {
  absl::MutexLock l(&mu_);
  if (shutdown_ || slots_.contains(descriptor.range_id)) return;
  Slot& slot = slots_[descriptor.range_id];
  slot.descriptor = descriptor;
  slot.state = State::kFailed;  // the reopen thread opens it
  slot.retry_at = absl::InfinitePast();
  slot.backoff = options_.min_backoff;
  cv_.SignalAll();
}

std::shared_ptr<Range> RangeHost::TakeReadableWhileOpeningLocked(uint64_t id) {
  auto it = slots_.find(id);
  if (it == slots_.end() || it->second.state != State::kOpening || it->second.range == nullptr) {
    return nullptr;
  }
  BeginClosingLocked(id);
  return std::move(it->second.range);
}

void RangeHost::CloseTaken(uint64_t id, std::shared_ptr<Range> range) {
  if (range == nullptr) return;
  IgnoreError(range->Close());  // its log failed already
  range.reset();
  absl::MutexLock l(&mu_);
  EndClosingLocked(id);
}

void RangeHost::Release(uint64_t range_id) {
  std::shared_ptr<Range> serving;
  {
    absl::MutexLock l(&mu_);
    serving = TakeReadableWhileOpeningLocked(range_id);
  }
  // It stops answering now, not once the reopen attempt (up to an RPC
  // timeout against silent bookies) ends: the lease may be gone already.
  CloseTaken(range_id, std::move(serving));
  {
    absl::MutexLock l(&mu_);
    while (slots_.contains(range_id) && slots_.at(range_id).state == State::kOpening) {
      cv_.Wait(&mu_);
    }
    auto it = slots_.find(range_id);
    if (it == slots_.end()) return;
    serving = std::move(it->second.range);
    slots_.erase(it);
    if (serving == nullptr) return;
    BeginClosingLocked(range_id);
  }
  absl::Status closed = serving->Close();
  if (!closed.ok()) {
    absl::FPrintF(stderr, "ledgerkv: range %d: close on release: %s\n", range_id,
                  closed.ToString());
  }
  serving.reset();
  absl::MutexLock l(&mu_);
  EndClosingLocked(range_id);
}

std::vector<uint64_t> RangeHost::Known() const {
  absl::MutexLock l(&mu_);
  std::vector<uint64_t> ids;
  for (const auto& [id, slot] : slots_) ids.push_back(id);
  return ids;
}

absl::StatusOr<std::vector<uint64_t>> RangeHost::SweepLocalDirs(
    const std::set<uint64_t>& referenced) {
  namespace fs = std::filesystem;
  {
    absl::MutexLock l(&mu_);
    if (shutdown_) return absl::UnavailableError("range host is shutting down");
  }
  // 1. Candidates: entries named like a range's directories, of ranges no
  // table references. A listing that fails part-way removes nothing.
  std::set<uint64_t> candidates;
  std::error_code ec;
  fs::directory_iterator it(options_.ranges_dir, ec);
  if (ec == std::errc::no_such_file_or_directory) return std::vector<uint64_t>();
  for (; !ec && it != fs::directory_iterator(); it.increment(ec)) {
    uint64_t id = 0;
    if (!ParseRangeDirName(it->path().filename().string(), &id)) continue;
    if (referenced.contains(id) || !IsPlainDir(it->path())) continue;
    candidates.insert(id);
  }
  if (ec) {
    return absl::InternalError(
        absl::StrCat("cannot list ", options_.ranges_dir, ": ", ec.message()));
  }
  if (candidates.empty()) return std::vector<uint64_t>();

  // 2. Claim those not in use here. From now until step 4, opening or
  // destroying a claimed range waits (AwaitNotSweepingLocked).
  std::vector<uint64_t> claimed;
  {
    absl::MutexLock l(&mu_);
    if (shutdown_) return absl::UnavailableError("range host is shutting down");
    std::set<uint64_t> in_use;
    for (const auto& range : to_close_) in_use.insert(range->descriptor().range_id);
    for (uint64_t id : candidates) {
      if (slots_.contains(id) || closing_.contains(id) || sweeping_.contains(id) ||
          in_use.contains(id)) {
        continue;
      }
      sweeping_.insert(id);
      claimed.push_back(id);
    }
  }

  // 3. Remove (slow for a big RocksDB: without the lock).
  absl::Status first;
  std::vector<uint64_t> removed;
  for (uint64_t id : claimed) {
    bool any = false;
    bool failed = false;
    for (const std::string& path : LocalDirs(id)) {
      if (!IsPlainDir(path)) continue;
      std::error_code rm;
      fs::remove_all(path, rm);
      if (rm) {
        failed = true;
        Note(first, absl::InternalError(absl::StrCat("remove ", path, ": ", rm.message())));
        continue;
      }
      any = true;
      absl::FPrintF(stderr, "ledgerkv: removed %s (range %d: no table references it)\n", path,
                    id);
    }
    if (any && !failed) removed.push_back(id);
  }

  // 4. Release the claims.
  {
    absl::MutexLock l(&mu_);
    for (uint64_t id : claimed) sweeping_.erase(id);
    cv_.SignalAll();
  }
  if (!first.ok()) return first;
  return removed;
}

std::string RangeHost::OwnerOf(uint64_t range_id) const {
  {
    absl::MutexLock l(&mu_);
    auto it = slots_.find(range_id);
    if (it != slots_.end() && it->second.state == State::kServing) return owner_;
  }
  return options_.owner_of ? options_.owner_of(range_id) : std::string();
}

void RangeHost::set_owner(std::string address) {
  absl::MutexLock l(&mu_);
  owner_ = std::move(address);
}

std::string RangeHost::owner() const {
  absl::MutexLock l(&mu_);
  return owner_;
}

absl::StatusOr<std::shared_ptr<const meta::TableMetadata>> RangeHost::Table(
    std::string_view table) {
  if (table.empty()) return absl::InvalidArgumentError("request names no table");
  absl::StatusOr<std::shared_ptr<const meta::TableMetadata>> got = catalog_->Get(table);
  if (absl::IsNotFound(got.status()) && options_.on_table_miss) {
    return options_.on_table_miss(table, got.status());
  }
  return got;
}

absl::StatusOr<std::shared_ptr<Range>> RangeHost::Serving(const meta::TableMetadata& table,
                                                          const meta::RangeSpec& spec) {
  std::string why = "recovering";
  {
    absl::MutexLock l(&mu_);
    auto it = slots_.find(spec.range_id());
    if (it != slots_.end() && it->second.range != nullptr) {
      // Serving, or failed with an instance that still answers reads (and
      // refuses writes, retry-safe, with the log's failure): kFailed, or
      // kOpening while the reopen thread tries to open a new log.
      return it->second.range;
    }
    if (shutdown_) {
      why = "shutting down";
    } else if (it == slots_.end()) {
      why = options_.owner_of ? std::string() : "not opened yet";
    } else if (!it->second.error.ok()) {
      why = absl::StrCat("recovering; last error: ", it->second.error.message());
    }
  }
  if (why.empty()) {
    // Cluster mode, a range this server does not own: name the owner.
    const std::string owner = options_.owner_of(spec.range_id());
    return RetrySafe(
        absl::UnavailableError(absl::StrCat(
            "range ", spec.range_id(), " of table ", table.name(), " is not served here (",
            owner.empty() ? std::string("no owner yet") : absl::StrCat("owner ", owner), ")")),
        owner);
  }
  return RetrySafe(absl::UnavailableError(absl::StrCat(
      "range ", spec.range_id(), " of table ", table.name(), " is not being served (", why, ")")));
}

void RangeHost::Shutdown() {
  std::vector<std::shared_ptr<Range>> closing;
  {
    absl::MutexLock l(&mu_);
    if (shutdown_) return;
    shutdown_ = true;
    cv_.SignalAll();
  }
  if (reopen_thread_.joinable()) reopen_thread_.join();
  {
    absl::MutexLock l(&mu_);
    closing = std::move(to_close_);
    for (auto& [id, slot] : slots_) {
      if (slot.range != nullptr) closing.push_back(std::move(slot.range));
    }
    slots_.clear();
    cv_.SignalAll();
  }
  for (auto& range : closing) {
    absl::Status closed = range->Close();
    if (!closed.ok()) {
      absl::FPrintF(stderr, "ledgerkv: range %d: close: %s\n", range->descriptor().range_id,
                    closed.ToString());
    }
  }
}

}  // namespace ledgerkv::kv
