// BookieStorage: opening (instance id, replay, torn-tail repair), reads,
// long polls, stats and Close. The write path is in storage_writer.cc and
// garbage collection in storage_gc.cc.
#include "ledger/bookie/bookie_storage.h"

#include <algorithm>
#include <cstdio>
#include <random>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/fault_point.h"
#include "base/status_macros.h"
#include "ledger/bookie/journal_reader.h"

namespace ledgerkv::bookie {
namespace {

constexpr char kInstanceFile[] = "INSTANCE";
constexpr char kCheckpointFile[] = "CHECKPOINT";
// The second word of INSTANCE until the first start wrote CHECKPOINT.
constexpr char kInstanceNewMark[] = "new";
constexpr char kIndexDir[] = "index";
// Replay applies index updates in batches of this many records.
constexpr int kReplayBatchRecords = 10000;

std::string NewInstanceId() {
  std::random_device rd;  // /dev/urandom
  uint64_t hi = (static_cast<uint64_t>(rd()) << 32) | rd();
  uint64_t lo = (static_cast<uint64_t>(rd()) << 32) | rd();
  return absl::StrFormat("%016x%016x", hi, lo);
}

bool ValidInstanceId(std::string_view id) {
  if (id.size() != 32) return false;
  return std::all_of(id.begin(), id.end(), [](char c) {
    return absl::ascii_isdigit(static_cast<unsigned char>(c)) || (c >= 'a' && c <= 'f');
  });
}

std::string NormalizeDir(std::string dir) {
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  return dir;
}

StorageOptions Normalize(StorageOptions o) {
  o.dir = NormalizeDir(std::move(o.dir));
  if (o.env == nullptr) o.env = Env::Default();
  return o;
}

}  // namespace

BookieStorage::BookieStorage(StorageOptions options)
    : options_(Normalize(std::move(options))), env_(options_.env) {}

BookieStorage::~BookieStorage() { Close(); }

absl::StatusOr<std::unique_ptr<BookieStorage>> BookieStorage::Open(StorageOptions options) {
  if (options.dir.empty()) return absl::InvalidArgumentError("bookie storage: empty data dir");
  // low < high: at low == high a bookie on the line would flap. high == 1
  // turns the watermark off, and then low does not matter.
  const bool watermark_off = options.disk_high_watermark == 1;
  if (!(options.disk_high_watermark > 0 && options.disk_high_watermark <= 1 &&
        (watermark_off ||
         (options.disk_low_watermark > 0 &&
          options.disk_low_watermark < options.disk_high_watermark)))) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "bookie storage: disk watermarks must satisfy 0 < low < high <= 1, or high == 1 "
        "(low %g, high %g)",
        options.disk_low_watermark, options.disk_high_watermark));
  }
  if (options.disk_check_interval <= absl::ZeroDuration() || options.disk_check_bytes == 0) {
    return absl::InvalidArgumentError(
        "bookie storage: disk_check_interval and disk_check_bytes must be positive");
  }
  std::unique_ptr<BookieStorage> storage(new BookieStorage(std::move(options)));
  RETURN_IF_ERROR(storage->Init());
  return storage;
}

std::string BookieStorage::JournalPath(uint64_t number) const {
  return absl::StrCat(options_.dir, "/", JournalFileName(number));
}

