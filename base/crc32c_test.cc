#include "base/crc32c.h"

#include <string>

#include "gtest/gtest.h"

namespace ledgerkv::crc32c {
namespace {

// Known answers from RFC 3720 (iSCSI) appendix B.4.
TEST(Crc32cTest, MatchesRfc3720Vectors) {
  std::string zeros(32, '\0');
  EXPECT_EQ(Value(zeros), 0x8a9136aau);
  std::string ones(32, '\xff');
  EXPECT_EQ(Value(ones), 0x62a8ab43u);
  std::string inc(32, '\0');
  for (int i = 0; i < 32; ++i) inc[i] = static_cast<char>(i);
  EXPECT_EQ(Value(inc), 0x46dd794eu);
  EXPECT_EQ(Value("123456789"), 0xe3069283u);
}

TEST(Crc32cTest, ExtendEqualsWholeValue) {
  std::string s = "hello, ledgers and bookies, in many pieces";
  for (size_t cut = 0; cut <= s.size(); ++cut) {
    uint32_t c = Extend(Value(s.data(), cut), s.data() + cut, s.size() - cut);
    EXPECT_EQ(c, Value(s)) << cut;
  }
}

}  // namespace
}  // namespace ledgerkv::crc32c
