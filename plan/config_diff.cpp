// Each key's value as text (field_texts), and the keys on which two configs differ: what a resumed
// run changed against the run that wrote its checkpoint (plan/config.h, config_changes). Walks the
// one list of keys (config_fields.h), so a key added there is compared too.
#include <charconv>
#include <map>
#include <sstream>

#include "plan/config.h"
#include "plan/config_fields.h"

namespace strata {
namespace {

using config_detail::AutoCount;
using config_detail::Choice;
using config_detail::ChoiceList;
using config_detail::LossScale;
using config_detail::TrainData;

// Each key's value as the effective config writes it.
class FieldText {
 public:
  explicit FieldText(std::map<std::string, std::string>& out) : out_(out) {}

  template <class Int>
  requires std::is_integral_v<Int>
  void operator()(std::string_view path, const Int& value) {
    if constexpr (std::is_same_v<Int, bool>)
      set(path, value ? "true" : "false");
    else
      set(path, std::to_string(value));
  }
  void operator()(std::string_view path, const double& value) {
    char text[32];  // the shortest text that parses back to the same double
    const auto result = std::to_chars(text, text + sizeof text, value);
    set(path, std::string(text, result.ptr));
  }
  void operator()(std::string_view path, const std::string& value) { set(path, value); }
  void operator()(std::string_view path, const std::vector<int>& values) {
    std::ostringstream text;
    text << '[';
    for (std::size_t i = 0; i < values.size(); ++i) text << (i ? ", " : "") << values[i];
    set(path, text.str() + "]");
  }
  template <class E, std::size_t N>
  void operator()(std::string_view path, const Choice<E, N>& choice) {
    set(path, std::string(choice.choices.word(choice.value)));
  }
  template <class E, std::size_t N>
  void operator()(std::string_view path, const ChoiceList<E, N>& list) {
    std::string text = "[";
    for (std::size_t i = 0; i < list.values.size(); ++i)
      text += (i ? ", " : "") + std::string(list.choices.word(list.values[i]));
    set(path, text + "]");
  }
  void operator()(std::string_view path, const AutoCount& count) {
    set(path, count.is_auto() ? "auto" : std::to_string(count.value));
  }
  void operator()(std::string_view path, const LossScale& scale) { set(path, scale.value); }
  void operator()(std::string_view path, const TrainData& data) {
    set(path, config_detail::train_data_text(data));
  }

 private:
  void set(std::string_view path, std::string text) { out_[std::string(path)] = std::move(text); }
  std::map<std::string, std::string>& out_;
};

}  // namespace

std::map<std::string, std::string> config_detail::field_texts(const Config& config) {
  std::map<std::string, std::string> texts;
  Config copy = config;  // visit_fields hands out mutable references; this only reads
  FieldText visitor(texts);
  visit_fields(copy, visitor);
  return texts;
}

std::vector<ConfigChange> config_changes(const Config& before, const Config& after) {
  const auto old_texts = config_detail::field_texts(before);
  const auto new_texts = config_detail::field_texts(after);
  std::vector<ConfigChange> changes;
  for (const auto& [key, text] : new_texts) {
    const auto old = old_texts.find(key);
    if (old != old_texts.end() && old->second != text) changes.push_back({key, old->second, text});
  }
  return changes;
}

}  // namespace strata
