// The strict JSON reader: what a hand-typed transaction may look like, and
// every deviation refused with a position and a reason.
#include "client/json.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ledgerkv::client {
namespace {

using ::testing::HasSubstr;

std::string ErrorOf(absl::string_view text) {
  auto v = ParseJson(text);
  EXPECT_FALSE(v.ok()) << "accepted: " << text;
  if (v.ok()) return "";
  EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(v.status().message());
}

TEST(JsonTest, ParsesNestedDocumentInOrder) {
  auto v = ParseJson(R"( {"b": [1, -2.5e3, true, false, null], "a": {"x": "y"}, "c": ""} )");
  ASSERT_TRUE(v.ok()) << v.status();
  ASSERT_TRUE(v->is_object());
  ASSERT_EQ(v->members().size(), 3u);
  EXPECT_EQ(v->members()[0].first, "b");
  EXPECT_EQ(v->members()[1].first, "a");
  const JsonValue* b = v->Find("b");
  ASSERT_NE(b, nullptr);
  ASSERT_EQ(b->items().size(), 5u);
  EXPECT_EQ(b->items()[0].number_text(), "1");
  EXPECT_EQ(b->items()[1].number_text(), "-2.5e3");
  EXPECT_TRUE(b->items()[2].bool_value());
  EXPECT_FALSE(b->items()[3].bool_value());
  EXPECT_TRUE(b->items()[4].is_null());
  EXPECT_EQ(v->Find("a")->Find("x")->string_value(), "y");
  EXPECT_EQ(v->Find("c")->string_value(), "");
  EXPECT_EQ(v->Find("missing"), nullptr);
}

TEST(JsonTest, DecodesEscapesAndUtf8) {
  auto v = ParseJson(R"("a\"b\\c\/d\b\f\n\r\t\u0041\u00e9\u20ac\ud83d\ude00 é")");
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->string_value(), "a\"b\\c/d\b\f\n\r\tA\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80 \xC3\xA9");
}

TEST(JsonTest, Int64KeepsFullPrecisionAndRefusesFractionsAndOverflow) {
  auto max = ParseJson("9223372036854775807");
  ASSERT_TRUE(max.ok());
  ASSERT_TRUE(max->AsInt64().ok());
  EXPECT_EQ(*max->AsInt64(), INT64_MAX);
  auto min = ParseJson("-9223372036854775808");
  ASSERT_TRUE(min.ok());
  EXPECT_EQ(*min->AsInt64(), INT64_MIN);
  EXPECT_THAT(ParseJson("9223372036854775808")->AsInt64().status().message(),
              HasSubstr("does not fit in int64"));
  EXPECT_THAT(ParseJson("1.5")->AsInt64().status().message(), HasSubstr("not an integer"));
  EXPECT_THAT(ParseJson("1e3")->AsInt64().status().message(), HasSubstr("not an integer"));
}

