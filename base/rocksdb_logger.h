// The info logger every RocksDB instance of ledgerkv uses (bookie index,
// range store, embedded metadata store): RocksDB's warnings and errors go
// to stderr with the instance's name, like the rest of the process's log;
// its info messages (options dump, periodic compaction stats) are dropped:
// an operator loses them as a post-mortem aid. Callers also set
// info_log_level = WARN_LEVEL so that RocksDB skips formatting them.
//
// Why not RocksDB's own LOG file in the data directory: on a full disk,
// the first failed write to that file leaves its writer in an error state,
// and the next line logged to it (at the latest when the database closes)
// trips an assertion in Debian's RocksDB 7.8 and aborts the process. A
// bookie must survive a full disk read-only (docs/bookie-format.md, "Full
// disk"), so no RocksDB instance may write a log file of its own.
//
// Header-only: base does not link RocksDB; its includers do.
#pragma once

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>

#include "rocksdb/env.h"

namespace ledgerkv {

class StderrRocksLogger final : public rocksdb::Logger {
 public:
  explicit StderrRocksLogger(std::string name)
      : rocksdb::Logger(rocksdb::InfoLogLevel::WARN_LEVEL), name_(std::move(name)) {}

  using rocksdb::Logger::Logv;
  void Logv(const char* format, va_list ap) override {
    char line[1024];
    const int n = std::vsnprintf(line, sizeof(line), format, ap);
    if (n < 0) return;
    const bool cut = static_cast<size_t>(n) >= sizeof(line);
    size_t len = std::min(static_cast<size_t>(n), sizeof(line) - 1);
    while (len > 0 && line[len - 1] == '\n') --len;
    // One write per line: lines of concurrent threads do not interleave.
    std::fprintf(stderr, "rocksdb (%s): %.*s%s\n", name_.c_str(), static_cast<int>(len), line,
                 cut ? " [...]" : "");
  }

 private:
  const std::string name_;
};

inline std::shared_ptr<rocksdb::Logger> NewStderrRocksLogger(std::string name) {
  return std::make_shared<StderrRocksLogger>(std::move(name));
}

}  // namespace ledgerkv
