#include "kv_server/cluster/cluster_server.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <set>
#include <utility>
#include <vector>

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "base/fault_point.h"
#include "base/net_address.h"
#include "base/status_macros.h"
#include "grpcpp/grpcpp.h"
#include "kv_server/admin_service.h"
#include "kv_server/catalog.h"
#include "kv_server/kv_service.h"
#include "kv_server/listen.h"
#include "kv_server/range_host.h"
#include "kv_server/retry.h"
#include "ledger/auditor.h"
#include "ledger/ledger_client.h"
#include "metadata/open_store.h"
#include "wal/orphan_ledgers.h"

namespace ledgerkv::kv {
namespace {

namespace meta = ::ledgerkv::meta::v1;

constexpr absl::Duration kShutdownGrace = absl::Seconds(10);
// Clock rate error allowed between this host and the etcd leader, and a
// fixed margin for the time between reading the clock and sending.
constexpr double kClockDrift = 0.01;
constexpr absl::Duration kLeaseMargin = absl::Milliseconds(200);
// Control passes run on every watch event and at least this often (a
// missed event, or a store that was down, is picked up by the next pass).
constexpr absl::Duration kControlPeriod = absl::Seconds(1);
constexpr absl::Duration kTablesReload = absl::Seconds(10);

int64_t NowNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

int64_t UnixMillis() { return absl::ToUnixMillis(absl::Now()); }

std::string RandomInstanceId() {
  absl::BitGen gen;
  return absl::StrFormat("%016x", absl::Uniform<uint64_t>(gen));
}

void Log(const std::string& what) { absl::FPrintF(stderr, "ledgerkv server: %s\n", what); }

}  // namespace

ClusterServer::ClusterServer(ClusterServerOptions options)
    : options_(std::move(options)), keys_(options_.cluster) {}

ClusterServer::~ClusterServer() { Shutdown(); }

absl::StatusOr<std::unique_ptr<ClusterServer>> ClusterServer::Start(ClusterServerOptions options) {
  if (options.data_dir.empty()) return absl::InvalidArgumentError("server: no data dir");
  if (options.listen.empty()) return absl::InvalidArgumentError("server: no listen address");
  if (options.metadata.empty()) return absl::InvalidArgumentError("server: no --metadata URI");
  if (absl::Status s = CheckAdvertisable(options.listen, options.advertise); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("server: ", s.message()));
  }
  if (options.ack_quorum < 1 || options.ack_quorum > options.write_quorum ||
      options.write_quorum > options.ensemble_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "server: need 1 <= ack quorum <= write quorum <= ensemble size (got E=",
        options.ensemble_size, " Qw=", options.write_quorum, " Qa=", options.ack_quorum, ")"));
  }
  if (options.lease_ttl < absl::Seconds(2)) {
    return absl::InvalidArgumentError("server: the lease TTL must be at least 2 s");
  }
  std::unique_ptr<ClusterServer> s(new ClusterServer(std::move(options)));
  RETURN_IF_ERROR(s->Init());
  return s;
}

