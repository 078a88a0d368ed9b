// The `ledgerkv` binary: one executable, one subcommand per process role.
//   ledgerkv bookie --data-dir DIR --listen HOST:PORT [--advertise HOST[:PORT]]
//       [--add-listen HOST:PORT|off] [--bookie-id ID] [--no-sync]
//                   [--metadata etcd://HOST:PORT[,HOST:PORT...] | embedded:///DIR] [--cluster NAME]
//       [--disk-high-watermark PCT] [--disk-low-watermark PCT]
//   ledgerkv standalone --data-dir DIR --listen HOST:PORT [--bookies N]
//       [--snapshot-log-mb M] [--snapshot-interval-s S] [--no-sync]
//       [--disk-high-watermark PCT] [--disk-low-watermark PCT]
//   ledgerkv server --data-dir DIR --listen HOST:PORT [--advertise HOST[:PORT]]
//       --metadata etcd://HOST:PORT[,...] [--cluster NAME] [--server-id ID] [--lease-ttl-s S]
//       [--ensemble E --write-quorum W --ack-quorum A] [--snapshot-log-mb M] [--snapshot-interval-s S]
//       [--orphan-sweep-period-s P] [--orphan-min-age-s A]
//       [--rereplicate-after-s R | --no-rereplicate]
//       (cluster mode, kv_server/cluster/cluster_server.h)
//   ledgerkv ledger --metadata URI [--cluster NAME] list|show ID|read ID|recover ID|delete ID [--force]
//       (operator commands, kv_server/ledger_cli.h)
//   ledgerkv cluster --metadata URI [--cluster NAME] [-o text|json] status
//       (the operator's view: bookies, servers, ranges, owners; kv_server/cluster_cli.h)
//
// Each prints exactly one line to stdout when it serves (tests and scripts
// parse it):
//   bookie <id> listening on <addr> instance <instance id>
//   ledgerkv standalone serving on <addr>
//   ledgerkv server <id> serving on <addr> instance <instance id>
// Everything else goes to stderr. SIGTERM and SIGINT shut it down cleanly
// (exit 0).
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/fault_point.h"
#include "base/process_tuning.h"
#include "kv_server/cluster/cluster_server.h"
#include "kv_server/cluster_cli.h"
#include "kv_server/ledger_cli.h"
#include "kv_server/standalone.h"
#include "ledger/bookie/bookie_server.h"
#include "metadata/open_store.h"

