// JSON text to a JsonValue tree through nlohmann-json's SAX parser (Debian's nlohmann-json3-dev),
// which does the lexing, the grammar and the string decoding; this file builds the tree, keeps
// the byte offset of every value and words the errors as json_value.h describes.
#include "data/json_value.h"

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <optional>
#include <utility>

#include "model/core/error.h"

namespace strata {
namespace {

using Json = nlohmann::json;

// Deeper values are refused: the tree's destructor recurses once per level, so hostile input must
// not nest without bound (nlohmann's parser itself keeps its state on the heap).
constexpr std::size_t kMaxDepth = 256;

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }
bool is_hex(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

// The SAX handler. nlohmann's events carry no positions, so a cursor follows the parser through
// the text: each event comes once nlohmann has read and accepted its token, and what lies between
// two tokens is white space and at most the one separator (',' or ':') the grammar expects there.
// So the cursor finds each token's first byte, and steps over the token by its first byte alone
// (a bracket, a literal), RFC 8259's number grammar, or a string's quotes and escapes.
class TreeBuilder {
 public:
  explicit TreeBuilder(std::string_view text) : text_(text) {}

  bool null() { return add(begin_value(JsonValue::Kind::null), 4); }
  bool boolean(bool value) {
    JsonValue v = begin_value(JsonValue::Kind::boolean);
    v.boolean = value;
    return add(std::move(v), value ? 4 : 5);
  }
  bool number_integer(Json::number_integer_t) { return number(); }
  bool number_unsigned(Json::number_unsigned_t) { return number(); }
  bool number_float(Json::number_float_t, const Json::string_t&) { return number(); }
  bool string(Json::string_t& value) {
    JsonValue v = begin_value(JsonValue::Kind::string);
    v.text = std::move(value);
    const std::size_t length = string_end(v.position) - v.position;
    return add(std::move(v), length);
  }
  bool binary(Json::binary_t&) { return false; }  // JSON text has no binary values
  bool start_object(std::size_t) { return open(JsonValue::Kind::object); }
  bool start_array(std::size_t) { return open(JsonValue::Kind::array); }
  bool key(Json::string_t& name) {
    cursor_ = string_end(token_start());
    keys_.push_back(std::move(name));
    separator_ = ':';
    return true;
  }
  bool end_object() { return close(); }
  bool end_array() { return close(); }
  bool parse_error(std::size_t position, const std::string& last_token,
                   const Json::exception& error) {
    // The bytes of the token quoted in the message are the input's: left out, so that they cannot
    // pass for words of the message below.
    std::string message = error.what();
    const std::string quoted = "; last read: '" + last_token + "'";
    if (const std::size_t at = message.find(quoted); at != std::string::npos)
      message.erase(at, quoted.size());
    error_ = {position, std::move(message)};
    return false;
  }

  // The tree once sax_parse succeeded; else the error line of what it reported.
  JsonValue result() {
    if (error_) fail_parse(error_->first, error_->second);
    // nlohmann takes a NUL byte for the end of the input; anything after the value is refused.
    if (!root_) fail_at(0, "invalid value");  // not reached: sax_parse fails through parse_error
    if (skip_space(cursor_) < text_.size()) fail_trailing();
    return std::move(*root_);
  }

 private:
  [[noreturn]] void fail_at(std::size_t position, std::string_view reason) const {
    fail(json_location(text_, position), ": ", reason);
  }

  std::size_t skip_space(std::size_t at) const {
    while (at < text_.size() && is_space(text_[at])) ++at;
    return at;
  }

  // The first byte of the token after the cursor: past white space and the separator the grammar
  // expects there (after a key ':', after a member or item ','), when present.
  std::size_t token_start() const {
    std::size_t at = skip_space(cursor_);
    if (separator_ != '\0' && at < text_.size() && text_[at] == separator_) at = skip_space(at + 1);
    return at;
  }

  // One past the closing quote of the string token at `start` (nlohmann has accepted it): the
  // first quote after an even run of backslashes (an odd one escapes it). Found with find (memchr)
  // rather than byte by byte, as documents are mostly long strings.
  std::size_t string_end(std::size_t start) const {
    for (std::size_t at = start + 1;; ++at) {
      at = text_.find('"', at);
      if (at == std::string_view::npos) return text_.size();
      std::size_t backslashes = 0;
      while (text_[at - 1 - backslashes] == '\\') ++backslashes;
      if (backslashes % 2 == 0) return at + 1;
    }
  }

  JsonValue begin_value(JsonValue::Kind kind) const {
    JsonValue v;
    v.kind = kind;
    v.position = token_start();
    if (open_.size() > kMaxDepth) fail_at(v.position, "nesting too deep");
    return v;
  }

  bool digit_at(std::size_t at) const {
    return at < text_.size() && text_[at] >= '0' && text_[at] <= '9';
  }

  // One past the number token at `start` (nlohmann has accepted it), by RFC 8259's grammar:
  // [ "-" ] ( "0" / 1-9 *DIGIT ) [ "." 1*DIGIT ] [ ( "e" / "E" ) [ "+" / "-" ] 1*DIGIT ].
  std::size_t number_end(std::size_t start) const {
    std::size_t at = start;
    const auto is = [&](std::string_view bytes) {
      return at < text_.size() && bytes.find(text_[at]) != std::string_view::npos;
    };
    if (is("-")) ++at;
    if (is("0"))
      ++at;
    else
      while (digit_at(at)) ++at;
    if (is(".")) {
      ++at;
      while (digit_at(at)) ++at;
    }
    if (is("eE")) {
      ++at;
      if (is("+-")) ++at;
      while (digit_at(at)) ++at;
    }
    return at;
  }

  bool number() {
    JsonValue v = begin_value(JsonValue::Kind::number);
    const std::size_t end = number_end(v.position);
    v.text = std::string(text_.substr(v.position, end - v.position));
    v.number = std::strtod(v.text.c_str(), nullptr);
    const std::size_t length = end - v.position;
    return add(std::move(v), length);
  }

  bool open(JsonValue::Kind kind) {
    JsonValue v = begin_value(kind);
    cursor_ = v.position + 1;
    separator_ = '\0';
    open_.push_back(std::move(v));
    return true;
  }

  bool close() {
    const std::size_t bracket = token_start();
    JsonValue v = std::move(open_.back());
    open_.pop_back();
    const std::size_t length = bracket + 1 - v.position;
    return add(std::move(v), length);
  }

  // Places a complete value of `length` bytes in its parent (or as the root).
  bool add(JsonValue v, std::size_t length) {
    cursor_ = v.position + length;
    separator_ = ',';
    if (open_.empty()) {
      root_ = std::move(v);
      separator_ = '\0';
    } else if (open_.back().is(JsonValue::Kind::array)) {
      open_.back().items.push_back(std::move(v));
    } else {
      open_.back().members.push_back({std::move(keys_.back()), std::move(v)});
      keys_.pop_back();
    }
    return true;
  }

  // The code unit of the \u escape at `at`, or -1 when there is none there.
  long escape_unit(std::size_t at) const {
    if (at + 6 > text_.size() || text_.compare(at, 2, "\\u") != 0) return -1;
    if (!std::all_of(text_.begin() + at + 2, text_.begin() + at + 6, is_hex)) return -1;
    return std::strtol(std::string(text_.substr(at + 2, 4)).c_str(), nullptr, 16);
  }

  // A high surrogate's \u escape without a low one after it; nlohmann stopped at `stop`, at most
  // 12 bytes past the escape's backslash (after a second escape that is not a low surrogate).
  [[noreturn]] void fail_high_surrogate(std::size_t stop) const {
    for (std::size_t at = stop >= 12 ? stop - 12 : 0; at < stop; ++at) {
      const long unit = escape_unit(at);
      if (unit >= 0xD800 && unit <= 0xDBFF)
        fail_at(at, escape_unit(at + 6) >= 0 ? "invalid surrogate pair in \\u escape"
                                             : "lone high surrogate in \\u escape");
    }
    fail_at(stop, "lone high surrogate in \\u escape");
  }

  // A \u escape whose 4 hex digits nlohmann found wanting at `stop`: named at its first digit, as
  // truncated when the text ends before 4 bytes follow the "\u".
  [[noreturn]] void fail_hex_digits(std::size_t stop) const {
    for (std::size_t at = stop; at + 5 >= stop && at >= 2; --at)
      if (text_[at - 2] == '\\' && text_[at - 1] == 'u')
        fail_at(at,
                text_.size() - at < 4 ? "truncated \\u escape" : "invalid hex digit in \\u escape");
    fail_at(stop, "invalid hex digit in \\u escape");
  }

  [[noreturn]] void fail_trailing() const {
    const std::size_t at = skip_space(cursor_);
    fail_at(at, root_->is(JsonValue::Kind::object)  ? "unexpected data after the JSON object"
                : root_->is(JsonValue::Kind::array) ? "unexpected data after the JSON array"
                                                    : "unexpected data after the JSON value");
  }

  // nlohmann's report as json_value.h words it. `read` counts the bytes its lexer had read (the
  // byte it stopped at included; an end of input counts as one); `message` is its exception text,
  // which names the lexer's finding and the token the grammar expected, in the words of
  // nlohmann-json 3.11 (Debian 12); a message this does not recognise is "invalid value" at the
  // token where parsing stopped, still one line at the right place.
  [[noreturn]] void fail_parse(std::size_t read, const std::string& message) const {
    if (root_) fail_trailing();
    const auto has = [&](std::string_view part) { return message.find(part) != std::string::npos; };
    const std::size_t start = token_start();  // the token nlohmann stopped in
    const std::size_t stop = read > 0 ? read - 1 : 0;
    const auto before = [&](std::size_t bytes) { return stop >= bytes ? stop - bytes : 0; };
    for (const char* closer : {"'}'", "']'", "':'"})
      if (has(std::string("; expected ") + closer))
        fail_at(start, std::string("expected ") + closer);
    // A string cut short, also right after a backslash (where nlohmann names the escape).
    if (has("invalid string: missing closing quote") ||
        (has("forbidden character after backslash") && stop >= text_.size()))
      fail_at(start, "unterminated string");
    if (has("invalid string: control character"))
      fail_at(stop, "unescaped control character in string");
    if (has("invalid string: forbidden character after backslash"))
      fail_at(before(1), "invalid escape in string");  // at the backslash
    if (has("must follow U+D800..U+DBFF"))
      fail_at(before(5), "lone low surrogate in \\u escape");  // at the escape's backslash
    if (has("must be followed by U+DC00..U+DFFF")) fail_high_surrogate(stop);
    if (has("must be followed by 4 hex digits")) fail_hex_digits(stop);
    if (has("invalid string: ill-formed UTF-8")) fail_at(stop, "invalid UTF-8 in string");
    if (has("; expected string literal")) fail_at(start, "expected a string key");
    if (has("invalid number")) fail_at(stop, "invalid number");
    if (has("number overflow")) fail_at(start, "number out of range");
    if (has("unexpected end of input") && start >= text_.size())
      fail_at(start, "unexpected end of input, expected a value");
    fail_at(start, "invalid value");
  }

  std::string_view text_;
  std::size_t cursor_ = 0;       // just past the last token an event accounted for
  char separator_ = '\0';        // the separator the grammar expects before the next token, if any
  std::vector<JsonValue> open_;  // the objects and arrays begun and not yet ended
  std::vector<std::string> keys_;  // the names of their members being read
  std::optional<JsonValue> root_;
  std::optional<std::pair<std::size_t, std::string>> error_;
};

}  // namespace

const JsonValue* JsonValue::find(std::string_view key) const {
  const JsonValue* found = nullptr;
  for (const auto& [name, value] : members)
    if (name == key) found = &value;
  return found;
}

bool JsonValue::integer(std::int64_t& out) const {
  if (kind != Kind::number) return false;
  std::int64_t value = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (ec != std::errc() || ptr != end) return false;
  out = value;
  return true;
}

const char* json_kind_name(JsonValue::Kind kind) {
  switch (kind) {
    case JsonValue::Kind::null:
      return "null";
    case JsonValue::Kind::boolean:
      return "a boolean";
    case JsonValue::Kind::number:
      return "a number";
    case JsonValue::Kind::string:
      return "a string";
    case JsonValue::Kind::array:
      return "an array";
    case JsonValue::Kind::object:
      return "an object";
  }
  return "?";
}

std::string json_location(std::string_view text, std::size_t position) {
  const std::size_t p = std::min(position, text.size());
  if (text.find('\n') == std::string_view::npos) return "column " + std::to_string(p + 1);
  const auto line =
      1 + std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(p), '\n');
  const std::size_t newline = p == 0 ? std::string_view::npos : text.rfind('\n', p - 1);
  const std::size_t line_start = newline == std::string_view::npos ? 0 : newline + 1;
  return "line " + std::to_string(line) + ", column " + std::to_string(p - line_start + 1);
}

JsonValue parse_json(std::string_view text) {
  // RFC 8259 has no byte order mark, and nlohmann would skip one: refused as before.
  if (text.starts_with("\xEF\xBB\xBF")) fail(json_location(text, 0), ": invalid value");
  TreeBuilder builder(text);
  Json::sax_parse(text.begin(), text.end(), &builder);
  return builder.result();
}

}  // namespace strata
