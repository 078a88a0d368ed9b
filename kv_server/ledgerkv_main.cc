// The `ledgerkv` binary: one executable, one subcommand per process role.
//   ledgerkv bookie --data-dir DIR --listen HOST:PORT [--bookie-id ID] [--no-sync]
//                   [--metadata etcd://HOST:PORT[,HOST:PORT...] | embedded:///DIR] [--cluster NAME]
//   ledgerkv standalone --data-dir DIR --listen HOST:PORT [--bookies N]
//       [--snapshot-log-mb M] [--snapshot-interval-s S] [--no-sync]
//   ledgerkv server --data-dir DIR --listen HOST:PORT --metadata etcd://HOST:PORT[,...]
//       [--cluster NAME] [--server-id ID] [--lease-ttl-s S] [--ensemble E --write-quorum W
//       --ack-quorum A] [--snapshot-log-mb M] [--snapshot-interval-s S]
//       (cluster mode, kv_server/cluster/cluster_server.h)
//   ledgerkv ledger --metadata URI [--cluster NAME] list|show ID|read ID|recover ID|delete ID
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
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "base/malloc_tuning.h"
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
    "  bookie --data-dir DIR --listen HOST:PORT [--bookie-id ID] [--no-sync]\n"
    "         [--metadata etcd://HOST:PORT[,HOST:PORT...]] [--cluster NAME]\n"
    "      run a bookie (ledger storage node). --no-sync skips fdatasync on adds:\n"
    "      acknowledged entries can be lost on power failure (off by default).\n"
    "      with --metadata the bookie registers itself (ephemeral), checks its cookie\n"
    "      and reclaims the space of deleted ledgers.\n"
    "  standalone --data-dir DIR --listen HOST:PORT [--bookies N] [--snapshot-log-mb M]\n"
    "             [--snapshot-interval-s S] [--no-sync]\n"
    "      run the whole KV store in one process: metadata in DIR/metadata, N in-process\n"
    "      bookies in DIR/bookies (default 1; every write goes to all of them), ranges in\n"
    "      DIR/ranges. Snapshots after M MiB of log (default 64) or S seconds with writes\n"
    "      (default 600). Prints \"ledgerkv standalone serving on <addr>\" when ready.\n"
    "  server --data-dir DIR --listen HOST:PORT --metadata etcd://HOST:PORT[,HOST:PORT...]\n"
    "         [--cluster NAME] [--server-id ID] [--lease-ttl-s S] [--ensemble E]\n"
    "         [--write-quorum W] [--ack-quorum A] [--snapshot-log-mb M] [--snapshot-interval-s S]\n"
    "      run a range server of a cluster (docs/cluster.md): registers in etcd (id defaults\n"
    "      to the listen address), serves the ranges the controller assigns it, redirects\n"
    "      the others. Logs and snapshots on E bookies (default 3), W copies (3), A acks (2).\n"
    "      Lease TTL S seconds (default 5): failover takes about that long.\n";

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

int RunBookie(const std::vector<std::string>& args) {
  ledgerkv::bookie::BookieOptions options;
  options.listen.clear();
  std::string metadata_uri;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&](std::string* out) {
      if (i + 1 >= args.size()) return false;
      *out = args[++i];
      return true;
    };
    bool ok = true;
    if (a == "--data-dir") {
      ok = value(&options.data_dir);
    } else if (a == "--listen") {
      ok = value(&options.listen);
    } else if (a == "--bookie-id") {
      ok = value(&options.bookie_id);
    } else if (a == "--metadata") {
      ok = value(&metadata_uri);
    } else if (a == "--cluster") {
      ok = value(&options.cluster);
    } else if (a == "--no-sync") {
      options.sync = false;
    } else if (a == "--help" || a == "-h") {
      absl::FPrintF(stdout, "%s", kUsage);
      return 0;
    } else {
      return Usage("bookie: unknown flag " + a);
    }
    if (!ok) return Usage("bookie: " + a + " needs a value");
  }
  if (options.data_dir.empty()) return Usage("bookie: --data-dir is required");
  if (options.listen.empty()) return Usage("bookie: --listen is required");
  if (!options.sync) {
    absl::FPrintF(stderr,
                  "ledgerkv bookie: --no-sync: adds are acknowledged before fdatasync; a power "
                  "failure can lose acknowledged entries\n");
  }

  sigset_t signals = BlockShutdownSignals();
  // With a metadata store the bookie registers itself (ephemeral, with its
  // instance id), checks its cookie and collects deleted ledgers.
  std::unique_ptr<ledgerkv::metadata::MetadataStore> store;
  if (!metadata_uri.empty()) {
    auto opened = ledgerkv::metadata::OpenMetadataStore(metadata_uri);
    if (!opened.ok()) {
      absl::FPrintF(stderr, "ledgerkv bookie: --metadata %s: %s\n", metadata_uri,
                    opened.status().ToString());
      return 1;
    }
    store = std::move(*opened);
    options.metadata = store.get();
  }
  auto server = ledgerkv::bookie::BookieServer::Start(options);
  if (!server.ok()) {
    absl::FPrintF(stderr, "ledgerkv bookie: %s\n", server.status().ToString());
    return 1;
  }
  absl::FPrintF(stdout, "bookie %s listening on %s instance %s\n", (*server)->bookie_id(),
                (*server)->address(), (*server)->instance_id());
  std::fflush(stdout);

  int sig = 0;
  sigwait(&signals, &sig);
  absl::FPrintF(stderr, "ledgerkv bookie: %s, shutting down\n", strsignal(sig));
  (*server)->Shutdown();
  return 0;
}