absl::Status BookieStorage::LoadOrCreateInstanceId(const std::vector<std::string>& children) {
  const std::string path = absl::StrCat(options_.dir, "/", kInstanceFile);
  const bool has_instance =
      std::find(children.begin(), children.end(), kInstanceFile) != children.end();
  if (has_instance) {
    ASSIGN_OR_RETURN(std::string contents, ReadFileToString(env_, path));
    // "<id>", or "<id> new" while the first start has not written its
    // CHECKPOINT (docs/bookie-format.md, "Startup", step 1).
    const std::vector<absl::string_view> words =
        absl::StrSplit(contents, absl::ByAnyChar(" \t\r\n"), absl::SkipEmpty());
    const bool fresh = words.size() == 2 && words[1] == kInstanceNewMark;
    if ((words.size() != 1 && !fresh) ||
        !ValidInstanceId(std::string_view(words[0].data(), words[0].size()))) {
      return absl::FailedPreconditionError(
          absl::StrCat(path, " does not hold a valid instance id (32 hex digits)"));
    }
    instance_id_ = std::string(words[0]);
    instance_new_ = fresh;
    return absl::OkStatus();
  }
  for (const std::string& name : children) {
    uint64_t n;
    if (ParseJournalFileName(name, &n) || name == kCheckpointFile || name == kIndexDir) {
      return absl::FailedPreconditionError(absl::StrCat(
          "data dir ", options_.dir, " holds bookie data (", name, ") but no ", kInstanceFile,
          " file; refusing to invent a new identity for existing data"));
    }
  }
  instance_id_ = NewInstanceId();
  instance_new_ = true;
  RETURN_IF_ERROR(
      WriteFileAtomically(env_, path, absl::StrCat(instance_id_, " ", kInstanceNewMark, "\n")));
  // The data dir itself may be new: make its entry in the parent durable.
  return env_->SyncDir(DirName(options_.dir));
}

absl::StatusOr<JournalPosition> BookieStorage::ReadCheckpoint() {
  const std::string path = absl::StrCat(options_.dir, "/", kCheckpointFile);
  if (!env_->FileExists(path)) return JournalPosition{};
  ASSIGN_OR_RETURN(std::string contents, ReadFileToString(env_, path));
  std::vector<absl::string_view> parts =
      absl::StrSplit(absl::StripAsciiWhitespace(contents), ' ', absl::SkipEmpty());
  JournalPosition pos;
  if (parts.size() != 3 || parts[0] != "v1" || !absl::SimpleAtoi(parts[1], &pos.file) ||
      !absl::SimpleAtoi(parts[2], &pos.offset) || pos.file == 0) {
    return absl::DataLossError(absl::StrCat(path, " is malformed: \"", contents, "\""));
  }
  return pos;
}

absl::Status BookieStorage::WriteCheckpointFile(const JournalPosition& pos) {
  return WriteFileAtomically(env_, absl::StrCat(options_.dir, "/", kCheckpointFile),
                             absl::StrCat("v1 ", pos.file, " ", pos.offset, "\n"));
}

bool BookieStorage::Preallocating() const {
  // The preallocated file is plain POSIX: only in place of the default file
  // layer (tests inject faults through their own Env, which appends).
  return env_ == Env::Default() && options_.sync && options_.journal_preallocate_bytes > 0;
}

absl::Status BookieStorage::ReopenJournalFile(uint64_t number, uint64_t size) {
  const std::string path = JournalPath(number);
  if (Preallocating()) {
    ASSIGN_OR_RETURN(std::unique_ptr<PreallocatedJournalFile> file,
                     PreallocatedJournalFile::Open(path, size, options_.journal_preallocate_bytes));
    prealloc_ = file.get();
    journal_ = std::move(file);
  } else {
    ASSIGN_OR_RETURN(journal_, env_->NewWritableFile(path));
    prealloc_ = nullptr;
  }
  journal_number_ = number;
  return absl::OkStatus();
}

absl::Status BookieStorage::OpenNewJournalFile(uint64_t number) {
  // Only the last journal file may end in unused (zero) space: replay cuts
  // it off there as a torn tail, but in any earlier file it would be
  // corruption. So the current file is cut to its records before a new one
  // exists.
  if (prealloc_ != nullptr) RETURN_IF_ERROR(prealloc_->Seal());
  const std::string path = JournalPath(number);
  std::unique_ptr<WritableFile> file;
  PreallocatedJournalFile* prealloc = nullptr;
  if (Preallocating()) {
    ASSIGN_OR_RETURN(std::unique_ptr<PreallocatedJournalFile> p,
                     PreallocatedJournalFile::Open(path, 0, options_.journal_preallocate_bytes));
    prealloc = p.get();
    file = std::move(p);
  } else {
    ASSIGN_OR_RETURN(file, env_->NewWritableFile(path));
  }
  RETURN_IF_ERROR(env_->SyncDir(options_.dir));
  ASSIGN_OR_RETURN(std::unique_ptr<RandomAccessFile> reader, env_->NewRandomAccessFile(path));
  if (journal_ != nullptr) IgnoreError(journal_->Close());  // already synced by the caller
  journal_ = std::move(file);
  prealloc_ = prealloc;
  journal_number_ = number;
  absl::MutexLock l(&mu_);
  files_[number] = std::move(reader);
  file_sizes_[number] = journal_->Size();
  return absl::OkStatus();
}

