#include "bench/latency_histogram.h"

#include <algorithm>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace ledgerkv::bench {
namespace {

// The quantiles a bench reports must be within the histogram's stated 1.6%
// of the exact ones, at every magnitude (microseconds to seconds).
TEST(LatencyHistogramTest, QuantilesWithinOnePointSixPercentOfExact) {
  std::mt19937_64 rng(42);
  std::lognormal_distribution<double> dist(13.0, 1.5);  // median ~0.44 ms in ns
  std::vector<int64_t> values;
  LatencyHistogram h;
  for (int i = 0; i < 100000; ++i) {
    const int64_t v = static_cast<int64_t>(dist(rng));
    values.push_back(v);
    h.Record(v);
  }
  std::sort(values.begin(), values.end());
  for (double q : {0.5, 0.9, 0.99, 0.999}) {
    const int64_t exact = values[static_cast<size_t>(std::ceil(q * values.size())) - 1];
    const int64_t got = h.Quantile(q);
    EXPECT_GE(got, exact) << "q=" << q;
    EXPECT_LE(got, exact + exact / 64 + 1) << "q=" << q;
  }
  EXPECT_EQ(h.count(), 100000);
  EXPECT_EQ(h.max(), values.back());
  EXPECT_EQ(h.min(), values.front());
  EXPECT_EQ(h.Quantile(1.0), values.back());
}

TEST(LatencyHistogramTest, SmallValuesAreExactAndEmptyIsZero) {
  LatencyHistogram h;
  EXPECT_EQ(h.Quantile(0.5), 0);
  EXPECT_EQ(h.count(), 0);
  for (int v = 1; v <= 10; ++v) h.Record(v);
  EXPECT_EQ(h.Quantile(0.5), 5);
  EXPECT_EQ(h.Quantile(0.0), 1);
  EXPECT_EQ(h.Quantile(1.0), 10);
  EXPECT_DOUBLE_EQ(h.mean(), 5.5);
}

// Per-thread histograms are merged at the end of a run: the merge must equal
// recording everything into one.
TEST(LatencyHistogramTest, MergeEqualsRecordingIntoOne) {
  LatencyHistogram a, b, all;
  for (int64_t v = 1; v < 1000000; v = v * 3 + 1) {
    ((v % 2) ? a : b).Record(v);
    all.Record(v);
  }
  a.Merge(b);
  EXPECT_EQ(a.count(), all.count());
  EXPECT_EQ(a.max(), all.max());
  EXPECT_EQ(a.min(), all.min());
  for (double q : {0.1, 0.5, 0.9, 0.99}) EXPECT_EQ(a.Quantile(q), all.Quantile(q));
}

}  // namespace
}  // namespace ledgerkv::bench
