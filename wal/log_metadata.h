// The log metadata record (proto LogMetadata at Keys(cluster).Log(name)) and
// the helpers that load, check and CAS it. Layout and rules:
// docs/wal-format.md, "Log metadata".
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "metadata/metadata_store.h"
#include "proto/metadata.pb.h"
#include "wal/log_options.h"

namespace ledgerkv::wal {

struct VersionedLog {
  meta::v1::LogMetadata metadata;
  metadata::Version version = 0;
};

// INVALID_ARGUMENT unless `name` is 1..200 characters of [A-Za-z0-9._-].
absl::Status CheckLogName(const std::string& name);

// INVALID_ARGUMENT unless options.client and options.metadata are set and
// the cluster name is not empty.
absl::Status CheckLogOptions(const LogOptions& options);

// Reads and parses the record at `key`.
// NOT_FOUND "log <name> not found", also "log <name> is being deleted" for
// a log DeleteLog has marked (unless `include_deleting`); DATA_LOSS if it
// does not parse or its segments are not contiguous (see CheckSegments);
// the store's error otherwise.
absl::StatusOr<VersionedLog> LoadLog(metadata::MetadataStore& store, std::string_view key,
                                     const std::string& name, bool include_deleting = false);

// Writes `log` at `key` if its version is still `expected` (kMustNotExist to
// create). Returns the new version; ABORTED when the version moved.
absl::StatusOr<metadata::Version> StoreLog(metadata::MetadataStore& store, std::string_view key,
                                           const meta::v1::LogMetadata& log,
                                           metadata::Version expected);

// The current metadata of log `name`, for tools and tests.
absl::StatusOr<meta::v1::LogMetadata> GetLogMetadata(const LogOptions& options,
                                                     const std::string& name);

// DATA_LOSS unless: at most the last segment is OPEN, and each segment
// starts right after the previous one's last seqno.
absl::Status CheckSegments(const meta::v1::LogMetadata& log, const std::string& name);

// The seqno after the last record of a log whose segments are all CLOSED
// (1 for an empty log).
uint64_t NextSeqnoAfter(const meta::v1::LogMetadata& log);

// The error of a writer that lost its log: FAILED_PRECONDITION
// "log <name> fenced: another writer opened it (epoch N)". The KV server
// maps it to UNAVAILABLE and gives the range up.
absl::Status LogFencedError(const std::string& name, uint64_t epoch);

// "log x: epoch 3, segments [ledger 7: 1..40 CLOSED, ledger 9: 41.. OPEN]".
std::string DescribeLog(const meta::v1::LogMetadata& log, const std::string& name);

// A new ledger of log `name` whose segment CAS failed (`expected`: the
// version the last attempt expected; `unknown_outcome`: some attempt failed
// without saying whether it was applied). Deletes the ledger unless the log
// may name it now or later: then deleting it would leave the log naming a
// missing ledger, and the next owner's recovery would fail with DATA_LOSS
// for good. It is deleted when every attempt failed definitely, or when a
// read shows the log past `expected` (no request of ours can still land)
// without naming it; otherwise it is left, with a line on stderr, to the
// next owner. Best effort: an orphan only costs space.
void DeleteUnlessTheLogMayNameIt(const LogOptions& options, std::string_view key,
                                 const std::string& name, uint64_t ledger_id,
                                 bool unknown_outcome, metadata::Version expected);

}  // namespace ledgerkv::wal
