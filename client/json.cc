#include "client/json.h"

#include <cstdio>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace ledgerkv::client {

JsonValue JsonValue::Bool(bool b) {
  JsonValue v;
  v.type_ = Type::kBool;
  v.bool_ = b;
  return v;
}

JsonValue JsonValue::Number(std::string text) {
  JsonValue v;
  v.type_ = Type::kNumber;
  v.text_ = std::move(text);
  return v;
}

JsonValue JsonValue::String(std::string s) {
  JsonValue v;
  v.type_ = Type::kString;
  v.text_ = std::move(s);
  return v;
}

JsonValue JsonValue::Array(std::vector<JsonValue> items) {
  JsonValue v;
  v.type_ = Type::kArray;
  v.items_ = std::move(items);
  return v;
}

JsonValue JsonValue::Object(std::vector<Member> members) {
  JsonValue v;
  v.type_ = Type::kObject;
  v.members_ = std::move(members);
  return v;
}

const JsonValue* JsonValue::Find(absl::string_view key) const {
  for (const auto& [k, v] : members_) {
    if (k == key) return &v;
  }
  return nullptr;
}

absl::StatusOr<int64_t> JsonValue::AsInt64() const {
  if (text_.find_first_of(".eE") != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat("number ", text_, " is not an integer"));
  }
  int64_t out = 0;
  if (!absl::SimpleAtoi(text_, &out)) {
    return absl::InvalidArgumentError(absl::StrCat("number ", text_, " does not fit in int64"));
  }
  return out;
}

const char* JsonTypeName(JsonValue::Type type) {
  switch (type) {
    case JsonValue::Type::kNull:
      return "null";
    case JsonValue::Type::kBool:
      return "boolean";
    case JsonValue::Type::kNumber:
      return "number";
    case JsonValue::Type::kString:
      return "string";
    case JsonValue::Type::kArray:
      return "array";
    case JsonValue::Type::kObject:
      return "object";
  }
  return "?";
}

namespace {

// Length of the UTF-8 sequence starting at s[i], or 0 if it is malformed.
size_t Utf8SequenceLength(absl::string_view s, size_t i) {
  auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  unsigned char c = byte(i);
  if (c < 0x80) return 1;
  size_t len;
  uint32_t cp;
  if ((c & 0xE0) == 0xC0) {
    len = 2;
    cp = c & 0x1F;
  } else if ((c & 0xF0) == 0xE0) {
    len = 3;
    cp = c & 0x0F;
  } else if ((c & 0xF8) == 0xF0) {
    len = 4;
    cp = c & 0x07;
  } else {
    return 0;
  }
  if (i + len > s.size()) return 0;
  for (size_t k = 1; k < len; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (byte(i + k) & 0x3F);
  }
  static constexpr uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < kMin[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return len;
}

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

class Parser {
 public:
  explicit Parser(absl::string_view text) : s_(text) {}

  absl::StatusOr<JsonValue> ParseDocument() {
    SkipSpace();
    if (AtEnd()) return Error("empty input: expected a JSON value");
    JsonValue v;
    if (!ParseValue(0, &v)) return error_;
    SkipSpace();
    if (!AtEnd()) return Error("unexpected text after the JSON value");
    return v;
  }

 private:
  bool AtEnd() const { return pos_ >= s_.size(); }
  char Peek() const { return s_[pos_]; }

  void SkipSpace() {
    while (!AtEnd() && (Peek() == ' ' || Peek() == '\t' || Peek() == '\n' || Peek() == '\r')) {
      ++pos_;
    }
  }

  // Records the first error with its position and returns it.
  absl::Status Error(absl::string_view what) {
    if (error_.ok()) {
      int line = 1, col = 1;
      for (size_t i = 0; i < pos_ && i < s_.size(); ++i) {
        if (s_[i] == '\n') {
          ++line;
          col = 1;
        } else {
          ++col;
        }
      }
      error_ = absl::InvalidArgumentError(
          absl::StrCat("invalid JSON at line ", line, ", column ", col, ": ", what));
    }
    return error_;
  }
  bool Fail(absl::string_view what) {
    IgnoreError(Error(what));  // kept in error_
    return false;
  }

  std::string Found() const {
    if (AtEnd()) return "end of input";
    unsigned char c = static_cast<unsigned char>(Peek());
    if (c < 0x20 || c >= 0x7F) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "0x%02X", c);
      return absl::StrCat("byte ", buf);
    }
    return absl::StrCat("'", std::string(1, Peek()), "'");
  }