absl::Status BookieStorage::Init() {
  RETURN_IF_ERROR(env_->CreateDirIfMissing(options_.dir));
  // Before anything is read or written: two bookies started on a new
  // directory at once would otherwise both write INSTANCE, and the one left
  // serving could find another id there at its next start.
  ASSIGN_OR_RETURN(dir_lock_, DataDirLock::Acquire(options_.dir));
  ASSIGN_OR_RETURN(std::vector<std::string> children, env_->GetChildren(options_.dir));
  RETURN_IF_ERROR(LoadOrCreateInstanceId(children));
  // A checkpoint says the index holds everything before its position, and
  // journal files before it may be deleted (GC): an index lost after the
  // first checkpoint cannot be rebuilt from the journal. Opening it empty
  // would answer "no such entry" for acknowledged entries and forget fence
  // marks (a deposed writer could add again), so the bookie refuses to
  // start. Only a directory without a checkpoint may create the index: a
  // new one, or one whose first start stopped before its first checkpoint
  // (replay then starts at the first journal file and loses nothing).
  const bool has_checkpoint =
      std::find(children.begin(), children.end(), kCheckpointFile) != children.end();
  if (!has_checkpoint && !instance_new_) {
    // Every start that got this far once wrote CHECKPOINT before INSTANCE
    // lost its "new" mark: the directory's state was removed and its id
    // kept. Serving under that id would answer NO_SUCH_ENTRY for entries
    // it acknowledged and forget its fences and deleted ledgers.
    return absl::DataLossError(absl::StrCat(
        "data dir ", options_.dir, " has an instance id (", kInstanceFile, ": ", instance_id_,
        ") but no ", kCheckpointFile,
        ": its index, checkpoint or journal were removed, so it cannot vouch for the entries "
        "and fence marks it acknowledged under that id. Restore the directory whole, or wipe "
        "it completely: the bookie then starts as a new instance holding none of its old "
        "entries (with a metadata store its cookie refuses that until its ledgers no longer "
        "need it, docs/bookie-format.md). A bookie whose very first start crashed "
        "acknowledged nothing: wipe its directory"));
  }
  {
    const std::string index_dir = absl::StrCat(options_.dir, "/", kIndexDir);
    absl::StatusOr<std::unique_ptr<Index>> index = Index::Open(index_dir, !has_checkpoint);
    if (absl::IsDataLoss(index.status())) {
      return absl::DataLossError(absl::StrCat(
          index.status().message(), ", but ", options_.dir, "/", kCheckpointFile,
          " says it holds the entries and fence marks of the journal before the checkpoint, "
          "which the journal alone cannot restore. Restore the data directory whole, or wipe "
          "it: the bookie then starts as a new instance holding none of its old entries"));
    }
    if (!index.ok()) return index.status();
    index_ = std::move(*index);
  }
  {
    absl::MutexLock l(&mu_);
    RETURN_IF_ERROR(index_->ForEachLedger(
        [this](uint64_t id, const LedgerState& st) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
          ledgers_[id] = st;
        }));
    // A held ledger is never looked up for a tombstone again (the lookup is
    // for ledgers not held), so one that has both a tombstone and a state
    // without the fence (written by a bookie before 9c70106: an add
    // published after the deletion) must get the fence here: a deleted
    // ledger stays fenced (docs/bookie-format.md, "Garbage collection",
    // step 4).
    for (auto& [id, st] : ledgers_) {
      if (st.fenced) continue;
      ASSIGN_OR_RETURN(bool deleted, index_->IsDeleted(id));
      if (deleted) {
        st.fenced = true;
        dirty_ledgers_.insert(id);
      }
    }
  }
  ASSIGN_OR_RETURN(JournalPosition cp, ReadCheckpoint());

  std::vector<uint64_t> numbers;
  for (const std::string& name : children) {
    uint64_t n;
    if (ParseJournalFileName(name, &n)) numbers.push_back(n);
  }
  std::sort(numbers.begin(), numbers.end());
  for (uint64_t n : numbers) {
    ASSIGN_OR_RETURN(std::unique_ptr<RandomAccessFile> f, env_->NewRandomAccessFile(JournalPath(n)));
    ASSIGN_OR_RETURN(uint64_t size, env_->GetFileSize(JournalPath(n)));
    absl::MutexLock l(&mu_);
    files_[n] = std::move(f);
    file_sizes_[n] = size;
  }

  // A killed process may have left the last file's newest records in the
  // page cache only. Replay indexes them, and RocksDB may flush that index
  // to disk at any moment: sync the file first, so that no durable index
  // key can point at a record a power loss could still take (it would read
  // CORRUPT, not NO_SUCH_ENTRY, and stall recoveries that need this
  // bookie's "no such entry"). Earlier files were synced when they rolled.
  if (!numbers.empty()) {
    ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> last,
                     env_->NewWritableFile(JournalPath(numbers.back())));
    RETURN_IF_ERROR(last->Sync());
    IgnoreError(last->Close());
  }

  // Replay every file from the checkpoint's on. Files before it may have
  // been deleted by GC; from it on, none may be missing.
  auto first = numbers.begin();
  if (cp.file != 0) {
    first = std::find(numbers.begin(), numbers.end(), cp.file);
    if (first == numbers.end()) {
      return absl::DataLossError(absl::StrCat("checkpoint names ", JournalFileName(cp.file),
                                              " which is missing from ", options_.dir));
    }
  }
  absl::flat_hash_map<uint64_t, LedgerState> touched;
  for (auto it = first; it != numbers.end(); ++it) {
    if (it != first && *it != *(it - 1) + 1) {
      return absl::DataLossError(absl::StrCat("journal file ", JournalFileName(*(it - 1) + 1),
                                              " is missing from ", options_.dir));
    }
    uint64_t start = *it == cp.file ? cp.offset : 0;
    RETURN_IF_ERROR(ReplayFile(*it, start, it + 1 == numbers.end(), &touched));
  }
  // A ledger that replay brought back although the index holds its
  // tombstone (a crash after a deletion's index flush but before the
  // checkpoint moved, with its fence mark before the old checkpoint) is
  // deleted: it stays fenced (docs/bookie-format.md, "Garbage collection").
  for (auto& [id, st] : touched) {
    if (st.fenced) continue;
    ASSIGN_OR_RETURN(bool deleted, index_->IsDeleted(id));
    st.fenced = deleted;
  }
  if (!touched.empty()) {
    Index::Batch batch;
    absl::MutexLock l(&mu_);
    for (const auto& [id, st] : touched) {
      batch.PutLedger(id, st);
      ledgers_[id] = st;
    }
    RETURN_IF_ERROR(index_->Write(batch));
  }

  if (numbers.empty()) {
    RETURN_IF_ERROR(OpenNewJournalFile(1));
  } else {
    ASSIGN_OR_RETURN(uint64_t size, env_->GetFileSize(JournalPath(numbers.back())));
    RETURN_IF_ERROR(ReopenJournalFile(numbers.back(), size));
  }
  JournalPosition end{journal_number_, journal_->Size()};
  if (end != cp) {
    // Replay may have indexed records that a killed process wrote but never
    // synced (they were in the page cache), and may have truncated a torn
    // tail. Make both durable before the checkpoint moves past them, or a
    // power loss now would leave CHECKPOINT beyond the journal's end.
    RETURN_IF_ERROR(journal_->Sync());
    RETURN_IF_ERROR(index_->Flush());
    RETURN_IF_ERROR(WriteCheckpointFile(end));
  }
  if (instance_new_) {
    // The first start is complete (CHECKPOINT is written): from now on a
    // missing CHECKPOINT means lost data.
    RETURN_IF_ERROR(WriteFileAtomically(env_, absl::StrCat(options_.dir, "/", kInstanceFile),
                                        instance_id_ + "\n"));
    instance_new_ = false;
  }
  {
    absl::MutexLock l(&mu_);
    applied_ = end;
    checkpoint_ = end;
  }
  // A bookie started on a full disk starts read-only for adds.
  CheckDiskUsage();
  writer_ = std::thread([this] { WriterLoop(); });
  applier_ = std::thread([this] { ApplierLoop(); });
  checkpointer_ = std::thread([this] { CheckpointLoop(); });
  return absl::OkStatus();
}

