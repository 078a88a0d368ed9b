#include "kv_server/cluster_cli.h"

#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "ledger/entry_format.h"
#include "proto/metadata.pb.h"

namespace ledgerkv::kv {

const char kClusterCliUsage[] =
    "  cluster --metadata URI [--cluster NAME] [-o text|json] <status |\n"
    "         delete-cookie BOOKIE_ID>\n"
    "      status: the cluster as the metadata store records it: controller, bookies\n"
    "      (up, down, read-only; how many ledgers name each, and how many recorded an\n"
    "      earlier instance of it: to_refill), servers and how many ranges each is\n"
    "      assigned, every range of every table with its owner, epoch and whether the\n"
    "      owner is registered, and orphan assignments. One line per item (-o json: one\n"
    "      JSON object). delete-cookie: let a bookie that is down rejoin under its id\n"
    "      with a new, empty data directory (its disk replaced); refused while it is\n"
    "      registered. The controller then refills it with what its earlier instance\n"
    "      held. URI: etcd://HOST:PORT or embedded:///DIR (an existing embedded store,\n"
    "      not open in another process).\n";

namespace {

namespace meta = ::ledgerkv::meta::v1;

struct Output {
  std::string* out;
  std::string* err;

  int Fail(const absl::Status& status) {
    absl::StrAppend(err, "ledgerkv cluster: ", status.ToString(), "\n");
    return kClusterCliExitFailure;
  }
  int Usage(absl::string_view message) {
    absl::StrAppend(err, "ledgerkv cluster: ", message, "\nusage:\n", kClusterCliUsage);
    return kClusterCliExitUsage;
  }
};

// Every string from a record is shown escaped, in both formats: one line
// per item must stay one line whatever bytes a key or id holds.
std::string E(std::string_view s) { return absl::CHexEscape(absl::string_view(s.data(), s.size())); }

// A JSON string literal of E(s). E's output is printable ASCII, so only
// '"' and '\' need escaping here.
std::string Q(std::string_view s) {
  std::string quoted = "\"";
  for (char c : E(s)) {
    if (c == '"' || c == '\\') quoted += '\\';
    quoted += c;
  }
  quoted += '"';
  return quoted;
}

struct Controller {
  std::string server_id;
  std::string address;
};

struct Bookie {
  std::string address;
  bool registered = false;
  bool read_only = false;
  int ledgers = 0;  // ledgers whose metadata names it (any state)
  std::string instance;  // the instance it is registered as
  // Ledgers (any state) that recorded an earlier instance of it: their
  // copies there are gone until refilled (docs/ledger-protocol.md,
  // "Refilling a re-provisioned bookie").
  int to_refill = 0;

