// Validation of KV requests against the Limits and the range's bounds
// (docs/kv-api.md, "Errors and limits"). A refused request changes nothing
// and never reaches the log. Every size refusal names the limit and the
// size, e.g. "key is 5000 bytes; limit max_key_bytes is 4096".
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "kv_server/range/limits.h"
#include "kv_server/range/range.h"
#include "proto/kv.pb.h"

namespace ledgerkv::kv {

// A key as it appears in messages: C-escaped, cut after 64 bytes.
std::string DisplayKey(std::string_view key);

class RequestValidator {
 public:
  RequestValidator(const Limits& limits, const RangeDescriptor& descriptor)
      : limits_(limits), descriptor_(descriptor) {}

  // INVALID_ARGUMENT for an empty key, a key over max_key_bytes, or a key
  // outside the range.
  absl::Status CheckKey(std::string_view key) const;
  // INVALID_ARGUMENT unless the request is at most max_request_bytes.
  absl::Status CheckRequestBytes(size_t bytes) const;

  // Each: the checks above for every key it names, plus its own rules
  // (value size; a Put with both conditions; a delete range that is empty,
  // reversed or leaves the range; txn op counts; compare operands).
  absl::Status CheckPut(const ledgerkv::v1::PutRequest& request) const;
  absl::Status CheckGet(const ledgerkv::v1::GetRequest& request) const;
  absl::Status CheckDelete(const ledgerkv::v1::DeleteRequest& request) const;
  absl::Status CheckIncrement(const ledgerkv::v1::IncrementRequest& request) const;
  absl::Status CheckTxn(const ledgerkv::v1::TxnRequest& request) const;

 private:
  absl::Status CheckOp(const ledgerkv::v1::TxnOp& op) const;

  const Limits limits_;
  const RangeDescriptor descriptor_;
};

}  // namespace ledgerkv::kv