  bool ParseValue(int depth, JsonValue* out) {
    if (AtEnd()) return Fail("unexpected end of input: expected a value");
    switch (Peek()) {
      case '{':
        return ParseObject(depth + 1, out);
      case '[':
        return ParseArray(depth + 1, out);
      case '"': {
        std::string s;
        if (!ParseString(&s)) return false;
        *out = JsonValue::String(std::move(s));
        return true;
      }
      case 't':
        return ParseLiteral("true", JsonValue::Bool(true), out);
      case 'f':
        return ParseLiteral("false", JsonValue::Bool(false), out);
      case 'n':
        return ParseLiteral("null", JsonValue::Null(), out);
      default:
        if (Peek() == '-' || (Peek() >= '0' && Peek() <= '9')) return ParseNumber(out);
        return Fail(absl::StrCat("expected a value, found ", Found()));
    }
  }

  bool ParseLiteral(absl::string_view word, JsonValue value, JsonValue* out) {
    if (s_.substr(pos_, word.size()) != word) {
      return Fail(absl::StrCat("expected a value, found ", Found()));
    }
    pos_ += word.size();
    *out = std::move(value);
    return true;
  }

  bool ParseNumber(JsonValue* out) {
    size_t start = pos_;
    auto digit = [&] { return !AtEnd() && Peek() >= '0' && Peek() <= '9'; };
    if (Peek() == '-') ++pos_;
    if (!digit()) return Fail("expected a digit");
    if (Peek() == '0') {
      ++pos_;
      if (digit()) return Fail("leading zeros are not allowed in numbers");
    } else {
      while (digit()) ++pos_;
    }
    if (!AtEnd() && Peek() == '.') {
      ++pos_;
      if (!digit()) return Fail("expected a digit after '.'");
      while (digit()) ++pos_;
    }
    if (!AtEnd() && (Peek() == 'e' || Peek() == 'E')) {
      ++pos_;
      if (!AtEnd() && (Peek() == '+' || Peek() == '-')) ++pos_;
      if (!digit()) return Fail("expected a digit in the exponent");
      while (digit()) ++pos_;
    }
    *out = JsonValue::Number(std::string(s_.substr(start, pos_ - start)));
    return true;
  }

