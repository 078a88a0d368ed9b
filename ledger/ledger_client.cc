#include "ledger/ledger_client.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/add_protocol.h"
#include "base/fault_point.h"
#include "base/status_macros.h"
#include "ledger/client_core.h"
#include "ledger/entry_format.h"
#include "ledger/recovery.h"
#include "ledger/writer_state.h"

namespace ledgerkv::ledger {

namespace {
// Attempts to find an unused ledger id; a collision means the id generator
// was reset (e.g. a restored store) and is worth a few more tries.
constexpr int kCreateAttempts = 3;
}  // namespace

LedgerClient::LedgerClient(std::shared_ptr<ClientCore> core) : core_(std::move(core)) {}
LedgerClient::~LedgerClient() = default;

absl::StatusOr<std::unique_ptr<LedgerClient>> LedgerClient::Create(ClientOptions options) {
  if (options.metadata == nullptr) return absl::InvalidArgumentError("ClientOptions.metadata is null");
  if (options.cluster.empty()) return absl::InvalidArgumentError("ClientOptions.cluster is empty");
  if (options.rpc_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("ClientOptions.rpc_timeout must be positive");
  }
  if (options.speculative_read_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "ClientOptions.speculative_read_timeout must be positive (InfiniteDuration: off)");
  }
  if (options.slow_bookie_hold < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "ClientOptions.slow_bookie_hold must not be negative (zero: never hold)");
  }
  if (options.recovery_readd_grace < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("ClientOptions.recovery_readd_grace must not be negative");
  }
  if (options.idle_connection_close < absl::Seconds(1)) {
    return absl::InvalidArgumentError(
        "ClientOptions.idle_connection_close must be at least 1s (InfiniteDuration: never)");
  }
  // A bookie stores no larger payload than kMaxEntryPayloadBytes, the
  // entry's header included (a larger one is refused INVALID, which the
  // writer takes for a failed bookie), and an add request (several entries
  // up to max_bytes_per_add_rpc, or one larger entry alone) must fit the
  // add port's frame and the RPC's message limit.
  constexpr int64_t kMaxEntry =
      static_cast<int64_t>(add_protocol::kMaxEntryPayloadBytes - kEntryHeaderSize);
  if (options.max_entry_bytes < 1 || options.max_entry_bytes > kMaxEntry) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ClientOptions.max_entry_bytes must be in [1, ", kMaxEntry,
        "] (a bookie's largest entry, less the client's ", kEntryHeaderSize, "-byte header)"));
  }
  if (options.max_bytes_per_add_rpc < 1 || options.max_bytes_per_add_rpc > kMaxEntry) {
    return absl::InvalidArgumentError(
        absl::StrCat("ClientOptions.max_bytes_per_add_rpc must be in [1, ", kMaxEntry, "]"));
  }
  return std::unique_ptr<LedgerClient>(
      new LedgerClient(std::make_shared<ClientCore>(std::move(options))));
}

int64_t LedgerClient::max_entry_bytes() const { return core_->options.max_entry_bytes; }