absl::Status ClusterServer::Init() {
  const ClusterServerOptions& o = options_;
  std::error_code ec;
  std::filesystem::create_directories(o.data_dir + "/ranges", ec);
  if (ec) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot create ", o.data_dir, "/ranges: ", ec.message()));
  }
  ASSIGN_OR_RETURN(lock_, DataDirLock::Acquire(o.data_dir));
  instance_id_ = RandomInstanceId();
  ASSIGN_OR_RETURN(store_, metadata::OpenMetadataStore(o.metadata));
  ASSIGN_OR_RETURN(client_,
                   ledger::LedgerClient::Create({.metadata = store_.get(), .cluster = o.cluster}));
  catalog_ = std::make_unique<TableCatalog>(store_.get(), o.cluster, o.limits);
  RETURN_IF_ERROR(catalog_->Load());

  RangeHostOptions ho = MakeRangeHostOptions({.data_dir = o.data_dir,
                                              .client = client_.get(),
                                              .store = store_.get(),
                                              .cluster = o.cluster,
                                              .ensemble_size = o.ensemble_size,
                                              .write_quorum = o.write_quorum,
                                              .ack_quorum = o.ack_quorum,
                                              .snapshot_log_bytes = o.snapshot_log_bytes,
                                              .snapshot_interval = o.snapshot_interval,
                                              .limits = o.limits});
  RangeOptions& ro = ho.range;
  ro.linearizable_read_check = [this] { return CheckLinearizableRead(); };
  ho.may_open = [this](uint64_t id) { return LeaseValid() && AssignedHere(id); };
  ho.owner_of = [this](uint64_t id) { return OwnerAddress(id); };
  ho.before_destroy = [this](uint64_t id) { return DeleteAssignment(id); };
  ho.on_table_miss = [this](std::string_view table, absl::Status not_found) {
    return OnTableMiss(table, std::move(not_found));
  };
  ASSIGN_OR_RETURN(host_, RangeHost::Create(catalog_.get(), std::move(ho)));

  calls_ = std::make_shared<ActiveCalls>();
  kv_service_ = std::make_unique<KvService>(host_.get(), o.limits, calls_.get());
  admin_service_ = std::make_unique<AdminService>(catalog_.get(), host_.get(), calls_.get());
  ASSIGN_OR_RETURN(Listening listening,
                   ListenAndServe(o.listen, {kv_service_.get(), admin_service_.get()},
                                  static_cast<int>(o.limits.max_request_bytes +
                                                   kRequestSlackBytes)));
  server_ = std::move(listening.server);
  address_ = AdvertisedAddress(o.listen, listening.port, o.advertise);
  host_->set_owner(address_);
  server_id_ = o.server_id.empty() ? address_ : o.server_id;

  // A previous run of this id (kill -9, restarted at once) holds the
  // registration until its lease runs out.
  RETURN_IF_ERROR(Register(o.lease_ttl + absl::Seconds(2)));
  RETURN_IF_ERROR(StartWatches());
  lease_thread_ = std::thread([this] { LeaseLoop(); });
  control_thread_ = std::thread([this] { ControlLoop(); });
  sweep_thread_ = std::thread([this] { SweepLoop(); });
  if (o.rereplicate_after > absl::ZeroDuration()) {
    audit_thread_ = std::thread([this] { AuditLoop(); });
  }
  return absl::OkStatus();
}

absl::Status ClusterServer::Register(absl::Duration wait) {
  metadata::SessionOptions so;
  so.ttl = options_.lease_ttl;
  // We refresh the lease ourselves: the lease is valid for a TTL from the
  // send time of the last acknowledged keepalive, which only we know.
  so.auto_keepalive = false;
  int64_t sent = NowNanos();
  ASSIGN_OR_RETURN(metadata::SessionId session, store_->CreateSession(so));
  meta::ServerRegistration reg;
  reg.set_server_id(server_id_);
  reg.set_address(address_);
  reg.set_instance_id(instance_id_);
  reg.set_start_unix_ms(UnixMillis());
  const absl::Time give_up = absl::Now() + wait;
  while (true) {
    absl::StatusOr<metadata::Version> put = store_->Put(
        keys_.Server(server_id_), reg.SerializeAsString(), metadata::kMustNotExist, session);
    if (put.ok()) break;
    if (!absl::IsAborted(put.status()) || absl::Now() >= give_up) {
      IgnoreError(store_->CloseSession(session));
      if (absl::IsAborted(put.status())) {
        return absl::FailedPreconditionError(
            absl::StrCat("server id ", server_id_, " is registered by another live process (",
                         keys_.Server(server_id_), "); use another --server-id or stop it"));
      }
      return put.status();
    }
    absl::SleepFor(absl::Milliseconds(250));
    // Waiting for the old registration can take longer than our own TTL:
    // keep the new session alive meanwhile (nothing else refreshes it yet).
    const int64_t kept_at = NowNanos();
    if (store_->KeepAlive(session).ok()) sent = kept_at;
  }
  {
    absl::MutexLock l(&mu_);
    session_ = session;
    // Only listings taken under this session may name ranges to adopt.
    assignments_.clear();
    assignment_versions_.clear();
    dirty_ = true;
    cv_.SignalAll();
  }
  lease_valid_until_.store(
      sent + absl::ToInt64Nanoseconds(options_.lease_ttl * (1 - kClockDrift) - kLeaseMargin));
  Log(absl::StrCat("registered as ", server_id_, " (", address_, ", instance ", instance_id_,
                   ", session ", session, ")"));
  return absl::OkStatus();
}

absl::Status ClusterServer::StartWatches() {
  const std::string prefixes[3] = {keys_.ServersPrefix(), keys_.AssignmentsPrefix(),
                                   keys_.TablesPrefix()};
  for (int i = 0; i < 3; ++i) {
    const bool tables = i == 2;
    ASSIGN_OR_RETURN(watches_[i],
                     store_->Watch(prefixes[i], 0, [this, tables](const auto&) {
                       absl::MutexLock l(&mu_);
                       dirty_ = true;
                       if (tables) tables_dirty_ = true;
                       cv_.SignalAll();
                     }));
  }
  // The controller key: a deleted one means an election.
  return absl::OkStatus();
}

bool ClusterServer::LeaseValid() const { return NowNanos() < lease_valid_until_.load(); }

