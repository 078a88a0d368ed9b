// Runs the ledgerkv-bench binary from tests and reads its JSON output.
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "tests/process_util.h"

namespace ledgerkv::bench {

struct BenchRun {
  int exit_code = -1;
  std::string output;  // stdout (one JSON object)

  // The number after "field": in the JSON output (fails the test if absent).
  double Number(const std::string& field) const {
    const std::string needle = absl::StrCat("\"", field, "\":");
    const size_t at = output.find(needle);
    EXPECT_NE(at, std::string::npos) << field << " missing in " << output;
    if (at == std::string::npos) return -1;
    return std::strtod(output.c_str() + at + needle.size(), nullptr);
  }
};

// Runs ledgerkv-bench with `args` and -o json; waits for it to exit.
inline BenchRun RunBench(const std::vector<std::string>& args) {
  const std::string command = absl::StrCat(::ledgerkv::testing::BinaryPath("bench/ledgerkv-bench"),
                                           " ", absl::StrJoin(args, " "), " -o json");
  BenchRun run;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return run;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), pipe)) > 0) run.output.append(buf, n);
  const int status = pclose(pipe);
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return run;
}

}  // namespace ledgerkv::bench
