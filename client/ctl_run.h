// ledgerkvctl's body: parses arguments, runs one command against a server
// through KvClient, prints the result. Exit codes: 0 success (a txn whose
// compares failed included), 1 the server or the connection failed (gRPC
// code name and message on `err`), 2 usage or input error (nothing sent),
// 3 `get` of a key that does not exist.
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

namespace ledgerkv::client {

inline constexpr int kExitOk = 0;
inline constexpr int kExitServerError = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitKeyNotFound = 3;

// `args` excludes the program name; `in` is read only by `txn`.
int RunCtl(const std::vector<std::string>& args, std::istream& in, std::ostream& out,
           std::ostream& err);

}  // namespace ledgerkv::client
