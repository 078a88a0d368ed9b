// LocalStore on a real RocksDB: what a crash leaves on disk.
#include "kv_server/range/local_store.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/fault_point.h"
#include "gtest/gtest.h"
#include "ledger/ledger_test_util.h"
#include "proto/range.pb.h"
#include "rocksdb/db.h"

namespace ledgerkv::kv {
namespace {

using ledger::testing::TempDir;

std::string KeyOf(uint64_t seqno) { return absl::StrCat("key-", seqno); }

// Applies the put of KeyOf(seqno) = "v" as the write of `seqno`.
absl::Status ApplyPut(LocalStore& store, uint64_t seqno) {
  range::v1::Effect effect;
  effect.set_revision(static_cast<int64_t>(seqno));
  range::v1::Mutation* m = effect.add_mutations();
  m->set_key(KeyOf(seqno));
  m->set_value("v");
  m->set_create_revision(static_cast<int64_t>(seqno));
  m->set_mod_revision(static_cast<int64_t>(seqno));
  m->set_version(1);
  std::vector<SequencedEffect> effects = {SequencedEffect{
      seqno, &effect,
      StatsDelta{.key_count = 1, .bytes = static_cast<int64_t>(KeyOf(seqno).size() + 1)}}};
  return store.Apply(effects);
}

// In a child process: applies one small put per seqno until RocksDB has
// flushed the meta column family on its own (its memtable made small so
// that it fills long before the data's, as it does in production where the
// meta takes four keys per apply), applies a few more, then dies without
// closing the store, as kill -9 would. Exit codes other than 0 name the
// step that failed.
[[noreturn]] void ApplyUntilTheMetaIsFlushedThenDie(const std::string& dir) {
  absl::StatusOr<std::unique_ptr<LocalStore>> store =
      LocalStore::Open(dir, LocalStore::Tuning{.meta_write_buffer_bytes = 1 << 20});
  if (!store.ok()) _exit(2);
  rocksdb::DB* db = (*store)->db();
  uint64_t flushed_at = 0;
  for (uint64_t seqno = 1; seqno <= 200000; ++seqno) {
    if (!ApplyPut(**store, seqno).ok()) _exit(4);
    if (flushed_at == 0) {
      std::string files;
      if (db->GetProperty((*store)->meta_cf(), "rocksdb.num-files-at-level0", &files) &&
          files != "0") {
        flushed_at = seqno;
      }
    } else if (seqno >= flushed_at + 100) {
      _exit(0);  // no Close: memtables are lost
    }
  }
  _exit(5);  // the meta never flushed
}

TEST(LocalStoreTest, AfterACrashTheDataOnDiskHoldsEverySeqnoTheMetaNames) {
  TempDir dir;
  const std::string db_dir = dir.path() + "/range";
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) ApplyUntilTheMetaIsFlushedThenDie(db_dir);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << status;
  ASSERT_EQ(WEXITSTATUS(status), 0) << "child failed at step " << WEXITSTATUS(status);

  absl::StatusOr<std::unique_ptr<LocalStore>> store = LocalStore::Open(db_dir);
  ASSERT_TRUE(store.ok()) << store.status();
  const LocalMeta meta = (*store)->meta();
  // Replay would start after applied_seqno: every write up to it must be
  // here, or it is lost for good.
  ASSERT_GT(meta.applied_seqno, 0u);
  uint64_t missing = 0;
  uint64_t first_missing = 0;
  for (uint64_t seqno = 1; seqno <= meta.applied_seqno; ++seqno) {
    absl::StatusOr<std::optional<StoredValue>> got = (*store)->Get(KeyOf(seqno));
    ASSERT_TRUE(got.ok()) << got.status();
    if (!got->has_value()) {
      if (missing++ == 0) first_missing = seqno;
    }
  }
  EXPECT_EQ(missing, 0u) << "the meta names seqno " << meta.applied_seqno << " but "
                         << missing << " of its writes are gone, the first at seqno "
                         << first_missing;
  EXPECT_EQ(meta.key_count, static_cast<int64_t>(meta.applied_seqno));
}

// Destroy (the range wiping a local state it cannot keep, before a
// restore) cut short by a crash: removing the DB in place could leave
// CURRENT and the MANIFEST without the files they name, a DB that no longer
// opens, so the range, which opens its local DB first, never opened again.
// Destroy renames the store away first: after a crash between the rename
// and the removal (the renamed store half removed, as remove_all leaves
// it), the directory is absent and opens as a new, empty store (the range
// then restores), and the leftover goes.
TEST(LocalStoreTest, ADestroyCutShortByACrashLeavesAStoreThatOpensEmpty) {
  TempDir dir;
  const std::string db_dir = dir.path() + "/range";
  {
    absl::StatusOr<std::unique_ptr<LocalStore>> store = LocalStore::Open(db_dir);
    ASSERT_TRUE(store.ok()) << store.status();
    for (uint64_t seqno = 1; seqno <= 100; ++seqno) ASSERT_TRUE(ApplyPut(**store, seqno).ok());
  }  // closed: flushed to table files

  ScopedFaultPoints faults;
  FaultPoints::Get().ArmAlways("local_store.destroy.renamed");
  ASSERT_FALSE(LocalStore::Destroy(db_dir).ok()) << "the crash point did not fire";
  FaultPoints::Get().DisarmAll();
  const std::string wiped = db_dir + LocalStore::kWipedSuffix;
  ASSERT_FALSE(std::filesystem::exists(db_dir)) << "not renamed away first";
  // The removal had begun: the table files are gone, CURRENT and the
  // MANIFEST are not.
  int removed = 0;
  for (const auto& entry : std::filesystem::directory_iterator(wiped)) {
    if (absl::EndsWith(entry.path().string(), ".sst")) {
      std::filesystem::remove(entry.path());
      ++removed;
    }
  }
  ASSERT_GT(removed, 0) << "nothing was flushed to a table file";
  ASSERT_TRUE(std::filesystem::exists(wiped + "/CURRENT"));
  // What an in-place removal cut short there would have left does not open.
  EXPECT_FALSE(LocalStore::Open(wiped).ok()) << "a half-removed DB opened";

  absl::StatusOr<std::unique_ptr<LocalStore>> again = LocalStore::Open(db_dir);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_FALSE((*again)->existed());
  EXPECT_EQ((*again)->meta().applied_seqno, 0u);
  EXPECT_FALSE(std::filesystem::exists(wiped)) << "the leftover was not removed";
}

}  // namespace
}  // namespace ledgerkv::kv
