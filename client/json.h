// A small, strict JSON reader and writer for ledgerkvctl (RFC 8259).
//
// Strict on purpose: a transaction typed by hand must either mean exactly
// what it says or be refused before anything is sent. So: UTF-8 input only,
// no comments, no trailing commas, no duplicate object keys, no leading
// zeros, no unescaped control characters, no lone surrogates, nothing after
// the top-level value, nesting at most kMaxJsonDepth. Errors name the line
// and column and what was expected.
#pragma once

#include <cstdint>
#include <string>
#include "absl/strings/string_view.h"
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace ledgerkv::client {

inline constexpr int kMaxJsonDepth = 64;

class JsonValue {
 public:
  enum class Type { kNull, kBool, kNumber, kString, kArray, kObject };
  using Member = std::pair<std::string, JsonValue>;

  JsonValue() = default;
  static JsonValue Null() { return JsonValue(); }
  static JsonValue Bool(bool b);
  // `text` is the number exactly as written (kept as text so that int64
  // values never pass through a double).
  static JsonValue Number(std::string text);
  static JsonValue String(std::string s);
  static JsonValue Array(std::vector<JsonValue> items);
  static JsonValue Object(std::vector<Member> members);

  Type type() const { return type_; }
  bool is_null() const { return type_ == Type::kNull; }
  bool is_bool() const { return type_ == Type::kBool; }
  bool is_number() const { return type_ == Type::kNumber; }
  bool is_string() const { return type_ == Type::kString; }
  bool is_array() const { return type_ == Type::kArray; }
  bool is_object() const { return type_ == Type::kObject; }

  // REQUIRES: the matching type.
  bool bool_value() const { return bool_; }
  const std::string& number_text() const { return text_; }
  const std::string& string_value() const { return text_; }
  const std::vector<JsonValue>& items() const { return items_; }
  // Members in document order (keys are unique: the parser refuses
  // duplicates).
  const std::vector<Member>& members() const { return members_; }

  // The member named `key`, or nullptr. REQUIRES: is_object().
  const JsonValue* Find(absl::string_view key) const;

  // The number as an int64. INVALID_ARGUMENT when it has a fraction or an
  // exponent, or does not fit. REQUIRES: is_number().
  absl::StatusOr<int64_t> AsInt64() const;

 private:
  Type type_ = Type::kNull;
  bool bool_ = false;
  std::string text_;
  std::vector<JsonValue> items_;
  std::vector<Member> members_;
};

// Name of a type for error messages ("string", "object", ...).
const char* JsonTypeName(JsonValue::Type type);

// Parses one JSON document. INVALID_ARGUMENT naming line, column and the
// problem on any deviation from RFC 8259 or the strictness rules above.
absl::StatusOr<JsonValue> ParseJson(absl::string_view text);

// `s` as a JSON string literal, quotes included. Control characters, '"'
// and '\' are escaped; REQUIRES: `s` is valid UTF-8 (see IsValidUtf8).
std::string JsonQuote(absl::string_view s);

// True if `s` is well-formed UTF-8 (no overlongs, no surrogates).
bool IsValidUtf8(absl::string_view s);

}  // namespace ledgerkv::client
