#include "wal/log_metadata.h"

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "ledger/ledger_client.h"

namespace ledgerkv::wal {

absl::Status CheckLogName(const std::string& name) {
  bool ok = !name.empty() && name.size() <= 200;
  for (char c : name) {
    const bool allowed = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                         c == '.' || c == '_' || c == '-';
    ok = ok && allowed;
  }
  if (!ok) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad log name \"", name, "\": use 1..200 characters of [A-Za-z0-9._-]"));
  }
  return absl::OkStatus();
}

absl::Status CheckLogOptions(const LogOptions& options) {
  if (options.client == nullptr || options.metadata == nullptr || options.cluster.empty()) {
    return absl::InvalidArgumentError("LogOptions need a ledger client, a metadata store and a cluster");
  }
  return absl::OkStatus();
}

absl::Status CheckSegments(const meta::v1::LogMetadata& log, const std::string& name) {
  for (int i = 0; i < log.segments_size(); ++i) {
    const meta::v1::LogSegment& s = log.segments(i);
    const bool last = i + 1 == log.segments_size();
    if (s.first_seqno() == 0 || (s.state() != meta::v1::LogSegment::OPEN &&
                                 s.state() != meta::v1::LogSegment::CLOSED)) {
      return absl::DataLossError(absl::StrCat("metadata of log ", name, " has a bad segment: ",
                                              DescribeLog(log, name)));
    }
    if (!last) {
      const meta::v1::LogSegment& next = log.segments(i + 1);
      if (s.state() != meta::v1::LogSegment::CLOSED || s.last_seqno() + 1 != next.first_seqno()) {
        return absl::DataLossError(absl::StrCat("metadata of log ", name,
                                                " has non-contiguous segments: ",
                                                DescribeLog(log, name)));
      }
    } else if (s.state() == meta::v1::LogSegment::CLOSED && s.last_seqno() + 1 < s.first_seqno()) {
      return absl::DataLossError(absl::StrCat("metadata of log ", name, " has a bad segment: ",
                                              DescribeLog(log, name)));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<VersionedLog> LoadLog(metadata::MetadataStore& store, std::string_view key,
                                     const std::string& name, bool include_deleting) {
  auto got = store.Get(key);
  if (absl::IsNotFound(got.status())) {
    return absl::NotFoundError(absl::StrCat("log ", name, " not found"));
  }
  if (!got.ok()) return got.status();
  VersionedLog out;
  out.version = got->version;
  if (!out.metadata.ParseFromString(got->value)) {
    return absl::DataLossError(absl::StrCat("metadata of log ", name, " is unparsable"));
  }
  absl::Status checked = CheckSegments(out.metadata, name);
  if (!checked.ok()) return checked;
  if (out.metadata.deleting() && !include_deleting) {
    return absl::NotFoundError(absl::StrCat("log ", name, " is being deleted"));
  }
  return out;
}

absl::StatusOr<metadata::Version> StoreLog(metadata::MetadataStore& store, std::string_view key,
                                           const meta::v1::LogMetadata& log,
                                           metadata::Version expected) {
  return store.Put(key, log.SerializeAsString(), expected);
}

absl::StatusOr<meta::v1::LogMetadata> GetLogMetadata(const LogOptions& options,
                                                     const std::string& name) {
  if (absl::Status s = CheckLogOptions(options); !s.ok()) return s;
  if (absl::Status s = CheckLogName(name); !s.ok()) return s;
  auto loaded = LoadLog(*options.metadata, metadata::Keys(options.cluster).Log(name), name);
  if (!loaded.ok()) return loaded.status();
  return std::move(loaded->metadata);
}

uint64_t NextSeqnoAfter(const meta::v1::LogMetadata& log) {
  if (log.segments_size() == 0) return 1;
  return log.segments(log.segments_size() - 1).last_seqno() + 1;
}

absl::Status LogFencedError(const std::string& name, uint64_t epoch) {
  return absl::FailedPreconditionError(
      absl::StrCat("log ", name, " fenced: another writer opened it (epoch ", epoch, ")"));
}

std::string DescribeLog(const meta::v1::LogMetadata& log, const std::string& name) {
  std::vector<std::string> segments;
  for (const meta::v1::LogSegment& s : log.segments()) {
    if (s.state() == meta::v1::LogSegment::CLOSED) {
      segments.push_back(
          absl::StrCat("ledger ", s.ledger_id(), ": ", s.first_seqno(), "..", s.last_seqno(), " CLOSED"));
    } else {
      segments.push_back(absl::StrCat("ledger ", s.ledger_id(), ": ", s.first_seqno(), "..",
                                      " ", meta::v1::LogSegment::State_Name(s.state())));
    }
  }
  return absl::StrCat("log ", name, ": epoch ", log.epoch(), ", segments [",
                      absl::StrJoin(segments, ", "), "]");
}

namespace {

bool MayBeNamedByLog(metadata::MetadataStore& store, std::string_view key,
                     const std::string& name, uint64_t ledger_id, metadata::Version expected) {
  // A log being deleted still names its segments authoritatively.
  auto now = LoadLog(store, key, name, /*include_deleting=*/true);
  if (!now.ok()) return true;  // unknown: keep it
  for (const meta::v1::LogSegment& segment : now->metadata.segments()) {
    if (segment.ledger_id() == ledger_id) return true;
  }
  // Not named, and the log has moved past the version our request expected:
  // a late arrival of that request can no longer land.
  return now->version == expected;
}

}  // namespace

void DeleteUnlessTheLogMayNameIt(const LogOptions& options, std::string_view key,
                                 const std::string& name, uint64_t ledger_id,
                                 bool unknown_outcome, metadata::Version expected) {
  if (unknown_outcome && MayBeNamedByLog(*options.metadata, key, name, ledger_id, expected)) {
    std::fprintf(stderr,
                 "ledgerkv: log %s: a segment CAS naming ledger %llu failed with an unknown "
                 "outcome; leaving the ledger to the log's next owner\n",
                 name.c_str(), static_cast<unsigned long long>(ledger_id));
    return;
  }
  IgnoreError(options.client->DeleteLedger(ledger_id));
}

}  // namespace ledgerkv::wal
