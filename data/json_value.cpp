// Recursive-descent JSON parser. Depth is capped so hostile input cannot overflow the stack.
#include "data/json_value.h"

#include <algorithm>
#include <charconv>
#include <cstdlib>

#include "data/utf8.h"
#include "model/core/error.h"

namespace strata {
namespace {

constexpr int kMaxDepth = 256;

class Parser {
 public:
  explicit Parser(std::string_view input) : input_(input) {}

  JsonValue document() {
    skip_space();
    JsonValue value = parse_value(0);
    skip_space();
    if (!at_end())
      error(value.is(JsonValue::Kind::object)  ? "unexpected data after the JSON object"
            : value.is(JsonValue::Kind::array) ? "unexpected data after the JSON array"
                                               : "unexpected data after the JSON value");
    return value;
  }

 private:
  [[noreturn]] void fail_at(std::size_t pos, std::string_view reason) const {
    fail(json_location(input_, pos), ": ", reason);
  }
  [[noreturn]] void error(std::string_view reason) const { fail_at(pos_, reason); }

  char peek() const { return pos_ < input_.size() ? input_[pos_] : '\0'; }
  bool at_end() const { return pos_ >= input_.size(); }

  void skip_space() {
    while (!at_end() && (peek() == ' ' || peek() == '\t' || peek() == '\r' || peek() == '\n')) {
      ++pos_;
    }
  }

  void expect(char c) {
    if (at_end() || peek() != c) error(std::string("expected '") + c + "'");
    ++pos_;
  }

  JsonValue parse_value(int depth) {
    if (depth > kMaxDepth) error("nesting too deep");
    if (at_end()) error("unexpected end of input, expected a value");
    JsonValue value;
    value.position = pos_;
    const char c = peek();
    if (c == '{') {
      value.kind = JsonValue::Kind::object;
      parse_object(depth, value);
    } else if (c == '[') {
      value.kind = JsonValue::Kind::array;
      parse_array(depth, value);
    } else if (c == '"') {
      value.kind = JsonValue::Kind::string;
      value.text = parse_string();
    } else if (c == '-' || (c >= '0' && c <= '9')) {
      value.kind = JsonValue::Kind::number;
      parse_number();
      value.text = std::string(input_.substr(value.position, pos_ - value.position));
      value.number = std::strtod(value.text.c_str(), nullptr);
    } else if (parse_literal("true")) {
      value.kind = JsonValue::Kind::boolean;
      value.boolean = true;
    } else if (parse_literal("false")) {
      value.kind = JsonValue::Kind::boolean;
    } else if (!parse_literal("null")) {
      error("invalid value");
    }
    return value;
  }

  void parse_object(int depth, JsonValue& object) {
    expect('{');
    skip_space();
    if (peek() == '}') {
      ++pos_;
      return;
    }
    while (true) {
      skip_space();
      if (peek() != '"') error("expected a string key");
      std::string key = parse_string();
      skip_space();
      expect(':');
      skip_space();
      object.members.push_back({std::move(key), parse_value(depth + 1)});
      skip_space();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      expect('}');
      return;
    }
  }

  void parse_array(int depth, JsonValue& array) {
    expect('[');
    skip_space();
    if (peek() == ']') {
      ++pos_;
      return;
    }
    while (true) {
      skip_space();
      array.items.push_back(parse_value(depth + 1));
      skip_space();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      expect(']');
      return;
    }
  }

  bool parse_literal(std::string_view word) {
    if (input_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }

  // number = [ "-" ] ( "0" / 1-9 *DIGIT ) [ "." 1*DIGIT ] [ ( "e" / "E" ) [ "+" / "-" ] 1*DIGIT ]
  void parse_number() {
    auto digits = [&] {
      const std::size_t start = pos_;
      while (!at_end() && peek() >= '0' && peek() <= '9') ++pos_;
      if (pos_ == start) error("invalid number");
    };
    if (peek() == '-') ++pos_;
    if (peek() == '0') {
      ++pos_;
    } else {
      digits();
    }
    if (peek() == '.') {
      ++pos_;
      digits();
    }
    if (peek() == 'e' || peek() == 'E') {
      ++pos_;
      if (peek() == '+' || peek() == '-') ++pos_;
      digits();
    }
  }

  unsigned parse_hex4() {
    if (pos_ + 4 > input_.size()) error("truncated \\u escape");
    unsigned value = 0;
    for (int i = 0; i < 4; ++i) {
      const char c = input_[pos_ + i];
      value <<= 4;
      if (c >= '0' && c <= '9') {
        value |= static_cast<unsigned>(c - '0');
      } else if (c >= 'a' && c <= 'f') {
        value |= static_cast<unsigned>(c - 'a' + 10);
      } else if (c >= 'A' && c <= 'F') {
        value |= static_cast<unsigned>(c - 'A' + 10);
      } else {
        error("invalid hex digit in \\u escape");
      }
    }
    pos_ += 4;
    return value;
  }

  // A \u escape at pos_ (just after the backslash and 'u'); joins a UTF-16 surrogate pair.
  char32_t parse_unicode_escape() {
    const std::size_t escape_start = pos_ - 2;
    const unsigned unit = parse_hex4();
    if (unit >= 0xDC00 && unit <= 0xDFFF) fail_at(escape_start, "lone low surrogate in \\u escape");
    if (unit < 0xD800 || unit > 0xDBFF) return unit;
    if (input_.substr(pos_, 2) != "\\u") fail_at(escape_start, "lone high surrogate in \\u escape");
    pos_ += 2;
    const unsigned low = parse_hex4();
    if (low < 0xDC00 || low > 0xDFFF) fail_at(escape_start, "invalid surrogate pair in \\u escape");
    return 0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00);
  }

  std::string parse_string() {
    const std::size_t start = pos_;
    expect('"');
    std::string out;
    while (true) {
      if (at_end()) fail_at(start, "unterminated string");
      const char c = input_[pos_];
      if (c == '"') {
        ++pos_;
        return out;
      }
      if (static_cast<unsigned char>(c) < 0x20) error("unescaped control character in string");
      if (c != '\\') {
        out.push_back(c);
        ++pos_;
        continue;
      }
      ++pos_;
      if (at_end()) fail_at(start, "unterminated string");
      const char escape = input_[pos_++];
      switch (escape) {
        case '"':
          out.push_back('"');
          break;
        case '\\':
          out.push_back('\\');
          break;
        case '/':
          out.push_back('/');
          break;
        case 'b':
          out.push_back('\b');
          break;
        case 'f':
          out.push_back('\f');
          break;
        case 'n':
          out.push_back('\n');
          break;
        case 'r':
          out.push_back('\r');
          break;
        case 't':
          out.push_back('\t');
          break;
        case 'u':
          append_utf8(out, parse_unicode_escape());
          break;
        default:
          fail_at(pos_ - 2, "invalid escape in string");
      }
    }
  }

  std::string_view input_;
  std::size_t pos_ = 0;
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

JsonValue parse_json(std::string_view text) { return Parser(text).document(); }

}  // namespace strata
