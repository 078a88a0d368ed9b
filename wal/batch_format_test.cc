#include "wal/batch_format.h"

#include <string>

#include "gtest/gtest.h"

namespace ledgerkv::wal {
namespace {

std::string ThreeRecords() {
  BatchBuilder builder(41);
  builder.Add("alpha");
  builder.Add("");
  builder.Add(std::string(300, 'x'));  // a two-byte length
  return builder.Finish();
}

TEST(BatchFormatTest, RecordsRoundTripWithContiguousSeqnos) {
  const std::string payload = ThreeRecords();
  auto batch = DecodeBatch(payload);
  ASSERT_TRUE(batch.ok()) << batch.status();
  EXPECT_EQ(batch->header.first_seqno, 41u);
  EXPECT_EQ(batch->header.count, 3u);
  EXPECT_EQ(batch->header.last_seqno(), 43u);
  ASSERT_EQ(batch->records.size(), 3u);
  EXPECT_EQ(batch->records[0], "alpha");
  EXPECT_EQ(batch->records[1], "");
  EXPECT_EQ(batch->records[2], std::string(300, 'x'));
  auto header = DecodeBatchHeader(payload);
  ASSERT_TRUE(header.ok());
  EXPECT_EQ(header->first_seqno, 41u);
}

TEST(BatchFormatTest, BuilderContinuesSeqnosAfterFinish) {
  BatchBuilder builder(1);
  builder.Add("a");
  builder.Add("b");
  builder.Finish();
  EXPECT_EQ(builder.count(), 0u);
  builder.Add("c");
  auto batch = DecodeBatch(builder.Finish());
  ASSERT_TRUE(batch.ok());
  EXPECT_EQ(batch->header.first_seqno, 3u);
}

// Every truncation and every single-byte change of the framing is either
// detected as DATA_LOSS or still decodes to a well-formed batch; nothing
// crashes or reads out of bounds (ASan in CI).
TEST(BatchFormatTest, TruncatedOrCorruptPayloadIsDataLoss) {
  const std::string payload = ThreeRecords();
  for (size_t n = 0; n < payload.size(); ++n) {
    auto batch = DecodeBatch(payload.substr(0, n));
    EXPECT_EQ(batch.status().code(), absl::StatusCode::kDataLoss) << "truncated to " << n;
  }
  EXPECT_EQ(DecodeBatch(payload + "z").status().code(), absl::StatusCode::kDataLoss);

  std::string bad_version = payload;
  bad_version[0] = 7;
  EXPECT_EQ(DecodeBatch(bad_version).status().code(), absl::StatusCode::kDataLoss);
  std::string zero_count = payload;
  for (int i = 9; i < 13; ++i) zero_count[i] = 0;
  EXPECT_EQ(DecodeBatch(zero_count).status().code(), absl::StatusCode::kDataLoss);
  std::string huge_count = payload;
  huge_count[12] = '\x7f';
  EXPECT_EQ(DecodeBatch(huge_count).status().code(), absl::StatusCode::kDataLoss);

  for (size_t i = 0; i < payload.size(); ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      std::string flipped = payload;
      flipped[i] ^= static_cast<char>(1 << bit);
      auto batch = DecodeBatch(flipped);
      if (!batch.ok()) {
        EXPECT_EQ(batch.status().code(), absl::StatusCode::kDataLoss);
        continue;
      }
      size_t total = 0;
      for (auto r : batch->records) total += r.size();
      EXPECT_LE(total, flipped.size());
    }
  }
}

}  // namespace
}  // namespace ledgerkv::wal
