// `ledgerkv cluster`: the operator's view of a cluster, read from the
// metadata store alone (records and keys: docs/cluster.md).
//
//   ledgerkv cluster --metadata URI [--cluster NAME] [-o text|json] status
//
// Text output: one line per item, in a fixed order, so that it can be
// grepped and diffed:
//
//   controller: <server id> <address>             (or "controller: none")
//   bookies: <N> up, <M> down                     (read-only bookies are up)
//   bookie <id> <address>|- up|down|read-only ledgers=<L>
//                                                 (L: ledgers naming it)
//   servers: <N>
//   server <id> <address> ranges=<K>              (K: assignments naming it)
//   tables: <N>
//   table <name> id=<table id> ranges=<R>
//   range <id> table=<t> [<start>, <end>) owner=<server id>|none
//         address=<addr>|- epoch=<e>|- owner_live=yes|no      (one line)
//   orphan assignment <range id> table=<t> owner=<server id> address=<addr>
//         epoch=<e> owner_live=yes|no                         (one line)
//
// Every string taken from a record (ids, addresses, names, keys) is shown
// C-escaped (absl::CHexEscape, as DescribeRange does): non-printable and
// non-ASCII bytes become \xNN, so a line never breaks and is plain ASCII.
// A bookie is up while its ephemeral registration (bookies/<id>) exists,
// down when only its durable cookie (cookies/<id>) is left (or when only
// ledgers name it: its address is then "-"). `ledgers` counts the ledgers
// whose metadata names it: on a down bookie, copies the controller has yet
// to re-replicate (or that open ledgers still hold). Ranges come
// from the table records, in table name then key order; owner_live says
// whether the assignment's server is registered (servers/<id>) now.
// Assignments of ranges no table references are listed as orphans.
//
// JSON output (-o json): one object with the same fields and the same
// escaped strings:
//   {"controller": {"server_id", "address"} | null,
//    "bookies": [{"id", "address", "state", "ledgers"}], "servers": [{"id", "address", "ranges"}],
//    "tables": [{"name", "table_id", "ranges"}],
//    "ranges": [{"range_id", "table", "start", "end", "owner", "address", "epoch",
//                "owner_live"}],            (owner/address/epoch null when unassigned)
//    "orphan_assignments": [{"range_id", "table", "owner", "address", "epoch",
//                            "owner_live"}]}
//
// The sections are read by separate List/Get calls, not from one snapshot:
// a server that dies (or a range that moves) while `status` runs may show
// in one section and not in another.
//
// Exit codes: 0 success; 1 failure, stderr "ledgerkv cluster: <status>":
// the store failed (nothing is printed) or a record does not parse (DATA_LOSS
// naming its key; the rest is printed without it); 2 usage error.
#pragma once

#include <string>
#include <vector>

#include "metadata/metadata_store.h"
#include "metadata/open_store.h"

namespace ledgerkv::kv {

inline constexpr int kClusterCliExitFailure = 1;
inline constexpr int kClusterCliExitUsage = 2;

// Usage text of the subcommand (for `ledgerkv --help`).
extern const char kClusterCliUsage[];

// Entry point of `ledgerkv cluster <args>` (args exclude "cluster"): parses
// the flags, opens the metadata store named by --metadata and runs the
// command, printing to stdout/stderr. Returns the exit code.
int RunClusterCli(const std::vector<std::string>& args);

// As above, opening the store with `options` (tests shorten the etcd
// timeouts) and appending the output to *out and error messages to *err
// instead of printing them. `--help` text goes to *out (exit 0).
int RunClusterCli(const std::vector<std::string>& args,
                  const metadata::OpenStoreOptions& options, std::string* out, std::string* err);

// Runs one command (`command` is e.g. {"-o", "json", "status"}, without
// --metadata/--cluster) against `store` (not owned) for cluster `cluster`.
// Output is appended to *out, error messages to *err. Returns the exit
// code. Blocks on the store (its own deadlines).
int RunClusterCommand(metadata::MetadataStore* store, const std::string& cluster,
                      const std::vector<std::string>& command, std::string* out, std::string* err);

}  // namespace ledgerkv::kv
