#include "train/metrics/json_scalars.h"

#include <charconv>
#include <string>
#include <system_error>

#include "model/core/error.h"

namespace strata {

namespace {

// A recursive-descent reader of one JSON line that collects its numbers as it goes.
class ScalarReader {
 public:
  explicit ScalarReader(std::string_view text) : text_(text) {}

  std::vector<Scalar> read() {
    skip_space();
    if (peek() != '{') error("expected a JSON object");
    value("");
    skip_space();
    if (pos_ != text_.size()) error("unexpected text after the object");
    return std::move(scalars_);
  }

 private:
  // The value at pos_, tagged `tag`: its numbers (all of them, for an object or an array) are
  // appended to scalars_.
  void value(const std::string& tag) {
    skip_space();
    const char next = peek();
    if (next == '{') {
      object(tag);
    } else if (next == '[') {
      array(tag);
    } else if (next == '"') {
      string();
    } else if (literal("true")) {
      scalars_.push_back({tag, 1});
    } else if (literal("false")) {
      scalars_.push_back({tag, 0});
    } else if (!literal("null")) {
      scalars_.push_back({tag, number()});
    }
  }

  void object(const std::string& tag) {
    ++pos_;  // '{'
    skip_space();
    if (consume('}')) return;
    do {
      skip_space();
      if (peek() != '"') error("expected a member name");
      const std::string key(string());
      skip_space();
      if (!consume(':')) error("expected ':' after the member name");
      value(tag.empty() ? key : tag + "/" + key);
      skip_space();
    } while (consume(','));
    if (!consume('}')) error("expected ',' or '}'");
  }

  void array(const std::string& tag) {
    ++pos_;  // '['
    skip_space();
    if (consume(']')) return;
    std::size_t index = 0;
    do {
      value(tag + "/" + std::to_string(index++));
      skip_space();
    } while (consume(','));
    if (!consume(']')) error("expected ',' or ']'");
  }

  // The text between the quotes, escapes left as written (a backslash only hides the next
  // character from the search for the closing quote).
  std::string_view string() {
    const std::size_t begin = ++pos_;  // after '"'
    while (pos_ < text_.size() && text_[pos_] != '"') pos_ += text_[pos_] == '\\' ? 2 : 1;
    if (pos_ >= text_.size()) {
      pos_ = begin - 1;
      error("unterminated string");
    }
    return text_.substr(begin, pos_++ - begin);
  }

  double number() {
    const std::size_t digit = pos_ < text_.size() && text_[pos_] == '-' ? pos_ + 1 : pos_;
    if (digit >= text_.size() || text_[digit] < '0' || text_[digit] > '9')
      error("expected a JSON value");
    double parsed = 0;
    const char* end = text_.data() + text_.size();
    const auto [stop, status] = std::from_chars(text_.data() + pos_, end, parsed);
    if (status != std::errc()) error("number out of range");
    pos_ = static_cast<std::size_t>(stop - text_.data());
    return parsed;
  }

  bool literal(std::string_view word) {
    if (text_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }

  bool consume(char c) {
    if (peek() != c) return false;
    ++pos_;
    return true;
  }
  char peek() const { return pos_ < text_.size() ? text_[pos_] : '\0'; }
  void skip_space() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t' ||
                                   text_[pos_] == '\n' || text_[pos_] == '\r'))
      ++pos_;
  }
  [[noreturn]] void error(const char* reason) const { fail("column ", pos_ + 1, ": ", reason); }

  std::string_view text_;
  std::size_t pos_ = 0;
  std::vector<Scalar> scalars_;
};

}  // namespace

std::vector<Scalar> json_scalars(std::string_view line) { return ScalarReader(line).read(); }

}  // namespace strata
