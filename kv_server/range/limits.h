// Request limits of the KV API (ARCHITECTURE.md section 8,
// docs/kv-api.md). Every refusal names the limit and the size.
#pragma once

#include <cstdint>

namespace ledgerkv::kv {

struct Limits {
  int64_t max_key_bytes = 4 << 10;
  int64_t max_value_bytes = 1 << 20;
  int64_t max_txn_ops = 128;
  int64_t max_request_bytes = 4 << 20;
  // A range delete or scan touches at most this many keys per request
  // (bounds the size of one log record and one response).
  int64_t max_keys_per_request = 10000;
};

}  // namespace ledgerkv::kv