absl::Status BookieStorage::ReplayFile(uint64_t number, uint64_t start, bool last,
                                       absl::flat_hash_map<uint64_t, LedgerState>* touched) {
  std::shared_ptr<RandomAccessFile> file = FindFile(number);
  uint64_t size;
  {
    absl::MutexLock l(&mu_);
    size = file_sizes_[number];
  }
  const std::string name = JournalFileName(number);
  if (start > size) {
    // Only possible when the checkpoint covered data that was never synced
    // (relaxed mode) and a power loss took it.
    return absl::DataLossError(absl::StrCat("checkpoint position ", start, " is beyond the end (",
                                            size, ") of ", name));
  }
  JournalScanner scanner(file.get(), number, size, start);
  Index::Batch batch;
  int pending = 0;
  auto state_of = [&](uint64_t ledger_id) -> LedgerState& {
    auto [it, inserted] = touched->try_emplace(ledger_id);
    if (inserted) {
      absl::MutexLock l(&mu_);
      auto cur = ledgers_.find(ledger_id);
      if (cur != ledgers_.end()) it->second = cur->second;
    }
    return it->second;
  };
  auto apply = [&] {
    const RecordHeader& h = scanner.header();
    if (h.type == RecordType::kSyncMark) return;  // proves the batch before it; holds nothing
    if (h.type == RecordType::kFence) {
      state_of(h.ledger_id).fenced = true;
    } else {
      batch.PutEntry(h.ledger_id, h.entry_id,
                     Location{number, scanner.record_offset(),
                              static_cast<uint32_t>(kRecordHeaderSize + h.payload_size)});
      LedgerState& st = state_of(h.ledger_id);
      st.lac = std::max(st.lac, EffectiveLac(h.lac, h.entry_id));
      st.last_entry_id = std::max(st.last_entry_id, h.entry_id);
    }
    ++pending;
  };
  bool after_mark = false;
  while (true) {
    ASSIGN_OR_RETURN(JournalScanner::Result r, scanner.Next());
    if (r == JournalScanner::Result::kEnd) break;
    // A batch written over a sync mark starts where the mark was. A record
    // right after a mark that continues an earlier batch is the rest of a
    // torn batch whose first sector kept the old mark (a power loss): the
    // mark proves nothing about it, and it is cut like any torn record.
    if (after_mark && r == JournalScanner::Result::kRecord &&
        scanner.header().batch_offset != scanner.record_offset()) {
      r = JournalScanner::Result::kBadHeader;
    }
    after_mark = r == JournalScanner::Result::kRecord &&
                 scanner.header().type == RecordType::kSyncMark;
    if (r == JournalScanner::Result::kRecord) {
      apply();
    } else {
      const uint64_t at = scanner.record_offset();
      bool later = false;
      if (last && r != JournalScanner::Result::kTruncated) {
        ASSIGN_OR_RETURN(later, LaterBatchExists(file.get(), number, size, at));
      }
      if (last && (!later || !options_.sync)) {
        // A torn tail: the last write batch never completed its sync, so
        // nothing in it was acknowledged. Cut it off.
        absl::FPrintF(stderr, "bookie: %s: torn tail (or unused preallocated space) at offset %d (%d bytes), cutting it off\n",
                      name, at, size - at);
        RETURN_IF_ERROR(env_->Truncate(JournalPath(number), at));
        absl::MutexLock l(&mu_);
        file_sizes_[number] = at;
        break;
      }
      if (r != JournalScanner::Result::kBadPayload) {
        return absl::DataLossError(absl::StrCat(
            name, " offset ", at,
            ": corrupt record in the middle of the journal (later records exist); entries "
            "it held cannot be identified, so the bookie refuses to start rather than answer "
            "\"no such entry\" for them"));
      }
      // The header is intact, so we know which entry this is: index it, and
      // reads of it will answer CORRUPT rather than NO_SUCH_ENTRY.
      absl::FPrintF(stderr, "bookie: %s offset %d: ledger %d entry %d fails its checksum\n",
                    name, at, scanner.header().ledger_id, scanner.header().entry_id);
      {
        absl::MutexLock l(&mu_);
        ++corrupt_records_;
      }
      apply();
    }
    if (pending >= kReplayBatchRecords) {
      RETURN_IF_ERROR(index_->Write(batch));
      batch.Clear();
      pending = 0;
    }
  }
  if (pending > 0) RETURN_IF_ERROR(index_->Write(batch));
  return absl::OkStatus();
}

