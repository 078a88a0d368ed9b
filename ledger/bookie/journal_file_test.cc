// Journal preallocation: the file keeps zero-filled space ahead of its
// records, the records are exactly what was written, and the zero tail is
// cut by Seal (roll, clean close) or, after a crash, by replay as a torn
// tail, never mistaken for corruption.
#include "ledger/bookie/journal_file.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "ledger/bookie/bookie_storage.h"
#include "ledger/bookie/test_util.h"

namespace ledgerkv::bookie {
namespace {

using testing::AddOne;
using testing::Eventually;
using testing::FileSize;
using testing::JournalPath;
using testing::NewTempDir;
using testing::ReadBack;

std::string ReadAll(const std::string& path) {
  std::string out(FileSize(path), '\0');
  FILE* f = fopen(path.c_str(), "rb");
  EXPECT_NE(f, nullptr);
  if (f == nullptr) return "";
  EXPECT_EQ(fread(out.data(), 1, out.size(), f), out.size());
  fclose(f);
  return out;
}

TEST(JournalFileTest, SmallBatchesGetZeroFilledSpaceAheadAndSealCutsIt) {
  const std::string path = NewTempDir("journal_file") + "/journal-000001.log";
  auto file = PreallocatedJournalFile::Open(path, 0, 8 << 20);
  ASSERT_TRUE(file.ok()) << file.status();
  std::string expected;
  for (int i = 0; i < PreallocatedJournalFile::kFillAfterBatches + 10; ++i) {
    const std::string a = "record " + std::to_string(i) + " ";
    const std::string b(100 + i, static_cast<char>('a' + i % 26));
    std::string_view parts[] = {a, b};
    ASSERT_TRUE((*file)->AppendV(parts).ok());
    ASSERT_TRUE((*file)->Sync().ok());
    expected += a + b;
  }
  EXPECT_EQ((*file)->Size(), expected.size());
  ASSERT_TRUE(Eventually([&] { return (*file)->FilledAhead() >= (8u << 20); }));
  // More records go into the filled space.
  for (int i = 0; i < 100; ++i) {
    const std::string r(1000, static_cast<char>('A' + i % 26));
    ASSERT_TRUE((*file)->Append(r).ok());
    expected += r;
  }
  ASSERT_TRUE((*file)->Sync().ok());
  std::string bytes = ReadAll(path);
  ASSERT_GT(bytes.size(), expected.size());
  EXPECT_EQ(bytes.substr(0, expected.size()), expected);
  EXPECT_EQ(bytes.find_first_not_of('\0', expected.size()), std::string::npos)
      << "the space ahead holds zeros only";

  ASSERT_TRUE((*file)->Seal().ok());
  EXPECT_EQ(FileSize(path), expected.size());
  EXPECT_EQ(ReadAll(path), expected);
  ASSERT_TRUE((*file)->Close().ok());
}

// The filler writes and syncs the zeros through its own open file
// description of the journal, not the writer's (nor a dup of it): Linux
// reports a write-back error once per description, so on a shared one the
// filler's sync_file_range could take the error of the writer's batch and
// the writer's fdatasync would return 0 for data that never reached the
// disk. File status flags belong to the description, which tells a second
// open(2) from a dup.
TEST(JournalFileTest, TheFillerSyncsThroughItsOwnOpenFileDescription) {
  const std::string path = NewTempDir("journal_file") + "/journal-000001.log";
  auto file = PreallocatedJournalFile::Open(path, 0, 8 << 20);
  ASSERT_TRUE(file.ok()) << file.status();
  const int writer = (*file)->writer_fd_for_test();
  const int filler = (*file)->filler_fd_for_test();
  ASSERT_GE(filler, 0);
  ASSERT_NE(writer, filler);
  struct stat w {}, f {};
  ASSERT_EQ(fstat(writer, &w), 0);
  ASSERT_EQ(fstat(filler, &f), 0);
  EXPECT_EQ(w.st_dev, f.st_dev);
  EXPECT_EQ(w.st_ino, f.st_ino) << "the filler writes another file";
  const int flags = fcntl(filler, F_GETFL);
  ASSERT_GE(flags, 0);
  ASSERT_EQ(fcntl(filler, F_SETFL, flags | O_NONBLOCK), 0);
  EXPECT_EQ(fcntl(writer, F_GETFL) & O_NONBLOCK, 0)
      << "the writer and the filler share one open file description";
  ASSERT_EQ(fcntl(filler, F_SETFL, flags), 0);

  // And the zeros it writes are still there ahead of the records.
  for (int i = 0; i < PreallocatedJournalFile::kFillAfterBatches + 1; ++i) {
    const std::string record = "record " + std::to_string(i);
    ASSERT_TRUE((*file)->Append(record).ok());
    ASSERT_TRUE((*file)->Sync().ok());
  }
  ASSERT_TRUE(Eventually([&] { return (*file)->FilledAhead() >= (8u << 20); }));
  EXPECT_TRUE((*file)->Close().ok());
}

TEST(JournalFileTest, LargeBatchesDoNotFill) {
  const std::string path = NewTempDir("journal_file") + "/journal-000001.log";
  auto file = PreallocatedJournalFile::Open(path, 0, 8 << 20);
  ASSERT_TRUE(file.ok()) << file.status();
  const std::string big(PreallocatedJournalFile::kFillMaxAverageBatch, 'x');
  for (int i = 0; i < PreallocatedJournalFile::kFillAfterBatches + 4; ++i) {
    ASSERT_TRUE((*file)->Append(big).ok());
  }
  absl::SleepFor(absl::Milliseconds(200));
  EXPECT_EQ((*file)->FilledAhead(), 0u);
  EXPECT_EQ(FileSize(path), (*file)->Size());
}

// Records written while the filler races ahead of them are intact.
TEST(JournalFileTest, WriterOvertakingTheFillerLosesNothing) {
  const std::string path = NewTempDir("journal_file") + "/journal-000001.log";
  auto file = PreallocatedJournalFile::Open(path, 0, 1 << 20);
  ASSERT_TRUE(file.ok()) << file.status();
  std::string expected;
  for (int i = 0; i < 3000; ++i) {
    const std::string r(100 + (i * 37) % 4000, static_cast<char>('a' + i % 26));
    ASSERT_TRUE((*file)->Append(r).ok());
    expected += r;
  }
  ASSERT_TRUE((*file)->Seal().ok());
  EXPECT_EQ(ReadAll(path), expected);
}

StorageOptions PreallocatingOptions(const std::string& dir) {
  StorageOptions o;
  o.dir = dir;
  o.journal_preallocate_bytes = 8 << 20;
  o.checkpoint_on_close = false;  // Close behaves like a crash
  return o;
}

// A crash leaves the last journal file with its zero tail: replay cuts it
// as a torn tail and every acknowledged entry is there.
TEST(JournalFileTest, CrashWithZeroTailReplaysEverythingAndCleanCloseLeavesNoTail) {
  const std::string dir = NewTempDir("prealloc_storage");
  StorageOptions o = PreallocatingOptions(dir);
  const int n = 2 * PreallocatedJournalFile::kFillAfterBatches;
  {
    auto s = BookieStorage::Open(o);
    ASSERT_TRUE(s.ok()) << s.status();
    for (int64_t e = 0; e < n; ++e) ASSERT_EQ(AddOne(**s, 1, e, e - 1), v1::OK);
    ASSERT_TRUE(Eventually([&] {
      // Beyond the records and a sync mark (journal_format.h).
      return FileSize(JournalPath(dir, 1)) > (*s)->GetStats().journal_bytes + kRecordHeaderSize;
    })) << "no space was preallocated";
    for (int64_t e = n; e < n + 10; ++e) ASSERT_EQ(AddOne(**s, 1, e, e - 1), v1::OK);
  }
  const uint64_t physical = FileSize(JournalPath(dir, 1));
  {
    auto s = BookieStorage::Open(o);
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_LT(FileSize(JournalPath(dir, 1)), physical) << "the zero tail was cut";
    for (int64_t e = 0; e < n + 10; ++e) ASSERT_EQ(ReadBack(**s, 1, e), v1::OK) << e;
    EXPECT_EQ(ReadBack(**s, 1, n + 10), v1::NO_SUCH_ENTRY);
    EXPECT_EQ((*s)->GetLedger(1), (LedgerState{false, n + 8, n + 9}));
    for (int64_t e = n + 10; e < n + 20; ++e) ASSERT_EQ(AddOne(**s, 1, e, e - 1), v1::OK);
  }
  o.checkpoint_on_close = true;
  {
    auto s = BookieStorage::Open(o);
    ASSERT_TRUE(s.ok()) << s.status();
    for (int64_t e = n + 20; e < 3 * n; ++e) ASSERT_EQ(AddOne(**s, 1, e, e - 1), v1::OK);
    ASSERT_TRUE(Eventually([&] {
      return FileSize(JournalPath(dir, 1)) > (*s)->GetStats().journal_bytes;
    }));
    (*s)->Close();
    EXPECT_EQ(FileSize(JournalPath(dir, 1)), (*s)->GetStats().journal_bytes)
        << "a clean close cuts the zero tail";
  }
  auto s = BookieStorage::Open(o);
  ASSERT_TRUE(s.ok()) << s.status();
  for (int64_t e = 0; e < 3 * n; ++e) ASSERT_EQ(ReadBack(**s, 1, e), v1::OK) << e;
}

// Only the last file may end in zeros: a roll cuts the file it leaves, so a
// crash later replays every earlier file without finding "corruption".
TEST(JournalFileTest, RolledFilesAreCutSoReplayAcrossThemSucceeds) {
  const std::string dir = NewTempDir("prealloc_roll");
  StorageOptions o = PreallocatingOptions(dir);
  o.journal_roll_bytes = 64 << 10;  // several hundred small records per file
  int64_t added = 0;
  {
    auto s = BookieStorage::Open(o);
    ASSERT_TRUE(s.ok()) << s.status();
    while ((*s)->JournalFiles().size() < 4) {
      ASSERT_EQ(AddOne(**s, 2, added, added - 1), v1::OK);
      ++added;
    }
    const std::vector<uint64_t> files = (*s)->JournalFiles();
    for (size_t i = 0; i + 1 < files.size(); ++i) {
      const std::string bytes = ReadAll(JournalPath(dir, files[i]));
      ASSERT_GE(bytes.size(), 8u);
      EXPECT_NE(bytes.find_last_not_of('\0'), std::string::npos);
      EXPECT_GT(bytes.find_last_not_of('\0') + 64, bytes.size())
          << "file " << files[i] << " still ends in zeros";
    }
  }
  auto s = BookieStorage::Open(o);
  ASSERT_TRUE(s.ok()) << s.status();
  for (int64_t e = 0; e < added; ++e) ASSERT_EQ(ReadBack(**s, 2, e), v1::OK) << e;
}

}  // namespace
}  // namespace ledgerkv::bookie
