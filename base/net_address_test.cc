// The address a registering bookie or server publishes (docs/cluster.md,
// "Addresses: listen and advertise").
#include "base/net_address.h"

#include "gtest/gtest.h"

namespace ledgerkv {
namespace {

TEST(NetAddressTest, AListenAddressOthersCanDialIsPublishedWithTheBoundPort) {
  EXPECT_TRUE(CheckAdvertisable("10.0.0.5:3181", "").ok());
  EXPECT_EQ(AdvertisedAddress("10.0.0.5:3181", 3181, ""), "10.0.0.5:3181");
  EXPECT_TRUE(CheckAdvertisable("127.0.0.1:0", "").ok());
  EXPECT_EQ(AdvertisedAddress("127.0.0.1:0", 40123, ""), "127.0.0.1:40123");
  EXPECT_TRUE(CheckAdvertisable("[fd00::5]:0", "").ok());
  EXPECT_EQ(AdvertisedAddress("[fd00::5]:0", 40123, ""), "[fd00::5]:40123");
  EXPECT_TRUE(CheckAdvertisable("bookie-3.example:3181", "").ok());
}

TEST(NetAddressTest, AWildcardListenWithoutAdvertiseIsRefusedNamingTheFlag) {
  for (const char* listen :
       {"0.0.0.0:3181", "[::]:3181", ":3181", "*:3181", "0:3181", "[::0]:3181", ":::3181"}) {
    const absl::Status s = CheckAdvertisable(listen, "");
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << listen << ": " << s;
    EXPECT_NE(s.message().find("--advertise"), absl::string_view::npos) << s;
    EXPECT_NE(s.message().find(listen), absl::string_view::npos) << s;
  }
}

TEST(NetAddressTest, AdvertiseNamesTheHostAndOptionallyThePort) {
  EXPECT_TRUE(CheckAdvertisable("0.0.0.0:0", "10.0.0.5").ok());
  EXPECT_EQ(AdvertisedAddress("0.0.0.0:0", 40123, "10.0.0.5"), "10.0.0.5:40123");
  // A forwarded port is published as given, whatever was bound.
  EXPECT_TRUE(CheckAdvertisable("0.0.0.0:3181", "gw.example:13181").ok());
  EXPECT_EQ(AdvertisedAddress("0.0.0.0:3181", 3181, "gw.example:13181"), "gw.example:13181");
  EXPECT_TRUE(CheckAdvertisable("[::]:0", "[fd00::5]").ok());
  EXPECT_EQ(AdvertisedAddress("[::]:0", 40123, "[fd00::5]"), "[fd00::5]:40123");
  EXPECT_TRUE(CheckAdvertisable("[::]:0", "[fd00::5]:3181").ok());
  EXPECT_EQ(AdvertisedAddress("[::]:0", 40123, "[fd00::5]:3181"), "[fd00::5]:3181");
  // Advertise also overrides a dialable listen host (a NAT's outside name).
  EXPECT_EQ(AdvertisedAddress("10.0.0.5:3181", 3181, "public.example"), "public.example:3181");
}

TEST(NetAddressTest, AnAdvertisedAddressNobodyCanDialIsRefused) {
  for (const char* advertise :
       {"0.0.0.0", "0.0.0.0:3181", "[::]", "[::]:3181", "*", ":3181", "host:", "host:0",
        "host:65536", "host:port", "host:+80", "host: 80", "[fd00::5]:", "0", "[::0]",
        "[0:0:0:0:0:0:0:0]:3181",
        // IPv6 without brackets would be published unusable ("fd00::5:3181").
        "fd00::5", "fd00::5:3181", "[]", "[]:3181", "[fd00::5", "[fd00::5]junk",
        "[fd00::5]3181"}) {
    const absl::Status s = CheckAdvertisable("0.0.0.0:3181", advertise);
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << advertise << ": " << s;
    EXPECT_NE(s.message().find(advertise), absl::string_view::npos) << s;
  }
}

}  // namespace
}  // namespace ledgerkv
