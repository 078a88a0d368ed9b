#include "bench/proc_stats.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace ledgerkv::bench {

absl::StatusOr<MemoryStatus> ReadMemoryStatus(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  if (!in) return absl::NotFoundError(absl::StrCat("no process ", pid));
  MemoryStatus status;
  bool have_rss = false, have_hwm = false;
  std::string line;
  while (std::getline(in, line)) {
    absl::string_view rest = line;
    int64_t* field = nullptr;
    if (absl::ConsumePrefix(&rest, "VmRSS:")) {
      field = &status.rss_kb;
      have_rss = true;
    } else if (absl::ConsumePrefix(&rest, "VmHWM:")) {
      field = &status.hwm_kb;
      have_hwm = true;
    } else {
      continue;
    }
    rest = absl::StripAsciiWhitespace(rest);
    absl::ConsumeSuffix(&rest, "kB");
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(rest), field)) {
      return absl::InternalError(absl::StrCat("bad line in /proc/", pid, "/status: ", line));
    }
  }
  if (!have_rss || !have_hwm) {
    return absl::InternalError(absl::StrCat("no VmRSS/VmHWM for process ", pid));
  }
  return status;
}

absl::StatusOr<double> ReadCpuSeconds(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/stat"));
  if (!in) return absl::NotFoundError(absl::StrCat("no process ", pid));
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string stat = buffer.str();
  // The command name (field 2) may hold spaces; fields are counted after its ')'.
  const size_t paren = stat.rfind(')');
  if (paren == std::string::npos) return absl::InternalError("bad /proc/PID/stat");
  std::vector<absl::string_view> fields =
      absl::StrSplit(absl::string_view(stat).substr(paren + 2), ' ', absl::SkipEmpty());
  // fields[0] is field 3 (state); utime and stime are fields 14 and 15.
  int64_t utime = 0, stime = 0;
  if (fields.size() < 13 || !absl::SimpleAtoi(fields[11], &utime) ||
      !absl::SimpleAtoi(fields[12], &stime)) {
    return absl::InternalError("bad /proc/PID/stat");
  }
  return static_cast<double>(utime + stime) / sysconf(_SC_CLK_TCK);
}

double SelfCpuSeconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  auto seconds = [](const timeval& tv) { return tv.tv_sec + tv.tv_usec / 1e6; };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

RssSampler::RssSampler(pid_t pid, absl::Duration interval) : pid_(pid), interval_(interval) {
  thread_ = std::thread([this] {
    do {
      Sample();
    } while (!stop_.WaitForNotificationWithTimeout(interval_));
  });
}

RssSampler::~RssSampler() { Stop(); }

void RssSampler::Sample() {
  absl::StatusOr<MemoryStatus> status = ReadMemoryStatus(pid_);
  if (status.ok()) max_rss_kb_ = std::max(max_rss_kb_, status->rss_kb);
}

int64_t RssSampler::Stop() {
  if (thread_.joinable()) {
    stop_.Notify();
    thread_.join();
    Sample();
  }
  return max_rss_kb_;
}

}  // namespace ledgerkv::bench