std::shared_ptr<RandomAccessFile> BookieStorage::FindFile(uint64_t number) const {
  absl::MutexLock l(&mu_);
  auto it = files_.find(number);
  return it == files_.end() ? nullptr : it->second;
}

Code BookieStorage::ReadEntry(uint64_t ledger_id, int64_t entry_id, v1::Entry* entry) {
  // Two rounds: compaction may move the entry and delete its old file
  // between our index lookup and the file lookup.
  for (int attempt = 0; attempt < 2; ++attempt) {
    absl::StatusOr<std::optional<Location>> loc = LookupEntry(ledger_id, entry_id);
    if (!loc.ok()) {
      absl::FPrintF(stderr, "bookie: read of ledger %d entry %d: %s\n", ledger_id, entry_id,
                    loc.status().ToString());
      return loc.status().code() == absl::StatusCode::kDataLoss ? v1::CORRUPT : v1::IO_ERROR;
    }
    if (!loc->has_value()) return v1::NO_SUCH_ENTRY;
    std::shared_ptr<RandomAccessFile> file = FindFile((*loc)->file);
    if (file == nullptr) continue;
    RecordHeader h;
    absl::StatusOr<std::string> payload = ReadEntryRecord(file.get(), **loc, ledger_id, entry_id, &h);
    if (!payload.ok()) {
      absl::FPrintF(stderr, "bookie: read: %s\n", payload.status().ToString());
      return absl::IsDataLoss(payload.status()) ? v1::CORRUPT : v1::IO_ERROR;
    }
    entry->set_ledger_id(ledger_id);
    entry->set_entry_id(entry_id);
    entry->set_lac(h.lac);
    entry->set_checksum(h.entry_checksum);
    *entry->mutable_payload() = std::move(*payload);
    return v1::OK;
  }
  absl::FPrintF(stderr, "bookie: read of ledger %d entry %d: journal file missing\n", ledger_id,
                entry_id);
  return v1::IO_ERROR;
}

