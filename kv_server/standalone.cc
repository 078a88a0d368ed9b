#include "kv_server/standalone.h"

#include <unistd.h>

#include <cstdio>
#include <algorithm>
#include <filesystem>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "grpcpp/grpcpp.h"
#include "kv_server/admin_service.h"
#include "kv_server/catalog.h"
#include "kv_server/kv_service.h"
#include "kv_server/listen.h"
#include "kv_server/range_host.h"
#include "ledger/bookie/bookie_server.h"
#include "ledger/ledger_client.h"
#include "metadata/embedded_store.h"
#include "wal/orphan_ledgers.h"

namespace ledgerkv::kv {
namespace {

constexpr char kCluster[] = "default";
constexpr absl::Duration kShutdownGrace = absl::Seconds(10);

}  // namespace

Standalone::Standalone(StandaloneOptions options) : options_(std::move(options)) {}

Standalone::~Standalone() { Shutdown(); }

metadata::MetadataStore* Standalone::metadata() { return store_.get(); }

absl::Status Standalone::Lock() {
  ASSIGN_OR_RETURN(lock_, DataDirLock::Acquire(options_.data_dir));
  return absl::OkStatus();
}

absl::Status Standalone::StartBookies() {
  for (int i = 0; i < options_.bookies; ++i) {
    bookie::BookieOptions bo;
    bo.data_dir = absl::StrCat(options_.data_dir, "/bookies/", i);
    bo.listen = "127.0.0.1:0";
    // A stable id: the port changes at every start, ledger metadata names
    // bookies by id and the registration gives the current address.
    bo.bookie_id = absl::StrCat("standalone-bookie-", i);
    bo.sync = options_.sync;
    bo.disk_high_watermark = options_.disk_high_watermark;
    bo.disk_low_watermark = options_.disk_low_watermark;
    bo.metadata = store_.get();
    bo.cluster = kCluster;
    ASSIGN_OR_RETURN(std::unique_ptr<bookie::BookieServer> server,
                     bookie::BookieServer::Start(std::move(bo)));
    bookies_.push_back(std::move(server));
  }
  return absl::OkStatus();
}

absl::Status Standalone::StartServer() {
  calls_ = std::make_shared<ActiveCalls>();
  kv_service_ = std::make_unique<KvService>(host_.get(), options_.limits, calls_.get());
  admin_service_ = std::make_unique<AdminService>(catalog_.get(), host_.get(), calls_.get());
  ASSIGN_OR_RETURN(Listening listening,
                   ListenAndServe(options_.listen, {kv_service_.get(), admin_service_.get()},
                                  static_cast<int>(options_.limits.max_request_bytes +
                                                   kRequestSlackBytes)));
  server_ = std::move(listening.server);
  address_ = std::move(listening.address);
  host_->set_owner(address_);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Standalone>> Standalone::Start(StandaloneOptions options) {
  if (options.data_dir.empty()) return absl::InvalidArgumentError("standalone: no data dir");
  if (options.listen.empty()) return absl::InvalidArgumentError("standalone: no listen address");
  if (options.bookies < 1 || options.bookies > 16) {
    return absl::InvalidArgumentError(
        absl::StrCat("standalone: --bookies ", options.bookies, " is not in 1..16"));
  }
  std::unique_ptr<Standalone> s(new Standalone(std::move(options)));
  const StandaloneOptions& o = s->options_;
  std::error_code ec;
  for (const char* sub : {"/ranges", "/bookies"}) {
    std::filesystem::create_directories(o.data_dir + sub, ec);
    if (ec) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot create ", o.data_dir, sub, ": ", ec.message()));
    }
  }
  RETURN_IF_ERROR(s->Lock());
  // Ledgers are written to every bookie: one that existed before must
  // still be started, or its ledgers could not be read.
  int previous = 0;
  for (const auto& entry : std::filesystem::directory_iterator(o.data_dir + "/bookies", ec)) {
    int index = 0;
    if (absl::SimpleAtoi(entry.path().filename().string(), &index)) {
      previous = std::max(previous, index + 1);
    }
  }
  if (previous > o.bookies) {
    return absl::FailedPreconditionError(
        absl::StrCat("data dir ", o.data_dir, " holds ", previous, " bookies; --bookies ",
                     o.bookies, " would leave ledgers unreadable (use --bookies ", previous,
                     " or more)"));
  }
  ASSIGN_OR_RETURN(s->store_, metadata::EmbeddedStore::Open(o.data_dir + "/metadata"));
  RETURN_IF_ERROR(s->StartBookies());
  ledger::ClientOptions co{.metadata = s->store_.get(), .cluster = kCluster};
  // The bookies live in this process: reach them through gRPC's in-process
  // transport instead of loopback TCP (docs/performance.md). They still
  // register their TCP address, which other processes (the ledger CLI) use.
  co.local_channel = [raw = s.get()](const std::string& address,
                                     const grpc::ChannelArguments& args) -> ledger::LocalChannel {
    for (const auto& b : raw->bookies_) {
      if (b->address() == address) return {b->InProcessChannel(args), b->InProcessCallGate()};
    }
    return {};
  };
  // And their adds (the write path) without gRPC at all: a function call
  // into the bookie's storage, answered from its journal thread after the
  // fdatasync.
  co.local_add = [raw = s.get()](const std::string& address) -> ledger::LocalAddFn {
    for (const auto& b : raw->bookies_) {
      if (b->address() == address) return b->LocalAdd();
    }
    return nullptr;
  };
  ASSIGN_OR_RETURN(s->client_, ledger::LedgerClient::Create(std::move(co)));

  s->catalog_ = std::make_unique<TableCatalog>(s->store_.get(), kCluster, o.limits);
  RETURN_IF_ERROR(s->catalog_->Load());
  if (absl::IsNotFound(s->catalog_->Get(kDefaultTable).status())) {
    RETURN_IF_ERROR(s->catalog_->CreateTable(kDefaultTable, {}).status());
  }

  // Every write goes to all the bookies (E = Qw = Qa = N).
  RangeHostOptions ho = MakeRangeHostOptions({.data_dir = o.data_dir,
                                              .client = s->client_.get(),
                                              .store = s->store_.get(),
                                              .cluster = kCluster,
                                              .ensemble_size = o.bookies,
                                              .write_quorum = o.bookies,
                                              .ack_quorum = o.bookies,
                                              .snapshot_log_bytes = o.snapshot_log_bytes,
                                              .snapshot_interval = o.snapshot_interval,
                                              .limits = o.limits});
  ASSIGN_OR_RETURN(s->host_, RangeHost::Create(s->catalog_.get(), std::move(ho)));

  // This process is the only writer: a range record no table names is
  // garbage of an interrupted create or drop.
  absl::StatusOr<int> swept = s->catalog_->Sweep(
      [host = s->host_.get()](const meta::v1::RangeMetadata& r) { return host->DestroyRange(r); });
  if (!swept.ok()) {
    absl::FPrintF(stderr, "ledgerkv: cleanup of unreferenced ranges failed: %s\n",
                  swept.status().ToString());
  } else if (*swept > 0) {
    absl::FPrintF(stderr, "ledgerkv: cleaned up %d unreferenced ranges\n", *swept);
  }
  // Local dirs of ranges no table references (a drop interrupted before
  // its directory was removed); only after the catalog loaded and swept.
  if (swept.ok()) {
    absl::StatusOr<std::vector<uint64_t>> dirs =
        s->host_->SweepLocalDirs(s->catalog_->ReferencedRanges());
    if (!dirs.ok()) {
      absl::FPrintF(stderr, "ledgerkv: cleanup of local range dirs failed: %s\n",
                    dirs.status().ToString());
    }
  }
  const int serving = s->host_->OpenAll();
  absl::FPrintF(stderr, "ledgerkv: %d ranges serving\n", serving);
  // Ledgers an open or roll created and never got into its log (a crash
  // before the segment CAS), including those of the logs the sweep above
  // deleted. After OpenAll: the opens raised every log's epoch past the
  // orphans of the previous run, which can then go at once.
  {
    wal::LogOptions log_options;
    log_options.client = s->client_.get();
    log_options.metadata = s->store_.get();
    log_options.cluster = kCluster;
    absl::StatusOr<wal::OrphanLedgerSweep> ledgers = wal::DeleteOrphanLedgers(log_options);
    if (!ledgers.ok()) {
      absl::FPrintF(stderr, "ledgerkv: cleanup of orphan ledgers failed: %s\n",
                    ledgers.status().ToString());
    } else if (ledgers->deleted > 0) {
      absl::FPrintF(stderr, "ledgerkv: deleted %d orphan ledgers\n", ledgers->deleted);
    }
  }

  RETURN_IF_ERROR(s->StartServer());
  return s;
}

void Standalone::Shutdown() {
  if (shut_down_) return;
  shut_down_ = true;
  // Stop accepting and finish pending calls (writes finish when their
  // effect is durable, or fail when the ranges close).
  StopServing(server_.get(), calls_.get(), kShutdownGrace);
  if (host_ != nullptr) host_->Shutdown();
  server_.reset();
  admin_service_.reset();
  kv_service_.reset();
  host_.reset();
  catalog_.reset();
  client_.reset();
  for (auto& b : bookies_) b->Shutdown();
  bookies_.clear();
  store_.reset();
  lock_ = DataDirLock();  // last: the data dir is free for the next process
}

}  // namespace ledgerkv::kv
