// Helpers shared by the bookie tests.
#pragma once

#include <stdlib.h>

#include <cstdint>
#include <deque>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/entry_checksum.h"
#include "base/file.h"
#include "gtest/gtest.h"
#include "ledger/bookie/bookie_storage.h"

namespace ledgerkv::bookie::testing {

// Directories made by NewTempDir, removed when the test program exits.
class TempDirs {
 public:
  ~TempDirs() {
    for (const std::string& d : dirs_) {
      std::error_code ignored;
      std::filesystem::remove_all(d, ignored);
    }
  }
  void Add(std::string d) { dirs_.push_back(std::move(d)); }

 private:
  std::vector<std::string> dirs_;
};

inline std::string NewTempDir(const std::string& name) {
  static TempDirs dirs;
  std::string tmpl = ::testing::TempDir() + "/bookie_test." + name + ".XXXXXX";
  char* d = ::mkdtemp(tmpl.data());
  EXPECT_NE(d, nullptr);
  dirs.Add(tmpl);
  return tmpl;
}

inline std::string Payload(uint64_t ledger, int64_t entry) {
  return absl::StrCat("payload of ledger ", ledger, " entry ", entry, " ",
                      std::string(static_cast<size_t>(entry % 7) * 10, 'x'));
}

// Entries whose payloads the batch owns (views stay valid while it lives).
class EntryBatch {
 public:
  EntryBatch& Add(uint64_t ledger, int64_t entry, int64_t lac, std::string payload) {
    payloads_.push_back(std::move(payload));
    const std::string& p = payloads_.back();
    views_.push_back(EntryView{ledger, entry, lac, EntryChecksum(ledger, entry, lac, p), p});
    return *this;
  }
  EntryBatch& Add(uint64_t ledger, int64_t entry, int64_t lac = -1) {
    return Add(ledger, entry, lac, Payload(ledger, entry));
  }
  std::vector<EntryView>& views() { return views_; }

 private:
  std::deque<std::string> payloads_;  // deque: views stay valid on growth
  std::vector<EntryView> views_;
};

inline std::vector<Code> AddSync(BookieStorage& storage, EntryBatch& batch,
                                 bool recovery = false) {
  absl::Notification done;
  std::vector<Code> out;
  storage.Add(batch.views(), recovery, [&](std::vector<Code> codes) {
    out = std::move(codes);
    done.Notify();
  });
  done.WaitForNotification();
  return out;
}

inline Code AddOne(BookieStorage& storage, uint64_t ledger, int64_t entry, int64_t lac = -1,
                   bool recovery = false) {
  EntryBatch b;
  b.Add(ledger, entry, lac);
  std::vector<Code> codes = AddSync(storage, b, recovery);
  return codes.size() == 1 ? codes[0] : v1::CODE_UNSPECIFIED;
}

inline Code FenceSync(BookieStorage& storage, uint64_t ledger) {
  absl::Notification done;
  Code out = v1::CODE_UNSPECIFIED;
  storage.Fence(ledger, [&](Code c) {
    out = c;
    done.Notify();
  });
  done.WaitForNotification();
  return out;
}

// Reads an entry and checks its payload and checksum when OK.
inline Code ReadBack(BookieStorage& storage, uint64_t ledger, int64_t entry,
                     std::string* payload = nullptr) {
  v1::Entry e;
  Code c = storage.ReadEntry(ledger, entry, &e);
  if (c == v1::OK) {
    EXPECT_EQ(e.ledger_id(), ledger);
    EXPECT_EQ(e.entry_id(), entry);
    EXPECT_EQ(e.checksum(), EntryChecksum(ledger, entry, e.lac(), e.payload()));
    if (payload != nullptr) *payload = e.payload();
  }
  return c;
}

inline std::string JournalPath(const std::string& dir, uint64_t number) {
  return absl::StrCat(dir, "/", JournalFileName(number));
}

// Overwrites byte `offset` of `path` with its complement.
inline void FlipByte(const std::string& path, uint64_t offset) {
  FILE* f = fopen(path.c_str(), "r+b");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(fseek(f, static_cast<long>(offset), SEEK_SET), 0);
  int c = fgetc(f);
  ASSERT_NE(c, EOF);
  ASSERT_EQ(fseek(f, static_cast<long>(offset), SEEK_SET), 0);
  fputc(~c & 0xff, f);
  fclose(f);
}

// Overwrites `path` from `offset` with `bytes` (the file may grow).
inline void WriteBytesAt(const std::string& path, uint64_t offset, const std::string& bytes) {
  FILE* f = fopen(path.c_str(), "r+b");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(fseek(f, static_cast<long>(offset), SEEK_SET), 0);
  ASSERT_EQ(fwrite(bytes.data(), 1, bytes.size(), f), bytes.size());
  fclose(f);
}

inline void AppendBytes(const std::string& path, const std::string& bytes) {
  FILE* f = fopen(path.c_str(), "ab");
  ASSERT_NE(f, nullptr);
  fwrite(bytes.data(), 1, bytes.size(), f);
  fclose(f);
}

inline uint64_t FileSize(const std::string& path) {
  absl::StatusOr<uint64_t> s = Env::Default()->GetFileSize(path);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *s : 0;
}

// Waits up to 10 s for `done` to hold (background work: the journal's
// filler, the idle writer's sync mark). Returns whether it held.
template <typename Pred>
bool Eventually(Pred done) {
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (!done()) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(5));
  }
  return true;
}

}  // namespace ledgerkv::bookie::testing