absl::Status ClusterServer::CheckLinearizableRead() const {
  if (LeaseValid()) return absl::OkStatus();
  return RetrySafe(absl::UnavailableError(absl::StrCat(
      "server ", server_id_,
      " cannot serve a linearizable read: its lease is not certainly valid (etcd unreachable "
      "or session lost); retry, or read with serializable consistency")));
}

void ClusterServer::Wake() {
  absl::MutexLock l(&mu_);
  dirty_ = true;
  cv_.SignalAll();
}

absl::Status ClusterServer::OnTableMiss(std::string_view table, absl::Status not_found) {
  const int64_t now = NowNanos();
  absl::MutexLock l(&mu_);
  auto it = table_misses_.find(table);
  if (it != table_misses_.end() && tables_load_started_ > it->second) {
    // A catalog load that started after the first miss did not find it
    // either: the table did not exist when this request was sent.
    table_misses_.erase(it);
    return not_found;
  }
  if (it == table_misses_.end()) {
    if (table_misses_.size() >= 10000) table_misses_.clear();
    table_misses_.emplace(std::string(table), now);
  }
  tables_dirty_ = true;
  dirty_ = true;
  cv_.SignalAll();
  return RetrySafe(absl::UnavailableError(absl::StrCat(
      "table ", std::string(table), " is not known to this server yet (reloading the table list); retry")));
}

void ClusterServer::LoseSession(const char* why) {
  lease_valid_until_.store(0);
  {
    absl::MutexLock l(&mu_);
    session_ = metadata::kNoSession;
    controller_version_ = 0;
    // Learnt under the lost session: ranges may have moved since.
    assignments_.clear();
    assignment_versions_.clear();
    dirty_ = true;
    cv_.SignalAll();
  }
  Log(absl::StrCat("session lost (", why, "): giving up every range"));
}

void ClusterServer::LeaseLoop() {
  const absl::Duration period = options_.lease_ttl / 4;
  bool reported = false;
  while (true) {
    metadata::SessionId session;
    {
      absl::MutexLock l(&mu_);
      if (stop_) return;
      session = session_;
    }
    if (session == metadata::kNoSession) {
      // Not before every range of the lost session is closed: a new
      // session makes the lease valid again, and a range still open from
      // the old one (possibly moved elsewhere meanwhile) would then serve
      // stale linearizable reads.
      if (!host_->Known().empty()) {
        Wake();
        absl::MutexLock l(&mu_);
        cv_.WaitWithTimeout(&mu_, absl::Milliseconds(50));
        continue;
      }
      absl::Status registered = Register(options_.lease_ttl);
      if (!registered.ok() && !reported) {
        Log(absl::StrCat("cannot register again yet: ", registered.ToString()));
        reported = true;
      }
      if (registered.ok()) reported = false;
    } else {
      const int64_t sent = NowNanos();
      absl::Status kept = store_->KeepAlive(session);
      if (kept.ok()) {
        lease_valid_until_.store(
            sent +
            absl::ToInt64Nanoseconds(options_.lease_ttl * (1 - kClockDrift) - kLeaseMargin));
        if (reported) Log("keepalive answered again");
        reported = false;
      } else if (absl::IsNotFound(kept)) {
        LoseSession("lease expired");
        continue;
      } else {
        if (!reported) Log(absl::StrCat("keepalive failed: ", kept.ToString()));
        reported = true;
        Wake();  // the control thread releases ranges once the lease lapses
      }
    }
    absl::MutexLock l(&mu_);
    cv_.WaitWithTimeout(&mu_, period);
  }
}

absl::Status ClusterServer::RefreshAssignments() {
  metadata::SessionId session;
  {
    absl::MutexLock l(&mu_);
    session = session_;
  }
  ASSIGN_OR_RETURN(std::vector<metadata::KeyValue> listed,
                   store_->List(keys_.AssignmentsPrefix()));
  std::map<uint64_t, meta::RangeAssignment> assignments;
  std::map<uint64_t, metadata::Version> versions;
  for (const metadata::KeyValue& kv : listed) {
    meta::RangeAssignment a;
    if (!a.ParseFromString(kv.value)) {
      return absl::DataLossError(absl::StrCat("assignment ", kv.key, " does not parse"));
    }
    versions[a.range_id()] = kv.version;
    assignments[a.range_id()] = std::move(a);
  }
  absl::MutexLock l(&mu_);
  // A list taken under a session that ended meanwhile may name this server
  // as the owner of ranges that have moved: never act on it. Nor keep one
  // taken with no session: Register would make it look current, and a pass
  // whose next listing fails would adopt ranges that moved meanwhile.
  if (session != session_) return absl::UnavailableError("session changed during the listing");
  if (session == metadata::kNoSession) return absl::UnavailableError("no session: not registered");
  assignments_ = std::move(assignments);
  assignment_versions_ = std::move(versions);
  return absl::OkStatus();
}

