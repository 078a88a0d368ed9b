#include "bench/latency_histogram.h"

#include <algorithm>
#include <bit>
#include <cmath>

namespace ledgerkv::bench {

namespace {
// Values below kSubCount get one bucket each; every further power of two
// [2^e, 2^(e+1)) is split into kSubCount equal buckets.
constexpr int kMaxExponent = 62;
}  // namespace

LatencyHistogram::LatencyHistogram()
    : counts_(kSubCount + (kMaxExponent - kSubBits + 1) * kSubCount, 0) {}

int LatencyHistogram::BucketIndex(int64_t value) {
  if (value < kSubCount) return static_cast<int>(value);
  const int exponent = std::bit_width(static_cast<uint64_t>(value)) - 1;  // >= kSubBits
  const int shift = exponent - kSubBits;
  const int sub = static_cast<int>((value >> shift) - kSubCount);  // 0 .. kSubCount-1
  return static_cast<int>(kSubCount) + shift * static_cast<int>(kSubCount) + sub;
}

int64_t LatencyHistogram::BucketUpperBound(int index) {
  if (index < kSubCount) return index;
  const int shift = (index - static_cast<int>(kSubCount)) / static_cast<int>(kSubCount);
  const int64_t sub = (index - kSubCount) % kSubCount;
  return ((kSubCount + sub + 1) << shift) - 1;
}

void LatencyHistogram::Record(int64_t value) {
  value = std::max<int64_t>(value, 0);
  ++counts_[BucketIndex(value)];
  min_ = count_ == 0 ? value : std::min(min_, value);
  max_ = std::max(max_, value);
  sum_ += value;
  ++count_;
}

void LatencyHistogram::Merge(const LatencyHistogram& other) {
  if (other.count_ == 0) return;
  for (size_t i = 0; i < counts_.size(); ++i) counts_[i] += other.counts_[i];
  min_ = count_ == 0 ? other.min_ : std::min(min_, other.min_);
  max_ = std::max(max_, other.max_);
  sum_ += other.sum_;
  count_ += other.count_;
}

int64_t LatencyHistogram::Quantile(double q) const {
  if (count_ == 0) return 0;
  q = std::clamp(q, 0.0, 1.0);
  const int64_t rank = std::max<int64_t>(1, static_cast<int64_t>(std::ceil(q * count_)));
  int64_t seen = 0;
  for (size_t i = 0; i < counts_.size(); ++i) {
    seen += counts_[i];
    if (seen >= rank) return std::min(BucketUpperBound(static_cast<int>(i)), max_);
  }
  return max_;
}

}  // namespace ledgerkv::bench