TEST(JsonTest, RefusesMalformedInputWithPositionAndReason) {
  EXPECT_THAT(ErrorOf(""), HasSubstr("empty input"));
  EXPECT_THAT(ErrorOf("   "), HasSubstr("empty input"));
  EXPECT_THAT(ErrorOf("{\"a\":1,}"), HasSubstr("trailing comma in object"));
  EXPECT_THAT(ErrorOf("[1,]"), HasSubstr("trailing comma in array"));
  EXPECT_THAT(ErrorOf("{\"a\":1 \"b\":2}"), HasSubstr("expected ',' or '}'"));
  EXPECT_THAT(ErrorOf("{a:1}"), HasSubstr("member name in double quotes"));
  EXPECT_THAT(ErrorOf("{'a':1}"), HasSubstr("member name in double quotes"));
  EXPECT_THAT(ErrorOf("{\"a\" 1}"), HasSubstr("expected ':'"));
  EXPECT_THAT(ErrorOf("{\"a\":1,\"a\":2}"), HasSubstr("duplicate member \"a\""));
  EXPECT_THAT(ErrorOf("{\"a\":1"), HasSubstr("unterminated object"));
  EXPECT_THAT(ErrorOf("[1"), HasSubstr("unterminated array"));
  EXPECT_THAT(ErrorOf("\"abc"), HasSubstr("unterminated string"));
  EXPECT_THAT(ErrorOf("{} {}"), HasSubstr("unexpected text after the JSON value"));
  EXPECT_THAT(ErrorOf("01"), HasSubstr("leading zeros"));
  EXPECT_THAT(ErrorOf("-"), HasSubstr("expected a digit"));
  EXPECT_THAT(ErrorOf("1."), HasSubstr("after '.'"));
  EXPECT_THAT(ErrorOf("1e"), HasSubstr("exponent"));
  EXPECT_THAT(ErrorOf("+1"), HasSubstr("expected a value"));
  EXPECT_THAT(ErrorOf("tru"), HasSubstr("expected a value"));
  EXPECT_THAT(ErrorOf("NaN"), HasSubstr("expected a value"));
  EXPECT_THAT(ErrorOf("\"a\tb\""), HasSubstr("control character"));
  EXPECT_THAT(ErrorOf(R"("\x41")"), HasSubstr("invalid escape '\\x'"));
  EXPECT_THAT(ErrorOf(R"("\u12zz")"), HasSubstr("four hex digits"));
  EXPECT_THAT(ErrorOf(R"("\u12")"), HasSubstr("truncated \\u escape"));
  EXPECT_THAT(ErrorOf(R"("\ud83d")"), HasSubstr("high surrogate"));
  EXPECT_THAT(ErrorOf(R"("\ude00")"), HasSubstr("lone low surrogate"));
  EXPECT_THAT(ErrorOf("\"\xC3\x28\""), HasSubstr("invalid UTF-8"));
  EXPECT_THAT(ErrorOf("\"\xC0\xAF\""), HasSubstr("invalid UTF-8"));      // overlong '/'
  EXPECT_THAT(ErrorOf("\"\xED\xA0\x80\""), HasSubstr("invalid UTF-8"));  // encoded surrogate
  EXPECT_THAT(ErrorOf("// c\n{}"), HasSubstr("expected a value"));
}

TEST(JsonTest, ErrorNamesLineAndColumn) {
  EXPECT_THAT(ErrorOf("{\n  \"a\": 1,\n  \"b\": x\n}"), HasSubstr("line 3, column 8"));
}

TEST(JsonTest, RefusesNestingBeyondLimitButAcceptsIt) {
  std::string ok(kMaxJsonDepth, '[');
  ok += std::string(kMaxJsonDepth, ']');
  EXPECT_TRUE(ParseJson(ok).ok());
  std::string deep(kMaxJsonDepth + 1, '[');
  deep += std::string(kMaxJsonDepth + 1, ']');
  EXPECT_THAT(ErrorOf(deep), HasSubstr("nesting deeper than"));
  // Far deeper input must not exhaust the stack either.
  EXPECT_THAT(ErrorOf(std::string(100000, '[')), HasSubstr("nesting deeper than"));
}

TEST(JsonTest, QuoteRoundTripsThroughParse) {
  const std::string s = "q\"b\\s\n\r\t\x01\x7F end \xE2\x82\xAC";
  std::string quoted = JsonQuote(s);
  auto back = ParseJson(quoted);
  ASSERT_TRUE(back.ok()) << back.status() << " for " << quoted;
  EXPECT_EQ(back->string_value(), s);
}

TEST(JsonTest, Utf8Validation) {
  EXPECT_TRUE(IsValidUtf8("plain \xC3\xA9 \xF0\x9F\x98\x80"));
  EXPECT_FALSE(IsValidUtf8("\xFF"));
  EXPECT_FALSE(IsValidUtf8("\xE2\x82"));
  EXPECT_FALSE(IsValidUtf8("\xF4\x90\x80\x80"));  // above U+10FFFF
}

}  // namespace
}  // namespace ledgerkv::client