namespace {

constexpr int kExitUsage = 2;

constexpr char kUsage[] =
    "usage: ledgerkv <command> [flags]\n"
    "commands:\n"
    "  bookie --data-dir DIR --listen HOST:PORT [--advertise HOST[:PORT]]\n"
    "         [--add-listen HOST:PORT|off] [--bookie-id ID] [--no-sync]\n"
    "         [--no-group-commit-wait | --group-commit-wait-max-us US]\n"
    "         [--metadata etcd://HOST:PORT[,HOST:PORT...]] [--cluster NAME]\n"
    "         [--disk-high-watermark PCT] [--disk-low-watermark PCT]\n"
    "      run a bookie (ledger storage node). --no-sync skips fdatasync on adds:\n"
    "      acknowledged entries can be lost on power failure (off by default).\n"
    "      a small write batch waits up to one recent sync time, but at most US\n"
    "      microseconds (default 1000, at most 100000), for the rest of its group\n"
    "      (docs/bookie-format.md); --no-group-commit-wait: it never waits.\n"
    "      with --metadata the bookie registers itself (ephemeral), checks its cookie\n"
    "      and reclaims the space of deleted ledgers. It publishes, and its id defaults\n"
    "      to, the --advertise address (HOST with the bound port, or HOST:PORT), by\n"
    "      default the --listen address, which then must not be 0.0.0.0 or [::]\n"
    "      (docs/cluster.md). --add-listen: the add port (plain TCP frames for Add,\n"
    "      docs/add-transport.md; default: the --listen host, a free port; off:\n"
    "      clients add over gRPC). With the data dir's file\n"
    "      system PCT full (whole percent of df's Use%; default 95, 100: off) the\n"
    "      bookie refuses adds until it is below the low watermark (default 5\n"
    "      points less; it must be at least 1 and below the high one).\n"
    "  standalone --data-dir DIR --listen HOST:PORT [--bookies N] [--snapshot-log-mb M]\n"
    "             [--snapshot-interval-s S] [--no-sync]\n"
    "             [--disk-high-watermark PCT] [--disk-low-watermark PCT]\n"
    "      run the whole KV store in one process: metadata in DIR/metadata, N in-process\n"
    "      bookies in DIR/bookies (default 1; every write goes to all of them), ranges in\n"
    "      DIR/ranges. Snapshots after M MiB of log (default 64) or S seconds with writes\n"
    "      (default 600). While the disk is over the bookies' watermark (as for\n"
    "      bookie) writes fail UNAVAILABLE (retry-safe) and reads (gets, scans, Txns\n"
    "      that change nothing) are still answered; writes resume once it is below.\n"
    "      Prints \"ledgerkv standalone serving on <addr>\" when ready.\n"
    "  server --data-dir DIR --listen HOST:PORT [--advertise HOST[:PORT]]\n"
    "         --metadata etcd://HOST:PORT[,HOST:PORT...] [--cluster NAME] [--server-id ID]\n"
    "         [--lease-ttl-s S] [--ensemble E] [--write-quorum W] [--ack-quorum A]\n"
    "         [--snapshot-log-mb M] [--snapshot-interval-s S]\n"
    "         [--orphan-sweep-period-s P] [--orphan-min-age-s A]\n"
    "         [--rereplicate-after-s R | --no-rereplicate]\n"
    "      run a range server of a cluster (docs/cluster.md): registers in etcd under\n"
    "      its published address (--advertise, as for bookie; the id defaults to it),\n"
    "      serves the ranges the controller assigns it, redirects the others.\n"
    "      Logs and snapshots on E bookies (default 3), W copies (3), A acks (2).\n"
    "      Lease TTL S seconds (default 5): failover takes about that long. The controller\n"
    "      cleans range records no table references every P seconds (default 300) once\n"
    "      they are A seconds old (default 600). It also moves the copies of closed\n"
    "      ledgers off a bookie unregistered for R seconds (default 300;\n"
    "      docs/ledger-protocol.md, \"Re-replication\").\n";

int Usage(const std::string& error) {
  if (!error.empty()) absl::FPrintF(stderr, "ledgerkv: %s\n", error);
  absl::FPrintF(stderr, "%s%s%s", kUsage, ledgerkv::kv::kLedgerCliUsage,
                ledgerkv::kv::kClusterCliUsage);
  return kExitUsage;
}

// Blocks SIGTERM/SIGINT in every thread (call before any thread starts) so
// that the main thread can wait for them with sigwait.
sigset_t BlockShutdownSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  return set;
}

// One flag of a subcommand. kString and kPositive flags take a value
// (kPositive: an integer > 0); kSwitch flags take none.
struct Flag {
  enum class Kind { kString, kPositive, kSwitch };
  const char* name;
  Kind kind;
  std::function<void(const std::string& text, int64_t number)> set;
  // kPositive: the largest value, and what the value is (for errors).
  int64_t max = std::numeric_limits<int32_t>::max();
  const char* what = "a positive integer";
};

Flag StringFlag(const char* name, std::string* out) {
  return {name, Flag::Kind::kString, [out](const std::string& v, int64_t) { *out = v; }};
}

Flag PositiveFlag(const char* name, std::function<void(int64_t)> set,
                  int64_t max = std::numeric_limits<int32_t>::max(),
                  const char* what = "a positive integer") {
  return {name, Flag::Kind::kPositive, [set](const std::string&, int64_t n) { set(n); }, max,
          what};
}

Flag SwitchFlag(const char* name, std::function<void()> set) {
  return {name, Flag::Kind::kSwitch, [set](const std::string&, int64_t) { set(); }};
}