std::optional<LedgerState> BookieStorage::GetLedger(uint64_t ledger_id) const {
  absl::MutexLock l(&mu_);
  auto it = ledgers_.find(ledger_id);
  if (it == ledgers_.end()) return std::nullopt;
  LedgerState st = it->second;
  st.lac = LacLocked(ledger_id, st);
  return st;
}

int64_t BookieStorage::LacLocked(uint64_t ledger_id, const LedgerState& st) const {
  auto it = explicit_lacs_.find(ledger_id);
  return it == explicit_lacs_.end() ? st.lac : std::max(st.lac, it->second);
}

std::pair<Code, int64_t> BookieStorage::SetExplicitLac(uint64_t ledger_id, int64_t lac) {
  int64_t now;
  bool raised = false;
  {
    absl::MutexLock l(&mu_);
    auto it = ledgers_.find(ledger_id);
    if (it == ledgers_.end()) return {v1::NO_SUCH_LEDGER, -1};
    const int64_t before = LacLocked(ledger_id, it->second);
    if (lac < -1) return {v1::INVALID, before};
    if (it->second.fenced) return {v1::FENCED, before};
    if (lac > before) {
      explicit_lacs_[ledger_id] = lac;
      raised = true;
    }
    now = std::max(before, lac);
  }
  // Outside mu_: waiters read the state again (FillLac). One registered
  // after the update above saw the new LAC in WaitForLac.
  if (raised) lac_waiters_.Notify(ledger_id, now);
  return {v1::OK, now};
}

