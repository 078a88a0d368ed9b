// EmbeddedStore: the contract suite plus what only a local, on-disk store
// promises (restart and crash behaviour, Open errors, bounded watch history,
// refusing writes after a failed sync).
#include "metadata/embedded_store.h"

#include <stdlib.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/fault_point.h"
#include "base/small_tmpfs.h"
#include "gtest/gtest.h"
#include "metadata/metadata_contract_test.h"

namespace ledgerkv::metadata {
namespace {

using contract::EventCollector;
using contract::MetadataContractParam;
using contract::MetadataStoreContractTest;
using contract::StoreHarness;
using contract::WaitUntil;

// A unique directory under the test temp dir, removed with its contents.
class TempDir {
 public:
  TempDir() {
    std::string pattern = ::testing::TempDir() + "ledgerkv_metadata_XXXXXX";
    if (mkdtemp(pattern.data()) == nullptr) {
      ADD_FAILURE() << "mkdtemp " << pattern << ": " << strerror(errno);
    }
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

class EmbeddedHarness : public StoreHarness {
 public:
  absl::StatusOr<std::unique_ptr<MetadataStore>> Create() override {
    ASSIGN_OR_RETURN(std::unique_ptr<EmbeddedStore> store, EmbeddedStore::Open(StoreDir()));
    return std::unique_ptr<MetadataStore>(std::move(store));
  }
  absl::StatusOr<std::unique_ptr<MetadataStore>> Reopen(
      std::unique_ptr<MetadataStore> store) override {
    store.reset();
    return Create();
  }

 private:
  std::string StoreDir() const { return dir_.path() + "/store"; }
  TempDir dir_;
};

INSTANTIATE_TEST_SUITE_P(Embedded, MetadataStoreContractTest,
                         ::testing::Values(MetadataContractParam{
                             "embedded", [] { return std::make_unique<EmbeddedHarness>(); }}),
                         contract::MetadataContractParamName);

std::unique_ptr<EmbeddedStore> MustOpen(const std::string& dir,
                                        const EmbeddedStore::Options& options = {}) {
  absl::StatusOr<std::unique_ptr<EmbeddedStore>> store = EmbeddedStore::Open(dir, options);
  EXPECT_TRUE(store.ok()) << store.status();
  return store.ok() ? std::move(store).value() : nullptr;
}

TEST(EmbeddedStoreTest, EphemeralKeysOfAPreviousProcessAreGoneAfterReopen) {
  TempDir dir;
  Version before = 0;
  {
    std::unique_ptr<EmbeddedStore> store = MustOpen(dir.path());
    ASSERT_NE(store, nullptr);
    METADATA_ASSERT_OK_AND_ASSIGN(SessionId session, store->CreateSession(SessionOptions{}));
    METADATA_ASSERT_OK(store->Put("eph/a", "a", kMustNotExist, session));
    METADATA_ASSERT_OK(store->Put("eph/b", "b", kMustNotExist, session));
    METADATA_ASSERT_OK(store->Put("keep/c", "c", kMustNotExist));
    METADATA_ASSERT_OK_AND_ASSIGN(before, store->CurrentRevision());
    // Destroyed with the session still open, as when a process stops.
  }
  std::unique_ptr<EmbeddedStore> store = MustOpen(dir.path());
  ASSERT_NE(store, nullptr);
  METADATA_EXPECT_CODE(store->Get("eph/a"), kNotFound);
  METADATA_EXPECT_CODE(store->Get("eph/b"), kNotFound);
  METADATA_ASSERT_OK(store->Get("keep/c"));
  // The cleanup is a mutation: the revision moves on.
  METADATA_ASSERT_OK_AND_ASSIGN(Version after, store->CurrentRevision());
  EXPECT_GT(after, before);
}

// Runs in a child process: writes, then exits without any destructor or
// flush, like kill -9 right after the acknowledgements.
void WriteThenCrash(const std::string& dir) {
  absl::StatusOr<std::unique_ptr<EmbeddedStore>> store = EmbeddedStore::Open(dir);
  if (!store.ok()) std::_Exit(2);
  absl::StatusOr<SessionId> session = (*store)->CreateSession(SessionOptions{});
  if (!session.ok()) std::_Exit(3);
  if (!(*store)->Put("crash/keep", "k", kMustNotExist).ok()) std::_Exit(4);
  if (!(*store)->Put("crash/eph", "e", kMustNotExist, *session).ok()) std::_Exit(5);
  std::_Exit(0);
}

// A process killed without running any destructor: every acknowledged write
// is there after reopen, and its ephemeral keys are not.
TEST(EmbeddedStoreTest, CrashedProcessKeepsAcknowledgedWritesAndLosesItsEphemeralKeys) {
  TempDir dir;
  EXPECT_EXIT(WriteThenCrash(dir.path()), ::testing::ExitedWithCode(0), "");
  std::unique_ptr<EmbeddedStore> store = MustOpen(dir.path());
  ASSERT_NE(store, nullptr);
  METADATA_ASSERT_OK_AND_ASSIGN(VersionedValue kept, store->Get("crash/keep"));
  EXPECT_EQ(kept.value, "k");
  METADATA_EXPECT_CODE(store->Get("crash/eph"), kNotFound);
  METADATA_ASSERT_OK_AND_ASSIGN(Version next, store->Put("crash/next", "n", kMustNotExist));
  EXPECT_GT(next, kept.version);
}

// A full disk fails writes with an error and loses nothing acknowledged;
// closing the store on it must not abort the process (RocksDB's own LOG
// file used to: base/rocksdb_logger.h).
TEST(EmbeddedStoreTest, FullFileSystemFailsWritesAndKeepsAcknowledgedOnes) {
  TempDir dir;
  SmallTmpfs fs;
  if (absl::Status m = fs.Mount(dir.path(), 16); !m.ok()) {
    GTEST_SKIP() << m << " (needs CAP_SYS_ADMIN, as root in CI)";
  }
  const std::string store_dir = dir.path() + "/store";
  std::unique_ptr<EmbeddedStore> store = MustOpen(store_dir);
  ASSERT_NE(store, nullptr);
  if (absl::Status f = fs.FillLeaving(3 << 20); !f.ok()) FAIL() << f;
  const std::string value(64 << 10, 'v');
  std::vector<std::string> acked;
  absl::Status failed;
  for (int i = 0; i < 1000 && failed.ok(); ++i) {
    const std::string key = absl::StrCat("full/", i);
    absl::StatusOr<Version> put = store->Put(key, value, kMustNotExist);
    if (put.ok()) {
      acked.push_back(key);
    } else {
      failed = put.status();
    }
  }
  ASSERT_FALSE(failed.ok()) << "the file system never filled up";
  ASSERT_FALSE(acked.empty());
  EXPECT_NE(failed.message().find("space"), std::string::npos) << failed;
  for (const std::string& key : acked) {
    METADATA_ASSERT_OK_AND_ASSIGN(VersionedValue got, store->Get(key));
    ASSERT_EQ(got.value, value) << key;
  }
  store.reset();

  ASSERT_TRUE(fs.Free().ok());
  store = MustOpen(store_dir);
  ASSERT_NE(store, nullptr);
  for (const std::string& key : acked) {
    METADATA_ASSERT_OK_AND_ASSIGN(VersionedValue got, store->Get(key));
    ASSERT_EQ(got.value, value) << key;
  }
  METADATA_ASSERT_OK(store->Put("full/after", "a", kMustNotExist));
}

TEST(EmbeddedStoreTest, OpenFailsClearlyWhenDirectoryCannotBeCreated) {
  TempDir dir;
  const std::string file = dir.path() + "/plain_file";
  std::ofstream(file) << "not a directory";
  for (const std::string& bad : {file, file + "/store"}) {
    absl::StatusOr<std::unique_ptr<EmbeddedStore>> store = EmbeddedStore::Open(bad);
    ASSERT_FALSE(store.ok()) << bad;
    EXPECT_NE(store.status().message().find(bad), std::string::npos) << store.status();
  }
}

TEST(EmbeddedStoreTest, SecondOpenOfSameDirectoryFailsWhileFirstIsOpen) {
  TempDir dir;
  std::unique_ptr<EmbeddedStore> first = MustOpen(dir.path());
  ASSERT_NE(first, nullptr);
  absl::StatusOr<std::unique_ptr<EmbeddedStore>> second = EmbeddedStore::Open(dir.path());
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.status().message().find(dir.path()), std::string::npos) << second.status();
  first.reset();
  EXPECT_NE(MustOpen(dir.path()), nullptr);
}

TEST(EmbeddedStoreTest, WatchFromRevisionOutsideHistoryIsOutOfRange) {
  TempDir dir;
  EmbeddedStore::Options options;
  options.watch_history_events = 3;
  std::vector<Version> versions;
  {
    std::unique_ptr<EmbeddedStore> store = MustOpen(dir.path(), options);
    ASSERT_NE(store, nullptr);
    for (int i = 0; i < 5; ++i) {
      METADATA_ASSERT_OK_AND_ASSIGN(Version v, store->Put(absl::StrCat("h/", i), "v", kAnyVersion));
      versions.push_back(v);
    }
    METADATA_EXPECT_CODE(store->Watch("h/", versions[1], [](const auto&) {}), kOutOfRange);
    EventCollector collector;
    METADATA_ASSERT_OK_AND_ASSIGN(auto watch,
                                  store->Watch("h/", versions[2], collector.Callback()));
    ASSERT_TRUE(collector.WaitForEvents(3));
    EXPECT_EQ(collector.Events()[0].version, versions[2]);
    METADATA_EXPECT_CODE(store->Watch("h/", -1, [](const auto&) {}), kInvalidArgument);
  }
  // History lives in memory: after a restart only new revisions can be watched.
  std::unique_ptr<EmbeddedStore> store = MustOpen(dir.path(), options);
  ASSERT_NE(store, nullptr);
  METADATA_EXPECT_CODE(store->Watch("h/", versions[4], [](const auto&) {}), kOutOfRange);
  EventCollector collector;
  METADATA_ASSERT_OK_AND_ASSIGN(auto watch,
                                store->Watch("h/", versions[4] + 1, collector.Callback()));
  METADATA_ASSERT_OK(store->Put("h/new", "v", kAnyVersion));
  ASSERT_TRUE(collector.WaitForEvents(1));
  EXPECT_EQ(collector.Events()[0].key, "h/new");
}

// Registering a watch from an old revision while writes commit must hand
// over from replay to live events without losing or repeating one.
TEST(EmbeddedStoreTest, WatchFromOldRevisionDuringWritesMissesAndRepeatsNothing) {
  TempDir dir;
  std::unique_ptr<EmbeddedStore> store = MustOpen(dir.path());
  ASSERT_NE(store, nullptr);
  constexpr int kWrites = 300;
  // A slow watcher keeps the dispatch queue full, so the new watcher
  // registers while already-replayed revisions still wait for delivery.
  METADATA_ASSERT_OK_AND_ASSIGN(auto slow, store->Watch("r/", 0, [](const auto&) {
    absl::SleepFor(absl::Milliseconds(1));
  }));
  METADATA_ASSERT_OK_AND_ASSIGN(Version first, store->Put("r/0", "v", kAnyVersion));
  std::thread writer([&] {
    for (int i = 1; i < kWrites; ++i) {
      EXPECT_TRUE(store->Put(absl::StrCat("r/", i), "v", kAnyVersion).ok());
    }
  });
  ASSERT_TRUE(WaitUntil([&] { return *store->CurrentRevision() > first + kWrites / 3; }));
  EventCollector collector;
  absl::StatusOr<std::unique_ptr<WatchHandle>> watch =
      store->Watch("r/", first, collector.Callback());
  writer.join();
  ASSERT_TRUE(watch.ok()) << watch.status();
  ASSERT_TRUE(collector.WaitForEvents(kWrites));
  absl::SleepFor(contract::kQuietPeriod);
  const std::vector<WatchEvent> events = collector.Events();
  ASSERT_EQ(events.size(), static_cast<size_t>(kWrites));
  for (int i = 0; i < kWrites; ++i) {
    EXPECT_EQ(events[i].key, absl::StrCat("r/", i));
    EXPECT_EQ(events[i].version, first + i);
  }
}

TEST(EmbeddedStoreTest, FailedWriteAppliesNothingAndRefusesLaterMutationsUntilReopen) {
  TempDir dir;
  ScopedFaultPoints faults;
  Version good = 0;
  {
    std::unique_ptr<EmbeddedStore> store = MustOpen(dir.path());
    ASSERT_NE(store, nullptr);
    METADATA_ASSERT_OK_AND_ASSIGN(good, store->Put("f/good", "g", kMustNotExist));
    FaultPoints::Get().ArmAlways("metadata.embedded.write");
    METADATA_EXPECT_CODE(store->Put("f/bad", "b", kMustNotExist), kUnavailable);
    FaultPoints::Get().DisarmAll();
    METADATA_EXPECT_CODE(store->Get("f/bad"), kNotFound);
    // The store cannot know what reached the disk: it stays failed.
    METADATA_EXPECT_CODE(store->Put("f/later", "l", kMustNotExist), kUnavailable);
    METADATA_EXPECT_CODE(store->Delete("f/good", kAnyVersion), kUnavailable);
    METADATA_ASSERT_OK(store->Get("f/good"));
    METADATA_ASSERT_OK_AND_ASSIGN(Version revision, store->CurrentRevision());
    EXPECT_EQ(revision, good);
  }
  std::unique_ptr<EmbeddedStore> store = MustOpen(dir.path());
  ASSERT_NE(store, nullptr);
  METADATA_EXPECT_CODE(store->Get("f/bad"), kNotFound);
  METADATA_ASSERT_OK_AND_ASSIGN(Version v, store->Put("f/later", "l", kMustNotExist));
  EXPECT_GT(v, good);
}

TEST(EmbeddedStoreTest, NextIdOnNonNumericCounterIsFailedPreconditionAndChangesNothing) {
  TempDir dir;
  std::unique_ptr<EmbeddedStore> store = MustOpen(dir.path());
  ASSERT_NE(store, nullptr);
  const std::string key = Keys("c").IdGen("ledger");
  METADATA_ASSERT_OK_AND_ASSIGN(Version v, store->Put(key, "garbage", kMustNotExist));
  METADATA_EXPECT_CODE(NextId(*store, key), kFailedPrecondition);
  METADATA_ASSERT_OK_AND_ASSIGN(VersionedValue got, store->Get(key));
  EXPECT_EQ(got.value, "garbage");
  EXPECT_EQ(got.version, v);
}

TEST(EmbeddedStoreTest, CreateSessionRejectsNonPositiveTtl) {
  TempDir dir;
  std::unique_ptr<EmbeddedStore> store = MustOpen(dir.path());
  ASSERT_NE(store, nullptr);
  SessionOptions options;
  options.ttl = absl::ZeroDuration();
  METADATA_EXPECT_CODE(store->CreateSession(options), kInvalidArgument);
}

}  // namespace
}  // namespace ledgerkv::metadata
