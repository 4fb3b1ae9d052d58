// Recursive-descent JSON parser over one line. Depth is capped so hostile input cannot overflow
// the stack; values other than the top-level "text" string are parsed only to be skipped.
#include "data/json_line.h"

#include <optional>

#include "data/utf8.h"
#include "model/core/error.h"

namespace strata {
namespace {

constexpr int kMaxDepth = 256;

class Parser {
 public:
  explicit Parser(std::string_view input) : input_(input) {}

  std::string top_level_text() {
    skip_space();
    if (peek() != '{') error("expected a JSON object");
    std::optional<std::string> text;
    parse_object(0, &text);
    skip_space();
    if (pos_ != input_.size()) error("unexpected data after the JSON object");
    if (!text) fail_at(0, "object has no string field \"text\"");
    return std::move(*text);
  }

 private:
  [[noreturn]] void fail_at(std::size_t pos, std::string_view reason) const {
    fail("column ", pos + 1, ": ", reason);
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

  // `text` is non-null only for the top-level object: its "text" member is captured there.
  void parse_object(int depth, std::optional<std::string>* text) {
    expect('{');
    skip_space();
    if (peek() == '}') {
      ++pos_;
      return;
    }
    while (true) {
      skip_space();
      if (peek() != '"') error("expected a string key");
      const std::string key = parse_string();
      skip_space();
      expect(':');
      skip_space();
      if (text != nullptr && key == "text") {
        if (peek() != '"') error("field \"text\" is not a string");
        *text = parse_string();
      } else {
        skip_value(depth + 1);
      }
      skip_space();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      expect('}');
      return;
    }
  }

  void parse_array(int depth) {
    expect('[');
    skip_space();
    if (peek() == ']') {
      ++pos_;
      return;
    }
    while (true) {
      skip_space();
      skip_value(depth + 1);
      skip_space();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      expect(']');
      return;
    }
  }

  void skip_value(int depth) {
    if (depth > kMaxDepth) error("nesting too deep");
    if (at_end()) error("unexpected end of line, expected a value");
    const char c = peek();
    if (c == '{') {
      parse_object(depth, nullptr);
    } else if (c == '[') {
      parse_array(depth);
    } else if (c == '"') {
      parse_string();
    } else if (c == '-' || (c >= '0' && c <= '9')) {
      parse_number();
    } else if (!parse_literal("true") && !parse_literal("false") && !parse_literal("null")) {
      error("invalid value");
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

std::string json_line_text(std::string_view line) { return Parser(line).top_level_text(); }

}  // namespace strata