bool ClusterServer::AssignedHere(uint64_t range_id) const {
  absl::MutexLock l(&mu_);
  auto it = assignments_.find(range_id);
  return it != assignments_.end() && it->second.server_id() == server_id_ &&
         it->second.moving_to().empty() && session_ != metadata::kNoSession;
}

std::string ClusterServer::OwnerAddress(uint64_t range_id) const {
  absl::MutexLock l(&mu_);
  auto it = assignments_.find(range_id);
  if (it == assignments_.end() || it->second.server_id() == server_id_) return "";
  return it->second.address();
}

absl::Status ClusterServer::DeleteAssignment(uint64_t range_id) {
  absl::Status deleted = store_->Delete(keys_.Assignment(range_id), metadata::kAnyVersion);
  if (absl::IsNotFound(deleted)) return absl::OkStatus();
  return deleted;
}

void ClusterServer::Reconcile() {
  std::map<uint64_t, meta::RangeAssignment> desired;
  std::map<uint64_t, std::pair<meta::RangeAssignment, metadata::Version>> handing_over;
  const bool valid = LeaseValid();
  {
    absl::MutexLock l(&mu_);
    if (valid && session_ != metadata::kNoSession) {
      for (const auto& [id, a] : assignments_) {
        if (a.server_id() != server_id_) continue;
        if (a.moving_to().empty()) {
          desired[id] = a;
        } else {
          handing_over[id] = {a, assignment_versions_.at(id)};
        }
      }
    }
  }
  for (const auto& [id, moving] : handing_over) HandOver(moving.first, moving.second);
  bool released = false;
  for (uint64_t id : host_->Known()) {
    if (desired.contains(id)) continue;
    Log(absl::StrCat("range ", id, " is no longer served here (",
                     valid ? "assigned elsewhere" : "lease not valid", ")"));
    host_->Release(id);
    released = true;
  }
  if (released) {
    // The range may have been dropped (its assignment deleted by a
    // DropTable on another server): reload the tables now, so that
    // SweepLocalDirs removes its directory without waiting kTablesReload.
    absl::MutexLock l(&mu_);
    tables_dirty_ = true;
    dirty_ = true;
  }
  std::vector<uint64_t> known = host_->Known();
  for (const auto& [id, a] : desired) {
    if (std::find(known.begin(), known.end(), id) != known.end()) continue;
    absl::StatusOr<std::shared_ptr<const meta::TableMetadata>> table = catalog_->Get(a.table());
    const meta::RangeSpec* spec = nullptr;
    if (table.ok()) {
      for (const meta::RangeSpec& r : (*table)->ranges()) {
        if (r.range_id() == id) spec = &r;
      }
    }
    if (spec == nullptr) {
      // Assigned before our catalog saw the table: load it next pass.
      absl::MutexLock l(&mu_);
      tables_dirty_ = true;
      continue;
    }
    Log(absl::StrCat("taking range ", id, " of table ", a.table(), " (epoch ", a.epoch(), ")"));
    host_->Adopt(RangeDescriptor{id, a.table(), spec->start(), spec->end()});
  }
}

void ClusterServer::SweepLocalDirs() {
  absl::StatusOr<std::vector<uint64_t>> swept =
      host_->SweepLocalDirs(catalog_->ReferencedRanges());
  if (!swept.ok()) {
    Log(absl::StrCat("sweep of local range directories failed (retried at the next table "
                     "reload): ",
                     swept.status().ToString()));
  }
}

void ClusterServer::HandOver(const meta::RangeAssignment& assignment, metadata::Version version) {
  // Closed here first (pending writes finish or fail), so the next owner
  // never serves while this one still does.
  host_->Release(assignment.range_id());
  meta::RangeAssignment next;
  next.set_range_id(assignment.range_id());
  next.set_server_id(assignment.moving_to());
  next.set_address(assignment.moving_to_address());
  next.set_epoch(assignment.epoch() + 1);
  next.set_assign_unix_ms(UnixMillis());
  next.set_table(assignment.table());
  absl::StatusOr<metadata::TxnResult> txn =
      store_->Txn({{keys_.Assignment(assignment.range_id()), version}},
                  {{metadata::TxnOp::Type::kPut, keys_.Assignment(assignment.range_id()),
                    next.SerializeAsString()}});
  if (txn.ok() && txn->succeeded) {
    Log(absl::StrCat("handed range ", assignment.range_id(), " over to ", next.server_id(),
                     " (epoch ", next.epoch(), ")"));
  }
  Wake();
}

