// How the ledger client lays out an entry on the wire (docs/ledger-protocol.md,
// "Entry framing"), and the helpers every write, read and recovery path uses:
// the write set of an entry, the segment holding it, and verification of an
// entry returned by a bookie.
//
// The bookie sees Entry.payload as opaque bytes. The client stores in it an
// 8-byte little-endian header, the ledger's cumulative user payload length
// through this entry, followed by the user payload. The header is covered by
// the entry checksum, so recovery learns the ledger length from the last
// entry it keeps without reading the whole ledger (BookKeeper keeps the same
// field in its entry header).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "base/entry_checksum.h"
#include "proto/bookie.pb.h"
#include "proto/metadata.pb.h"

namespace ledgerkv::ledger {

inline constexpr size_t kEntryHeaderSize = 8;

// Builds the Entry the writer sends: framed payload and checksum.
inline bookie::v1::Entry MakeEntry(uint64_t ledger_id, int64_t entry_id, int64_t lac,
                                   uint64_t cumulative_length, std::string_view payload) {
  bookie::v1::Entry entry;
  entry.set_ledger_id(ledger_id);
  entry.set_entry_id(entry_id);
  entry.set_lac(lac);
  std::string* framed = entry.mutable_payload();
  framed->resize(kEntryHeaderSize + payload.size());
  std::memcpy(framed->data(), &cumulative_length, kEntryHeaderSize);
  if (!payload.empty()) std::memcpy(framed->data() + kEntryHeaderSize, payload.data(), payload.size());
  entry.set_checksum(EntryChecksum(ledger_id, entry_id, lac, *framed));
  return entry;
}

// Checks that `entry`, returned by a bookie for (ledger_id, entry_id), is
// that entry and intact. DATA_LOSS (naming the bookie) otherwise: a corrupt
// replica is an error, never "absent" (L10).
inline absl::Status VerifyEntry(const bookie::v1::Entry& entry, uint64_t ledger_id,
                                int64_t entry_id, const std::string& bookie_id) {
  if (entry.ledger_id() != ledger_id || entry.entry_id() != entry_id) {
    return absl::DataLossError(absl::StrCat("bookie ", bookie_id, " returned entry ",
                                            entry.ledger_id(), ":", entry.entry_id(),
                                            " when asked for ", ledger_id, ":", entry_id));
  }
  if (EntryChecksum(ledger_id, entry_id, entry.lac(), entry.payload()) != entry.checksum()) {
    return absl::DataLossError(absl::StrCat("checksum mismatch in entry ", ledger_id, ":",
                                            entry_id, " from bookie ", bookie_id));
  }
  if (entry.payload().size() < kEntryHeaderSize) {
    return absl::DataLossError(absl::StrCat("entry ", ledger_id, ":", entry_id, " from bookie ",
                                            bookie_id, " is shorter than its header"));
  }
  return absl::OkStatus();
}

// REQUIRES: VerifyEntry(entry) passed.
inline uint64_t CumulativeLength(const bookie::v1::Entry& entry) {
  uint64_t length;
  std::memcpy(&length, entry.payload().data(), kEntryHeaderSize);
  return length;
}

// REQUIRES: VerifyEntry(entry) passed.
inline std::string_view UserPayload(const bookie::v1::Entry& entry) {
  return std::string_view(entry.payload()).substr(kEntryHeaderSize);
}

// Ensemble indices of the Qw bookies holding entry `entry_id`: starting at
// entry_id mod E. The same indices in every segment, so an ensemble change
// that replaces the bookie at index i touches exactly the entries whose write
// set contains i.
inline std::vector<int> WriteSet(int64_t entry_id, int ensemble_size, int write_quorum) {
  std::vector<int> indices;
  indices.reserve(write_quorum);
  const int first = static_cast<int>(entry_id % ensemble_size);
  for (int k = 0; k < write_quorum; ++k) indices.push_back((first + k) % ensemble_size);
  return indices;
}

inline bool InWriteSet(int64_t entry_id, int index, int ensemble_size, int write_quorum) {
  const int first = static_cast<int>(entry_id % ensemble_size);
  return (index - first + ensemble_size) % ensemble_size < write_quorum;
}

// The segment holding `entry_id`: the last one whose first_entry_id <= it.
// REQUIRES: metadata has at least one segment starting at 0 and entry_id >= 0.
inline const meta::v1::Segment& SegmentFor(const meta::v1::LedgerMetadata& metadata,
                                           int64_t entry_id) {
  int i = metadata.segments_size() - 1;
  while (i > 0 && metadata.segments(i).first_entry_id() > entry_id) --i;
  return metadata.segments(i);
}

// Every bookie some segment of `metadata` names, once each, sorted.
inline std::vector<std::string> BookiesNamed(const meta::v1::LedgerMetadata& metadata) {
  std::vector<std::string> named;
  for (const meta::v1::Segment& segment : metadata.segments()) {
    named.insert(named.end(), segment.bookies().begin(), segment.bookies().end());
  }
  std::sort(named.begin(), named.end());
  named.erase(std::unique(named.begin(), named.end()), named.end());
  return named;
}

// Instance id of ensemble index `i` of `segment` ("" when not recorded).
inline const std::string& InstanceOf(const meta::v1::Segment& segment, int i) {
  static const std::string* const kEmpty = new std::string();
  return i < segment.bookie_instances_size() ? segment.bookie_instances(i) : *kEmpty;
}

// Whether ensemble index `i` of `segment` recorded an instance of its
// bookie other than `current` (the one registered now): the bookie was
// re-provisioned since, and the copies the segment names there are gone.
// One that recorded none ("") is never judged so.
inline bool IsEarlierInstance(const meta::v1::Segment& segment, int i, const std::string& current) {
  const std::string& recorded = InstanceOf(segment, i);
  return !recorded.empty() && recorded != current;
}

// Every bookie that some segment of `metadata` recorded an earlier instance
// of (IsEarlierInstance), once each, sorted. `current(id)` returns the
// instance bookie `id` runs as now (a `const std::string*`), or nullptr or
// "" when that is unknown (not registered): such a bookie is never named.
template <typename CurrentInstance>
std::vector<std::string> BookiesReprovisioned(const meta::v1::LedgerMetadata& metadata,
                                              const CurrentInstance& current) {
  std::vector<std::string> named;
  for (const meta::v1::Segment& segment : metadata.segments()) {
    for (int i = 0; i < segment.bookies_size(); ++i) {
      const std::string* now = current(segment.bookies(i));
      if (now != nullptr && !now->empty() && IsEarlierInstance(segment, i, *now)) {
        named.push_back(segment.bookies(i));
      }
    }
  }
  std::sort(named.begin(), named.end());
  named.erase(std::unique(named.begin(), named.end()), named.end());
  return named;
}

}  // namespace ledgerkv::ledger
