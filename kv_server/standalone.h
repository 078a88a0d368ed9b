// Standalone: a whole ledgerkv in one process (`ledgerkv standalone`): an
// embedded metadata store, N in-process bookies, one RangeHost serving
// every range of every table, and the KV and Admin gRPC services.
//
// Data directory layout:
//   DIR/LOCK          flock'ed while a process uses DIR (holds its pid)
//   DIR/metadata/     EmbeddedStore
//   DIR/bookies/<i>/  bookie i (id "standalone-bookie-<i>", 127.0.0.1:0)
//   DIR/ranges/<id>/  local RocksDB of range <id>
//
// Durability: with sync on (the default) every acknowledged write is on
// all N bookies (E = Qw = Qa = N) and fdatasync'ed there, so kill -9 loses
// none. The number of bookies may grow between runs on one data dir but not
// shrink (Start refuses: ledgers written on bookie i need it to be read).
//
// Threading: Start and Shutdown block; accessors are thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "base/data_dir_lock.h"
#include "kv_server/range/limits.h"

namespace grpc {
class Server;
}
namespace ledgerkv::bookie {
class BookieServer;
}
namespace ledgerkv::ledger {
class LedgerClient;
}
namespace ledgerkv::metadata {
class EmbeddedStore;
class MetadataStore;
}  // namespace ledgerkv::metadata

namespace ledgerkv::kv {

class ActiveCalls;

class AdminService;
class KvService;
class RangeHost;
class TableCatalog;

struct StandaloneOptions {
  std::string data_dir;
  // host:port; port 0 picks a free one (see address()).
  std::string listen = "127.0.0.1:7070";
  // In-process bookies; every ledger is written to all of them.
  int bookies = 1;
  // false: bookies acknowledge adds before fdatasync (docs/bookie-format.md):
  // acknowledged writes can be lost when the machine fails.
  bool sync = true;
  // The bookies' disk usage watermarks (BookieOptions): puts fail
  // UNAVAILABLE from `high` of the disk in use until it is below `low`.
  double disk_high_watermark = 0.95;
  double disk_low_watermark = 0.90;
  int64_t snapshot_log_bytes = int64_t{64} << 20;
  absl::Duration snapshot_interval = absl::Minutes(10);
  Limits limits;
};

class Standalone {
 public:
  // Locks the data dir, opens the store, starts the bookies, loads the
  // catalog (creating table `default` with one range if it is missing),
  // cleans up ranges no table references, opens every range and starts
  // serving. Errors: FAILED_PRECONDITION "data dir D is in use by another
  // ledgerkv process (pid P)", or fewer bookies than the data dir holds;
  // INVALID_ARGUMENT (options); UNAVAILABLE if
  // it cannot listen; the store's, bookies' and catalog's errors.
  static absl::StatusOr<std::unique_ptr<Standalone>> Start(StandaloneOptions options);

  // Shutdown().
  ~Standalone();

  Standalone(const Standalone&) = delete;
  Standalone& operator=(const Standalone&) = delete;

  // host:port the KV and Admin services listen on (the bound port).
  const std::string& address() const { return address_; }

  // Stops accepting requests and finishes the pending ones, closes every
  // range, stops the bookies and the store, unlocks the data dir.
  // Idempotent.
  void Shutdown();

  TableCatalog* catalog() { return catalog_.get(); }
  RangeHost* host() { return host_.get(); }
  metadata::MetadataStore* metadata();
  ledger::LedgerClient* ledger_client() { return client_.get(); }

 private:
  explicit Standalone(StandaloneOptions options);

  absl::Status Lock();
  absl::Status StartBookies();
  absl::Status StartServer();

  const StandaloneOptions options_;
  DataDirLock lock_;  // the data dir's LOCK, held while running
  std::string address_;
  std::unique_ptr<metadata::EmbeddedStore> store_;
  std::vector<std::unique_ptr<bookie::BookieServer>> bookies_;
  std::unique_ptr<ledger::LedgerClient> client_;
  std::unique_ptr<TableCatalog> catalog_;
  std::unique_ptr<RangeHost> host_;
  std::unique_ptr<KvService> kv_service_;
  std::unique_ptr<AdminService> admin_service_;
  // Counted by the services, read by StopServing: declared before server_
  // so that it outlives it.
  std::shared_ptr<ActiveCalls> calls_;
  std::unique_ptr<grpc::Server> server_;
  bool shut_down_ = false;
};

}  // namespace ledgerkv::kv
