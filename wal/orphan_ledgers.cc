#include "wal/orphan_ledgers.h"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "ledger/ledger_client.h"
#include "metadata/metadata_store.h"
#include "proto/metadata.pb.h"
#include "wal/log_metadata.h"

namespace ledgerkv::wal {

absl::StatusOr<OrphanLedgerSweep> DeleteOrphanLedgers(const LogOptions& options) {
  RETURN_IF_ERROR(CheckLogOptions(options));
  const metadata::Keys keys(options.cluster);
  ASSIGN_OR_RETURN(std::vector<metadata::KeyValue> listed,
                   options.metadata->List(keys.LedgersPrefix()));
  struct Candidate {
    uint64_t id;
    uint64_t epoch;
  };
  std::map<std::string, std::vector<Candidate>> by_log;
  for (const metadata::KeyValue& kv : listed) {
    uint64_t id = 0;
    if (!keys.ParseLedgerKey(kv.key, &id)) continue;  // another cluster's key
    meta::v1::LedgerMetadata ledger;
    if (!ledger.ParseFromString(kv.value) || ledger.id() != id) continue;  // never guess
    auto log = ledger.custom().find("log");
    auto epoch = ledger.custom().find("log_epoch");
    if (log == ledger.custom().end() || epoch == ledger.custom().end()) continue;
    uint64_t e = 0;
    if (!absl::SimpleAtoi(epoch->second, &e) || !CheckLogName(log->second).ok()) continue;
    by_log[log->second].push_back(Candidate{id, e});
  }
  OrphanLedgerSweep result;
  absl::Status first;
  for (const auto& [name, candidates] : by_log) {
    // Read after the listing: a ledger listed above was created after its
    // log's record (Open raises the epoch, creating the record, first), so
    // a log missing now was deleted. A log of that name created again later
    // (a stale open of a dropped range) never names this ledger: Open gives
    // up when it finds the record it raised the epoch of replaced by
    // another, even one with the same content (log_open.cc), and a roll
    // only appends after its own tail ledger. Its old ledgers then carry
    // epochs the new record may reach: they wait, or go once it moves past.
    absl::StatusOr<VersionedLog> log =
        LoadLog(*options.metadata, keys.Log(name), name, /*include_deleting=*/true);
    const bool gone = absl::IsNotFound(log.status());
    if (!gone && !log.ok()) continue;  // unreadable or unreachable: leave it
    for (const Candidate& c : candidates) {
      if (!gone) {
        bool named = false;
        for (const meta::v1::LogSegment& s : log->metadata.segments()) {
          named |= s.ledger_id() == c.id;
        }
        // Truncated away, its deletion pending: the log's next truncation
        // deletes it.
        for (uint64_t id : log->metadata.ledgers_to_delete()) named |= id == c.id;
        if (named) continue;
        if (c.epoch >= log->metadata.epoch()) {
          ++result.waiting;
          continue;
        }
      }
      absl::Status deleted = options.client->DeleteLedger(c.id);
      if (deleted.ok()) {
        ++result.deleted;
      } else if (!absl::IsNotFound(deleted) && first.ok()) {
        first = deleted;
      }
    }
  }
  if (!first.ok()) return first;
  return result;
}

}  // namespace ledgerkv::wal