void ClusterServer::Campaign() {
  metadata::SessionId session;
  {
    absl::MutexLock l(&mu_);
    if (controller_version_ != 0 || session_ == metadata::kNoSession) return;
    session = session_;
  }
  meta::ControllerRecord rec;
  rec.set_server_id(server_id_);
  rec.set_address(address_);
  rec.set_instance_id(instance_id_);
  rec.set_elected_unix_ms(UnixMillis());
  absl::StatusOr<metadata::Version> put =
      store_->Put(keys_.Controller(), rec.SerializeAsString(), metadata::kMustNotExist, session);
  // Tests: the create landed but its reply was lost (etcd slow or changing
  // leader): the caller sees UNAVAILABLE.
  if (put.ok() && LEDGERKV_FAULT("cluster.controller.campaign_reply_lost")) {
    put = absl::UnavailableError("fault point cluster.controller.campaign_reply_lost");
  }
  if (!put.ok()) {
    // UNAVAILABLE: the put may have landed with its reply lost; ABORTED
    // after such a put: the key may be that put. The record is then this
    // process's own, bound to its session: nobody else can be elected while
    // that session lives, so it must lead. Read back only while in doubt
    // (every other server's create is ABORTED once a second).
    {
      absl::MutexLock l(&mu_);
      if (absl::IsUnavailable(put.status())) campaign_in_doubt_ = session;
      if (campaign_in_doubt_ != session) return;  // someone else leads
    }
    // Absent, unreadable or someone else's: the next pass tries again.
    absl::StatusOr<metadata::VersionedValue> current = store_->Get(keys_.Controller());
    meta::ControllerRecord found;
    if (!current.ok() || !found.ParseFromString(current->value) ||
        found.server_id() != server_id_ || found.instance_id() != instance_id_) {
      return;
    }
    absl::MutexLock l(&mu_);
    campaign_in_doubt_ = metadata::kNoSession;
    Log(absl::StrCat("the controller key is this server's own (", put.status().message(),
                     "): taking it"));
    controller_version_ = current->version;
    Log("elected controller");
    return;
  }
  absl::MutexLock l(&mu_);
  campaign_in_doubt_ = metadata::kNoSession;
  controller_version_ = *put;
  Log("elected controller");
}

