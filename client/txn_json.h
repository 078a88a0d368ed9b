// The JSON form of a transaction that `ledgerkvctl txn` reads from stdin
// (schema in client/README.md):
//
//   {"compare": [{"key": "k", "target": "value|version|create|mod",
//                 "result": "=|!=|<|>", "value": "v" | "number": 3}],
//    "success": [{"put": {"key": "k", "value": "v"}}, {"get": {"key": "k"}},
//                {"delete": {"key": "k", "end": "z"}},
//                {"incr": {"key": "k", "delta": 1}}],
//    "failure": [...same ops...]}
//
// Strict: unknown members, wrong types, missing required members, a
// compare with both or neither operand (or the wrong one for its target)
// are refused with a message naming the path ("success[1].put.value").
#pragma once

#include <string>
#include "absl/strings/string_view.h"

#include "absl/status/statusor.h"
#include "client/json.h"
#include "proto/kv.pb.h"

namespace ledgerkv::client {

// Parses `text` into a TxnRequest for `table` (the ops carry no table: the
// server routes them with the txn).
// INVALID_ARGUMENT with a message naming the problem.
absl::StatusOr<v1::TxnRequest> ParseTxnJson(absl::string_view text, const std::string& table);

// Same, from an already parsed document.
absl::StatusOr<v1::TxnRequest> TxnFromJson(const JsonValue& doc, const std::string& table);

}  // namespace ledgerkv::client
