// Power loss under both journal layouts production runs: the preallocated
// journal (journal_file.h: zero-filled space ahead of the records, a sync
// mark written unsynced after the last batch, the next batch written over
// it), and the growing journal of the last section below.
//
// The model of a power loss: every byte before the end of the last
// completed fdatasync holds its synced content. Past that point each
// 512-byte sector holds, independently of the others, its content as of
// that sync or any newer content written to it since: the sync mark, or
// the next batch, whose sync never completed. The tests take those images
// from the real write path (fault points bookie.journal.synced and
// bookie.journal.before_sync; firing the latter fails the batch as the
// power loss would have: unacknowledged) and restart a copy of the data
// directory on every distinct mix of them, sector by sector.
//
// The index (RocksDB, no WAL) is copied as the crash left it. That is an
// index a power loss can leave: RocksDB closes without flushing
// (avoid_flush_during_shutdown), so its files hold only what was flushed,
// and synced, at checkpoints or when a memtable filled; the applier puts
// only synced batches into the memtable, so no flushed key names a record
// the power loss could take. CHECKPOINT and INSTANCE were synced when
// written.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "base/fault_point.h"
#include "gtest/gtest.h"
#include "ledger/bookie/bookie_storage.h"
#include "ledger/bookie/journal_file.h"
#include "ledger/bookie/journal_format.h"
#include "ledger/bookie/test_util.h"

