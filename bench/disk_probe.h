// Raw disk limits, measured in the same run as every ledgerkv figure so that
// results can be reported as ratios (docs/performance.md).
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace ledgerkv::bench {

struct DiskLimits {
  double fdatasyncs_per_sec = 0;  // 4 KiB overwrite + fdatasync, one at a time
  double seq_write_mb_per_sec = 0;  // 1 MiB appends overlapped with fdatasync, <= 64 MiB unsynced
};

// Measures the disk holding `dir` for about `duration` per figure, using
// scratch files that are removed afterwards, unless `keep_files`: then they
// stay (under names no later call reuses) for the caller to remove with
// `dir` once its measurements are done. Removing a GiB-sized file on a
// filesystem mounted with `discard` makes the next journal commits wait for
// the discards, so a figure measured right after the probe would pay for
// the probe's cleanup.
absl::StatusOr<DiskLimits> MeasureDisk(const std::string& dir, absl::Duration duration,
                                       bool keep_files = false);

}  // namespace ledgerkv::bench
