// Retry-safety marks on statuses (docs/kv-api.md, "Retries").
//
// An UNAVAILABLE for a request that certainly reached no log (the range is
// not served here, is recovering, or was closing before it accepted the
// request) is marked retry-safe, optionally with the owner that serves the
// range now. The KV service turns the marks into trailing metadata
// `ledgerkv-retry-safe: 1` and `ledgerkv-owner: host:port`. A write whose
// outcome is unknown (the log failed after the append) is never marked.
//
// The marks travel as absl::Status payloads under these type URLs, so any
// layer (kv_server/range/ too) can set them without depending on this
// folder: SetPayload(kRetrySafePayload, absl::Cord("1")).
#pragma once

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/strings/cord.h"

namespace ledgerkv::kv {

inline constexpr char kRetrySafePayload[] = "ledgerkv-retry-safe";
inline constexpr char kOwnerPayload[] = "ledgerkv-owner";

// Trailing metadata keys of the KV service.
inline constexpr char kRetrySafeMetadata[] = "ledgerkv-retry-safe";
inline constexpr char kOwnerMetadata[] = "ledgerkv-owner";

// `status` marked retry-safe (and with `owner` when not empty).
inline absl::Status RetrySafe(absl::Status status, std::string_view owner = {}) {
  status.SetPayload(kRetrySafePayload, absl::Cord("1"));
  if (!owner.empty())
    status.SetPayload(kOwnerPayload, absl::Cord(absl::string_view(owner.data(), owner.size())));
  return status;
}

inline bool IsRetrySafe(const absl::Status& status) {
  return status.GetPayload(kRetrySafePayload).has_value();
}

// The owner named by the status, or "".
inline std::string OwnerOf(const absl::Status& status) {
  auto owner = status.GetPayload(kOwnerPayload);
  return owner.has_value() ? std::string(*owner) : std::string();
}

}  // namespace ledgerkv::kv
