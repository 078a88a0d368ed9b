#include "ledger/bookie/bookie_server.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "base/add_protocol.h"
#include "base/file.h"
#include "base/net_address.h"
#include "base/status_macros.h"
#include "grpcpp/grpcpp.h"
#include "ledger/bookie/add_server.h"
#include "ledger/bookie/bookie_service.h"
#include "ledger/bookie/bookie_storage.h"
#include "proto/metadata.pb.h"

namespace ledgerkv::bookie {
namespace {

constexpr int kReadThreads = 4;
constexpr absl::Duration kSessionTtl = absl::Seconds(10);
// An add carries up to kMaxPayloadSize per entry; leave room for framing
// (the clients' limit is the same: add_protocol::kMaxBodyBytes).
constexpr int kMaxReceiveMessageBytes = static_cast<int>(add_protocol::kMaxBodyBytes);

namespace meta = ::ledgerkv::meta::v1;

// In the data dir: the cluster and bookie id whose cookie this data was
// registered under (docs/bookie-format.md, "Registration file").
constexpr char kRegistrationFile[] = "REGISTERED";

std::string RegistrationText(const std::string& cluster, const std::string& bookie_id) {
  return absl::StrCat("cluster ", cluster, "\nbookie_id ", bookie_id, "\n");
}

// Runs `use(service)` while the gate's service serves, counted in
// `active`: a use that saw the service ends before Shutdown's wait for
// `active` does, so before the server stops. False, without running it,
// once Shutdown began.
template <typename Gate, typename Use>
bool ThroughGate(Gate& gate, Use use) {
  gate.active.fetch_add(1);
  BookieServiceImpl* service = gate.service.load();
  if (service != nullptr) use(service);
  gate.active.fetch_sub(1);
  return service != nullptr;
}

}  // namespace

BookieServer::BookieServer(BookieOptions options) : options_(std::move(options)) {}

BookieServer::~BookieServer() { Shutdown(); }

std::shared_ptr<grpc::Channel> BookieServer::InProcessChannel(const grpc::ChannelArguments& args) {
  // Under mu_: Shutdown sets shutdown_ under it before it resets server_.
  absl::MutexLock l(&mu_);
  if (shutdown_ || server_ == nullptr) return nullptr;
  return server_->InProcessChannel(args);
}

LocalCallGate BookieServer::InProcessCallGate() {
  return [gate = local_gate_](absl::FunctionRef<void()> start) {
    return ThroughGate(*gate, [&](BookieServiceImpl*) { start(); });
  };
}

LocalAddFunction BookieServer::LocalAdd() {
  // The gate was opened by Start and is closed by Shutdown; this only hands
  // out a function that goes through it.
  return [gate = local_gate_](const v1::AddRequest& request, v1::AddResponse* response,
                              std::function<void(const grpc::Status&)> done) {
    const bool served = ThroughGate(*gate, [&](BookieServiceImpl* service) {
      service->AddDirect(request, response, std::move(done));
    });
    if (!served) done(grpc::Status(grpc::StatusCode::UNAVAILABLE, "bookie is shutting down"));
  };
}

absl::StatusOr<std::unique_ptr<BookieServer>> BookieServer::Start(BookieOptions options) {
  if (options.add_port_max_connections == 0 ||
      options.add_port_hello_timeout <= absl::ZeroDuration() ||
      options.add_port_max_in_flight_bytes <= 0) {
    return absl::InvalidArgumentError(
        "BookieOptions: add_port_max_connections, add_port_hello_timeout and "
        "add_port_max_in_flight_bytes must be positive");
  }
  // Before the data dir is opened: a bookie registered under a wildcard
  // address would be dialled by every client at its own host.
  if (options.metadata != nullptr || !options.advertise.empty()) {
    RETURN_IF_ERROR(CheckAdvertisable(options.listen, options.advertise));
  }
  std::unique_ptr<BookieServer> s(new BookieServer(std::move(options)));
  StorageOptions so;
  so.dir = s->options_.data_dir;
  so.env = s->options_.env;
  so.sync = s->options_.sync;
  so.group_commit_wait_max = s->options_.group_commit_wait_max;
  so.group_commit_forget_after_idle = s->options_.group_commit_forget_after_idle;
  so.disk_high_watermark = s->options_.disk_high_watermark;
  so.disk_low_watermark = s->options_.disk_low_watermark;
  so.disk_check_interval = s->options_.disk_check_interval;
  ASSIGN_OR_RETURN(s->storage_, BookieStorage::Open(std::move(so)));
  s->instance_id_ = s->storage_->instance_id();

  s->service_ = std::make_unique<BookieServiceImpl>(s->storage_.get(), kReadThreads);
  s->local_gate_->service.store(s->service_.get());
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(s->options_.listen, grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(s->service_.get());
  builder.SetMaxReceiveMessageSize(kMaxReceiveMessageBytes);
  s->server_ = builder.BuildAndStart();
  if (s->server_ == nullptr || port == 0) {
    return absl::UnavailableError(absl::StrCat("bookie: cannot listen on ", s->options_.listen));
  }
  const std::string& listen = s->options_.listen;
  const std::string host(HostOf(listen));
  s->address_ = AdvertisedAddress(listen, port, s->options_.advertise);
  s->bookie_id_ = s->options_.bookie_id.empty() ? s->address_ : s->options_.bookie_id;
  s->service_->set_bookie_id(s->bookie_id_);
  if (s->options_.add_listen != "off") {
    const std::string add_listen =
        s->options_.add_listen.empty() ? absl::StrCat(host, ":0") : s->options_.add_listen;
    // Before StartServing: until then its adds are answered UNAVAILABLE, as
    // the RPCs are.
    // The service outlives the add server's threads (Shutdown joins them
    // before it resets the service).
    AddEntriesFunction add = [gate = s->local_gate_, service = s->service_.get()](
                                 std::string_view expected_instance_id, bool recovery,
                                 std::vector<EntryView> entries, AddEntriesDone done) {
      service->CountAddPortRequest();
      // The gate of LocalAdd: after Shutdown begins, UNAVAILABLE.
      const bool served = ThroughGate(*gate, [&](BookieServiceImpl* serving) {
        serving->AddEntries(expected_instance_id, recovery, std::move(entries), std::move(done));
      });
      if (!served) {
        std::move(done)(grpc::Status(grpc::StatusCode::UNAVAILABLE, "bookie is shutting down"), {});
      }
    };
    AddServerLimits limits;
    limits.max_connections = s->options_.add_port_max_connections;
    limits.hello_timeout = s->options_.add_port_hello_timeout;
    limits.max_in_flight_bytes = s->options_.add_port_max_in_flight_bytes;
    ASSIGN_OR_RETURN(s->add_server_,
                     AddServer::Start(add_listen, std::move(add), s->bookie_id_, limits));
    s->service_->set_add_port(s->add_server_->port());
  }

  if (s->options_.metadata != nullptr) {
    RETURN_IF_ERROR(s->CheckCookie());
    // Serve before registering, so that no client finds a registered
    // bookie that refuses it.
    s->service_->StartServing();
    RETURN_IF_ERROR(s->Register());
    s->storage_->SetReadOnlyListener([wakeup = s->wakeup_] {
      absl::MutexLock l(&wakeup->mu);
      wakeup->read_only_changed = true;
      wakeup->cv.Signal();
    });
    // The state may have changed (a failure, a disk watermark crossed
    // either way) between Register and the listener: publish it again.
    {
      absl::MutexLock l(&s->wakeup_->mu);
      s->wakeup_->read_only_changed = true;
    }
    BookieServer* raw = s.get();
    s->background_ = std::thread([raw] { raw->BackgroundLoop(); });
  } else {
    s->service_->StartServing();
  }
  return s;
}

absl::Status BookieServer::CheckCookie() {
  metadata::Keys keys(options_.cluster);
  const std::string key = keys.Cookie(bookie_id_);
  meta::BookieRegistration cookie;
  cookie.set_bookie_id(bookie_id_);
  cookie.set_address(address_);
  cookie.set_instance_id(instance_id_);
  // A data dir registered once must find its cookie again. Without this
  // check a bookie restarted under another --cluster, or against another
  // (empty) metadata store, would write a fresh cookie there, find none of
  // its ledgers in that store's listing, and garbage-collect all of them.
  Env* env = options_.env != nullptr ? options_.env : Env::Default();
  const std::string registration_path = absl::StrCat(options_.data_dir, "/", kRegistrationFile);
  const std::string registration = RegistrationText(options_.cluster, bookie_id_);
  const bool registered = env->FileExists(registration_path);
  if (registered) {
    ASSIGN_OR_RETURN(std::string recorded, ReadFileToString(env, registration_path));
    if (recorded != registration) {
      return absl::FailedPreconditionError(absl::StrCat(
          "bookie data dir ", options_.data_dir, " was registered as \"",
          absl::StrReplaceAll(recorded, {{"\n", "; "}}), "\" but this bookie starts as \"",
          absl::StrReplaceAll(registration, {{"\n", "; "}}),
          "\". Start it with the cluster name and bookie id (--cluster, and --bookie-id or "
          "the published address, --advertise or --listen) it was registered with; under "
          "another name it would find none of its ledgers in the metadata and "
          "garbage-collect them"));
    }
  }
  auto remember = [&]() -> absl::Status {
    if (registered) return absl::OkStatus();
    return WriteFileAtomically(env, registration_path, registration);
  };
  for (int attempt = 0; attempt < 2; ++attempt) {
    absl::StatusOr<metadata::VersionedValue> got = options_.metadata->Get(key);
    if (got.ok()) {
      meta::BookieRegistration stored;
      if (!stored.ParseFromString(got->value)) {
        return absl::DataLossError(absl::StrCat("bookie cookie ", key, " is not parseable"));
      }
      if (stored.instance_id() != instance_id_) {
        return absl::FailedPreconditionError(absl::StrCat(
            "bookie ", bookie_id_, ": metadata cookie ", key, " names instance ",
            stored.instance_id(), " but data dir ", options_.data_dir, " holds instance ",
            instance_id_, ". The data directory was wiped or belongs to another bookie; a "
            "bookie must not rejoin under the same id without its data. If its disk was "
            "replaced on purpose, `ledgerkv cluster --metadata URI delete-cookie ", bookie_id_,
            "` lets it rejoin empty, and the cluster then refills it"));
      }
      return remember();
    }
    if (!absl::IsNotFound(got.status())) return got.status();
    if (registered) {
      return absl::FailedPreconditionError(absl::StrCat(
          "bookie ", bookie_id_, ": data dir ", options_.data_dir, " was registered in cluster \"",
          options_.cluster, "\" but the metadata store has no cookie ", key,
          " for it. Is this the metadata store (etcd endpoints) it was registered with? Starting "
          "here would garbage-collect every ledger it holds. If its data is to be discarded, "
          "wipe the data dir first"));
    }
    absl::StatusOr<metadata::Version> put =
        options_.metadata->Put(key, cookie.SerializeAsString(), metadata::kMustNotExist);
    if (put.ok()) return remember();
    // ABORTED: someone wrote the cookie meanwhile; read and compare it.
    if (!absl::IsAborted(put.status())) return put.status();
  }
  return absl::AbortedError(absl::StrCat("bookie cookie ", key, " keeps changing"));
}

absl::Status BookieServer::Register() {
  // Called only from Start and then the background thread, never at once;
  // mu_ is not held across store calls (the store's threads call back into
  // on_expired, and the storage's writer into the read-only listener).
  metadata::SessionId session;
  {
    absl::MutexLock l(&mu_);
    session = session_;
  }
  if (session == metadata::kNoSession) {
    metadata::SessionOptions so;
    so.ttl = kSessionTtl;
    so.on_expired = [wakeup = wakeup_] {
      absl::MutexLock l(&wakeup->mu);
      wakeup->reregister = true;
      wakeup->cv.Signal();
    };
    ASSIGN_OR_RETURN(session, options_.metadata->CreateSession(so));
    absl::MutexLock l(&mu_);
    session_ = session;
  }
  meta::BookieRegistration reg;
  reg.set_bookie_id(bookie_id_);
  reg.set_address(address_);
  reg.set_instance_id(instance_id_);
  reg.set_read_only(storage_->read_only());
  const metadata::Keys keys(options_.cluster);
  // The cookie as read now, and the registration on condition that it is
  // still so. A bookie whose session lapsed while it ran on (an etcd
  // partition), or one between its cookie check and this call, could
  // otherwise register after an operator deleted its cookie to replace its
  // disk, and two instances would run under one id.
  for (int attempt = 0; attempt < 3; ++attempt) {
    absl::StatusOr<metadata::VersionedValue> cookie =
        options_.metadata->Get(keys.Cookie(bookie_id_));
    std::string lost;
    if (absl::IsNotFound(cookie.status())) {
      lost = "was deleted";
    } else if (!cookie.ok()) {
      return cookie.status();
    } else {
      meta::BookieRegistration stored;
      if (!stored.ParseFromString(cookie->value)) {
        return absl::DataLossError(absl::StrCat("bookie cookie ", keys.Cookie(bookie_id_),
                                                " is not parseable"));
      }
      if (stored.instance_id() != instance_id_) {
        lost = absl::StrCat("names instance ", stored.instance_id(), " now");
      }
    }
    if (!lost.empty()) {
      absl::MutexLock l(&mu_);
      cookie_lost_ = true;
      return absl::FailedPreconditionError(absl::StrCat(
          "bookie ", bookie_id_, " (instance ", instance_id_, "): its cookie ",
          keys.Cookie(bookie_id_), " ", lost,
          " after the bookie checked it (`ledgerkv cluster delete-cookie`: its disk is being "
          "replaced), so it does not register"));
    }
    absl::StatusOr<metadata::TxnResult> put = options_.metadata->Txn(
        {{keys.Cookie(bookie_id_), cookie->version}},
        {{metadata::TxnOp::Type::kPut, keys.Bookie(bookie_id_), reg.SerializeAsString(),
          session}});
    if (absl::IsNotFound(put.status())) {
      absl::MutexLock l(&mu_);  // the session ended meanwhile: start a new one
      if (session_ == session) session_ = metadata::kNoSession;
    }
    if (!put.ok()) return put.status();
    if (put->succeeded) return absl::OkStatus();
    // The cookie changed between the read and the transaction: look again.
  }
  return absl::AbortedError(absl::StrCat("bookie cookie ", keys.Cookie(bookie_id_),
                                         " keeps changing"));
}

void BookieServer::BackgroundLoop() {
  Wakeup& w = *wakeup_;
  absl::Time next_gc = absl::Now() + options_.gc_interval;
  w.mu.Lock();
  while (!w.stopping) {
    if (!w.reregister && !w.read_only_changed && absl::Now() < next_gc) {
      w.cv.WaitWithDeadline(&w.mu, next_gc);
      continue;
    }
    const bool reregister = std::exchange(w.reregister, false);
    const bool update = std::exchange(w.read_only_changed, false);
    const bool gc = absl::Now() >= next_gc;
    w.mu.Unlock();
    if (reregister) {
      absl::MutexLock l(&mu_);
      session_ = metadata::kNoSession;  // it expired: Register makes a new one
    }
    bool retry = false;
    bool cookie_lost;
    {
      absl::MutexLock l(&mu_);
      cookie_lost = cookie_lost_;
    }
    if ((reregister || update) && !cookie_lost) {
      absl::Status s = Register();
      bool lost_now;
      {
        absl::MutexLock l(&mu_);
        lost_now = cookie_lost_;
      }
      if (lost_now) {
        // For good: the operator declared this instance gone. Its adds
        // would count towards quorums on a disk about to be wiped.
        const std::string why = absl::StrCat(
            s.message(), " again; it refuses adds and fences from now on (its copies stay "
            "readable): stop it");
        // A storage read-only for good already keeps (and logged) its first
        // reason: this one is logged here.
        if (storage_->failed()) absl::FPrintF(stderr, "bookie: %s\n", why);
        storage_->RefuseAddsForGood(why);
      } else if (!s.ok()) {
        absl::FPrintF(stderr, "bookie %s: registration failed: %s\n", bookie_id_, s.ToString());
        retry = true;
      }
    }
    if (gc) {
      absl::Status s = RunGcOnce();
      if (!s.ok()) absl::FPrintF(stderr, "bookie %s: gc: %s\n", bookie_id_, s.ToString());
      next_gc = absl::Now() + options_.gc_interval;
    }
    w.mu.Lock();
    if (retry) {
      w.read_only_changed = true;  // Register writes the current state
      // Back off a little instead of spinning on a failing store.
      w.cv.WaitWithTimeout(&w.mu, absl::Seconds(1));
    }
  }
  w.mu.Unlock();
}

absl::Status BookieServer::RunGcOnce() {
  if (options_.metadata == nullptr) {
    return absl::FailedPreconditionError("bookie gc needs a metadata store");
  }
  absl::MutexLock g(&gc_mu_);
  {
    absl::MutexLock l(&mu_);
    if (shutdown_) return absl::FailedPreconditionError("bookie is shut down");
  }
  // Held ledgers first, listing second: a ledger created after the listing
  // is not in `held`, and one in `held` had its metadata before it reached
  // us, so it is listed unless it was deleted.
  const std::vector<uint64_t> held = storage_->LedgerIds();
  metadata::Keys keys(options_.cluster);
  absl::StatusOr<std::vector<metadata::KeyValue>> listing =
      options_.metadata->List(keys.LedgersPrefix());
  if (!listing.ok()) {
    return absl::Status(listing.status().code(),
                        absl::StrCat("ledger listing failed, nothing deleted: ",
                                     listing.status().message()));
  }
  absl::flat_hash_set<uint64_t> present;
  for (const metadata::KeyValue& kv : *listing) {
    uint64_t id;
    if (keys.ParseLedgerKey(kv.key, &id)) present.insert(id);
  }
  std::vector<uint64_t> dead;
  for (uint64_t id : held) {
    if (!present.contains(id)) dead.push_back(id);
  }
  if (!dead.empty()) {
    RETURN_IF_ERROR(storage_->DeleteLedgers(dead));
    absl::FPrintF(stderr, "bookie %s: gc: deleted %d ledgers without metadata\n", bookie_id_,
                  dead.size());
  }
  // Compaction needs the journal. A bookie over its disk watermark still
  // compacts: that is how it gets below it again.
  if (storage_->failed()) return absl::OkStatus();
  ASSIGN_OR_RETURN(BookieStorage::CompactionResult r, storage_->CompactJournal());
  if (r.files_deleted > 0) {
    absl::FPrintF(stderr,
                  "bookie %s: gc: removed %d journal files (%d compacted, %d entries copied, "
                  "%d bytes)\n",
                  bookie_id_, r.files_deleted, r.files_compacted, r.entries_copied,
                  r.bytes_reclaimed);
  }
  return absl::OkStatus();
}

int BookieServer::add_port() const { return add_server_ == nullptr ? 0 : add_server_->port(); }

bool BookieServer::read_only() const {
  absl::MutexLock l(&mu_);
  return shutdown_ ? read_only_at_shutdown_ : storage_->read_only();
}

void BookieServer::Shutdown() {
  absl::MutexLock whole(&shutdown_mu_);
  metadata::SessionId session;
  {
    absl::MutexLock l(&mu_);
    if (shutdown_) return;
  }
  {
    absl::MutexLock l(&wakeup_->mu);
    wakeup_->stopping = true;
    wakeup_->cv.Signal();
  }
  if (background_.joinable()) background_.join();
  {
    absl::MutexLock g(&gc_mu_);  // wait for a RunGcOnce from another thread
    absl::MutexLock l(&mu_);
    shutdown_ = true;
    read_only_at_shutdown_ = storage_ != nullptr && storage_->read_only();
    session = std::exchange(session_, metadata::kNoSession);
  }
  if (session != metadata::kNoSession) {
    absl::Status s = options_.metadata->CloseSession(session);
    if (!s.ok() && !absl::IsNotFound(s)) {
      absl::FPrintF(stderr, "bookie %s: deregistration failed: %s\n", bookie_id_, s.ToString());
    }
  }
  // No new adds from the add port: its connections close (clients see the
  // bookie gone) and its threads are joined; replies of adds it handed over
  // are dropped.
  if (add_server_ != nullptr) {
    service_->set_add_port(0);  // a client reconnecting now falls back to the RPC
    add_server_->Shutdown();
  }
  // No new local adds or in-process calls; adds inside the service finish
  // handing over (they never block), and the storage's close answers them;
  // calls that started are failed by the server's shutdown below.
  local_gate_->service.store(nullptr);
  while (local_gate_->active.load() != 0) std::this_thread::yield();
  // Storage first: it answers every queued add and ends long polls, so the
  // gRPC shutdown below has no reaction left waiting.
  if (storage_ != nullptr) {
    storage_->Close();
    absl::MutexLock l(&mu_);
    read_only_at_shutdown_ = storage_->read_only();
  }
  if (server_ != nullptr) {
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  }
  server_.reset();   // before the service it calls into
  service_.reset();  // joins the read pool (Shutdown waited for its reads)
  storage_.reset();  // releases the data directory
}

}  // namespace ledgerkv::bookie
