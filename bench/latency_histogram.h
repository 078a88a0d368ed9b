// Log-linear latency histogram in the manner of HdrHistogram: constant
// memory, relative error below 1/64 (1.6%) at every magnitude, mergeable.
#pragma once

#include <cstdint>
#include <vector>

namespace ledgerkv::bench {

class LatencyHistogram {
 public:
  LatencyHistogram();

  // Records one value (e.g. nanoseconds). Negative values count as 0.
  void Record(int64_t value);
  // Adds every value recorded in `other`.
  void Merge(const LatencyHistogram& other);

  int64_t count() const { return count_; }
  // 0 when empty.
  int64_t min() const { return count_ == 0 ? 0 : min_; }
  int64_t max() const { return max_; }
  double mean() const { return count_ == 0 ? 0 : static_cast<double>(sum_) / count_; }

  // The smallest recorded bucket bound v such that at least q*count values
  // are <= v (q in [0, 1]); never above max(). 0 when empty. The result is
  // within 1.6% above the exact quantile.
  int64_t Quantile(double q) const;

 private:
  static constexpr int kSubBits = 6;  // 64 linear sub-buckets per power of two
  static constexpr int64_t kSubCount = int64_t{1} << kSubBits;
  static int BucketIndex(int64_t value);
  static int64_t BucketUpperBound(int index);

  std::vector<int64_t> counts_;
  int64_t count_ = 0;
  int64_t min_ = 0;
  int64_t max_ = 0;
  int64_t sum_ = 0;
};

}  // namespace ledgerkv::bench
