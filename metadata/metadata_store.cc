#include "metadata/metadata_store.h"

#include <charconv>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "metadata/absl_compat.h"

namespace ledgerkv::metadata {
namespace {

// Ids are zero-padded to the width of the largest uint64 so that the store's
// lexicographic key order is numeric order (List returns ledgers by id).
constexpr int kIdWidth = 20;

std::string PaddedId(uint64_t id) { return absl::StrFormat("%020u", id); }

// A CAS loop that keeps losing must still end: every lost round means some
// other caller got an id, so this many losses means something is wrong
// (e.g. a store that reports ABORTED for another reason).
constexpr int kMaxNextIdAttempts = 100000;

}  // namespace

std::string Keys::Ledger(uint64_t id) const { return LedgersPrefix() + PaddedId(id); }

bool Keys::ParseLedgerKey(std::string_view key, uint64_t* id) const {
  const std::string prefix = LedgersPrefix();
  if (!key.starts_with(prefix)) return false;
  std::string_view digits = key.substr(prefix.size());
  if (digits.size() != kIdWidth) return false;
  for (char c : digits) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return false;
  }
  uint64_t parsed = 0;
  // from_chars rejects values above UINT64_MAX (20 digits can overflow).
  const char* end = digits.data() + digits.size();
  auto [ptr, ec] = std::from_chars(digits.data(), end, parsed);
  if (ec != std::errc() || ptr != end) return false;
  *id = parsed;
  return true;
}

std::string Keys::Range(uint64_t id) const { return RangesPrefix() + PaddedId(id); }

std::string Keys::Creating(uint64_t table_id) const { return CreatingPrefix() + PaddedId(table_id); }

std::string Keys::Assignment(uint64_t range_id) const {
  return root_ + "assignments/" + PaddedId(range_id);
}

absl::StatusOr<uint64_t> NextId(MetadataStore& store, std::string_view key_view) {
  const absl::string_view key = internal::ToAbsl(key_view);
  for (int attempt = 0; attempt < kMaxNextIdAttempts; ++attempt) {
    uint64_t current = 0;
    Version expected = kMustNotExist;
    absl::StatusOr<VersionedValue> got = store.Get(key_view);
    if (got.ok()) {
      if (!absl::SimpleAtoi(got->value, &current)) {
        return absl::FailedPreconditionError(absl::StrCat("id counter ", key,
                                                          " holds a non-numeric value \"",
                                                          absl::CHexEscape(got->value), "\""));
      }
      expected = got->version;
    } else if (!absl::IsNotFound(got.status())) {
      return got.status();
    }
    if (current == UINT64_MAX) {
      return absl::ResourceExhaustedError(absl::StrCat("id counter ", key, " is exhausted"));
    }
    const uint64_t next = current + 1;
    absl::StatusOr<Version> put = store.Put(key_view, absl::StrCat(next), expected);
    if (put.ok()) return next;
    // ABORTED: another caller advanced the counter first; read it again.
    if (!absl::IsAborted(put.status())) return put.status();
  }
  return absl::AbortedError(
      absl::StrCat("NextId(", key, "): gave up after ", kMaxNextIdAttempts, " lost CAS rounds"));
}

}  // namespace ledgerkv::metadata
