// Command-line parsing for ledgerkvctl: argv -> a validated CtlCommand.
// Nothing here talks to a server; a usage error is found before anything is
// sent.
#pragma once

#include <cstdint>
#include <string>
#include "absl/strings/string_view.h"
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace ledgerkv::client {

enum class OutputFormat { kText, kJson };

struct CtlCommand {
  enum class Kind {
    kHelp,
    kPut,
    kGet,
    kDelete,
    kScan,
    kIncr,
    kTxn,
    kTableCreate,
    kTableDrop,
    kTableList,
    kTableDescribe,
    kBookieInfo,
  };
  Kind kind = Kind::kHelp;

  // Global flags.
  std::string endpoint = "127.0.0.1:7070";  // host:port, or a comma-separated list of seeds
  std::string table = "default";
  OutputFormat output = OutputFormat::kText;
  absl::Duration timeout = absl::Seconds(10);

  // Operands. For kDelete/kScan, [key, end) is the resolved range (end empty:
  // a single key for delete, the end of the table for scan).
  std::string key;
  std::string value;
  std::string end;
  int64_t limit = 0;  // scan; 0 = all
  bool keys_only = false;
  int64_t delta = 1;                    // incr
  std::string name;                     // table commands
  std::vector<std::string> split_keys;  // table create
  std::string bookie_address;           // bookie info: host:port of a bookie
};

// Parses the arguments after the program name. INVALID_ARGUMENT naming the
// problem (unknown command or flag, missing or extra operand, bad number,
// conflicting flags, a prefix delete that would not be bounded). Keys are
// not checked here: the server owns the limits (an empty key is its
// INVALID_ARGUMENT).
absl::StatusOr<CtlCommand> ParseCtlArgs(const std::vector<std::string>& args);

// The smallest key greater than every key starting with `prefix` ("" when
// there is none: the prefix is empty or all 0xFF bytes).
std::string PrefixEnd(absl::string_view prefix);

// Usage text (the command list), for --help and usage errors.
const char* CtlUsage();

}  // namespace ledgerkv::client
