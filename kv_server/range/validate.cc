#include "kv_server/range/validate.h"

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace ledgerkv::kv {
namespace {

// Debian's Abseil keeps its own string_view type.
absl::string_view A(std::string_view s) { return absl::string_view(s.data(), s.size()); }

absl::Status TooBig(std::string_view what, size_t size, std::string_view limit, int64_t max) {
  return absl::InvalidArgumentError(
      absl::StrCat(A(what), " is ", size, " bytes; limit ", A(limit), " is ", max));
}

}  // namespace

std::string DisplayKey(std::string_view key) {
  constexpr size_t kShown = 64;
  std::string shown = absl::CHexEscape(A(key.substr(0, kShown)));
  if (key.size() > kShown) absl::StrAppend(&shown, "...");
  return absl::StrCat("\"", shown, "\"");
}

absl::Status RequestValidator::CheckKey(std::string_view key) const {
  if (key.empty()) return absl::InvalidArgumentError("key is empty");
  if (static_cast<int64_t>(key.size()) > limits_.max_key_bytes) {
    return TooBig("key", key.size(), "max_key_bytes", limits_.max_key_bytes);
  }
  if (!descriptor_.Contains(key)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "key ", DisplayKey(key), " is outside range ", descriptor_.range_id, " [",
        DisplayKey(descriptor_.start), ", ",
        descriptor_.end.empty() ? "end" : DisplayKey(descriptor_.end), ")"));
  }
  return absl::OkStatus();
}

absl::Status RequestValidator::CheckRequestBytes(size_t bytes) const {
  if (static_cast<int64_t>(bytes) > limits_.max_request_bytes) {
    return TooBig("request", bytes, "max_request_bytes", limits_.max_request_bytes);
  }
  return absl::OkStatus();
}

absl::Status RequestValidator::CheckPut(const ledgerkv::v1::PutRequest& request) const {
  RETURN_IF_ERROR(CheckKey(request.key()));
  if (static_cast<int64_t>(request.value().size()) > limits_.max_value_bytes) {
    return TooBig("value", request.value().size(), "max_value_bytes", limits_.max_value_bytes);
  }
  if (request.has_expected_version() && request.has_expected_mod_revision()) {
    return absl::InvalidArgumentError(
        "put sets both expected_version and expected_mod_revision; at most one is allowed");
  }
  if (request.has_expected_version() && request.expected_version() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("expected_version ", request.expected_version(), " is negative"));
  }
  return absl::OkStatus();
}

absl::Status RequestValidator::CheckGet(const ledgerkv::v1::GetRequest& request) const {
  return CheckKey(request.key());
}

absl::Status RequestValidator::CheckDelete(const ledgerkv::v1::DeleteRequest& request) const {
  RETURN_IF_ERROR(CheckKey(request.key()));
  if (request.end().empty()) return absl::OkStatus();
  if (request.end() <= request.key()) {
    return absl::InvalidArgumentError(absl::StrCat("delete range [", DisplayKey(request.key()),
                                                   ", ", DisplayKey(request.end()),
                                                   ") is empty or reversed"));
  }
  if (static_cast<int64_t>(request.end().size()) > limits_.max_key_bytes) {
    return TooBig("range end", request.end().size(), "max_key_bytes", limits_.max_key_bytes);
  }
  if (!descriptor_.end.empty() && request.end() > descriptor_.end) {
    return absl::InvalidArgumentError(
        absl::StrCat("delete range end ", DisplayKey(request.end()), " is beyond range ",
                     descriptor_.range_id, " (ends at ", DisplayKey(descriptor_.end), ")"));
  }
  return absl::OkStatus();
}

absl::Status RequestValidator::CheckIncrement(
    const ledgerkv::v1::IncrementRequest& request) const {
  return CheckKey(request.key());
}

absl::Status RequestValidator::CheckOp(const ledgerkv::v1::TxnOp& op) const {
  switch (op.op_case()) {
    case ledgerkv::v1::TxnOp::kPut:
      return CheckPut(op.put());
    case ledgerkv::v1::TxnOp::kGet:
      return CheckGet(op.get());
    case ledgerkv::v1::TxnOp::kDelete:
      return CheckDelete(op.delete_());
    case ledgerkv::v1::TxnOp::kIncrement:
      return CheckIncrement(op.increment());
    case ledgerkv::v1::TxnOp::OP_NOT_SET:
      break;
  }
  return absl::InvalidArgumentError("txn op has no operation set");
}

absl::Status RequestValidator::CheckTxn(const ledgerkv::v1::TxnRequest& request) const {
  const std::pair<const char*, int> counts[] = {{"compares", request.compares_size()},
                                                {"success ops", request.success_size()},
                                                {"failure ops", request.failure_size()}};
  for (const auto& [what, n] : counts) {
    if (n > limits_.max_txn_ops) {
      return absl::InvalidArgumentError(
          absl::StrCat("txn has ", n, " ", what, "; limit max_txn_ops is ", limits_.max_txn_ops));
    }
  }
  for (const ledgerkv::v1::Compare& c : request.compares()) {
    RETURN_IF_ERROR(CheckKey(c.key()));
    // An unknown target or result (a newer client, a bad encoder) would
    // otherwise count as a false compare and run the failure branch.
    if (!ledgerkv::v1::Compare::Target_IsValid(c.target())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "compare of ", DisplayKey(c.key()), " has an unknown target ", c.target()));
    }
    if (!ledgerkv::v1::Compare::Result_IsValid(c.result())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "compare of ", DisplayKey(c.key()), " has an unknown result ", c.result()));
    }
    const bool wants_value = c.target() == ledgerkv::v1::Compare::VALUE;
    if (wants_value && c.operand_case() == ledgerkv::v1::Compare::kNumber) {
      return absl::InvalidArgumentError(
          absl::StrCat("compare of the value of ", DisplayKey(c.key()), " has a number operand"));
    }
    if (!wants_value && c.operand_case() == ledgerkv::v1::Compare::kValue) {
      return absl::InvalidArgumentError(absl::StrCat(
          "compare of a revision or version of ", DisplayKey(c.key()), " has a bytes operand"));
    }
  }
  for (const ledgerkv::v1::TxnOp& op : request.success()) RETURN_IF_ERROR(CheckOp(op));
  for (const ledgerkv::v1::TxnOp& op : request.failure()) RETURN_IF_ERROR(CheckOp(op));
  return absl::OkStatus();
}

}  // namespace ledgerkv::kv
