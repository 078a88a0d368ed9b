#include "bench/proc_stats.h"

#include <unistd.h>

#include <cstring>
#include <memory>

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace ledgerkv::bench {
namespace {

// The server's peak memory is read from /proc: touching 64 MiB must show
// in both the sampled VmRSS maximum and VmHWM.
TEST(ProcStatsTest, SamplerAndHighWaterMarkSeeMemoryGrowth) {
  absl::StatusOr<MemoryStatus> before = ReadMemoryStatus(getpid());
  ASSERT_TRUE(before.ok()) << before.status();
  RssSampler sampler(getpid(), absl::Milliseconds(10));
  constexpr size_t kBytes = 64 << 20;
  auto block = std::make_unique<char[]>(kBytes);
  std::memset(block.get(), 1, kBytes);
  absl::SleepFor(absl::Milliseconds(50));
  const int64_t max_rss_kb = sampler.Stop();
  absl::StatusOr<MemoryStatus> after = ReadMemoryStatus(getpid());
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_GE(max_rss_kb, before->rss_kb + 60 * 1024);
  EXPECT_GE(after->hwm_kb, before->rss_kb + 60 * 1024);
  EXPECT_EQ(sampler.Stop(), max_rss_kb);  // idempotent
  volatile char sink = block[kBytes - 1];
  (void)sink;
}

TEST(ProcStatsTest, CpuSecondsGrowWithWorkAndMissingProcessIsNotFound) {
  absl::StatusOr<double> before = ReadCpuSeconds(getpid());
  ASSERT_TRUE(before.ok()) << before.status();
  const double self_before = SelfCpuSeconds();
  // Busy until this thread has used 0.15 s of CPU (by its own clock), not
  // for a fixed wall time: with ctest -j2 on two cores it may get far less
  // than a whole one.
  volatile uint64_t x = 0;
  const absl::Time give_up = absl::Now() + absl::Seconds(20);
  while (SelfCpuSeconds() - self_before < 0.15 && absl::Now() < give_up) {
    for (int i = 0; i < 100000; ++i) x = x + 1;
  }
  absl::StatusOr<double> after = ReadCpuSeconds(getpid());
  ASSERT_TRUE(after.ok());
  EXPECT_GE(*after - *before, 0.1);
  EXPECT_GE(SelfCpuSeconds() - self_before, 0.1);
  EXPECT_EQ(ReadCpuSeconds(0x7ffffff0).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(ReadMemoryStatus(0x7ffffff0).status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace ledgerkv::bench