absl::Status ClusterServer::ControllerPass() {
  metadata::Version controller;
  {
    absl::MutexLock l(&mu_);
    controller = controller_version_;
  }
  if (controller == 0) return absl::OkStatus();
  // Still ours? (Our session may have ended while we were paused.)
  absl::StatusOr<metadata::VersionedValue> current = store_->Get(keys_.Controller());
  if (!current.ok() || current->version != controller) {
    if (current.ok() || absl::IsNotFound(current.status())) {
      absl::MutexLock l(&mu_);
      controller_version_ = 0;
      Log("no longer the controller");
      return absl::OkStatus();
    }
    return current.status();
  }

  ASSIGN_OR_RETURN(std::vector<metadata::KeyValue> servers_kv, store_->List(keys_.ServersPrefix()));
  std::map<std::string, meta::ServerRegistration> live;
  for (const metadata::KeyValue& kv : servers_kv) {
    meta::ServerRegistration reg;
    if (reg.ParseFromString(kv.value)) live[reg.server_id()] = reg;
  }
  ASSIGN_OR_RETURN(std::vector<metadata::KeyValue> tables_kv, store_->List(keys_.TablesPrefix()));
  bool have_default = false;
  std::vector<std::pair<meta::TableMetadata, metadata::Version>> tables;
  for (const metadata::KeyValue& kv : tables_kv) {
    meta::TableMetadata t;
    if (!t.ParseFromString(kv.value)) {
      return absl::DataLossError(absl::StrCat("table record ", kv.key, " does not parse"));
    }
    have_default = have_default || t.name() == kDefaultTable;
    tables.emplace_back(std::move(t), kv.version);
  }
  if (!have_default) {
    absl::StatusOr<meta::TableMetadata> created = catalog_->CreateTable(kDefaultTable, {});
    if (created.ok()) Log("created table default");
    Wake();
    return absl::OkStatus();  // the next pass sees it with its version
  }
  RETURN_IF_ERROR(RefreshAssignments());
  std::map<uint64_t, meta::RangeAssignment> assignments;
  std::map<uint64_t, metadata::Version> versions;
  {
    absl::MutexLock l(&mu_);
    assignments = assignments_;
    versions = assignment_versions_;
  }
  if (live.empty()) return absl::OkStatus();
  if (FaultPoints::Get().AnyArmed()) {
    // Tests: a pause between the listing and the writes that move the
    // ranges of servers it found gone (the window an owner that registers
    // again races with).
    for (const auto& [id, a] : assignments) {
      if (!live.contains(a.server_id())) {
        Log(absl::StrCat("range ", id, ": its owner ", a.server_id(),
                         " is not registered (fault point cluster.controller.owner_gone)"));
        static_cast<void>(LEDGERKV_FAULT("cluster.controller.owner_gone"));
        break;
      }
    }
  }

  std::map<std::string, int> load;
  for (const auto& [id, reg] : live) load[id] = 0;
  std::set<uint64_t> referenced;
  for (const auto& [table, version] : tables) {
    for (const meta::RangeSpec& r : table.ranges()) {
      referenced.insert(r.range_id());
      auto a = assignments.find(r.range_id());
      if (a != assignments.end() && live.contains(a->second.server_id())) {
        ++load[a->second.server_id()];
      }
    }
  }
  const metadata::TxnCompare still_controller{keys_.Controller(), controller};
  for (const auto& [table, table_version] : tables) {
    for (const meta::RangeSpec& r : table.ranges()) {
      auto a = assignments.find(r.range_id());
      if (a != assignments.end() && live.contains(a->second.server_id())) continue;
      // Unassigned, or its owner's session ended: the least loaded live
      // server gets it.
      auto target = std::min_element(load.begin(), load.end(), [](const auto& x, const auto& y) {
        return x.second < y.second;
      });
      meta::RangeAssignment next;
      next.set_range_id(r.range_id());
      next.set_server_id(target->first);
      next.set_address(live.at(target->first).address());
      next.set_epoch(a == assignments.end() ? 1 : a->second.epoch() + 1);
      next.set_assign_unix_ms(UnixMillis());
      next.set_table(table.name());
      const metadata::Version expected =
          a == assignments.end() ? metadata::kMustNotExist : versions.at(r.range_id());
      // The table must still exist as listed (a drop deletes it first), and
      // we must still be the controller.
      std::vector<metadata::TxnCompare> compares = {
          still_controller,
          {keys_.Table(table.name()), table_version},
          {keys_.Assignment(r.range_id()), expected}};
      if (a != assignments.end()) {
        // And its owner must still be gone. The listing above is older than
        // this write: an owner that registered again since (a restart on
        // the same id, a server whose session was lost) lists its
        // assignments after registering and may already serve this range;
        // moving it now would have two servers serving it until the old one
        // noticed. Absent here, it is absent at the write, and if it
        // registers after, its listing sees the new owner.
        compares.push_back({keys_.Server(a->second.server_id()), metadata::kMustNotExist});
      }
      ASSIGN_OR_RETURN(
          metadata::TxnResult txn,
          store_->Txn(compares, {{metadata::TxnOp::Type::kPut, keys_.Assignment(r.range_id()),
                                  next.SerializeAsString()}}));
      if (!txn.succeeded) {
        Wake();  // something changed under us: look again
        return absl::OkStatus();
      }
      ++target->second;
      Log(absl::StrCat("assigned range ", r.range_id(), " of table ", table.name(), " to ",
                       target->first, " (epoch ", next.epoch(), ")"));
    }
  }
  RETURN_IF_ERROR(Rebalance(still_controller, live, assignments, versions, referenced, load));
  for (const auto& [id, a] : assignments) {
    if (referenced.contains(id)) continue;
    IgnoreError(store_->Txn({still_controller, {keys_.Assignment(id), versions.at(id)}},
                            {{metadata::TxnOp::Type::kDelete, keys_.Assignment(id), ""}})
                    .status());
  }
  return absl::OkStatus();
}

absl::Status ClusterServer::Rebalance(
    const metadata::TxnCompare& still_controller,
    const std::map<std::string, meta::ServerRegistration>& live,
    const std::map<uint64_t, meta::RangeAssignment>& assignments,
    const std::map<uint64_t, metadata::Version>& versions, const std::set<uint64_t>& referenced,
    const std::map<std::string, int>& load) {
  // One move at a time: wait for a pending hand-over to finish.
  for (const auto& [id, a] : assignments) {
    if (!a.moving_to().empty()) return absl::OkStatus();
  }
  if (load.size() < 2) return absl::OkStatus();
  auto [least, most] = std::minmax_element(
      load.begin(), load.end(), [](const auto& x, const auto& y) { return x.second < y.second; });
  if (most->second - least->second < 2) return absl::OkStatus();
  for (const auto& [id, a] : assignments) {
    if (a.server_id() != most->first || !referenced.contains(id)) continue;
    meta::RangeAssignment moving = a;
    moving.set_moving_to(least->first);
    moving.set_moving_to_address(live.at(least->first).address());
    ASSIGN_OR_RETURN(metadata::TxnResult txn,
                     store_->Txn({still_controller, {keys_.Assignment(id), versions.at(id)}},
                                 {{metadata::TxnOp::Type::kPut, keys_.Assignment(id),
                                   moving.SerializeAsString()}}));
    if (txn.succeeded) {
      Log(absl::StrCat("moving range ", id, " from ", most->first, " (", most->second,
                       " ranges) to ", least->first, " (", least->second, ")"));
    }
    return absl::OkStatus();
  }
  return absl::OkStatus();
}