absl::StatusOr<std::unique_ptr<LedgerWriter>> LedgerClient::CreateLedger(
    const CreateOptions& options) {
  const int E = options.ensemble_size, Qw = options.write_quorum, Qa = options.ack_quorum;
  if (!(E >= Qw && Qw >= Qa && Qa >= 1) || E > kMaxEnsembleSize) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ledger needs E >= Qw >= Qa >= 1 and E <= 64; got E=", E, " Qw=", Qw, " Qa=", Qa));
  }
  auto ensemble = core_->placement.Choose(E, {});
  if (!ensemble.ok()) return ensemble.status();

  meta::v1::LedgerMetadata md;
  md.set_ensemble_size(E);
  md.set_write_quorum(Qw);
  md.set_ack_quorum(Qa);
  md.set_state(meta::v1::OPEN);
  md.set_last_entry_id(-1);
  md.set_length(0);
  md.set_digest_type(meta::v1::CRC32C);
  md.set_ctime_unix_ms(absl::ToUnixMillis(absl::Now()));
  for (const auto& [key, value] : options.custom) (*md.mutable_custom())[key] = value;
  meta::v1::Segment* segment = md.add_segments();
  segment->set_first_entry_id(0);
  std::vector<std::shared_ptr<BookieConn>> conns;
  for (const BookieInfo& bookie : *ensemble) {
    segment->add_bookies(bookie.bookie_id);
    segment->add_bookie_instances(bookie.instance_id);
    core_->pool.Learn(bookie.bookie_id, bookie.address);
    conns.push_back(core_->pool.ForAddress(bookie.address));
  }

  for (int attempt = 0;; ++attempt) {
    auto id = metadata::NextId(*core_->store, core_->keys.IdGen("ledger"));
    if (!id.ok()) return id.status();
    md.set_id(*id);
    const std::string record = md.SerializeAsString();
    auto stored = core_->store->Put(core_->keys.Ledger(*id), record, metadata::kMustNotExist);
    // Tests: the create landed, and its reply was lost.
    if (stored.ok() && LEDGERKV_FAULT("ledger.create.reply_lost")) {
      stored = absl::UnavailableError("fault point ledger.create.reply_lost");
    }
    if (absl::IsUnavailable(stored.status())) {
      // Outcome unknown. A record that landed with nobody to write or close
      // it would stay OPEN for ever (bookies keep what a ledger's metadata
      // names, and `ledger delete` refuses OPEN ledgers): look for ours,
      // riding out a short store outage as StoreLedger does.
      const int looks = std::max(1, core_->options.metadata_retries);
      for (int look = 1; look <= looks; ++look) {
        auto found = core_->store->Get(core_->keys.Ledger(*id));
        if (found.ok() && found->value == record) stored = found->version;
        if (!absl::IsUnavailable(found.status()) || look == looks) break;
        absl::SleepFor(MetadataBackoff(look));
      }
    }
    if (absl::IsAborted(stored.status()) && attempt + 1 < kCreateAttempts) continue;
    if (!stored.ok()) {
      return absl::Status(stored.status().code(),
                          absl::StrCat("cannot create ledger ", *id, ": ", stored.status().message()));
    }
    auto state = std::make_shared<WriterState>(core_, VersionedLedger{md, *stored}, std::move(conns));
    state->Start();
    return std::unique_ptr<LedgerWriter>(new LedgerWriter(*id, std::move(state)));
  }
}

absl::StatusOr<ReplicationResult> LedgerClient::ReplaceBookie(
    uint64_t id, const std::string& bookie_id, const std::function<bool()>& keep_going) {
  return ReplaceBookieInLedger(*core_, id, bookie_id, keep_going);
}

absl::StatusOr<ReplicationResult> LedgerClient::RefillBookie(
    uint64_t id, const std::string& bookie_id, const std::function<bool()>& keep_going) {
  return RefillBookieInLedger(*core_, id, bookie_id, keep_going);
}

absl::StatusOr<std::unique_ptr<LedgerReader>> LedgerClient::OpenLedger(uint64_t id, OpenMode mode) {
  auto loaded = LoadLedger(*core_, id);
  if (!loaded.ok()) return loaded.status();
  if (mode == OpenMode::kRecover && loaded->metadata.state() != meta::v1::CLOSED) {
    loaded = RecoverLedger(*core_, id);
    if (!loaded.ok()) return loaded.status();
  }
  auto reader = std::unique_ptr<LedgerReader>(new LedgerReader(core_, loaded->metadata, loaded->version));
  if (!reader->closed()) {
    // Best effort: the reader starts from the metadata's floor if no bookie
    // answers now; ReadLac/WaitForLac retry.
    IgnoreError(reader->ReadLac().status());
  }
  return reader;
}

absl::Status LedgerClient::DeleteLedger(uint64_t id) {
  for (int attempt = 0;; ++attempt) {
    auto got = core_->store->Get(core_->keys.Ledger(id));
    if (absl::IsNotFound(got.status())) {
      return absl::NotFoundError(absl::StrCat("ledger ", id, " not found"));
    }
    if (!got.ok()) return got.status();
    absl::Status deleted = core_->store->Delete(core_->keys.Ledger(id), got->version);
    if (absl::IsAborted(deleted) && attempt < 10) continue;  // changed meanwhile: re-read
    if (absl::IsNotFound(deleted)) {
      return absl::NotFoundError(absl::StrCat("ledger ", id, " not found"));
    }
    return deleted;
  }
}

absl::StatusOr<meta::v1::LedgerMetadata> LedgerClient::GetLedgerMetadata(uint64_t id) {
  auto loaded = LoadLedger(*core_, id);
  if (!loaded.ok()) return loaded.status();
  return std::move(loaded->metadata);
}

}  // namespace ledgerkv::ledger
