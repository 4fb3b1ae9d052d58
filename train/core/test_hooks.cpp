#include "train/core/test_hooks.h"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <string>

#include "model/core/error.h"

namespace strata {

namespace {

constexpr const char* kVariable = "STRATA_TEST_HOOKS";

std::int64_t integer_of(std::string_view name, std::string_view text) {
  std::int64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size())
    fail(kVariable, ": ", name, " needs an integer, not '", text, "'");
  return value;
}

}  // namespace

TestHooks TestHooks::parse(std::string_view text) {
  TestHooks hooks;
  std::size_t at = 0;
  while (at < text.size()) {
    if (text[at] == ' ') {
      ++at;
      continue;
    }
    const std::size_t end = std::min(text.find(' ', at), text.size());
    const std::string_view item = text.substr(at, end - at);
    at = end;
    const std::size_t equals = item.find('=');
    if (equals == std::string_view::npos) fail(kVariable, ": '", item, "' is not name=value");
    const std::string_view name = item.substr(0, equals), value = item.substr(equals + 1);
    if (name == "nonfinite_steps") {
      for (std::size_t from = 0; from <= value.size();) {
        const std::size_t comma = std::min(value.find(',', from), value.size());
        hooks.nonfinite_steps.insert(integer_of(name, value.substr(from, comma - from)));
        from = comma + 1;
      }
    } else if (name == "step_seconds") {
      char* parsed_end = nullptr;
      const std::string number(value);
      hooks.step_seconds = std::strtod(number.c_str(), &parsed_end);
      if (number.empty() || *parsed_end != '\0' || !std::isfinite(hooks.step_seconds) ||
          hooks.step_seconds < 0)
        fail(kVariable, ": step_seconds needs a number of seconds, not '", value, "'");
    } else if (name == "kill_in_update") {
      hooks.kill_in_update = integer_of(name, value);
    } else if (name == "kill_in_averaging") {
      hooks.kill_in_averaging = integer_of(name, value);
    } else if (name == "kill_in_request") {
      hooks.kill_in_request = integer_of(name, value);
    } else if (name == "poison_outer") {
      const std::size_t colon = value.find(':');
      const std::string_view kind = value.substr(0, colon);
      hooks.poison_outer = kind == "nan"     ? Poison::nan
                           : kind == "scale" ? Poison::scale
                           : kind == "noise" ? Poison::noise
                                             : Poison::none;
      if (hooks.poison_outer == Poison::none)
        fail(kVariable, ": poison_outer needs nan, scale or noise, not '", kind, "'");
      if (colon != std::string_view::npos)
        hooks.poison_worker = static_cast<int>(integer_of(name, value.substr(colon + 1)));
    } else {
      fail(kVariable, ": unknown hook '", name,
           "' (nonfinite_steps, step_seconds, kill_in_update, kill_in_averaging, "
           "kill_in_request, poison_outer)");
    }
  }
  return hooks;
}

TestHooks TestHooks::from_environment() {
  const char* text = std::getenv(kVariable);
  return text == nullptr ? TestHooks{} : parse(text);
}

}  // namespace strata