void ClusterServer::ControlLoop() {
  bool store_error_reported = false;
  absl::Time tables_loaded = absl::Now();
  while (true) {
    bool tables;
    {
      absl::MutexLock l(&mu_);
      if (!dirty_ && !stop_) cv_.WaitWithTimeout(&mu_, kControlPeriod);
      if (stop_) return;
      dirty_ = false;
      // Watches only make changes visible sooner: a watch event lost to a
      // compaction while disconnected is made up for by this reload.
      tables = tables_dirty_ || absl::Now() - tables_loaded > kTablesReload;
      tables_dirty_ = false;
    }
    if (tables) tables_loaded = absl::Now();
    absl::Status s;
    if (tables) {
      const int64_t started = NowNanos();
      s = catalog_->Load();
      {
        absl::MutexLock l(&mu_);
        if (!s.ok()) {
          tables_dirty_ = true;
        } else {
          tables_load_started_ = started;
        }
      }
      // Only after a listing that succeeded, and on this thread: a range
      // adopted here (Reconcile, below) is in the catalog first, so one
      // missing from this listing has no open directory here.
      if (s.ok()) SweepLocalDirs();
    }
    if (s.ok()) s = RefreshAssignments();
    Reconcile();  // with what we know: releases ranges once the lease lapsed
    if (s.ok() && LeaseValid()) {
      Campaign();
      s = ControllerPass();
    }
    if (!s.ok() && !store_error_reported) {
      Log(absl::StrCat("control pass failed (retrying): ", s.ToString()));
    }
    store_error_reported = !s.ok();
  }
}

void ClusterServer::SweepLoop() {
  while (true) {
    {
      absl::MutexLock l(&mu_);
      const absl::Time next =
          absl::Now() + std::max(options_.orphan_sweep_period, absl::Seconds(1));
      while (!stop_ && absl::Now() < next) cv_.WaitWithDeadline(&mu_, next);
      if (stop_) return;
    }
    if (!IsController() || !LeaseValid()) continue;
    // Never without a minimum age here: other servers create tables, and
    // Sweep takes records of older builds (which no intent fences) only
    // without one.
    absl::StatusOr<int> swept = catalog_->Sweep(
        [this](const meta::RangeMetadata& range) { return host_->DestroyRange(range); },
        std::max(options_.orphan_min_age, absl::Seconds(1)), [this] {
          {
            absl::MutexLock l(&mu_);
            if (stop_) return false;
          }
          return IsController() && LeaseValid();
        });
    if (!swept.ok()) {
      Log(absl::StrCat("sweep of unreferenced ranges failed (retried in ",
                       absl::FormatDuration(options_.orphan_sweep_period), "): ",
                       swept.status().ToString()));
    } else if (*swept > 0) {
      Log(absl::StrCat("swept ", *swept, " range(s) no table references"));
    }
    // Ledgers an open or roll created and never got into its log (a crash
    // before the segment CAS), including those of the logs just deleted.
    if (!IsController() || !LeaseValid()) continue;
    wal::LogOptions log_options;
    log_options.client = client_.get();
    log_options.metadata = store_.get();
    log_options.cluster = options_.cluster;
    absl::StatusOr<wal::OrphanLedgerSweep> ledgers = wal::DeleteOrphanLedgers(log_options);
    if (!ledgers.ok()) {
      Log(absl::StrCat("sweep of orphan ledgers failed: ", ledgers.status().ToString()));
    } else if (ledgers->deleted > 0) {
      Log(absl::StrCat("deleted ", ledgers->deleted, " orphan ledger(s) of logs"));
    }
  }
}

