#include "ledger/client_core.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "google/protobuf/util/message_differencer.h"

namespace ledgerkv::ledger {

void SlowBookies::Mark(const std::string& bookie_id) {
  const absl::Time now = absl::Now();
  absl::MutexLock l(&mu_);
  holds_[bookie_id] = Hold{now, now + hold_};
}

void SlowBookies::Clear(const std::string& bookie_id, absl::Time sent_at) {
  absl::MutexLock l(&mu_);
  auto it = holds_.find(bookie_id);
  if (it != holds_.end() && it->second.marked <= sent_at) holds_.erase(it);
}

bool SlowBookies::IsSlow(const std::string& bookie_id) const {
  const absl::Time now = absl::Now();
  absl::MutexLock l(&mu_);
  auto it = holds_.find(bookie_id);
  return it != holds_.end() && now < it->second.until;
}

absl::StatusOr<VersionedLedger> LoadLedger(const ClientCore& core, uint64_t id) {
  auto got = core.store->Get(core.keys.Ledger(id));
  if (absl::IsNotFound(got.status())) {
    return absl::NotFoundError(absl::StrCat("ledger ", id, " not found"));
  }
  if (!got.ok()) return got.status();
  VersionedLedger out;
  out.version = got->version;
  if (!out.metadata.ParseFromString(got->value) || out.metadata.segments_size() == 0 ||
      out.metadata.segments(0).first_entry_id() != 0) {
    return absl::DataLossError(absl::StrCat("metadata of ledger ", id, " is unparsable"));
  }
  return out;
}

absl::StatusOr<metadata::Version> StoreLedger(const ClientCore& core,
                                              const meta::v1::LedgerMetadata& metadata,
                                              metadata::Version expected) {
  const std::string key = core.keys.Ledger(metadata.id());
  const std::string value = metadata.SerializeAsString();
  for (int attempt = 1;; ++attempt) {
    auto put = core.store->Put(key, value, expected);
    if (put.ok() || !absl::IsUnavailable(put.status()) ||
        attempt >= core.options.metadata_retries) {
      return put;
    }
    // A transient error may have been a lost reply to a successful write;
    // the retry then fails with ABORTED and callers re-read, which is the
    // same path as losing the race to someone else.
    absl::SleepFor(MetadataBackoff(attempt));
  }
}

absl::Duration MetadataBackoff(int attempt) {
  absl::Duration backoff = absl::Milliseconds(50);
  for (int i = 1; i < attempt && backoff < absl::Seconds(1); ++i) backoff *= 2;
  return std::min(backoff, absl::Seconds(1));
}

bool SameLedger(const meta::v1::LedgerMetadata& a, const meta::v1::LedgerMetadata& b) {
  return google::protobuf::util::MessageDifferencer::Equals(a, b);
}

bool SameSegments(const meta::v1::LedgerMetadata& a, const meta::v1::LedgerMetadata& b) {
  if (a.segments_size() != b.segments_size()) return false;
  for (int i = 0; i < a.segments_size(); ++i) {
    if (!google::protobuf::util::MessageDifferencer::Equals(a.segments(i), b.segments(i))) {
      return false;
    }
  }
  return true;
}

absl::Status FencedError(uint64_t ledger_id) {
  return absl::FailedPreconditionError(
      absl::StrCat("ledger ", ledger_id, " fenced: it was recovered or closed by another client"));
}

std::string Describe(const meta::v1::LedgerMetadata& metadata) {
  return absl::StrCat("ledger ", metadata.id(), " (E=", metadata.ensemble_size(),
                      " Qw=", metadata.write_quorum(), " Qa=", metadata.ack_quorum(), ", ",
                      meta::v1::LedgerState_Name(metadata.state()), ", ",
                      metadata.segments_size(), " segments)");
}

}  // namespace ledgerkv::ledger