void BookieStorage::WaitForLac(uint64_t ledger_id, int64_t at_most, absl::Time deadline,
                               LacCallback done) {
  LacWaiters::Wake wake;
  bool parked = false;
  {
    absl::MutexLock l(&mu_);
    auto it = ledgers_.find(ledger_id);
    const int64_t lac = it == ledgers_.end() ? -1 : LacLocked(ledger_id, it->second);
    if (lac > at_most) {
      wake = LacWaiters::Wake::kAdvanced;
    } else if (lac_waiters_.Add(ledger_id, at_most, deadline, &done)) {
      // Registered under mu_, so the writer's LAC update (also under mu_)
      // either was seen above or will Notify us.
      parked = true;
    } else {
      wake = LacWaiters::Wake::kShutdown;
    }
  }
  if (parked) {
    // Only observed (tests wait for a long poll to be parked).
    static_cast<void>(LEDGERKV_FAULT("bookie.lac.parked"));
    return;
  }
  std::move(done)(wake);
}

StorageStats BookieStorage::GetStats() const {
  absl::MutexLock l(&mu_);
  StorageStats s;
  s.read_only = read_only_ || disk_full_;
  s.read_only_reason = read_only_ ? read_only_reason_ : disk_full_reason_;
  s.failed = read_only_;
  s.disk_full = disk_full_;
  s.disk_usage = disk_usage_;
  s.disk_checks = disk_checks_;
  s.ledger_count = ledgers_.size();
  for (const auto& [n, size] : file_sizes_) s.journal_bytes += size;
  s.entries_added = entries_added_;
  s.syncs = syncs_;
  s.group_commit_waits = group_commit_waits_;
  s.corrupt_records_at_startup = corrupt_records_;
  s.sync = options_.sync;
  return s;
}

bool BookieStorage::failed() const {
  absl::MutexLock l(&mu_);
  return read_only_;
}

void BookieStorage::SetReadOnlyListener(std::function<void()> listener) {
  absl::MutexLock l(&mu_);
  read_only_listener_ = std::move(listener);
}

void BookieStorage::Close() {
  {
    absl::MutexLock l(&mu_);
    if (closed_) return;
    closed_ = true;
    stopping_ = true;
    writer_cv_.Signal();
    checkpoint_cv_.Signal();
  }
  const bool opened = writer_.joinable();
  if (checkpointer_.joinable()) checkpointer_.join();
  if (writer_.joinable()) writer_.join();
  {
    absl::MutexLock l(&mu_);
    applier_stop_ = true;  // after the writer: it drains what the writer queued
    applier_cv_.Signal();
  }
  if (applier_.joinable()) applier_.join();
  lac_waiters_.Shutdown();
  if (!opened) return;
  if (options_.checkpoint_on_close) {
    absl::Status s = absl::OkStatus();
    // Only a failure (never a sync retried after a failed one) skips the
    // final sync and seal; a disk over the watermark still gets both.
    const bool failed_now = failed();
    if (!options_.sync && !failed_now) s = journal_->Sync();
    if (s.ok()) {
      absl::MutexLock c(&checkpoint_mu_);
      s = CommitCheckpoint(/*synced=*/!failed_now, /*writer_stopped=*/true);
    }
    if (!s.ok()) {
      absl::FPrintF(stderr, "bookie: checkpoint at close failed: %s\n", s.ToString());
    } else if (prealloc_ != nullptr && !failed_now) {
      // A clean shutdown leaves no zero tail, so a restart cuts nothing.
      // Without this the tail is cut at startup, as after a crash.
      s = prealloc_->Seal();
      if (!s.ok()) absl::FPrintF(stderr, "bookie: cutting the journal at close failed: %s\n", s.ToString());
    }
  }
  IgnoreError(journal_->Close());
}

}  // namespace ledgerkv::bookie
