#include "data/text_stream.h"

#include <string_view>

namespace strata {

namespace {
constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD in UTF-8
}  // namespace

std::string TextStream::append(const std::vector<int>& ids) {
  ids_.insert(ids_.end(), ids.begin(), ids.end());
  const std::string text = tokenizer_.decode(ids_);
  std::size_t stable = text.size();
  while (stable >= shown_ + kReplacement.size() &&
         std::string_view(text).substr(stable - kReplacement.size(), kReplacement.size()) ==
             kReplacement)
    stable -= kReplacement.size();
  if (stable <= shown_) return {};
  std::string gained = text.substr(shown_, stable - shown_);
  shown_ = stable;
  return gained;
}

std::string TextStream::finish() {
  const std::string text = tokenizer_.decode(ids_);
  std::string rest = text.size() > shown_ ? text.substr(shown_) : std::string();
  shown_ = text.size();
  return rest;
}

}  // namespace strata