  const char* State() const {
    if (!registered) return "down";
    return read_only ? "read-only" : "up";
  }
};

struct Server {
  std::string id;
  std::string address;
  int ranges = 0;
};

struct Assignment {
  meta::RangeAssignment record;
  bool owner_live = false;
  bool referenced = false;  // some table has this range
};

// Everything `status` shows, read from the store.
struct ClusterView {
  std::optional<Controller> controller;
  std::map<std::string, Bookie> bookies;  // by id
  std::vector<Server> servers;            // in id order
  std::vector<meta::TableMetadata> tables;  // in name order
  std::map<uint64_t, Assignment> assignments;  // by range id
  // Records that did not parse (named in the messages); shown after the
  // output, and make the exit code 1.
  std::vector<std::string> bad_records;
};

// Lists `prefix` and calls fn(key suffix, value) for each record.
template <typename Fn>
absl::Status ForEach(metadata::MetadataStore* store, const std::string& prefix, Fn fn) {
  auto kvs = store->List(prefix);
  if (!kvs.ok()) return kvs.status();
  for (const metadata::KeyValue& kv : *kvs) {
    fn(std::string_view(kv.key).substr(prefix.size()), kv);
  }
  return absl::OkStatus();
}

absl::Status Read(metadata::MetadataStore* store, const std::string& cluster, ClusterView* view) {
  const metadata::Keys keys(cluster);
  auto bad = [view](const metadata::KeyValue& kv) {
    view->bad_records.push_back(absl::StrCat(E(kv.key), ": record does not parse"));
  };

  auto controller = store->Get(keys.Controller());
  if (controller.ok()) {
    meta::ControllerRecord record;
    if (record.ParseFromString(controller->value)) {
      view->controller = Controller{record.server_id(), record.address()};
    } else {
      view->bad_records.push_back(absl::StrCat(E(keys.Controller()), ": record does not parse"));
    }
  } else if (!absl::IsNotFound(controller.status())) {
    return controller.status();
  }

  // Cookies first: a registration's address (the current one) wins.
  absl::Status status =
      ForEach(store, keys.Cookie(""), [&](std::string_view id, const metadata::KeyValue& kv) {
        meta::BookieRegistration cookie;
        if (!cookie.ParseFromString(kv.value)) return bad(kv);
        view->bookies[std::string(id)].address = cookie.address();
      });
  if (!status.ok()) return status;
  status = ForEach(store, keys.BookiesPrefix(), [&](std::string_view id, const metadata::KeyValue& kv) {
    meta::BookieRegistration reg;
    if (!reg.ParseFromString(kv.value)) return bad(kv);
    Bookie& bookie = view->bookies[std::string(id)];
    bookie.address = reg.address();
    bookie.registered = true;
    bookie.read_only = reg.read_only();
    bookie.instance = reg.instance_id();
  });
  if (!status.ok()) return status;

  // Ledgers naming each bookie: a down bookie still named has copies the
  // controller's auditor has yet to move (docs/ledger-protocol.md, "The
  // auditor"). A bookie named with neither cookie nor registration is
  // listed too, down, without an address.
  status = ForEach(store, keys.LedgersPrefix(), [&](std::string_view,
                                                    const metadata::KeyValue& kv) {
    uint64_t ledger_id = 0;
    if (!keys.ParseLedgerKey(kv.key, &ledger_id)) return;  // not a ledger record
    meta::LedgerMetadata ledger;
    if (!ledger.ParseFromString(kv.value)) return bad(kv);
    for (const std::string& id : ledger::BookiesNamed(ledger)) ++view->bookies[id].ledgers;
    const auto current = [view](const std::string& b) -> const std::string* {
      auto it = view->bookies.find(b);
      return it == view->bookies.end() ? nullptr : &it->second.instance;
    };
    for (const std::string& id : ledger::BookiesReprovisioned(ledger, current)) {
      ++view->bookies[id].to_refill;
    }
  });
  if (!status.ok()) return status;

  // The key, not the record, names a registered server: liveness of an
  // assignment's owner is "servers/<its server id> exists".
  status = ForEach(store, keys.ServersPrefix(), [&](std::string_view id, const metadata::KeyValue& kv) {
    meta::ServerRegistration reg;
    if (!reg.ParseFromString(kv.value)) return bad(kv);
    view->servers.push_back(Server{std::string(id), reg.address(), 0});
  });
  if (!status.ok()) return status;

  status = ForEach(store, keys.TablesPrefix(), [&](std::string_view, const metadata::KeyValue& kv) {
    meta::TableMetadata table;
    if (!table.ParseFromString(kv.value)) return bad(kv);
    view->tables.push_back(std::move(table));
  });
  if (!status.ok()) return status;

  status = ForEach(store, keys.AssignmentsPrefix(), [&](std::string_view, const metadata::KeyValue& kv) {
    meta::RangeAssignment record;
    if (!record.ParseFromString(kv.value)) return bad(kv);
    const uint64_t range_id = record.range_id();
    view->assignments[range_id].record = std::move(record);
  });
  if (!status.ok()) return status;

  std::map<std::string, Server*, std::less<>> servers;
  for (Server& s : view->servers) servers[s.id] = &s;
  for (auto& [range_id, a] : view->assignments) {
    auto it = servers.find(a.record.server_id());
    a.owner_live = it != servers.end();
    if (a.owner_live) ++it->second->ranges;
  }
  for (const meta::TableMetadata& table : view->tables) {
    for (const meta::RangeSpec& range : table.ranges()) {
      auto it = view->assignments.find(range.range_id());
      if (it != view->assignments.end()) it->second.referenced = true;
    }
  }
  return absl::OkStatus();
}

const char* YesNo(bool b) { return b ? "yes" : "no"; }
const char* TrueFalse(bool b) { return b ? "true" : "false"; }

std::string Text(const ClusterView& view) {
  std::string s;
  if (view.controller) {
    absl::StrAppend(&s, "controller: ", E(view.controller->server_id), " ",
                    E(view.controller->address), "\n");
  } else {
    absl::StrAppend(&s, "controller: none\n");
  }
  int up = 0;
  int down = 0;
  for (const auto& [id, b] : view.bookies) ++(b.registered ? up : down);
  absl::StrAppend(&s, "bookies: ", up, " up, ", down, " down\n");
  for (const auto& [id, b] : view.bookies) {
    absl::StrAppend(&s, "bookie ", E(id), " ", b.address.empty() ? "-" : E(b.address), " ",
                    b.State(), " ledgers=", b.ledgers,
                    b.to_refill > 0 ? absl::StrCat(" to_refill=", b.to_refill) : "", "\n");
  }
  absl::StrAppend(&s, "servers: ", view.servers.size(), "\n");
  for (const Server& server : view.servers) {
    absl::StrAppend(&s, "server ", E(server.id), " ", E(server.address), " ranges=", server.ranges,
                    "\n");
  }
  absl::StrAppend(&s, "tables: ", view.tables.size(), "\n");
  for (const meta::TableMetadata& table : view.tables) {
    absl::StrAppend(&s, "table ", E(table.name()), " id=", table.table_id(),
                    " ranges=", table.ranges_size(), "\n");
  }
  for (const meta::TableMetadata& table : view.tables) {
    for (const meta::RangeSpec& range : table.ranges()) {
      absl::StrAppend(&s, "range ", range.range_id(), " table=", E(table.name()), " [",
                      E(range.start()), ", ", E(range.end()), ")");
      auto it = view.assignments.find(range.range_id());
      if (it == view.assignments.end()) {
        absl::StrAppend(&s, " owner=none address=- epoch=- owner_live=no\n");
        continue;
      }
      const meta::RangeAssignment& a = it->second.record;
      absl::StrAppend(&s, " owner=", E(a.server_id()), " address=", E(a.address()),
                      " epoch=", a.epoch(), " owner_live=", YesNo(it->second.owner_live), "\n");
    }
  }
  for (const auto& [range_id, a] : view.assignments) {
    if (a.referenced) continue;
    absl::StrAppend(&s, "orphan assignment ", range_id, " table=", E(a.record.table()),
                    " owner=", E(a.record.server_id()), " address=", E(a.record.address()),
                    " epoch=", a.record.epoch(), " owner_live=", YesNo(a.owner_live), "\n");
  }
  return s;
}

std::string Json(const ClusterView& view) {
  std::string s = "{\"controller\":";
  if (view.controller) {
    absl::StrAppend(&s, "{\"server_id\":", Q(view.controller->server_id),
                    ",\"address\":", Q(view.controller->address), "}");
  } else {
    absl::StrAppend(&s, "null");
  }
  // Elements of an array: "[" a "," b "]".
  auto sep = [](std::string* out, bool* first) {
    absl::StrAppend(out, *first ? "" : ",");
    *first = false;
  };
  bool first = true;
  absl::StrAppend(&s, ",\"bookies\":[");
  for (const auto& [id, b] : view.bookies) {
    sep(&s, &first);
    absl::StrAppend(&s, "{\"id\":", Q(id), ",\"address\":", Q(b.address), ",\"state\":\"",
                    b.State(), "\",\"ledgers\":", b.ledgers, ",\"to_refill\":", b.to_refill,
                    "}");
  }
  first = true;
  absl::StrAppend(&s, "],\"servers\":[");
  for (const Server& server : view.servers) {
    sep(&s, &first);
    absl::StrAppend(&s, "{\"id\":", Q(server.id), ",\"address\":", Q(server.address),
                    ",\"ranges\":", server.ranges, "}");
  }
  first = true;
  absl::StrAppend(&s, "],\"tables\":[");
  for (const meta::TableMetadata& table : view.tables) {
    sep(&s, &first);
    absl::StrAppend(&s, "{\"name\":", Q(table.name()), ",\"table_id\":", table.table_id(),
                    ",\"ranges\":", table.ranges_size(), "}");
  }
  first = true;
  absl::StrAppend(&s, "],\"ranges\":[");
  for (const meta::TableMetadata& table : view.tables) {
    for (const meta::RangeSpec& range : table.ranges()) {
      sep(&s, &first);
      absl::StrAppend(&s, "{\"range_id\":", range.range_id(), ",\"table\":", Q(table.name()),
                      ",\"start\":", Q(range.start()), ",\"end\":", Q(range.end()));
      auto it = view.assignments.find(range.range_id());
      if (it == view.assignments.end()) {
        absl::StrAppend(&s, ",\"owner\":null,\"address\":null,\"epoch\":null,\"owner_live\":false}");
        continue;
      }
      const meta::RangeAssignment& a = it->second.record;
      absl::StrAppend(&s, ",\"owner\":", Q(a.server_id()), ",\"address\":", Q(a.address()),
                      ",\"epoch\":", a.epoch(), ",\"owner_live\":",
                      TrueFalse(it->second.owner_live), "}");
    }
  }
  first = true;
  absl::StrAppend(&s, "],\"orphan_assignments\":[");
  for (const auto& [range_id, a] : view.assignments) {
    if (a.referenced) continue;
    sep(&s, &first);
    absl::StrAppend(&s, "{\"range_id\":", range_id, ",\"table\":", Q(a.record.table()),
                    ",\"owner\":", Q(a.record.server_id()), ",\"address\":", Q(a.record.address()),
                    ",\"epoch\":", a.record.epoch(), ",\"owner_live\":", TrueFalse(a.owner_live),
                    "}");
  }
  absl::StrAppend(&s, "]}\n");
  return s;
}

// A parsed command line: `[-o text|json] status` or `delete-cookie B`.
struct Command {
  std::string verb;  // "status" or "delete-cookie"
  bool json = false;
  std::string bookie;  // delete-cookie's
};

// Parses `command`. On a usage error appends the message to o.err and
// returns nullopt.
std::optional<Command> Parse(const std::vector<std::string>& command, Output& o) {
  Command parsed;
  std::vector<std::string> positional;
  for (size_t i = 0; i < command.size(); ++i) {
    const std::string& a = command[i];
    if (a == "-o" || a == "--output") {
      if (i + 1 >= command.size()) {
        o.Usage(absl::StrCat(a, " needs a value (text or json)"));
        return std::nullopt;
      }
      const std::string& format = command[++i];
      if (format != "text" && format != "json") {
        o.Usage(absl::StrCat("unknown output format \"", E(format), "\" (text or json)"));
        return std::nullopt;
      }
      parsed.json = format == "json";
    } else if (!a.empty() && a[0] == '-') {
      o.Usage(absl::StrCat("unknown flag \"", E(a), "\""));
      return std::nullopt;
    } else {
      positional.push_back(a);
    }
  }
  if (positional.empty()) {
    o.Usage("missing command");
    return std::nullopt;
  }
  parsed.verb = positional[0];
  if (parsed.verb != "status" && parsed.verb != "delete-cookie") {
    o.Usage(absl::StrCat("unknown command \"", E(positional[0]), "\""));
    return std::nullopt;
  }
  const size_t args = parsed.verb == "status" ? 0 : 1;
  if (positional.size() > args + 1) {
    o.Usage(absl::StrCat(parsed.verb, ": unexpected argument \"", E(positional[args + 1]), "\""));
    return std::nullopt;
  }
  if (positional.size() < args + 1 || (args == 1 && positional[1].empty())) {
    o.Usage(absl::StrCat(parsed.verb, " needs a bookie id"));
    return std::nullopt;
  }
  if (args == 1) parsed.bookie = positional[1];
  if (parsed.json && parsed.verb != "status") {
    o.Usage(absl::StrCat(parsed.verb, " prints text only"));
    return std::nullopt;
  }
  return parsed;
}

int RunStatus(metadata::MetadataStore* store, const std::string& cluster,
              const Command& command, Output& o) {
  ClusterView view;
  absl::Status read = Read(store, cluster, &view);
  if (!read.ok()) return o.Fail(read);
  absl::StrAppend(o.out, command.json ? Json(view) : Text(view));
  for (const std::string& bad : view.bad_records) o.Fail(absl::DataLossError(bad));
  return view.bad_records.empty() ? 0 : kClusterCliExitFailure;
}

// The refusal of delete-cookie for a registered bookie.
absl::Status StillRegistered(const std::string& bookie, const std::string& record) {
  meta::BookieRegistration reg;
  const std::string address =
      reg.ParseFromString(record) ? E(reg.address()) : "an unparsable registration";
  return absl::FailedPreconditionError(absl::StrCat(
      "bookie ", E(bookie), " is registered (running at ", address,
      "): stop it first; its cookie is deleted only while it is down (a bookie killed "
      "without a shutdown stays registered until its etcd session expires, 10 s)"));
}

// `delete-cookie B`: the cookie keeps a wiped data directory from joining
// under B's id; deleting it is how an operator says the disk was replaced
// on purpose. Refused while B is registered: a running bookie's cookie
// gone would let another directory join under its id once it stops. The
// delete is one transaction on "B not registered, cookie as read", so a
// bookie that registered meanwhile keeps its cookie; a bookie registers
// only in a transaction on its cookie, so one that had yet to register
// (at its start, or running on with a lapsed session) never registers
// after the delete (docs/bookie-format.md, "Instance id"). Still, "stop it
// first": a lapsed bookie cannot hear of the delete before it reaches
// etcd again. An old directory started after the
// delete refuses to start by itself (its REGISTERED file finds no cookie),
// except one from before that file existed, which writes a fresh cookie
// with its old instance id: its copies are real, and the new disk is then
// refused with a cookie mismatch.
int RunDeleteCookie(metadata::MetadataStore* store, const std::string& cluster,
                    const std::string& bookie, Output& o) {
  const metadata::Keys keys(cluster);
  absl::StatusOr<metadata::VersionedValue> registered = store->Get(keys.Bookie(bookie));
  if (registered.ok()) return o.Fail(StillRegistered(bookie, registered->value));
  if (!absl::IsNotFound(registered.status())) return o.Fail(registered.status());
  absl::StatusOr<metadata::VersionedValue> cookie = store->Get(keys.Cookie(bookie));
  if (absl::IsNotFound(cookie.status())) {
    return o.Fail(absl::NotFoundError(absl::StrCat("cluster ", E(cluster),
                                                   " has no cookie for bookie ", E(bookie),
                                                   ": a mistyped id, or another --cluster?")));
  }
  if (!cookie.ok()) return o.Fail(cookie.status());
  meta::BookieRegistration record;
  const std::string instance =
      record.ParseFromString(cookie->value) ? record.instance_id() : "(unparsable)";
  absl::StatusOr<metadata::TxnResult> deleted = store->Txn(
      {{keys.Bookie(bookie), metadata::kMustNotExist}, {keys.Cookie(bookie), cookie->version}},
      {{metadata::TxnOp::Type::kDelete, keys.Cookie(bookie)}});
  if (!deleted.ok()) return o.Fail(deleted.status());
  if (!deleted->succeeded) {
    registered = store->Get(keys.Bookie(bookie));
    if (registered.ok()) return o.Fail(StillRegistered(bookie, registered->value));
    return o.Fail(absl::AbortedError(absl::StrCat(
        "the cookie of bookie ", E(bookie), " changed while it was being deleted: run again")));
  }
  absl::StrAppend(o.out, "deleted the cookie of bookie ", E(bookie), " (instance ", E(instance),
                  "); started with an empty data directory it joins as a new instance, and "
                  "the controller copies back onto it what the closed ledgers held on this "
                  "one (or: ledgerkv ledger refill --all --bookie ", E(bookie), ")\n");
  return 0;
}

int RunCommand(metadata::MetadataStore* store, const std::string& cluster,
               const Command& command, Output& o) {
  if (command.verb == "delete-cookie") return RunDeleteCookie(store, cluster, command.bookie, o);
  return RunStatus(store, cluster, command, o);
}

}  // namespace

int RunClusterCommand(metadata::MetadataStore* store, const std::string& cluster,
                      const std::vector<std::string>& command, std::string* out, std::string* err) {
  Output o{out, err};
  std::optional<Command> parsed = Parse(command, o);
  if (!parsed) return kClusterCliExitUsage;
  return RunCommand(store, cluster, *parsed, o);
}

int RunClusterCli(const std::vector<std::string>& args, const metadata::OpenStoreOptions& options,
                  std::string* out, std::string* err) {
  Output o{out, err};
  std::string metadata_uri;
  std::string cluster = "default";
  std::vector<std::string> command;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--metadata" || a == "--cluster") {
      if (i + 1 >= args.size()) return o.Usage(a + " needs a value");
      (a == "--metadata" ? metadata_uri : cluster) = args[++i];
    } else if (a == "--help" || a == "-h") {
      absl::StrAppend(out, "usage:\n", kClusterCliUsage);
      return 0;
    } else {
      command.push_back(a);
    }
  }
  if (metadata_uri.empty()) return o.Usage("--metadata is required");
  if (cluster.empty()) return o.Usage("--cluster must not be empty");
  // Before connecting: a usage error must not wait for an unreachable store.
  std::optional<Command> parsed = Parse(command, o);
  if (!parsed) return kClusterCliExitUsage;
  // A mistyped embedded:// directory must not become a new, empty store.
  metadata::OpenStoreOptions open = options;
  open.embedded.must_exist = true;
  auto store = metadata::OpenMetadataStore(metadata_uri, open);
  if (!store.ok()) return o.Fail(store.status());
  return RunCommand(store->get(), cluster, *parsed, o);
}

int RunClusterCli(const std::vector<std::string>& args) {
  std::string out;
  std::string err;
  const int code = RunClusterCli(args, metadata::OpenStoreOptions{}, &out, &err);
  std::fwrite(out.data(), 1, out.size(), stdout);
  std::fwrite(err.data(), 1, err.size(), stderr);
  std::fflush(stdout);
  return code;
}

}  // namespace ledgerkv::kv
