// `ledgerkv ledger`: operator commands on the ledgers of a cluster
// (inspect, read, recover, delete), run against the metadata store and the
// bookies it names.
//
//   ledgerkv ledger --metadata URI [--cluster NAME] list
//                                                  show ID
//                                                  read ID [--from N] [--to M]
//                                                  read ID [--from N] --follow
//                                                  recover ID
//                                                  delete ID
//
// Exit codes: 0 success, 1 an operation failed (stderr
// "ledgerkv ledger: <status>"), 2 usage error.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "metadata/metadata_store.h"

namespace ledgerkv::kv {

inline constexpr int kLedgerCliExitFailure = 1;
inline constexpr int kLedgerCliExitUsage = 2;

// Usage text of the subcommand (for `ledgerkv --help`).
extern const char kLedgerCliUsage[];

// Entry point of `ledgerkv ledger <args>` (args exclude "ledger"): parses
// the flags, opens the metadata store named by --metadata and runs the
// command, printing to stdout/stderr. Returns the exit code.
int RunLedgerCli(const std::vector<std::string>& args);

// Runs one command (`command` is e.g. {"read", "7", "--from", "0"}, without
// --metadata/--cluster) against `store` (not owned) for cluster `cluster`.
// Output is appended to *out, error messages to *err. Returns the exit code.
// Blocks on the store and the bookies (rpc deadlines of ClientOptions).
// `read --follow` runs until the ledger is closed (exit 0) or deleted (1),
// calling `flush` (if set) on the calling thread after each batch it
// appends to *out, so a caller can hand the lines on as they come;
// `rereplicate` flushes after each ledger (RunLedgerCli's flush writes
// both *out and *err).
int RunLedgerCommand(metadata::MetadataStore* store, const std::string& cluster,
                     const std::vector<std::string>& command, std::string* out, std::string* err,
                     const std::function<void()>& flush = {});

}  // namespace ledgerkv::kv