// Applies `args` to `flags`. Returns nullopt to go on, or the exit code
// (0 after --help, kExitUsage after a usage error, which it reports).
std::optional<int> ParseFlags(const std::string& command, const std::vector<std::string>& args,
                              const std::vector<Flag>& flags) {
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--help" || a == "-h") {
      absl::FPrintF(stdout, "%s", kUsage);
      return 0;
    }
    const Flag* flag = nullptr;
    for (const Flag& f : flags) {
      if (a == f.name) flag = &f;
    }
    if (flag == nullptr) return Usage(absl::StrCat(command, ": unknown flag ", a));
    if (flag->kind == Flag::Kind::kSwitch) {
      flag->set("", 0);
      continue;
    }
    // Positive integers stop at INT32_MAX: every such flag is a count, a
    // percent, a size in MiB or a time in seconds or microseconds, and
    // larger values wrapped when narrowed to int (--bookies 4294967297 was
    // 1) or overflowed when scaled (--snapshot-log-mb).
    int64_t n = 0;
    const bool given = i + 1 < args.size();
    const bool ok = given && (flag->kind == Flag::Kind::kString ||
                              (absl::SimpleAtoi(args[i + 1], &n) && n > 0 && n <= flag->max));
    if (!ok) {
      std::string want;
      if (flag->kind == Flag::Kind::kPositive) {
        want = absl::StrCat(" (", flag->what, " from 1 to ", flag->max, ")");
        if (given) absl::StrAppend(&want, ", not \"", args[i + 1], "\"");
      }
      return Usage(absl::StrCat(command, ": ", a, " needs a value", want));
    }
    flag->set(args[++i], n);
  }
  return std::nullopt;
}

// --disk-high-watermark / --disk-low-watermark (percent of the data dir's
// file system in use, docs/bookie-format.md): the flags, and their check.
// The low one defaults to 5 points under the high one.
struct DiskWatermarkFlags {
  std::optional<int64_t> high;
  std::optional<int64_t> low;

  std::vector<Flag> flags() {
    return {PositiveFlag("--disk-high-watermark", [this](int64_t n) { high = n; }, 100,
                         "a percent"),
            PositiveFlag("--disk-low-watermark", [this](int64_t n) { low = n; }, 100,
                         "a percent")};
  }

  // Sets the fractions, or returns the exit code of a usage error.
  std::optional<int> Apply(const std::string& command, double* high_out, double* low_out) const {
    const int64_t h = high.value_or(95);  // 1-100: the flags' bounds
    if (h == 100) {  // off: the low one does not matter
      *high_out = 1;
      return std::nullopt;
    }
    const int64_t l = low.value_or(h - 5);
    if (l < 1 || l >= h) {
      return Usage(absl::StrCat(command, ": --disk-low-watermark (", l,
                                ") must be at least 1 and below --disk-high-watermark (", h,
                                "), so that a disk on the line does not flap"));
    }
    *high_out = static_cast<double>(h) / 100;
    *low_out = static_cast<double>(l) / 100;
    return std::nullopt;
  }
};

