#include "kv_server/range/stored_value.h"

#include <cstdint>
#include <string>

#include "gtest/gtest.h"

namespace ledgerkv::kv {
namespace {

TEST(StoredValueTest, RoundTripsEveryFieldAndBinaryValues) {
  const StoredValue cases[] = {
      {.create_revision = 0, .mod_revision = 0, .version = 0, .value = ""},
      {.create_revision = 1, .mod_revision = 1, .version = 1, .value = "v"},
      {.create_revision = 127, .mod_revision = 128, .version = 300,
       .value = std::string("\0\x01\xff", 3)},
      {.create_revision = INT64_MAX, .mod_revision = INT64_MAX, .version = INT64_MAX,
       .value = std::string(100000, 'x')},
  };
  for (const StoredValue& v : cases) {
    const std::string bytes = EncodeStoredValue(v);
    EXPECT_EQ(static_cast<uint8_t>(bytes[0]), kStoredValueFormat);
    auto back = DecodeStoredValue(bytes);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(*back, v);
  }
}

TEST(StoredValueTest, LayoutIsFormatByteThenVarintsThenValue) {
  const std::string bytes =
      EncodeStoredValue({.create_revision = 1, .mod_revision = 300, .version = 2, .value = "ab"});
  EXPECT_EQ(bytes, std::string("\x01\x01\xac\x02\x02" "ab", 7));
}

TEST(StoredValueTest, EveryTruncationOfTheHeaderIsDataLoss) {
  const std::string bytes = EncodeStoredValue(
      {.create_revision = 1 << 20, .mod_revision = 1 << 21, .version = 1 << 22, .value = ""});
  for (size_t n = 0; n < bytes.size(); ++n) {
    auto back = DecodeStoredValue(std::string_view(bytes).substr(0, n));
    EXPECT_EQ(back.status().code(), absl::StatusCode::kDataLoss) << "prefix " << n;
  }
}

TEST(StoredValueTest, UnknownFormatAndOverlongVarintsAreDataLoss) {
  std::string bytes = EncodeStoredValue({.create_revision = 1, .mod_revision = 1, .version = 1});
  bytes[0] = 2;
  EXPECT_EQ(DecodeStoredValue(bytes).status().code(), absl::StatusCode::kDataLoss);
  // 11 continuation bytes: more than 64 bits.
  std::string overlong = "\x01" + std::string(10, '\xff') + "\x01\x01\x01";
  EXPECT_EQ(DecodeStoredValue(overlong).status().code(), absl::StatusCode::kDataLoss);
  // A 64-bit value above INT64_MAX.
  std::string negative = "\x01" + std::string(9, '\xff') + "\x01" + "\x01\x01";
  EXPECT_EQ(DecodeStoredValue(negative).status().code(), absl::StatusCode::kDataLoss);
}

}  // namespace
}  // namespace ledgerkv::kv