namespace ledgerkv::bookie {
namespace {

using testing::AddOne;
using testing::AddSync;
using testing::EntryBatch;
using testing::Eventually;
using testing::FenceSync;
using testing::FileSize;
using testing::JournalPath;
using testing::NewTempDir;
using testing::ReadBack;

constexpr uint64_t kSector = 512;
constexpr uint64_t kLedger = 1;       // the entries
constexpr uint64_t kFencedLast = 2;   // fenced by the last synced batch
constexpr uint64_t kFencedEarly = 3;  // fenced after the checkpoint, before that
constexpr int64_t kTornFirst = 81;    // entries of the batch whose sync never completed
constexpr int64_t kTornEnd = 85;

std::string ReadRange(const std::string& path, uint64_t offset, uint64_t n) {
  std::string out(n, '\0');
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  const ssize_t got = ::pread(fd, out.data(), n, static_cast<off_t>(offset));
  ::close(fd);
  out.resize(got < 0 ? 0 : static_cast<size_t>(got));
  return out;
}

// The file as the page cache holds it: the newest content.
std::string ReadAll(const std::string& path) { return ReadRange(path, 0, FileSize(path)); }

bool AllZeros(std::string_view s) { return s.find_first_not_of('\0') == std::string_view::npos; }

StorageOptions Options(const std::string& dir) {
  StorageOptions o;
  o.dir = dir;  // with the default file layer: the preallocated journal
  o.checkpoint_on_close = false;  // Close is a crash
  return o;
}

struct TornRecord {
  int64_t entry_id;
  uint64_t offset;
  uint64_t size;  // header included
  std::string payload;
};

// What the crash left: the data directory (index, CHECKPOINT, INSTANCE; its
// journal is replaced by each image) and three versions of the journal.
struct Crash {
  std::string dir;
  // The end of the last synced batch: where the mark went, and the batch after it.
  uint64_t mark_offset = 0;
  // The journal when the last fdatasync completed, after the sync mark was
  // written, and after the next batch was written over the mark.
  std::string synced;
  std::string marked;
  std::string written;
  // The records of that next batch, in journal order.
  std::vector<TornRecord> torn;
  // Acknowledged entries of kLedger: id -> payload.
  std::map<int64_t, std::string> acked;
  // [region_begin, region_end): the sectors in which the three versions
  // differ; they are equal before, and zeros after.
  uint64_t region_begin = 0;
  uint64_t region_end = 0;
};

// Runs a bookie on the preallocated journal until the filler is ahead,
// checkpoints, adds and fences more, and ends with a fence whose batch ends
// at `mark_in_sector` bytes into a 512-byte sector. The idle writer then
// writes a sync mark there; the next batch (entries kTornFirst..kTornEnd-1,
// the first one header-only) is written over it, and the power fails
// before its fdatasync completes.
void CrashWhileABatchOverwritesASyncMark(uint64_t mark_in_sector, Crash* c) {
  ScopedFaultPoints faults;
  c->dir = NewTempDir("power_loss");
  const std::string path = JournalPath(c->dir, 1);
  auto opened = BookieStorage::Open(Options(c->dir));
  ASSERT_TRUE(opened.ok()) << opened.status();
  BookieStorage& s = **opened;
  int64_t next = 0;
  auto add = [&](std::string payload) {
    EntryBatch b;
    b.Add(kLedger, next, next - 1, payload);
    ASSERT_EQ(AddSync(s, b), std::vector<Code>{v1::OK}) << "entry " << next;
    c->acked[next++] = std::move(payload);
  };
  // One batch per add: enough of them start the filler.
  while (next < PreallocatedJournalFile::kFillAfterBatches + 6) {
    ASSERT_NO_FATAL_FAILURE(add(testing::Payload(kLedger, next)));
  }
  ASSERT_TRUE(Eventually([&] { return FileSize(path) >= s.GetStats().journal_bytes + (4u << 20); }))
      << "no space was preallocated ahead of the records";
  // The index now holds these entries; replay starts in the middle of the file.
  ASSERT_TRUE(s.Checkpoint().ok());
  ASSERT_EQ(FenceSync(s, kFencedEarly), v1::OK);
  while (next < kTornFirst - 1) {
    ASSERT_NO_FATAL_FAILURE(add(testing::Payload(kLedger, next)));
  }
  // Pads so that the fence below (a 48-byte record) ends where wanted.
  const uint64_t end = s.GetStats().journal_bytes + 2 * kRecordHeaderSize;
  ASSERT_NO_FATAL_FAILURE(
      add(std::string((mark_in_sector + kSector - end % kSector) % kSector, 'p')));

  FaultPoints::Get().Arm("bookie.journal.synced", [c](std::string_view arg) {
    c->synced = ReadAll(std::string(arg));
    return false;
  });
  ASSERT_EQ(FenceSync(s, kFencedLast), v1::OK);
  FaultPoints::Get().Disarm("bookie.journal.synced");
  const uint64_t mark = c->mark_offset = s.GetStats().journal_bytes;
  ASSERT_EQ(mark % kSector, mark_in_sector);
  // Preallocation was in effect: the last sync left megabytes of zeros ahead.
  ASSERT_GE(c->synced.size(), mark + (4u << 20));
  ASSERT_TRUE(AllZeros(std::string_view(c->synced).substr(mark)));
  ASSERT_TRUE(Eventually([&] {
    const std::string h = ReadRange(path, mark, kRecordHeaderSize);
    RecordHeader header;
    return h.size() == kRecordHeaderSize && DecodeRecordHeader(h.data(), 1, mark, &header) &&
           header.type == RecordType::kSyncMark;
  })) << "the idle writer wrote no sync mark after the last batch";
  c->marked = ReadAll(path);
  {
    // The growing journal's test encodes the mark itself: check it is this.
    RecordHeader h;
    h.type = RecordType::kSyncMark;
    h.ledger_id = 0;
    h.batch_offset = mark;
    std::string encoded(kRecordHeaderSize, '\0');
    EncodeRecordHeader(h, 1, mark, encoded.data());
    ASSERT_EQ(c->marked.substr(mark, kRecordHeaderSize), encoded) << "the sync mark's encoding";
  }

  EntryBatch torn;
  // A header-only record first: the second record starts right after where
  // the mark was, which is the case the "after a mark" rule of replay is for.
  uint64_t offset = mark;
  for (int64_t e = kTornFirst; e < kTornEnd; ++e) {
    std::string payload =
        e == kTornFirst ? "" : absl::StrCat("unsynced entry ", e, " ", std::string(280, 'u'));
    torn.Add(kLedger, e, kTornFirst - 2, payload);
    c->torn.push_back(TornRecord{e, offset, kRecordHeaderSize + payload.size(), payload});
    offset += kRecordHeaderSize + payload.size();
  }
  FaultPoints::Get().Arm("bookie.journal.before_sync", [c](std::string_view arg) {
    c->written = ReadAll(std::string(arg));
    return true;  // the power fails before the fdatasync completes
  });
  ASSERT_EQ(AddSync(s, torn), std::vector<Code>(kTornEnd - kTornFirst, v1::READ_ONLY))
      << "nothing of the batch whose sync failed is acknowledged";
  opened->reset();  // a crash: no checkpoint, no cut of the zero tail

  for (const TornRecord& r : c->torn) {
    RecordHeader h;
    ASSERT_TRUE(DecodeRecordHeader(c->written.data() + r.offset, 1, r.offset, &h)) << r.entry_id;
    ASSERT_EQ(h.entry_id, r.entry_id);
    ASSERT_EQ(h.batch_offset, mark) << "one batch, started where the mark was";
  }
  c->region_begin = mark / kSector * kSector;
  c->region_end = (offset + kSector - 1) / kSector * kSector;
  const size_t size = std::max({c->synced.size(), c->marked.size(), c->written.size()});
  for (std::string* v : {&c->synced, &c->marked, &c->written}) {
    v->resize(size, '\0');  // the filler may have grown the file since
    ASSERT_EQ(v->compare(0, mark, c->written, 0, mark), 0) << "the synced journal changed";
    ASSERT_TRUE(AllZeros(std::string_view(*v).substr(c->region_end)));
  }
  // So that every mix below is a different journal: the batch reached every
  // sector of the region, and the mark differs from what it overwrote.
  for (uint64_t at = c->region_begin; at < c->region_end; at += kSector) {
    ASSERT_NE(c->written.compare(at, kSector, c->synced, at, kSector), 0) << at;
  }
  ASSERT_NE(c->marked.compare(mark, kRecordHeaderSize, c->synced, mark, kRecordHeaderSize), 0);
}

// The crash for a mark at `mark_in_sector`, made once per test program.
const Crash* CrashFor(uint64_t mark_in_sector) {
  static auto* crashes = new std::map<uint64_t, std::unique_ptr<Crash>>();
  auto it = crashes->find(mark_in_sector);
  if (it != crashes->end()) return it->second.get();
  auto c = std::make_unique<Crash>();
  CrashWhileABatchOverwritesASyncMark(mark_in_sector, c.get());
  if (::testing::Test::HasFatalFailure()) return nullptr;
  return crashes->emplace(mark_in_sector, std::move(c)).first->second.get();
}

// One journal a power loss can leave: per sector of the region, which
// version it holds ('s'ynced, 'm'arked, 'w'ritten).
struct Image {
  std::string sectors;
  std::string bytes;  // the journal's bytes up to region_end; zeros after
};

// Every distinct image: each sector of the region from each version,
// counting versions that agree on a sector once.
std::vector<Image> EveryImage(const Crash& c) {
  const std::string* versions[] = {&c.synced, &c.marked, &c.written};
  const char names[] = {'s', 'm', 'w'};
  std::vector<std::vector<int>> choices;  // per sector: the distinct versions
  for (uint64_t at = c.region_begin; at < c.region_end; at += kSector) {
    std::vector<int> distinct;
    for (int v = 0; v < 3; ++v) {
      bool seen = false;
      for (int d : distinct) {
        seen |= versions[d]->compare(at, kSector, *versions[v], at, kSector) == 0;
      }
      if (!seen) distinct.push_back(v);
    }
    choices.push_back(distinct);
  }
  std::vector<Image> images;
  std::vector<size_t> pick(choices.size(), 0);
  while (true) {
    Image image;
    image.bytes = c.written.substr(0, c.region_end);
    for (size_t i = 0; i < pick.size(); ++i) {
      const int v = choices[i][pick[i]];
      const uint64_t at = c.region_begin + i * kSector;
      image.bytes.replace(at, kSector, *versions[v], at, kSector);
      image.sectors += names[v];
    }
    images.push_back(std::move(image));
    size_t i = 0;
    while (i < pick.size() && ++pick[i] == choices[i].size()) pick[i++] = 0;
    if (i == pick.size()) break;
  }
  return images;
}

std::string Describe(const Crash& c, const Image& image) {
  return absl::StrCat("image: mark at ", c.mark_offset, " (", c.mark_offset % kSector,
                      " into its sector); sectors from ", c.region_begin, ": ", image.sectors,
                      " (s = as at the last sync, m = the sync mark, w = the unsynced batch)");
}

// A copy of the crashed data directory `crashed` whose journal holds
// `bytes` and is `length` bytes long (zeros after `bytes`, as a hole: it
// reads as zeros, and the restart's fdatasync need not write megabytes of
// them).
std::string DirWithJournal(const std::string& crashed, std::string_view bytes, uint64_t length) {
  const std::string dir = NewTempDir("power_loss_image");
  const std::string journal = JournalFileName(1);
  for (const auto& child : std::filesystem::directory_iterator(crashed)) {
    if (child.path().filename() == journal) continue;
    std::filesystem::copy(child.path(), std::filesystem::path(dir) / child.path().filename(),
                          std::filesystem::copy_options::recursive);
  }
  const std::string path = JournalPath(dir, 1);
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  EXPECT_GE(fd, 0);
  EXPECT_EQ(::pwrite(fd, bytes.data(), bytes.size(), 0), static_cast<ssize_t>(bytes.size()));
  EXPECT_EQ(::ftruncate(fd, static_cast<off_t>(length)), 0);
  ::close(fd);
  return dir;
}

// A copy of the crashed data directory whose journal is `image`.
std::string DirWithImage(const Crash& c, const Image& image) {
  return DirWithJournal(c.dir, image.bytes, c.written.size());
}

std::unique_ptr<BookieStorage> Restart(const StorageOptions& options) {
  auto s = BookieStorage::Open(options);
  EXPECT_TRUE(s.ok()) << "the bookie does not start: " << s.status();
  return s.ok() ? std::move(*s) : nullptr;
}

std::unique_ptr<BookieStorage> Restart(const std::string& dir) { return Restart(Options(dir)); }

// Every acknowledged entry of kLedger (`acked`) reads back with its bytes;
// both acknowledged fences hold.
void ExpectAcknowledgedWrites(BookieStorage& s, const std::map<int64_t, std::string>& acked) {
  for (const auto& [e, want] : acked) {
    std::string payload;
    const Code code = ReadBack(s, kLedger, e, &payload);
    ASSERT_EQ(code, v1::OK) << "acknowledged entry " << e << " lost: " << v1::Code_Name(code);
    ASSERT_EQ(payload, want) << "entry " << e;
  }
  for (uint64_t ledger : {kFencedEarly, kFencedLast}) {
    std::optional<LedgerState> st = s.GetLedger(ledger);
    ASSERT_TRUE(st.has_value() && st->fenced)
        << "acknowledged fence of ledger " << ledger << " lost";
    EXPECT_EQ(AddOne(s, ledger, 0), v1::FENCED) << "ledger " << ledger;
  }
  std::optional<LedgerState> st = s.GetLedger(kLedger);
  ASSERT_TRUE(st.has_value());
  EXPECT_GE(st->last_entry_id, acked.rbegin()->first);
}

// L2, L5 and L7 at one bookie, through a power loss: whatever the disk kept
// of a batch written over a sync mark whose fdatasync never completed, torn
// in any way the disk can tear it, the bookie starts (a torn tail is cut,
// never reported as corruption), every acknowledged add reads back with its
// bytes and every acknowledged fence holds. An entry that was never
// acknowledged reads as itself or NO_SUCH_ENTRY, never CORRUPT (which would
// stall a recovery that needs this bookie's "no such entry"; docs/
// bookie-format.md, "Torn tails and corruption"). And the bookie takes adds
// again and loses none of them in the next crash.
TEST(PowerLossTest, AcknowledgedAddsAndFencesSurviveEveryTornTailOfThePreallocatedJournal) {
  // The mark at the start of a sector, ending a sector (the batch's second
  // record starts the next one), and straddling two.
  for (uint64_t mark_in_sector : {0, 464, 488}) {
    SCOPED_TRACE(absl::StrCat("mark ", mark_in_sector, " bytes into its sector"));
    const Crash* c = CrashFor(mark_in_sector);
    ASSERT_NE(c, nullptr);
    for (const Image& image : EveryImage(*c)) {
      SCOPED_TRACE(Describe(*c, image));
      const std::string dir = DirWithImage(*c, image);
      {
        std::unique_ptr<BookieStorage> s = Restart(dir);
        ASSERT_NE(s, nullptr);
        EXPECT_EQ(s->GetStats().corrupt_records_at_startup, 0u)
            << "a torn tail counted as corruption";
        ASSERT_NO_FATAL_FAILURE(ExpectAcknowledgedWrites(*s, c->acked));
        for (const TornRecord& r : c->torn) {
          std::string payload;
          const Code code = ReadBack(*s, kLedger, r.entry_id, &payload);
          ASSERT_TRUE(code == v1::OK || code == v1::NO_SUCH_ENTRY)
              << "unacknowledged entry " << r.entry_id << ": " << v1::Code_Name(code);
          if (code == v1::OK) {
            ASSERT_EQ(payload, r.payload) << "entry " << r.entry_id;
          }
        }
        EXPECT_EQ(ReadBack(*s, kLedger, kTornEnd), v1::NO_SUCH_ENTRY);
        // The writer sends again what was never acknowledged.
        EntryBatch again;
        for (const TornRecord& r : c->torn) {
          again.Add(kLedger, r.entry_id, kTornFirst - 2, r.payload);
        }
        ASSERT_EQ(AddSync(*s, again), std::vector<Code>(c->torn.size(), v1::OK));
      }  // and crashes again
      std::unique_ptr<BookieStorage> s = Restart(dir);
      ASSERT_NE(s, nullptr);
      ASSERT_NO_FATAL_FAILURE(ExpectAcknowledgedWrites(*s, c->acked));
      for (const TornRecord& r : c->torn) {
        std::string payload;
        ASSERT_EQ(ReadBack(*s, kLedger, r.entry_id, &payload), v1::OK) << r.entry_id;
        ASSERT_EQ(payload, r.payload);
      }
      s.reset();
      std::filesystem::remove_all(dir);
    }
  }
}

// docs/bookie-format.md, "Sync marks" and "Torn tails and corruption":
// replay keeps a torn batch's records up to the first one the power loss
// did not keep whole and cuts the rest; a sync mark kept where the batch
// started vouches for nothing after it (the record there continues a batch
// whose start is gone), so then nothing of the batch is kept.
TEST(PowerLossTest, ATornBatchKeepsOnlyItsIntactPrefixAndAKeptSyncMarkVouchesForNothingAfterIt) {
  int mark_then_record = 0;  // images where the mark and a whole record after it survived
  for (uint64_t mark_in_sector : {0, 464, 488}) {
    SCOPED_TRACE(absl::StrCat("mark ", mark_in_sector, " bytes into its sector"));
    const Crash* c = CrashFor(mark_in_sector);
    ASSERT_NE(c, nullptr);
    for (const Image& image : EveryImage(*c)) {
      SCOPED_TRACE(Describe(*c, image));
      auto kept = [&](uint64_t offset, uint64_t n, const std::string& version) {
        return image.bytes.compare(offset, n, version, offset, n) == 0;
      };
      const bool mark_kept = kept(c->mark_offset, kRecordHeaderSize, c->marked);
      size_t prefix = 0;
      while (!mark_kept && prefix < c->torn.size() &&
             kept(c->torn[prefix].offset, c->torn[prefix].size, c->written)) {
        ++prefix;
      }
      mark_then_record += mark_kept && kept(c->torn[1].offset, c->torn[1].size, c->written);
      const std::string dir = DirWithImage(*c, image);
      std::unique_ptr<BookieStorage> s = Restart(dir);
      ASSERT_NE(s, nullptr);
      for (size_t i = 0; i < c->torn.size(); ++i) {
        EXPECT_EQ(v1::Code_Name(ReadBack(*s, kLedger, c->torn[i].entry_id)),
                  v1::Code_Name(i < prefix ? v1::OK : v1::NO_SUCH_ENTRY))
            << "entry " << c->torn[i].entry_id << "; the first " << prefix
            << " records of the torn batch are whole" << (mark_kept ? " (the mark was kept)" : "");
      }
      s.reset();
      std::filesystem::remove_all(dir);
    }
  }
  EXPECT_GT(mark_then_record, 0) << "no image kept the mark and the record after it";
}

// The growing journal: the preallocated journal file while it is not
// filling (journal_file.h): before a file's first kFillAfterBatches
// batches (every new file starts so), while batches average
// kFillMaxAverageBatch or more (64 KiB entries), or after filling failed.
// Records are appended, so fdatasync also makes the new size durable; the
// idle writer's sync mark is written past the end (the file grows by 48
// bytes), and the next batch over it.
//
// The model of a power loss: everything before the end of the last
// completed fdatasync (the synced end) holds its synced content. The file
// is as long as then, as long as with the sync mark, as long as after the
// next batch's write, or (write-back persisting the size a page at a time)
// cut at any 4 KiB page boundary inside that batch. Each 512-byte sector past the synced end holds,
// independently of the others, the batch's bytes, the mark (the sectors it
// covers), zeros (a block allocated but never written), or stale bytes of
// another file or offset (here: this journal's bytes from kStaleDistance
// earlier, valid records, but of another offset, so their headers fail).
// Not modelled: stale bytes of a record once written at this very offset
// of this file (a torn tail cut at an earlier restart, its block reused
// when the file grew again). Replay would take such a record as part of the
// batch; it was never acknowledged either, and entries never change their
// bytes (one writer per ledger; recovery re-adds what it read), so that
// costs nothing but "exactly the intact prefix", which this test asserts.
constexpr uint64_t kTornFence = 4;  // fenced by the batch whose sync never completed
constexpr int64_t kGrowingAcked = 40;  // acknowledged entries 0..39
constexpr int64_t kGrowingTornFirst = kGrowingAcked;  // then the torn batch's 3 entries
constexpr uint64_t kStaleDistance = 4096;

struct GrowingCrash {
  std::string dir;
  // The journal's size when the last fdatasync returned.
  uint64_t synced_end = 0;
  // The journal once the next batch was written (its sync never completed).
  std::string written;
  // The sync mark the idle writer would have written at the synced end.
  std::string mark;
  // That batch's records in journal order: two entries of kLedger, the
  // fence of kTornFence (entry_id -1), one more entry.
  std::vector<TornRecord> torn;
  std::map<int64_t, std::string> acked;
};

// Runs a bookie on the growing journal (fewer batches than start the
// filler), checkpoints, adds and fences more, and ends with a fence
// (acknowledged) and then one batch of two adds, a fence and one more add
// whose fdatasync never completes. The batch's three requests are queued
// while the writer is held right after the last acknowledged sync, so that
// they make one batch.
void CrashWhileTheGrowingJournalAppendsABatch(GrowingCrash* c) {
  ScopedFaultPoints faults;
  c->dir = NewTempDir("power_loss_growing");
  auto opened = BookieStorage::Open(Options(c->dir));
  ASSERT_TRUE(opened.ok()) << opened.status();
  BookieStorage& s = **opened;
  int64_t next = 0;
  auto add = [&] {
    std::string payload = testing::Payload(kLedger, next) + std::string(200, 'a');
    EntryBatch b;
    b.Add(kLedger, next, next - 1, payload);
    ASSERT_EQ(AddSync(s, b), std::vector<Code>{v1::OK}) << "entry " << next;
    c->acked[next++] = std::move(payload);
  };
  while (next < kGrowingAcked / 2) ASSERT_NO_FATAL_FAILURE(add());
  ASSERT_TRUE(s.Checkpoint().ok());  // replay starts in the middle of the file
  ASSERT_EQ(FenceSync(s, kFencedEarly), v1::OK);
  while (next < kGrowingAcked) ASSERT_NO_FATAL_FAILURE(add());
  ASSERT_GE(s.GetStats().journal_bytes, 2 * kStaleDistance) << "too little journal to go stale";

  absl::Notification synced;
  absl::Notification queued;
  std::atomic<bool> first{true};
  FaultPoints::Get().Arm("bookie.journal.synced", [&](std::string_view arg) {
    if (first.exchange(false)) {
      c->synced_end = FileSize(std::string(arg));
      synced.Notify();
      queued.WaitForNotification();
    }
    return false;
  });
  Code last_fence = v1::CODE_UNSPECIFIED;
  std::thread fencer([&] { last_fence = FenceSync(s, kFencedLast); });
  // The writer is held after the fence's sync, before its acknowledgement
  // (and before an idle writer's sync mark: it finds the queue not empty).
  const bool held = synced.WaitForNotificationWithTimeout(absl::Seconds(30));
  FaultPoints::Get().Arm("bookie.journal.before_sync", [c](std::string_view arg) {
    c->written = ReadAll(std::string(arg));
    return true;  // the power fails before the fdatasync completes
  });
  // The second entry's payload is sized so that the fence starts a sector:
  // then some images keep the records before the fence and lose it. The
  // entry after the fence runs into the next sector: then some images keep
  // the fence and lose that entry.
  std::map<int64_t, std::string> torn_payloads;
  uint64_t fence_at = c->synced_end;
  for (int64_t e = kGrowingTornFirst; e < kGrowingTornFirst + 3; ++e) {
    std::string payload = absl::StrCat("unsynced entry ", e, " ");
    uint64_t size = e == kGrowingTornFirst ? 280 : 600;
    if (e == kGrowingTornFirst + 1) {
      const uint64_t end = fence_at + kRecordHeaderSize + payload.size();
      size = (kSector - end % kSector) % kSector;
      if (size < 64) size += kSector;
    }
    payload.append(size, 'u');
    if (e < kGrowingTornFirst + 2) fence_at += kRecordHeaderSize + payload.size();
    torn_payloads[e] = std::move(payload);
  }
  EntryBatch before_fence;
  EntryBatch after_fence;
  for (int64_t e = kGrowingTornFirst; e < kGrowingTornFirst + 3; ++e) {
    (e < kGrowingTornFirst + 2 ? before_fence : after_fence)
        .Add(kLedger, e, kGrowingTornFirst - 2, torn_payloads[e]);
  }
  std::vector<Code> codes_before;
  std::vector<Code> codes_after;
  Code torn_fence = v1::CODE_UNSPECIFIED;
  absl::Notification done[3];
  s.Add(before_fence.views(), false, [&](std::vector<Code> codes) {
    codes_before = std::move(codes);
    done[0].Notify();
  });
  s.Fence(kTornFence, [&](Code code) {
    torn_fence = code;
    done[1].Notify();
  });
  s.Add(after_fence.views(), false, [&](std::vector<Code> codes) {
    codes_after = std::move(codes);
    done[2].Notify();
  });
  queued.Notify();
  fencer.join();
  FaultPoints::Get().Disarm("bookie.journal.synced");
  bool answered = true;
  for (absl::Notification& d : done) {
    answered &= d.WaitForNotificationWithTimeout(absl::Seconds(30));
  }
  // Stopping the storage answers what it still holds, while the callbacks'
  // captures still live.
  if (!answered) opened->reset();
  ASSERT_TRUE(held) << "the last acknowledged batch never completed its sync";
  ASSERT_TRUE(answered) << "the torn batch's requests were never answered";
  ASSERT_EQ(last_fence, v1::OK);
  ASSERT_EQ(codes_before, std::vector<Code>(2, v1::READ_ONLY))
      << "nothing of the batch whose sync failed is acknowledged";
  ASSERT_EQ(torn_fence, v1::READ_ONLY);
  ASSERT_EQ(codes_after, std::vector<Code>{v1::READ_ONLY});
  opened->reset();  // a crash: no checkpoint

  // The batch's records, as written: one batch, in queue order, right at
  // the end of the file (no zeros ahead: the filler never ran).
  uint64_t offset = c->synced_end;
  for (int64_t e = kGrowingTornFirst; e < kGrowingTornFirst + 3; ++e) {
    if (e == kGrowingTornFirst + 2) {
      c->torn.push_back(TornRecord{-1, offset, kRecordHeaderSize, ""});
      offset += kRecordHeaderSize;
    }
    const std::string& payload = torn_payloads[e];
    c->torn.push_back(TornRecord{e, offset, kRecordHeaderSize + payload.size(), payload});
    offset += kRecordHeaderSize + payload.size();
  }
  ASSERT_EQ(c->written.size(), offset) << "the journal grew by exactly the batch";
  ASSERT_EQ(fence_at % kSector, 0u) << "the fence starts a sector";
  for (const TornRecord& r : c->torn) {
    RecordHeader h;
    ASSERT_TRUE(DecodeRecordHeader(c->written.data() + r.offset, 1, r.offset, &h)) << r.offset;
    ASSERT_EQ(h.type, r.entry_id < 0 ? RecordType::kFence : RecordType::kEntry) << r.offset;
    ASSERT_EQ(h.ledger_id, r.entry_id < 0 ? kTornFence : kLedger) << r.offset;
    if (r.entry_id >= 0) {
      ASSERT_EQ(h.entry_id, r.entry_id);
    }
    ASSERT_EQ(h.batch_offset, c->synced_end) << "one batch, started at the synced end";
  }
  // The mark, as MarkSyncedIfIdle writes it (the preallocated journal's
  // test checks that encoding against the real one).
  RecordHeader mark;
  mark.type = RecordType::kSyncMark;
  mark.ledger_id = 0;
  mark.batch_offset = c->synced_end;
  c->mark.resize(kRecordHeaderSize);
  EncodeRecordHeader(mark, 1, c->synced_end, c->mark.data());
}

// One journal a power loss can leave on the growing journal.
struct GrowingImage {
  std::string sectors;  // per sector past the synced end: w, m, z or s
  std::string bytes;    // as long as the file
};

std::vector<GrowingImage> EveryGrowingImage(const GrowingCrash& c) {
  const uint64_t S = c.synced_end;
  const uint64_t mark_end = S + kRecordHeaderSize;
  // The file with the mark and nothing after it: what the batch overwrote.
  std::string marked = c.written.substr(0, S) + c.mark;
  marked.resize(c.written.size(), '\0');
  std::vector<GrowingImage> images;
  std::vector<uint64_t> lengths = {S, mark_end, c.written.size()};
  for (uint64_t page = (S / 4096 + 1) * 4096; page < c.written.size(); page += 4096) {
    if (page > mark_end) lengths.push_back(page);
  }
  for (uint64_t length : lengths) {
    const uint64_t begin = S / kSector * kSector;
    const uint64_t end = (length + kSector - 1) / kSector * kSector;
    const size_t n = length > S ? (end - begin) / kSector : 0;
    // Per sector: the versions it may hold ('m' only where the mark was).
    std::vector<std::string> choices(n);
    for (size_t i = 0; i < n; ++i) {
      choices[i] = begin + i * kSector < mark_end ? "wmzs" : "wzs";
    }
    std::vector<size_t> pick(n, 0);
    while (true) {
      GrowingImage image;
      image.bytes = c.written;
      image.bytes.resize(end, '\0');
      for (size_t i = 0; i < n; ++i) {
        // The bytes before the synced end are the synced ones in every image.
        const uint64_t from = std::max(begin + i * kSector, S);
        const uint64_t to = std::min<uint64_t>(begin + (i + 1) * kSector, c.written.size());
        const char v = choices[i][pick[i]];
        if (v == 'm') image.bytes.replace(from, to - from, marked, from, to - from);
        if (v == 'z') image.bytes.replace(from, to - from, to - from, '\0');
        if (v == 's') image.bytes.replace(from, to - from, c.written, from - kStaleDistance, to - from);
        image.sectors += v;
      }
      image.bytes.resize(length);
      if (n == 0) image.sectors = "-";
      images.push_back(std::move(image));
      size_t i = 0;
      while (i < n && ++pick[i] == choices[i].size()) pick[i++] = 0;
      if (i == n) break;
    }
  }
  return images;
}

// L2, L5 and L7 at one bookie, through a power loss on the growing journal:
// whatever the disk kept of a batch whose fdatasync never completed (its
// size update, the sync mark it overwrote, its bytes, zeros or stale bytes,
// sector by sector), the bookie starts without counting a corrupt record,
// every acknowledged add reads back with its bytes, and every acknowledged
// fence holds. The torn batch keeps exactly its records up to the first one
// not kept whole (none when the mark was kept), its unacknowledged fence
// included: kept only with every record before it. Nothing of it reads
// CORRUPT. Then the bookie takes the adds and the fence again and keeps
// them through the next crash.
TEST(PowerLossTest, AcknowledgedWritesSurviveEveryTornAppendOfTheGrowingJournal) {
  GrowingCrash c;
  ASSERT_NO_FATAL_FAILURE(CrashWhileTheGrowingJournalAppendsABatch(&c));
  // Every sector's versions differ, so every image is a different journal.
  for (uint64_t at = c.synced_end; at < c.written.size(); at = (at / kSector + 1) * kSector) {
    const uint64_t len = std::min((at / kSector + 1) * kSector, c.written.size()) - at;
    const std::string_view written = std::string_view(c.written).substr(at, len);
    const std::string_view stale = std::string_view(c.written).substr(at - kStaleDistance, len);
    ASSERT_FALSE(AllZeros(written)) << at;
    ASSERT_FALSE(AllZeros(stale)) << at;
    ASSERT_NE(written, stale) << at;
  }
  ASSERT_NE(std::string_view(c.written).substr(c.synced_end, kRecordHeaderSize), c.mark);
  const std::vector<GrowingImage> images = EveryGrowingImage(c);
  std::map<size_t, int> images_keeping;  // records kept -> images
  int marks_kept = 0;
  for (const GrowingImage& image : images) {
    SCOPED_TRACE(absl::StrCat("image: ", image.bytes.size(), " bytes; sectors from ",
                              c.synced_end / kSector * kSector, ": ", image.sectors,
                              " (w = the unsynced batch, m = the sync mark, z = zeros, ",
                              "s = stale; - = the file as long as at the last sync)"));
    size_t prefix = 0;
    while (prefix < c.torn.size()) {
      const TornRecord& r = c.torn[prefix];
      if (image.bytes.size() < r.offset + r.size ||
          image.bytes.compare(r.offset, r.size, c.written, r.offset, r.size) != 0) {
        break;
      }
      ++prefix;
    }
    ++images_keeping[prefix];
    marks_kept += image.bytes.compare(c.synced_end, kRecordHeaderSize, c.mark) == 0;
    const std::string dir = DirWithJournal(c.dir, image.bytes, image.bytes.size());
    {
      std::unique_ptr<BookieStorage> s = Restart(dir);
      ASSERT_NE(s, nullptr);
      EXPECT_EQ(s->GetStats().corrupt_records_at_startup, 0u)
          << "a torn tail counted as corruption";
      ASSERT_NO_FATAL_FAILURE(ExpectAcknowledgedWrites(*s, c.acked));
      for (size_t i = 0; i < c.torn.size(); ++i) {
        const TornRecord& r = c.torn[i];
        if (r.entry_id < 0) {
          std::optional<LedgerState> st = s->GetLedger(kTornFence);
          EXPECT_EQ(st.has_value() && st->fenced, i < prefix)
              << "the unacknowledged fence; the first " << prefix << " records are whole";
          continue;
        }
        std::string payload;
        EXPECT_EQ(v1::Code_Name(ReadBack(*s, kLedger, r.entry_id, &payload)),
                  v1::Code_Name(i < prefix ? v1::OK : v1::NO_SUCH_ENTRY))
            << "entry " << r.entry_id << "; the first " << prefix << " records are whole";
        if (i < prefix) {
          EXPECT_EQ(payload, r.payload) << "entry " << r.entry_id;
        }
      }
      // The writer sends again what was never acknowledged; the recoverer
      // fences again.
      EntryBatch again;
      int entries = 0;
      for (const TornRecord& r : c.torn) {
        if (r.entry_id < 0) continue;
        again.Add(kLedger, r.entry_id, kGrowingTornFirst - 2, r.payload);
        ++entries;
      }
      ASSERT_EQ(AddSync(*s, again), std::vector<Code>(entries, v1::OK));
      ASSERT_EQ(FenceSync(*s, kTornFence), v1::OK);
    }  // and crashes again
    std::unique_ptr<BookieStorage> s = Restart(dir);
    ASSERT_NE(s, nullptr);
    ASSERT_NO_FATAL_FAILURE(ExpectAcknowledgedWrites(*s, c.acked));
    for (const TornRecord& r : c.torn) {
      if (r.entry_id < 0) {
        EXPECT_EQ(AddOne(*s, kTornFence, 0), v1::FENCED);
        continue;
      }
      std::string payload;
      ASSERT_EQ(ReadBack(*s, kLedger, r.entry_id, &payload), v1::OK) << r.entry_id;
      ASSERT_EQ(payload, r.payload);
    }
    s.reset();
    std::filesystem::remove_all(dir);
  }
  // The images cover the fence kept and lost, the batch kept whole, and
  // the mark kept.
  EXPECT_GT(images_keeping[0], 0);
  EXPECT_GT(images_keeping[2], 0) << "no image kept the records before the fence and not it";
  EXPECT_GT(images_keeping[3], 0) << "no image kept the fence and lost a record after it";
  EXPECT_GT(images_keeping[c.torn.size()], 0) << "no image kept the whole batch";
  EXPECT_GT(marks_kept, 0);
  RecordProperty("images", static_cast<int>(images.size()));
}

}  // namespace
}  // namespace ledgerkv::bookie