std::vector<Flag> Concat(std::vector<Flag> a, const std::vector<Flag>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// The common life of a serving command: `start` runs with SIGTERM/SIGINT
// blocked in every thread; once it succeeded the ready line goes to stdout
// (tests and scripts wait for it), then the main thread waits for a signal
// and shuts the server down.
template <typename Server>
int ServeUntilSignalled(const std::string& command,
                        const std::function<absl::StatusOr<std::unique_ptr<Server>>()>& start,
                        const std::function<std::string(Server&)>& ready_line) {
  sigset_t signals = BlockShutdownSignals();
  absl::StatusOr<std::unique_ptr<Server>> server = start();
  if (!server.ok()) {
    absl::FPrintF(stderr, "ledgerkv %s: %s\n", command, server.status().ToString());
    return 1;
  }
  absl::FPrintF(stdout, "%s\n", ready_line(**server));
  std::fflush(stdout);
  int sig = 0;
  sigwait(&signals, &sig);
  absl::FPrintF(stderr, "ledgerkv %s: %s, shutting down\n", command, strsignal(sig));
  (*server)->Shutdown();
  absl::FPrintF(stderr, "ledgerkv %s: stopped\n", command);
  return 0;
}

int RunBookie(const std::vector<std::string>& args) {
  ledgerkv::bookie::BookieOptions options;
  options.listen.clear();
  std::string metadata_uri;
  bool no_wait = false;
  std::optional<int64_t> wait_us;
  DiskWatermarkFlags disk;
  std::optional<int> exit = ParseFlags(
      "bookie", args,
      Concat({StringFlag("--data-dir", &options.data_dir), StringFlag("--listen", &options.listen),
              StringFlag("--advertise", &options.advertise),
              StringFlag("--add-listen", &options.add_listen),
              StringFlag("--bookie-id", &options.bookie_id),
              StringFlag("--metadata", &metadata_uri), StringFlag("--cluster", &options.cluster),
              SwitchFlag("--no-sync", [&] { options.sync = false; }),
              SwitchFlag("--no-group-commit-wait", [&] { no_wait = true; }),
              // Longer than any disk's sync: the wait is bounded by one
              // recent sync anyway, so a larger bound would only be a typo.
              PositiveFlag("--group-commit-wait-max-us", [&](int64_t n) { wait_us = n; },
                           100000, "microseconds")},
             disk.flags()));
  if (exit.has_value()) return *exit;
  exit = disk.Apply("bookie", &options.disk_high_watermark, &options.disk_low_watermark);
  if (exit.has_value()) return *exit;
  if (no_wait && wait_us.has_value()) {
    return Usage("bookie: --no-group-commit-wait and --group-commit-wait-max-us exclude each other");
  }
  if (no_wait) options.group_commit_wait_max = absl::ZeroDuration();
  if (wait_us.has_value()) options.group_commit_wait_max = absl::Microseconds(*wait_us);
  if (options.data_dir.empty()) return Usage("bookie: --data-dir is required");
  if (options.listen.empty()) return Usage("bookie: --listen is required");
  if (!options.sync) {
    absl::FPrintF(stderr,
                  "ledgerkv bookie: --no-sync: adds are acknowledged before fdatasync; a power "
                  "failure can lose acknowledged entries\n");
  }
  // With a metadata store the bookie registers itself (ephemeral, with its
  // instance id), checks its cookie and collects deleted ledgers.
  std::unique_ptr<ledgerkv::metadata::MetadataStore> store;
  using ledgerkv::bookie::BookieServer;
  return ServeUntilSignalled<BookieServer>(
      "bookie",
      [&]() -> absl::StatusOr<std::unique_ptr<BookieServer>> {
        if (!metadata_uri.empty()) {
          auto opened = ledgerkv::metadata::OpenMetadataStore(metadata_uri);
          if (!opened.ok()) {
            return absl::Status(opened.status().code(),
                                absl::StrCat("--metadata ", metadata_uri, ": ",
                                             opened.status().message()));
          }
          store = std::move(*opened);
          options.metadata = store.get();
        }
        return BookieServer::Start(options);
      },
      [](BookieServer& s) {
        return absl::StrCat("bookie ", s.bookie_id(), " listening on ", s.address(), " instance ",
                            s.instance_id());
      });
}

int RunStandalone(const std::vector<std::string>& args) {
  ledgerkv::kv::StandaloneOptions options;
  options.listen.clear();
  DiskWatermarkFlags disk;
  std::optional<int> exit = ParseFlags(
      "standalone", args,
      Concat({StringFlag("--data-dir", &options.data_dir), StringFlag("--listen", &options.listen),
              PositiveFlag("--bookies", [&](int64_t n) { options.bookies = static_cast<int>(n); }),
              PositiveFlag("--snapshot-log-mb",
                           [&](int64_t n) { options.snapshot_log_bytes = n << 20; }),
              PositiveFlag("--snapshot-interval-s",
                           [&](int64_t n) { options.snapshot_interval = absl::Seconds(n); }),
              SwitchFlag("--no-sync", [&] { options.sync = false; })},
             disk.flags()));
  if (exit.has_value()) return *exit;
  exit = disk.Apply("standalone", &options.disk_high_watermark, &options.disk_low_watermark);
  if (exit.has_value()) return *exit;
  if (options.data_dir.empty()) return Usage("standalone: --data-dir is required");
  if (options.listen.empty()) return Usage("standalone: --listen is required");
  if (!options.sync) {
    absl::FPrintF(stderr,
                  "ledgerkv standalone: --no-sync: bookies acknowledge before fdatasync; a "
                  "machine failure can lose acknowledged writes\n");
  }
  using ledgerkv::kv::Standalone;
  return ServeUntilSignalled<Standalone>(
      "standalone", [&] { return Standalone::Start(options); },
      [](Standalone& s) { return absl::StrCat("ledgerkv standalone serving on ", s.address()); });
}

int RunServer(const std::vector<std::string>& args) {
  ledgerkv::kv::ClusterServerOptions options;
  bool rereplicate_after_set = false;
  bool no_rereplicate = false;
  std::optional<int> exit = ParseFlags(
      "server", args,
      {StringFlag("--data-dir", &options.data_dir), StringFlag("--listen", &options.listen),
       StringFlag("--advertise", &options.advertise), StringFlag("--metadata", &options.metadata),
       StringFlag("--cluster", &options.cluster),
       StringFlag("--server-id", &options.server_id),
       PositiveFlag("--lease-ttl-s", [&](int64_t n) { options.lease_ttl = absl::Seconds(n); }),
       PositiveFlag("--ensemble", [&](int64_t n) { options.ensemble_size = static_cast<int>(n); }),
       PositiveFlag("--write-quorum",
                    [&](int64_t n) { options.write_quorum = static_cast<int>(n); }),
       PositiveFlag("--ack-quorum", [&](int64_t n) { options.ack_quorum = static_cast<int>(n); }),
       PositiveFlag("--snapshot-log-mb", [&](int64_t n) { options.snapshot_log_bytes = n << 20; }),
       PositiveFlag("--snapshot-interval-s",
                    [&](int64_t n) { options.snapshot_interval = absl::Seconds(n); }),
       PositiveFlag("--orphan-sweep-period-s",
                    [&](int64_t n) { options.orphan_sweep_period = absl::Seconds(n); }),
       PositiveFlag("--orphan-min-age-s",
                    [&](int64_t n) { options.orphan_min_age = absl::Seconds(n); }),
       PositiveFlag("--rereplicate-after-s",
                    [&](int64_t n) {
                      options.rereplicate_after = absl::Seconds(n);
                      rereplicate_after_set = true;
                    }),
       SwitchFlag("--no-rereplicate", [&] { no_rereplicate = true; })});
  if (exit.has_value()) return *exit;
  if (options.data_dir.empty()) return Usage("server: --data-dir is required");
  if (options.listen.empty()) return Usage("server: --listen is required");
  if (options.metadata.empty()) return Usage("server: --metadata is required");
  if (no_rereplicate && rereplicate_after_set) {
    return Usage("server: --no-rereplicate and --rereplicate-after-s exclude each other");
  }
  if (no_rereplicate) options.rereplicate_after = absl::ZeroDuration();
  using ledgerkv::kv::ClusterServer;
  return ServeUntilSignalled<ClusterServer>(
      "server", [&] { return ClusterServer::Start(options); },
      [](ClusterServer& s) {
        return absl::StrCat("ledgerkv server ", s.server_id(), " serving on ", s.address(),
                            " instance ", s.instance_id());
      });
}

}  // namespace

