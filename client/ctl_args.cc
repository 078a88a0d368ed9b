#include "client/ctl_args.h"

#include <optional>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace ledgerkv::client {
namespace {

absl::Status Usage(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(what, " (see ledgerkvctl --help)"));
}

bool IsNegativeNumber(absl::string_view s) {
  if (s.size() < 2 || s[0] != '-') return false;
  for (char c : s.substr(1)) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

absl::StatusOr<int64_t> ParseInt(absl::string_view what, absl::string_view text) {
  int64_t v = 0;
  if (!absl::SimpleAtoi(text, &v)) {
    return Usage(absl::StrCat(what, " must be an integer, got \"", text, "\""));
  }
  return v;
}

// Flags that only some commands take, as given on the command line.
struct CommandFlags {
  std::optional<std::string> limit;
  std::optional<std::string> to;
  std::optional<std::string> scan_prefix;
  bool del_prefix = false;
  bool keys_only = false;
  std::vector<std::string> splits;
};

absl::Status Arity(const std::vector<std::string>& pos, size_t first, size_t min, size_t max,
                   absl::string_view synopsis) {
  size_t n = pos.size() - first;
  if (n < min || n > max) {
    return Usage(absl::StrCat("usage: ledgerkvctl ", synopsis, " (got ", n, " operand",
                              n == 1 ? "" : "s", ")"));
  }
  return absl::OkStatus();
}

}  // namespace

std::string PrefixEnd(absl::string_view prefix) {
  std::string end(prefix);
  while (!end.empty()) {
    unsigned char last = static_cast<unsigned char>(end.back());
    if (last != 0xFF) {
      end.back() = static_cast<char>(last + 1);
      return end;
    }
    end.pop_back();
  }
  return end;
}

const char* CtlUsage() {
  return R"(usage: ledgerkvctl [--endpoint HOST:PORT[,HOST:PORT...]] [--table T] [-o text|json] [--timeout 10s] COMMAND
  --endpoint  one server, or several (comma-separated seeds: a server that does
              not answer is skipped); default 127.0.0.1:7070
commands:
  put KEY VALUE
  get KEY                          exit 3 when the key does not exist
  del KEY [--prefix | --to END]    one key, keys starting with KEY, or [KEY, END)
  scan [START [END]] [--prefix P] [--limit N] [--keys-only]
  incr KEY [DELTA]                 DELTA defaults to 1
  txn                              reads a JSON transaction from stdin (client/README.md)
  table create NAME [--split K1,K2,...]
  table list
  table describe NAME
  table drop NAME
  bookie info HOST:PORT            a bookie's identity, state (read-only and why) and counters
exit codes: 0 ok, 1 server error (code and message on stderr), 2 usage or input error, 3 key not found,
            4 a write failed with an unknown outcome (it may have been applied: read before retrying)
)";
}

