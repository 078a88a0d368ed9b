// Test fixture for snapshot/: real bookies (gRPC on 127.0.0.1, real fsync)
// and the embedded metadata store from ledger/ledger_test_util.h, plus real
// RocksDB instances in a temporary directory. Test-only.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "ledger/ledger_client.h"
#include "ledger/ledger_test_util.h"
#include "rocksdb/db.h"
#include "rocksdb/options.h"
#include "snapshot/snapshot_store.h"

namespace ledgerkv::snapshot::testing {

using ledger::testing::TempDir;
// Flips the byte after every stored copy of a marker in journal files.
using ledger::testing::CorruptJournal;
using ledger::testing::TestCluster;
using KeyValues = std::vector<std::pair<std::string, std::string>>;

// Every (key, value) of the default column family of `db`, in order, as of
// `at` (nullptr: now).
inline KeyValues Contents(rocksdb::DB& db, const rocksdb::Snapshot* at = nullptr) {
  rocksdb::ReadOptions read;
  read.snapshot = at;
  KeyValues out;
  std::unique_ptr<rocksdb::Iterator> it(db.NewIterator(read));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    out.emplace_back(it->key().ToString(), it->value().ToString());
  }
  EXPECT_TRUE(it->status().ok()) << it->status().ToString();
  return out;
}

class SnapshotTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(dir_.path().empty());
    auto cluster = TestCluster::Start({.bookies = 3});
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = *std::move(cluster);
    NewClientAndStore();
  }

  void TearDown() override {
    store_.reset();
    client_.reset();
    cluster_.reset();
  }

  // (Re)creates the ledger client and the store with options_ (after a
  // change to options_, or after bookies restarted).
  void NewClientAndStore() {
    store_.reset();
    auto client = cluster_->NewClient();
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = *std::move(client);
    options_.client = client_.get();
    options_.metadata = cluster_->store();
    auto store = SnapshotStore::Create(options_);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
  }

  // A new, empty RocksDB in the test's directory.
  std::unique_ptr<rocksdb::DB> OpenDb(const std::string& name) {
    rocksdb::Options options;
    options.create_if_missing = true;
    options.error_if_exists = true;
    rocksdb::DB* db = nullptr;
    rocksdb::Status s = rocksdb::DB::Open(options, absl::StrCat(dir_.path(), "/", name), &db);
    EXPECT_TRUE(s.ok()) << s.ToString();
    return std::unique_ptr<rocksdb::DB>(db);
  }

  static void Put(rocksdb::DB& db, const std::string& key, const std::string& value) {
    rocksdb::WriteOptions write;
    write.disableWAL = true;  // as the KV server: the ledger log is the WAL
    rocksdb::Status s = db.Put(write, key, value);
    ASSERT_TRUE(s.ok()) << s.ToString();
  }

  // A snapshot source for `db` with a fixed (V, S).
  static SnapshotSource Source(rocksdb::DB& db, uint64_t revision, uint64_t seqno) {
    SnapshotSource source;
    source.db = &db;
    source.point = {.revision = revision, .seqno = seqno};
    return source;
  }

  bool LedgerExists(uint64_t id) {
    return !absl::IsNotFound(client_->GetLedgerMetadata(id).status());
  }

  TempDir dir_;
  std::unique_ptr<TestCluster> cluster_;
  std::unique_ptr<ledger::LedgerClient> client_;
  SnapshotOptions options_;
  std::unique_ptr<SnapshotStore> store_;
};

}  // namespace ledgerkv::snapshot::testing
