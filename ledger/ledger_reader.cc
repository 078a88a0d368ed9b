#include "ledger/ledger_reader.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"
#include "ledger/client_core.h"
#include "ledger/entry_format.h"
#include "ledger/replica_read.h"

namespace ledgerkv::ledger {

namespace {
// A long poll is cut into slices of at most this, so that a close or an
// ensemble change (seen only in the metadata) is noticed while waiting.
constexpr absl::Duration kPollSlice = absl::Seconds(1);
}  // namespace

LedgerReader::LedgerReader(std::shared_ptr<ClientCore> core, meta::v1::LedgerMetadata metadata,
                           int64_t version)
    : core_(std::move(core)), id_(metadata.id()) {
  absl::MutexLock l(&mu_);
  metadata_ = std::move(metadata);
  version_ = version;
  if (metadata_.state() != meta::v1::CLOSED) {
    lac_ = metadata_.segments(metadata_.segments_size() - 1).first_entry_id() - 1;
  }
}

meta::v1::LedgerMetadata LedgerReader::metadata() const {
  absl::MutexLock l(&mu_);
  return metadata_;
}

bool LedgerReader::closed() const {
  absl::MutexLock l(&mu_);
  return metadata_.state() == meta::v1::CLOSED;
}

int64_t LedgerReader::LastReadableLocked() const {
  return metadata_.state() == meta::v1::CLOSED ? metadata_.last_entry_id() : lac_;
}

void LedgerReader::AdoptLocked(const meta::v1::LedgerMetadata& metadata, int64_t version) {
  if (version <= version_) return;
  metadata_ = metadata;
  version_ = version;
}

int64_t LedgerReader::last_readable() const {
  absl::MutexLock l(&mu_);
  return LastReadableLocked();
}

absl::Status LedgerReader::Refresh(int64_t above, absl::Duration wait) {
  auto loaded = LoadLedger(*core_, id_);
  if (!loaded.ok()) return loaded.status();
  meta::v1::LedgerMetadata metadata;
  {
    absl::MutexLock l(&mu_);
    AdoptLocked(loaded->metadata, loaded->version);
    if (metadata_.state() == meta::v1::CLOSED) return absl::OkStatus();
    metadata = metadata_;
  }
  auto lac = ReadLacFromBookies(*core_, metadata, above, wait);
  if (!lac.ok()) return lac.status();
  absl::MutexLock l(&mu_);
  lac_ = std::max(lac_, *lac);
  return absl::OkStatus();
}

absl::StatusOr<int64_t> LedgerReader::ReadLac() {
  absl::Status status = Refresh(-2, absl::ZeroDuration());
  if (!status.ok()) return status;
  return last_readable();
}

absl::StatusOr<int64_t> LedgerReader::WaitForLac(int64_t above, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  for (bool first = true;; first = false) {
    {
      absl::MutexLock l(&mu_);
      const int64_t readable = LastReadableLocked();
      if (readable > above) return readable;
      if (!first && metadata_.state() == meta::v1::CLOSED) {
        return absl::OutOfRangeError(absl::StrCat("ledger ", id_, " is closed at entry ",
                                                  readable, "; it will not pass ", above));
      }
    }
    const absl::Duration remaining = deadline - absl::Now();
    if (!first && remaining <= absl::ZeroDuration()) {
      return absl::DeadlineExceededError(absl::StrCat(
          "LAC of ledger ", id_, " did not pass ", above, " within ", absl::FormatDuration(timeout)));
    }
    absl::Status status =
        Refresh(above, std::clamp(remaining, absl::ZeroDuration(), kPollSlice));
    if (absl::IsNotFound(status)) return status;
    if (!status.ok()) {
      // Bookies unreachable for now (restarting, ensemble changing): retry
      // until the deadline rather than failing a tailing reader at once.
      absl::SleepFor(std::min(std::max(remaining, absl::ZeroDuration()), absl::Milliseconds(50)));
    }
  }
}

absl::StatusOr<std::vector<LedgerEntry>> LedgerReader::Read(int64_t first, int64_t last) {
  if (first < 0 || last < first) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad entry range ", first, "..", last, " of ledger ", id_));
  }
  if (last > last_readable() && !closed()) {
    // The cached LAC may be stale; one refresh before refusing.
    IgnoreError(Refresh(-2, absl::ZeroDuration()));
  }
  meta::v1::LedgerMetadata metadata;
  {
    absl::MutexLock l(&mu_);
    const int64_t readable = LastReadableLocked();
    if (last > readable) {
      const bool is_closed = metadata_.state() == meta::v1::CLOSED;
      return absl::OutOfRangeError(absl::StrCat(
          "entries ", first, "..", last, " of ledger ", id_, ": only entries up to ", readable,
          is_closed ? " exist (the ledger is closed)" : " are confirmed (LAC)"));
    }
    metadata = metadata_;
  }
  auto entries = ReadReplicas(*core_, metadata, first, last);
  if (!entries.ok() && metadata.state() != meta::v1::CLOSED) {
    // The writer may have moved entries to a new ensemble since the metadata
    // was read: re-read it and try once more.
    auto loaded = LoadLedger(*core_, id_);
    if (loaded.ok()) {
      {
        absl::MutexLock l(&mu_);
        AdoptLocked(loaded->metadata, loaded->version);
        metadata = metadata_;
      }
      entries = ReadReplicas(*core_, metadata, first, last);
    }
  }
  if (!entries.ok()) return entries.status();
  std::vector<LedgerEntry> out;
  out.reserve(entries->size());
  for (const auto& entry : *entries) {
    out.push_back(LedgerEntry{entry.entry_id(), std::string(UserPayload(entry))});
  }
  return out;
}

}  // namespace ledgerkv::ledger