absl::StatusOr<CtlCommand> ParseCtlArgs(const std::vector<std::string>& args) {
  CtlCommand cmd;
  CommandFlags flags;
  std::vector<std::string> pos;
  bool only_operands = false;
  bool help = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& tok = args[i];
    if (only_operands || tok.size() < 2 || tok[0] != '-' || IsNegativeNumber(tok)) {
      pos.push_back(tok);
      continue;
    }
    if (tok == "--") {
      only_operands = true;
      continue;
    }
    std::string name = tok;
    std::optional<std::string> inline_value;
    if (size_t eq = tok.find('='); tok.rfind("--", 0) == 0 && eq != std::string::npos) {
      name = tok.substr(0, eq);
      inline_value = tok.substr(eq + 1);
    }
    auto value = [&]() -> absl::StatusOr<std::string> {
      if (inline_value) return *inline_value;
      if (i + 1 >= args.size()) return Usage(absl::StrCat("flag ", name, " needs a value"));
      return args[++i];
    };
    auto boolean = [&]() -> absl::Status {
      if (inline_value) return Usage(absl::StrCat("flag ", name, " takes no value"));
      return absl::OkStatus();
    };
    absl::StatusOr<std::string> v;
    if (name == "--endpoint") {
      if (!(v = value()).ok()) return v.status();
      cmd.endpoint = *v;
    } else if (name == "--table") {
      if (!(v = value()).ok()) return v.status();
      cmd.table = *v;
    } else if (name == "-o" || name == "--output") {
      if (!(v = value()).ok()) return v.status();
      if (*v == "text") {
        cmd.output = OutputFormat::kText;
      } else if (*v == "json") {
        cmd.output = OutputFormat::kJson;
      } else {
        return Usage(absl::StrCat("-o must be text or json, got \"", *v, "\""));
      }
    } else if (name == "--timeout") {
      if (!(v = value()).ok()) return v.status();
      if (!absl::ParseDuration(*v, &cmd.timeout) || cmd.timeout <= absl::ZeroDuration()) {
        return Usage(absl::StrCat("--timeout must be a positive duration like 10s or 500ms, got \"",
                                  *v, "\""));
      }
    } else if (name == "--limit") {
      if (!(v = value()).ok()) return v.status();
      flags.limit = *v;
    } else if (name == "--to") {
      if (!(v = value()).ok()) return v.status();
      flags.to = *v;
    } else if (name == "--split") {
      if (!(v = value()).ok()) return v.status();
      for (auto& k : absl::StrSplit(*v, ',')) flags.splits.emplace_back(k);
    } else if (name == "--prefix") {
      // A value for scan (the prefix), a switch for del (KEY is the prefix).
      const std::string command = pos.empty() ? "" : pos[0];
      if (command == "scan") {
        if (!(v = value()).ok()) return v.status();
        flags.scan_prefix = *v;
      } else if (command == "del") {
        if (auto s = boolean(); !s.ok()) return s;
        flags.del_prefix = true;
      } else {
        return Usage("--prefix goes after the del or scan command");
      }
    } else if (name == "--keys-only") {
      if (auto s = boolean(); !s.ok()) return s;
      flags.keys_only = true;
    } else if (name == "-h" || name == "--help") {
      help = true;
    } else {
      return Usage(absl::StrCat("unknown flag ", name));
    }
  }

  if (help || pos.empty() || pos[0] == "help") {
    if (!help && pos.empty()) return Usage("missing command");
    cmd.kind = CtlCommand::Kind::kHelp;
    return cmd;
  }
  const std::string& command = pos[0];
  // Which command-specific flags this command accepts.
  bool takes_limit = false, takes_to = false, takes_scan_prefix = false, takes_del_prefix = false,
       takes_keys_only = false, takes_split = false;

  if (command == "put") {
    cmd.kind = CtlCommand::Kind::kPut;
    if (auto s = Arity(pos, 1, 2, 2, "put KEY VALUE"); !s.ok()) return s;
    cmd.key = pos[1];
    cmd.value = pos[2];
  } else if (command == "get") {
    cmd.kind = CtlCommand::Kind::kGet;
    if (auto s = Arity(pos, 1, 1, 1, "get KEY"); !s.ok()) return s;
    cmd.key = pos[1];
  } else if (command == "del") {
    cmd.kind = CtlCommand::Kind::kDelete;
    takes_to = takes_del_prefix = true;
    if (auto s = Arity(pos, 1, 1, 1, "del KEY [--prefix | --to END]"); !s.ok()) return s;
    cmd.key = pos[1];
    if (flags.del_prefix && flags.to) return Usage("del takes --prefix or --to, not both");
    if (flags.del_prefix) {
      if (cmd.key.empty()) return Usage("del --prefix needs a non-empty prefix");
      cmd.end = PrefixEnd(cmd.key);
      if (cmd.end.empty()) {
        return Usage("del --prefix: a prefix of only 0xFF bytes has no end key; use --to");
      }
    }
    if (flags.to) {
      if (flags.to->empty()) return Usage("del --to needs a non-empty END");
      cmd.end = *flags.to;
    }
  } else if (command == "scan") {
    cmd.kind = CtlCommand::Kind::kScan;
    takes_limit = takes_scan_prefix = takes_keys_only = true;
    if (auto s = Arity(pos, 1, 0, 2, "scan [START [END]] [--prefix P] [--limit N]"); !s.ok()) {
      return s;
    }
    if (flags.scan_prefix) {
      if (pos.size() > 1) return Usage("scan takes START/END or --prefix, not both");
      cmd.key = *flags.scan_prefix;
      cmd.end = PrefixEnd(cmd.key);
    } else {
      if (pos.size() > 1) cmd.key = pos[1];
      if (pos.size() > 2) cmd.end = pos[2];
    }
    if (flags.limit) {
      auto n = ParseInt("--limit", *flags.limit);
      if (!n.ok()) return n.status();
      if (*n < 0) return Usage("--limit must be >= 0");
      cmd.limit = *n;
    }
    cmd.keys_only = flags.keys_only;
  } else if (command == "incr") {
    cmd.kind = CtlCommand::Kind::kIncr;
    if (auto s = Arity(pos, 1, 1, 2, "incr KEY [DELTA]"); !s.ok()) return s;
    cmd.key = pos[1];
    if (pos.size() > 2) {
      auto n = ParseInt("DELTA", pos[2]);
      if (!n.ok()) return n.status();
      cmd.delta = *n;
    }
  } else if (command == "txn") {
    cmd.kind = CtlCommand::Kind::kTxn;
    if (auto s = Arity(pos, 1, 0, 0, "txn < transaction.json"); !s.ok()) return s;
  } else if (command == "table") {
    if (pos.size() < 2) return Usage("usage: ledgerkvctl table create|list|describe|drop ...");
    const std::string& sub = pos[1];
    if (sub == "create") {
      cmd.kind = CtlCommand::Kind::kTableCreate;
      takes_split = true;
      if (auto s = Arity(pos, 2, 1, 1, "table create NAME [--split K1,K2,...]"); !s.ok()) return s;
      cmd.name = pos[2];
      cmd.split_keys = flags.splits;
    } else if (sub == "list") {
      cmd.kind = CtlCommand::Kind::kTableList;
      if (auto s = Arity(pos, 2, 0, 0, "table list"); !s.ok()) return s;
    } else if (sub == "describe") {
      cmd.kind = CtlCommand::Kind::kTableDescribe;
      if (auto s = Arity(pos, 2, 1, 1, "table describe NAME"); !s.ok()) return s;
      cmd.name = pos[2];
    } else if (sub == "drop") {
      cmd.kind = CtlCommand::Kind::kTableDrop;
      if (auto s = Arity(pos, 2, 1, 1, "table drop NAME"); !s.ok()) return s;
      cmd.name = pos[2];
    } else {
      return Usage(absl::StrCat("unknown table command \"", sub,
                                "\" (expected create, list, describe or drop)"));
    }
  } else if (command == "bookie") {
    if (pos.size() < 2 || pos[1] != "info") {
      return Usage("usage: ledgerkvctl bookie info HOST:PORT");
    }
    cmd.kind = CtlCommand::Kind::kBookieInfo;
    if (auto s = Arity(pos, 2, 1, 1, "bookie info HOST:PORT"); !s.ok()) return s;
    cmd.bookie_address = pos[2];
  } else {
    return Usage(absl::StrCat("unknown command \"", command, "\""));
  }

  auto refuse = [&](bool given, bool takes, absl::string_view flag) -> absl::Status {
    if (given && !takes) return Usage(absl::StrCat(flag, " does not apply to ", command));
    return absl::OkStatus();
  };
  for (auto s : {refuse(flags.limit.has_value(), takes_limit, "--limit"),
                 refuse(flags.to.has_value(), takes_to, "--to"),
                 refuse(flags.scan_prefix.has_value(), takes_scan_prefix, "--prefix"),
                 refuse(flags.del_prefix, takes_del_prefix, "--prefix"),
                 refuse(flags.keys_only, takes_keys_only, "--keys-only"),
                 refuse(!flags.splits.empty(), takes_split, "--split")}) {
    if (!s.ok()) return s;
  }
  return cmd;
}

}  // namespace ledgerkv::client
