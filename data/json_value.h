// A JSON document parsed into a tree: the one JSON reader of the project (JSON Lines documents,
// Hugging Face's config.json, a safetensors header). nlohmann-json (Debian's nlohmann-json3-dev)
// parses it through its SAX interface; json_value.cpp builds the tree and words the errors.
//
// It accepts exactly RFC 8259 JSON: strings with every escape (\uXXXX, surrogate pairs joined into
// one code point, lone surrogates rejected) and valid UTF-8 bytes, numbers, true/false/null,
// nested arrays and objects, nesting at most 256 deep (so hostile input cannot overflow the
// stack), no byte order mark. Every value keeps the byte offset where it starts, so a caller can
// point at the value it rejects.
//
// The errors name the same reasons at the same byte offsets as the hand-written parser this
// replaced (the value or token that is wrong; inside a string, the escape or byte), except where
// nlohmann refuses more:
//   - a string holding bytes that are not UTF-8: "invalid UTF-8 in string" at the byte where the
//     sequence proved ill-formed (a lead byte's missing continuation: the byte after it). They were
//     copied through unchanged before (JSON Lines documents are checked for UTF-8 before they are
//     parsed, so only config.json and safetensors headers can meet this);
//   - a number beyond a double's range (1e400): "number out of range" at the number, where it read
//     as infinity before (so "1e400 x" names the number, not the data after it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace strata {

struct JsonMember;

struct JsonValue {
  enum class Kind { null, boolean, number, string, array, object };
  Kind kind = Kind::null;
  bool boolean = false;
  double number = 0;
  std::string text;  // a string's decoded value, or a number as written
  std::vector<JsonValue> items;
  std::vector<JsonMember> members;  // in document order, duplicates kept
  std::size_t position = 0;         // byte offset of the value's start

  bool is(Kind k) const { return kind == k; }
  // The last member named `key` (JSON leaves duplicates to the reader; the last wins, as in
  // Python's json), or null when absent or when this is not an object.
  const JsonValue* find(std::string_view key) const;
  // A number written as an integer (no fraction or exponent) that fits in int64: true and the
  // value in `out`; anything else: false, `out` untouched.
  bool integer(std::int64_t& out) const;
};

// A member of an object. (Not a std::pair: a pair needs JsonValue complete where JsonValue
// declares its members, which only GCC's library lets pass.)
struct JsonMember {
  std::string name;
  JsonValue value;
};

// The word for a kind in messages: "null", "a boolean", "a number", "a string", "an array",
// "an object".
const char* json_kind_name(JsonValue::Kind kind);

// Parses one JSON value filling all of `text` (white space around it allowed). Throws
// strata::Error "column C: reason" (C counts bytes from 1), or "line L, column C: reason" when
// `text` spans several lines.
JsonValue parse_json(std::string_view text);

// "column C" or "line L, column C" for byte offset `position` of `text`, as parse_json's errors.
std::string json_location(std::string_view text, std::size_t position);

}  // namespace strata