  bool ParseHex4(uint32_t* out) {
    if (pos_ + 4 > s_.size()) return Fail("truncated \\u escape");
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) {
      char c = s_[pos_ + i];
      v <<= 4;
      if (c >= '0' && c <= '9') {
        v |= static_cast<uint32_t>(c - '0');
      } else if (c >= 'a' && c <= 'f') {
        v |= static_cast<uint32_t>(c - 'a' + 10);
      } else if (c >= 'A' && c <= 'F') {
        v |= static_cast<uint32_t>(c - 'A' + 10);
      } else {
        pos_ += i;
        return Fail("\\u must be followed by four hex digits");
      }
    }
    pos_ += 4;
    *out = v;
    return true;
  }

  // REQUIRES: Peek() == '"'.
  bool ParseString(std::string* out) {
    ++pos_;
    while (true) {
      if (AtEnd()) return Fail("unterminated string");
      unsigned char c = static_cast<unsigned char>(Peek());
      if (c == '"') {
        ++pos_;
        return true;
      }
      if (c < 0x20) return Fail("control character in string (escape it)");
      if (c == '\\') {
        ++pos_;
        if (AtEnd()) return Fail("unterminated string");
        char e = Peek();
        ++pos_;
        switch (e) {
          case '"':
            out->push_back('"');
            break;
          case '\\':
            out->push_back('\\');
            break;
          case '/':
            out->push_back('/');
            break;
          case 'b':
            out->push_back('\b');
            break;
          case 'f':
            out->push_back('\f');
            break;
          case 'n':
            out->push_back('\n');
            break;
          case 'r':
            out->push_back('\r');
            break;
          case 't':
            out->push_back('\t');
            break;
          case 'u': {
            uint32_t cp;
            if (!ParseHex4(&cp)) return false;
            if (cp >= 0xDC00 && cp <= 0xDFFF) return Fail("lone low surrogate in \\u escape");
            if (cp >= 0xD800 && cp <= 0xDBFF) {
              uint32_t low;
              if (s_.substr(pos_, 2) != "\\u") return Fail("high surrogate not followed by \\u");
              pos_ += 2;
              if (!ParseHex4(&low)) return false;
              if (low < 0xDC00 || low > 0xDFFF) return Fail("high surrogate not followed by a low one");
              cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
            }
            AppendUtf8(cp, out);
            break;
          }
          default:
            --pos_;
            return Fail(absl::StrCat("invalid escape '\\", std::string(1, e), "'"));
        }
        continue;
      }
      size_t len = Utf8SequenceLength(s_, pos_);
      if (len == 0) return Fail("invalid UTF-8 in string");
      out->append(s_.data() + pos_, len);
      pos_ += len;
    }
  }

  bool ParseArray(int depth, JsonValue* out) {
    if (depth > kMaxJsonDepth) return Fail(absl::StrCat("nesting deeper than ", kMaxJsonDepth));
    ++pos_;
    std::vector<JsonValue> items;
    SkipSpace();
    if (!AtEnd() && Peek() == ']') {
      ++pos_;
      *out = JsonValue::Array(std::move(items));
      return true;
    }
    while (true) {
      SkipSpace();
      JsonValue item;
      if (!ParseValue(depth, &item)) return false;
      items.push_back(std::move(item));
      SkipSpace();
      if (AtEnd()) return Fail("unterminated array: expected ',' or ']'");
      if (Peek() == ',') {
        ++pos_;
        SkipSpace();
        if (!AtEnd() && Peek() == ']') return Fail("trailing comma in array");
        continue;
      }
      if (Peek() == ']') {
        ++pos_;
        *out = JsonValue::Array(std::move(items));
        return true;
      }
      return Fail(absl::StrCat("expected ',' or ']' in array, found ", Found()));
    }
  }

  bool ParseObject(int depth, JsonValue* out) {
    if (depth > kMaxJsonDepth) return Fail(absl::StrCat("nesting deeper than ", kMaxJsonDepth));
    ++pos_;
    std::vector<JsonValue::Member> members;
    SkipSpace();
    if (!AtEnd() && Peek() == '}') {
      ++pos_;
      *out = JsonValue::Object(std::move(members));
      return true;
    }
    while (true) {
      SkipSpace();
      if (AtEnd() || Peek() != '"') {
        return Fail(absl::StrCat("expected a member name in double quotes, found ", Found()));
      }
      std::string key;
      if (!ParseString(&key)) return false;
      for (const auto& m : members) {
        if (m.first == key) return Fail(absl::StrCat("duplicate member \"", key, "\""));
      }
      SkipSpace();
      if (AtEnd() || Peek() != ':') {
        return Fail(absl::StrCat("expected ':' after member name, found ", Found()));
      }
      ++pos_;
      SkipSpace();
      JsonValue value;
      if (!ParseValue(depth, &value)) return false;
      members.emplace_back(std::move(key), std::move(value));
      SkipSpace();
      if (AtEnd()) return Fail("unterminated object: expected ',' or '}'");
      if (Peek() == ',') {
        ++pos_;
        SkipSpace();
        if (!AtEnd() && Peek() == '}') return Fail("trailing comma in object");
        continue;
      }
      if (Peek() == '}') {
        ++pos_;
        *out = JsonValue::Object(std::move(members));
        return true;
      }
      return Fail(absl::StrCat("expected ',' or '}' in object, found ", Found()));
    }
  }

  absl::string_view s_;
  size_t pos_ = 0;
  absl::Status error_;
};

}  // namespace

absl::StatusOr<JsonValue> ParseJson(absl::string_view text) { return Parser(text).ParseDocument(); }

bool IsValidUtf8(absl::string_view s) {
  for (size_t i = 0; i < s.size();) {
    size_t len = Utf8SequenceLength(s, i);
    if (len == 0) return false;
    i += len;
  }
  return true;
}

std::string JsonQuote(absl::string_view s) {
  std::string out;
  out.reserve(s.size() + 2);
  out.push_back('"');
  for (char ch : s) {
    unsigned char c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20 || c == 0x7F) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else {
          out.push_back(ch);
        }
    }
  }
  out.push_back('"');
  return out;
}

}  // namespace ledgerkv::client
