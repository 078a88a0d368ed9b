// LedgerClient: creates, opens (with or without recovery) and deletes
// replicated ledgers (ARCHITECTURE.md section 4; docs/ledger-protocol.md).
//
//   auto client = LedgerClient::Create({.metadata = store});
//   auto writer = (*client)->CreateLedger({.ensemble_size = 3, .write_quorum = 2,
//                                          .ack_quorum = 2});
//   (*writer)->Append("payload");  ...  (*writer)->Close();
//   auto reader = (*client)->OpenLedger(id, OpenMode::kRecover);
//   (*reader)->Read(0, (*reader)->last_readable());
//
// Thread-safe. Writers and readers made by a client may outlive it. Every
// method may block on the metadata store or bookies: never call one from a
// gRPC callback or a LedgerWriter callback.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ledger/ledger_reader.h"
#include "ledger/ledger_writer.h"
#include "ledger/options.h"
#include "ledger/rereplicate.h"
#include "proto/metadata.pb.h"

namespace ledgerkv::ledger {

struct ClientCore;

class LedgerClient {
 public:
  // INVALID_ARGUMENT if options.metadata is null, the cluster name is empty
  // or rpc_timeout is not positive.
  static absl::StatusOr<std::unique_ptr<LedgerClient>> Create(ClientOptions options);

  LedgerClient(const LedgerClient&) = delete;
  LedgerClient& operator=(const LedgerClient&) = delete;
  ~LedgerClient();

  // The largest ensemble a ledger may have.
  static constexpr int kMaxEnsembleSize = 64;
  // The largest entry an append accepts (ClientOptions::max_entry_bytes).
  int64_t max_entry_bytes() const;

  // Creates an empty OPEN ledger on E distinct writable bookies and returns
  // its writer. The id comes from the "ledger" id generator; the metadata is
  // written with CAS "must not exist".
  // INVALID_ARGUMENT unless E >= Qw >= Qa >= 1 and E <= 64 (L1; nothing is
  // created); UNAVAILABLE if fewer than E writable bookies are registered
  // or the metadata store fails.
  absl::StatusOr<std::unique_ptr<LedgerWriter>> CreateLedger(const CreateOptions& options);

  // Opens ledger `id` for reading.
  // kRecover: if not CLOSED yet, fences it and closes it (recovery.h); the
  // returned reader sees a CLOSED ledger. kNoRecovery: the reader sees the
  // ledger as it is, readable up to its LAC.
  // NOT_FOUND for an unknown id; recovery errors as RecoverLedger.
  absl::StatusOr<std::unique_ptr<LedgerReader>> OpenLedger(uint64_t id, OpenMode mode);

  // Deletes the metadata of ledger `id` (whatever its state); bookies
  // reclaim its entries in their next garbage collection.
  // NOT_FOUND for an unknown id; the store's error otherwise.
  absl::Status DeleteLedger(uint64_t id);

  // Moves CLOSED ledger `id`'s copies off bookie `bookie_id` (dead for
  // good, or being retired) onto replacements, then names them in its
  // metadata (rereplicate.h, docs/ledger-protocol.md "Re-replication").
  // `keep_going`: as ReplaceBookieInLedger's (CANCELLED once it says false).
  absl::StatusOr<ReplicationResult> ReplaceBookie(
      uint64_t id, const std::string& bookie_id,
      const std::function<bool()>& keep_going = nullptr);

  // Copies CLOSED ledger `id`'s copies back onto bookie `bookie_id`'s
  // current instance where its segments recorded an earlier one (the
  // bookie was re-provisioned under its id), then records the current one
  // (RefillBookieInLedger in rereplicate.h).
  absl::StatusOr<ReplicationResult> RefillBookie(
      uint64_t id, const std::string& bookie_id,
      const std::function<bool()>& keep_going = nullptr);

  // The current metadata of ledger `id`. NOT_FOUND for an unknown id.
  absl::StatusOr<meta::v1::LedgerMetadata> GetLedgerMetadata(uint64_t id);

 private:
  explicit LedgerClient(std::shared_ptr<ClientCore> core);

  std::shared_ptr<ClientCore> core_;
};

}  // namespace ledgerkv::ledger
