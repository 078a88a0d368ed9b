// ledgerkvctl's body: parses arguments, runs one command against a server
// through KvClient, prints the result. Exit codes: 0 success (a txn whose
// compares failed included), 1 the server or the connection failed (gRPC
// code name and message on `err`), 2 usage or input error (nothing sent),
// 3 `get` of a key that does not exist, 4 a write (put, del, incr, txn,
// table create/drop) failed with an unknown outcome: it may or may not
// have been applied, so a script must not simply run it again.
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace ledgerkv::client {

inline constexpr int kExitOk = 0;
inline constexpr int kExitServerError = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitKeyNotFound = 3;
inline constexpr int kExitWriteOutcomeUnknown = 4;

// True if a write that failed with `status` may still have been applied:
// not refused by the server (INVALID_ARGUMENT, NOT_FOUND, ALREADY_EXISTS,
// FAILED_PRECONDITION, OUT_OF_RANGE, RESOURCE_EXHAUSTED) and not an
// UNAVAILABLE that KvClient knows to be retry-safe.
bool WriteOutcomeUnknown(const absl::Status& status);

// `args` excludes the program name; `in` is read only by `txn`.
int RunCtl(const std::vector<std::string>& args, std::istream& in, std::ostream& out,
           std::ostream& err);

}  // namespace ledgerkv::client
