// The JSON reader (data/json_value.h) on its own: the tree and every value's byte offset, and the
// error lines a caller passes on, "column C: reason" at the token or byte that is wrong.
// (JSON Lines documents through it: data_documents_test.cpp.)
#include <gtest/gtest.h>

#include <string>

#include "data/json_value.h"
#include "model/core/error.h"

namespace strata {
namespace {

std::string error_of(std::string_view text) {
  try {
    parse_json(text);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(JsonValue, BuildsTheTreeWithEveryValuesOffset) {
  const JsonValue root =
      parse_json(R"( {"a": [1, -2.5e3, true], "b": {"c": null, "d": "x\"y"}, "a": false} )");
  ASSERT_TRUE(root.is(JsonValue::Kind::object));
  EXPECT_EQ(root.position, 1u);
  ASSERT_EQ(root.members.size(), 3u);  // duplicates kept, in document order
  const JsonValue& a = root.members[0].value;
  ASSERT_EQ(a.items.size(), 3u);
  EXPECT_EQ(a.position, 7u);
  EXPECT_EQ(a.items[1].text, "-2.5e3");
  EXPECT_EQ(a.items[1].number, -2500.0);
  EXPECT_EQ(a.items[1].position, 11u);
  EXPECT_EQ(a.items[2].position, 19u);
  const JsonValue* d = root.find("b")->find("d");
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->text, "x\"y");
  EXPECT_EQ(d->position, 48u);
  EXPECT_TRUE(root.find("a")->is(JsonValue::Kind::boolean));  // the last of a name wins
  std::int64_t big = 0;
  EXPECT_TRUE(parse_json("-9223372036854775808").integer(big));
  EXPECT_EQ(big, INT64_MIN);
  EXPECT_FALSE(parse_json("9223372036854775808").integer(big));
}

TEST(JsonValue, ErrorsNameTheReasonAtTheTokenOrByte) {
  EXPECT_EQ(error_of(R"({"a" 1})"), "column 6: expected ':'");
  EXPECT_EQ(error_of(R"({"a":1,})"), "column 8: expected a string key");
  EXPECT_EQ(error_of("[1,,2]"), "column 4: invalid value");
  EXPECT_EQ(error_of(R"({"n": 01})"), "column 8: expected '}'");
  EXPECT_EQ(error_of("[1.]"), "column 4: invalid number");
  EXPECT_EQ(error_of("[tru]"), "column 2: invalid value");
  EXPECT_EQ(error_of(R"({"a":)"), "column 6: unexpected end of input, expected a value");
  EXPECT_EQ(error_of("[1] [2]"), "column 5: unexpected data after the JSON array");
  EXPECT_EQ(error_of(std::string("{}\0", 3)), "column 3: unexpected data after the JSON object");
  EXPECT_EQ(error_of("[\"a\",\n \"b\" \"c\"]"), "line 2, column 6: expected ']'");
  EXPECT_EQ(error_of("\xEF\xBB\xBF{}"), "column 1: invalid value");  // no byte order mark
}

TEST(JsonValue, StringErrorsPointIntoTheString) {
  EXPECT_EQ(error_of(R"(["ab\q"])"), "column 5: invalid escape in string");
  EXPECT_EQ(error_of("[\"a\tb\"]"), "column 4: unescaped control character in string");
  EXPECT_EQ(error_of(R"(["abc)"), "column 2: unterminated string");
  EXPECT_EQ(error_of(R"(["a\)"), "column 2: unterminated string");
  EXPECT_EQ(error_of(R"(["\ud800x"])"), "column 3: lone high surrogate in \\u escape");
  EXPECT_EQ(error_of(R"(["\ud800\u0041"])"), "column 3: invalid surrogate pair in \\u escape");
  EXPECT_EQ(error_of(R"(["\udc00"])"), "column 3: lone low surrogate in \\u escape");
  EXPECT_EQ(error_of(R"(["\u12G4"])"), "column 5: invalid hex digit in \\u escape");
  EXPECT_EQ(error_of(R"(["\u12)"), "column 5: truncated \\u escape");
}

TEST(JsonValue, RefusesWhatNlohmannRefusesBeyondTheEarlierParser) {
  // Bytes that are not UTF-8 were copied through, and numbers past a double read as infinity.
  EXPECT_EQ(error_of("[\"caf\xC3\"]"), "column 7: invalid UTF-8 in string");  // at the quote
  EXPECT_EQ(error_of("[1, 1e400]"), "column 5: number out of range");
}

TEST(JsonValue, NestingIsCappedAt256Levels) {
  const std::string deepest = std::string(257, '[') + std::string(257, ']');
  EXPECT_EQ(error_of(deepest), "");
  EXPECT_EQ(error_of("[" + deepest + "]"), "column 258: nesting too deep");
  EXPECT_EQ(error_of(std::string(100000, '[')), "column 258: nesting too deep");
}

}  // namespace
}  // namespace strata
