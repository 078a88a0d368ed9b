// Test fixture for wal/: real bookies (gRPC on 127.0.0.1, real fsync) and an
// embedded metadata store from ledger/ledger_test_util.h, plus helpers to
// append and read records. Test-only.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"
#include "ledger/ledger_client.h"
#include "ledger/ledger_test_util.h"
#include "wal/log_metadata.h"
#include "wal/log_options.h"
#include "wal/log_reader.h"
#include "wal/log_writer.h"

namespace ledgerkv::wal::testing {

using ledger::testing::TestCluster;

// A recognisable record of about `size` bytes for (tag, i).
inline std::string RecordFor(const std::string& tag, int64_t i, size_t size = 64) {
  std::string r = absl::StrCat(tag, "-", i, "-");
  while (r.size() < size) r += static_cast<char>('a' + (r.size() + i) % 26);
  return r;
}

class WalTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto cluster = TestCluster::Start({.bookies = 3});
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = *std::move(cluster);
    auto client = cluster_->NewClient();
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = *std::move(client);
    options_.client = client_.get();
    options_.metadata = cluster_->store();
  }

  void TearDown() override {
    client_.reset();
    cluster_.reset();
  }

  // Appends `count` records tagged `tag` without waiting between them, then
  // waits for every callback. Results are in callback order.
  std::vector<absl::StatusOr<uint64_t>> AppendAll(LogWriter& writer, const std::string& tag,
                                                  int64_t count, size_t size = 64) {
    absl::Mutex mu;
    std::vector<absl::StatusOr<uint64_t>> results;
    for (int64_t i = 0; i < count; ++i) {
      writer.Append(RecordFor(tag, i, size), [&](absl::StatusOr<uint64_t> r) {
        absl::MutexLock l(&mu);
        results.push_back(std::move(r));
      });
    }
    absl::MutexLock l(&mu);
    auto all = [&]() { return static_cast<int64_t>(results.size()) == count; };
    mu.Await(absl::Condition(&all));
    return results;
  }

  // Appends waves of `per_wave` records (wave k tagged "w<k>", so seqno s
  // holds RecordFor("w" + (s-1)/per_wave, (s-1)%per_wave, size)) until the
  // log has at least `segments` segments: rolls happen in the background,
  // so a fixed amount of data does not give a fixed number of them. Returns
  // the number of records appended (all acknowledged, seqnos 1..n).
  int64_t AppendUntilSegments(LogWriter& writer, int64_t per_wave, size_t size, int segments) {
    int64_t appended = 0;
    for (int wave = 0; wave < 200 && writer.metadata().segments_size() < segments; ++wave) {
      for (auto& r : AppendAll(writer, absl::StrCat("w", wave), per_wave, size)) {
        EXPECT_TRUE(r.ok()) << r.status();
        if (!r.ok()) return appended;
        EXPECT_EQ(*r, static_cast<uint64_t>(appended + 1));
        ++appended;
      }
    }
    EXPECT_GE(writer.metadata().segments_size(), segments);
    return appended;
  }

  // Every committed record from `from` on (Next until it returns nothing).
  absl::StatusOr<std::vector<LogRecord>> ReadAll(std::string_view name, uint64_t from) {
    auto reader = LogReader::Open(options_, std::string(name), from);
    if (!reader.ok()) return reader.status();
    std::vector<LogRecord> all;
    for (;;) {
      auto records = (*reader)->Next();
      if (!records.ok()) return records.status();
      if (records->empty()) return all;
      for (LogRecord& r : *records) all.push_back(std::move(r));
    }
  }

  std::unique_ptr<TestCluster> cluster_;
  std::unique_ptr<ledger::LedgerClient> client_;
  LogOptions options_;
};

// The record AppendUntilSegments wrote at `seqno`.
inline std::string WaveRecordFor(uint64_t seqno, int64_t per_wave, size_t size) {
  return RecordFor(absl::StrCat("w", (seqno - 1) / per_wave), (seqno - 1) % per_wave, size);
}

// Asserts records have seqnos first, first+1, ... (strictly increasing and
// unique).
inline void ExpectContiguous(const std::vector<LogRecord>& records, uint64_t first) {
  for (size_t i = 0; i < records.size(); ++i) {
    ASSERT_EQ(records[i].seqno, first + i) << "record " << i;
  }
}

}  // namespace ledgerkv::wal::testing