int RunStandalone(const std::vector<std::string>& args) {
  ledgerkv::kv::StandaloneOptions options;
  options.listen.clear();
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    std::string v;
    auto value = [&]() {
      if (i + 1 >= args.size()) return false;
      v = args[++i];
      return true;
    };
    auto positive = [&](int64_t* out) { return value() && absl::SimpleAtoi(v, out) && *out > 0; };
    bool ok = true;
    int64_t n = 0;
    if (a == "--data-dir") {
      ok = value();
      options.data_dir = v;
    } else if (a == "--listen") {
      ok = value();
      options.listen = v;
    } else if (a == "--bookies") {
      ok = positive(&n);
      options.bookies = static_cast<int>(n);
    } else if (a == "--snapshot-log-mb") {
      ok = positive(&n);
      options.snapshot_log_bytes = n << 20;
    } else if (a == "--snapshot-interval-s") {
      ok = positive(&n);
      options.snapshot_interval = absl::Seconds(n);
    } else if (a == "--no-sync") {
      options.sync = false;
    } else if (a == "--help" || a == "-h") {
      absl::FPrintF(stdout, "%s", kUsage);
      return 0;
    } else {
      return Usage("standalone: unknown flag " + a);
    }
    if (!ok) return Usage("standalone: " + a + " needs a value (a positive integer for numbers)");
  }
  if (options.data_dir.empty()) return Usage("standalone: --data-dir is required");
  if (options.listen.empty()) return Usage("standalone: --listen is required");
  if (!options.sync) {
    absl::FPrintF(stderr,
                  "ledgerkv standalone: --no-sync: bookies acknowledge before fdatasync; a "
                  "machine failure can lose acknowledged writes\n");
  }

  sigset_t signals = BlockShutdownSignals();
  auto server = ledgerkv::kv::Standalone::Start(options);
  if (!server.ok()) {
    absl::FPrintF(stderr, "ledgerkv standalone: %s\n", server.status().ToString());
    return 1;
  }
  absl::FPrintF(stdout, "ledgerkv standalone serving on %s\n", (*server)->address());
  std::fflush(stdout);

  int sig = 0;
  sigwait(&signals, &sig);
  absl::FPrintF(stderr, "ledgerkv standalone: %s, shutting down\n", strsignal(sig));
  (*server)->Shutdown();
  absl::FPrintF(stderr, "ledgerkv standalone: stopped\n");
  return 0;
}

int RunServer(const std::vector<std::string>& args) {
  ledgerkv::kv::ClusterServerOptions options;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    std::string v;
    auto value = [&]() {
      if (i + 1 >= args.size()) return false;
      v = args[++i];
      return true;
    };
    auto positive = [&](int64_t* out) { return value() && absl::SimpleAtoi(v, out) && *out > 0; };
    bool ok = true;
    int64_t n = 0;
    if (a == "--data-dir") {
      ok = value();
      options.data_dir = v;
    } else if (a == "--listen") {
      ok = value();
      options.listen = v;
    } else if (a == "--metadata") {
      ok = value();
      options.metadata = v;
    } else if (a == "--cluster") {
      ok = value();
      options.cluster = v;
    } else if (a == "--server-id") {
      ok = value();
      options.server_id = v;
    } else if (a == "--lease-ttl-s") {
      ok = positive(&n);
      options.lease_ttl = absl::Seconds(n);
    } else if (a == "--ensemble") {
      ok = positive(&n);
      options.ensemble_size = static_cast<int>(n);
    } else if (a == "--write-quorum") {
      ok = positive(&n);
      options.write_quorum = static_cast<int>(n);
    } else if (a == "--ack-quorum") {
      ok = positive(&n);
      options.ack_quorum = static_cast<int>(n);
    } else if (a == "--snapshot-log-mb") {
      ok = positive(&n);
      options.snapshot_log_bytes = n << 20;
    } else if (a == "--snapshot-interval-s") {
      ok = positive(&n);
      options.snapshot_interval = absl::Seconds(n);
    } else if (a == "--help" || a == "-h") {
      absl::FPrintF(stdout, "%s", kUsage);
      return 0;
    } else {
      return Usage("server: unknown flag " + a);
    }
    if (!ok) return Usage("server: " + a + " needs a value (a positive integer for numbers)");
  }
  if (options.data_dir.empty()) return Usage("server: --data-dir is required");
  if (options.listen.empty()) return Usage("server: --listen is required");
  if (options.metadata.empty()) return Usage("server: --metadata is required");

  sigset_t signals = BlockShutdownSignals();
  auto server = ledgerkv::kv::ClusterServer::Start(options);
  if (!server.ok()) {
    absl::FPrintF(stderr, "ledgerkv server: %s\n", server.status().ToString());
    return 1;
  }
  absl::FPrintF(stdout, "ledgerkv server %s serving on %s instance %s\n", (*server)->server_id(),
                (*server)->address(), (*server)->instance_id());
  std::fflush(stdout);

  int sig = 0;
  sigwait(&signals, &sig);
  absl::FPrintF(stderr, "ledgerkv server: %s, shutting down\n", strsignal(sig));
  (*server)->Shutdown();
  absl::FPrintF(stderr, "ledgerkv server: stopped\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  ledgerkv::TuneMallocForServer();
  // Debian's libabsl is built in debug mode, which turns on absl::Mutex's
  // deadlock detector: a lock-order graph updated on every acquisition,
  // 2.6% of the server's CPU under a put load (docs/performance.md). The
  // unit tests keep it on (they are separate binaries); the process tests
  // keep it on for the children they start (tests/process_util.cc sets
  // LEDGERKV_MUTEX_DEADLOCK_DETECTION=1).
  const char* detect = std::getenv("LEDGERKV_MUTEX_DEADLOCK_DETECTION");
  if (detect == nullptr || std::string_view(detect) != "1") {
    absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  }
  if (argc < 2) return Usage("missing command");
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
