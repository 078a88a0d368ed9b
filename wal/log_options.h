// Options shared by LogWriter and LogReader (docs/wal-format.md).
#pragma once

#include <cstdint>
#include <string>

#include "absl/time/time.h"

namespace ledgerkv::metadata {
class MetadataStore;
}
namespace ledgerkv::ledger {
class LedgerClient;
}

namespace ledgerkv::wal {

struct LogOptions {
  // Not owned; both must outlive every writer and reader made with them.
  ledger::LedgerClient* client = nullptr;
  metadata::MetadataStore* metadata = nullptr;
  // Key prefix /ledgerkv/<cluster>/ (the same cluster as the client's).
  std::string cluster = "default";

  // Quorums of the ledgers a writer creates: E >= Qw >= Qa >= 1.
  int ensemble_size = 3;
  int write_quorum = 2;
  int ack_quorum = 2;

  // Group commit: records are gathered into one ledger entry until it holds
  // max_batch_bytes, or until its first record waited max_batch_delay while
  // other entries were in flight. With nothing in flight a record leaves at
  // once, so a lone writer pays no delay; under load a batch is cut as soon
  // as the entries in flight are acknowledged, or after the delay. 4 ms
  // rather than 1: when an entry takes longer than the delay (2 of 3 remote
  // fdatasyncs in a cluster) a short delay sends more, smaller entries,
  // each costing RPCs, syncs and thread wake-ups; 4 ms gave +19% cluster
  // and +12% standalone puts at 256 clients with lower p99, and no change
  // at 1 and 16 clients (docs/performance.md).
  int64_t max_batch_bytes = int64_t{1} << 20;
  absl::Duration max_batch_delay = absl::Milliseconds(4);
  // Entries sent to the ledger and not yet acknowledged; further batches
  // wait (and keep growing up to max_batch_bytes).
  int max_entries_in_flight = 64;
  // Largest record Append accepts. Must leave room for the entry header
  // below the ledger client's max_entry_bytes (16 MiB by default): Open
  // refuses options where it does not.
  int64_t max_record_bytes = int64_t{8} << 20;

  // A writer starts a new ledger once the current one holds roll_bytes of
  // entries, or its first entry is roll_age old. InfiniteDuration(): no age.
  int64_t roll_bytes = int64_t{64} << 20;
  absl::Duration roll_age = absl::Hours(1);

  // Attempts of a log metadata CAS that lost to a change which kept the
  // epoch (or failed transiently) before the operation gives up.
  int metadata_retries = 10;

  // LogReader: payload bytes one Next() aims to return (it always returns at
  // least one entry's worth when records are available).
  int64_t read_bytes = int64_t{4} << 20;
};

}  // namespace ledgerkv::wal