void ClusterServer::AuditLoop() {
  // The clocks of missing bookies live in this auditor, which is made anew
  // whenever this server becomes the controller again (another controller
  // may have been in between), so re-replication can only come later,
  // never earlier. Its time is the steady clock: a wall clock step must not
  // end a grace period early.
  auto fresh_auditor = [this] {
    return ledger::Auditor({.client = client_.get(),
                            .store = store_.get(),
                            .cluster = options_.cluster,
                            .grace = options_.rereplicate_after});
  };
  ledger::Auditor auditor = fresh_auditor();
  const absl::Duration period =
      std::clamp(options_.rereplicate_after / 4, absl::Seconds(1), absl::Minutes(1));
  auto keep_going = [this] {
    {
      absl::MutexLock l(&mu_);
      if (stop_) return false;
    }
    return IsController() && LeaseValid();
  };
  metadata::Version audited_as = 0;  // controller_version_ of the auditor's passes
  std::string last_missing;
  std::string last_held_off;
  while (true) {
    {
      absl::MutexLock l(&mu_);
      const absl::Time next = absl::Now() + period;
      while (!stop_ && absl::Now() < next) cv_.WaitWithDeadline(&mu_, next);
      if (stop_) return;
    }
    if (!keep_going()) continue;
    metadata::Version version;
    {
      absl::MutexLock l(&mu_);
      version = controller_version_;
    }
    if (version != audited_as) {
      auditor = fresh_auditor();
      audited_as = version;
      last_missing.clear();
      last_held_off.clear();
    }
    absl::StatusOr<ledger::AuditResult> pass =
        auditor.Pass(absl::FromUnixNanos(NowNanos()), keep_going);
    if (!pass.ok()) {
      Log(absl::StrCat("ledger audit failed (retried in ", absl::FormatDuration(period),
                       "): ", pass.status().ToString()));
      continue;
    }
    // Logged when the set changes, not at every pass.
    const std::string missing = absl::StrJoin(pass->missing, ", ");
    if (missing != last_missing && !missing.empty()) {
      Log(absl::StrCat("ledger audit: bookie(s) named by ledgers and not registered: ", missing,
                       "; their closed ledgers are re-replicated once unregistered for ",
                       absl::FormatDuration(options_.rereplicate_after)));
    } else if (missing.empty() && !last_missing.empty()) {
      Log("ledger audit: every bookie named by a ledger is registered again");
    }
    last_missing = missing;
    if (pass->held_off != last_held_off) {
      Log(pass->held_off.empty()
              ? std::string("ledger audit: re-replication resumed (few enough bookies missing)")
              : absl::StrCat("ledger audit: re-replication held off: ", pass->held_off));
    }
    last_held_off = pass->held_off;
    for (const std::string& line : pass->lines) Log(absl::StrCat("ledger audit: ", line));
    if (pass->ledgers_replaced > 0) {
      Log(absl::StrCat("ledger audit: ", pass->ledgers_replaced,
                       " closed ledger(s) moved off lost bookie(s) ",
                       absl::StrJoin(pass->lost, ", "), " (", pass->entries_copied,
                       " entries copied); ", pass->ledgers_not_closed,
                       " ledger(s) not closed left for now"));
    }
    if (pass->ledgers_refilled > 0) {
      Log(absl::StrCat("ledger audit: ", pass->ledgers_refilled,
                       " closed ledger(s) refilled onto re-provisioned bookie(s) ",
                       absl::StrJoin(pass->reprovisioned, ", "), " (", pass->entries_refilled,
                       " entries copied back)"));
    }
  }
}

bool ClusterServer::IsController() const {
  absl::MutexLock l(&mu_);
  return controller_version_ != 0;
}

void ClusterServer::Shutdown() {
  if (shut_down_) return;
  shut_down_ = true;
  {
    absl::MutexLock l(&mu_);
    stop_ = true;
    cv_.SignalAll();
  }
  // The auditor first, while the lease is still kept alive: it stops within
  // one window of a copy (its keep_going sees stop_).
  if (audit_thread_.joinable()) audit_thread_.join();
  if (control_thread_.joinable()) control_thread_.join();
  if (lease_thread_.joinable()) lease_thread_.join();
  if (sweep_thread_.joinable()) sweep_thread_.join();
  for (auto& w : watches_) {
    if (w != nullptr) w->Cancel();
    w.reset();
  }
  StopServing(server_.get(), calls_.get(), kShutdownGrace);
  if (host_ != nullptr) host_->Shutdown();
  metadata::SessionId session;
  {
    absl::MutexLock l(&mu_);
    session = session_;
    session_ = metadata::kNoSession;
  }
  // Ranges are closed: hand them over now rather than after the TTL.
  if (session != metadata::kNoSession && store_ != nullptr) {
    IgnoreError(store_->CloseSession(session));
  }
  lease_valid_until_.store(0);
  server_.reset();
  admin_service_.reset();
  kv_service_.reset();
  host_.reset();
  catalog_.reset();
  client_.reset();
  store_.reset();
  lock_ = DataDirLock();  // last: the data dir is free for the next process
}

}  // namespace ledgerkv::kv
