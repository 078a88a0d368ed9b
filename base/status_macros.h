// Abseil 20220623 ships no status macros; these are the project's own.
#pragma once

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define LEDGERKV_CONCAT_INNER(a, b) a##b
#define LEDGERKV_CONCAT(a, b) LEDGERKV_CONCAT_INNER(a, b)

// Returns from the enclosing function if `expr` (an absl::Status) is not OK.
#define RETURN_IF_ERROR(expr)                    \
  do {                                           \
    ::absl::Status _lkv_status = (expr);         \
    if (!_lkv_status.ok()) return _lkv_status;   \
  } while (0)

// ASSIGN_OR_RETURN(auto x, MakeX()); returns the error status if not OK.
#define ASSIGN_OR_RETURN(lhs, rexpr) \
  ASSIGN_OR_RETURN_IMPL(LEDGERKV_CONCAT(_lkv_statusor_, __LINE__), lhs, rexpr)
#define ASSIGN_OR_RETURN_IMPL(statusor, lhs, rexpr) \
  auto statusor = (rexpr);                          \
  if (!statusor.ok()) return statusor.status();     \
  lhs = std::move(statusor).value()

namespace ledgerkv {
// A deliberate, searchable decision to ignore a status (RocksDB's
// PermitUncheckedError).
inline void IgnoreError(const absl::Status&) {}
}  // namespace ledgerkv