int main(int argc, char** argv) {
  ledgerkv::TuneProcessForServer();
  if (argc < 2) return Usage("missing command");
  // Process tests arm named fault points here (base/fault_point.h); a build
  // without fault points (release) has none to arm.
  if (const char* faults = std::getenv("LEDGERKV_FAULTS"); faults != nullptr && *faults != 0) {
#if defined(LEDGERKV_FAULT_POINTS) && LEDGERKV_FAULT_POINTS
    if (absl::Status armed = ledgerkv::FaultPoints::Get().ArmFromSpec(faults); !armed.ok()) {
      return Usage(absl::StrCat("LEDGERKV_FAULTS: ", armed.message()));
    }
    absl::FPrintF(stderr, "ledgerkv: fault points armed (LEDGERKV_FAULTS): %s\n", faults);
#else
    absl::FPrintF(stderr, "ledgerkv: LEDGERKV_FAULTS ignored: built without fault points\n");
#endif
  }
  const std::string_view command = argv[1];
  std::vector<std::string> args(argv + 2, argv + argc);
  if (command == "bookie") return RunBookie(args);
  if (command == "standalone") return RunStandalone(args);
  if (command == "server") return RunServer(args);
  if (command == "--help" || command == "-h" || command == "help") {
    absl::FPrintF(stdout, "%s%s", kUsage, ledgerkv::kv::kLedgerCliUsage);
    return 0;
  }
  if (command == "ledger") return ledgerkv::kv::RunLedgerCli(args);
  if (command == "cluster") return ledgerkv::kv::RunClusterCli(args);
  return Usage(absl::StrFormat("unknown command \"%s\"", command));
}
