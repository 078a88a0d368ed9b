// FaultPoints::ArmFromSpec: the LEDGERKV_FAULTS syntax process tests use to
// arm points inside a ledgerkv binary.
#include "base/fault_point.h"

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace ledgerkv {
namespace {

TEST(FaultSpecTest, OnceFiresAtTheFirstHitOnlyAndSleepNeverFires) {
  ScopedFaultPoints faults;
  ASSERT_TRUE(FaultPoints::Get().ArmFromSpec("a.b=once, c.d=sleep:50").ok());
  EXPECT_TRUE(FaultPoints::Get().Hit("a.b"));
  EXPECT_FALSE(FaultPoints::Get().Hit("a.b"));
  const absl::Time start = absl::Now();
  EXPECT_FALSE(FaultPoints::Get().Hit("c.d"));
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(50));
  EXPECT_FALSE(FaultPoints::Get().Hit("not.armed"));
}

TEST(FaultSpecTest, AMalformedSpecIsRefusedAndArmsNothing) {
  ScopedFaultPoints faults;
  for (const char* bad : {"a.b", "a.b=twice", "=once", "a.b=sleep:", "a.b=sleep:-1",
                          "a.b=sleep:x", "ok=once,a.b=sometimes"}) {
    const absl::Status s = FaultPoints::Get().ArmFromSpec(bad);
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << bad << ": " << s;
    EXPECT_FALSE(FaultPoints::Get().AnyArmed()) << bad;
  }
  EXPECT_TRUE(FaultPoints::Get().ArmFromSpec("").ok());
  EXPECT_FALSE(FaultPoints::Get().AnyArmed());
}

}  // namespace
}  // namespace ledgerkv
