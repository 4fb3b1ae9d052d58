#include "tools/hf/hf_config_json.h"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "model/core/error.h"

namespace strata {

HfConfigJson::HfConfigJson(std::string text, std::string origin, std::string family)
    : text_(std::move(text)), origin_(std::move(origin)), family_(std::move(family)) {
  try {
    root_ = parse_json(text_);
  } catch (const Error& e) {
    fail(origin_, ": not valid JSON: ", e.what());
  }
  if (!root_.is(JsonValue::Kind::object)) fail(origin_, ": not a JSON object");
}

std::string HfConfigJson::at(const JsonValue& value) const {
  return origin_ + ": " + json_location(text_, value.position);
}

void HfConfigJson::unsupported(const JsonValue& value, const char* key,
                               const std::string& why) const {
  fail(at(value), ": \"", key, "\" ", why);
}

int HfConfigJson::positive(const char* key) const {
  const JsonValue* v = find(key);
  if (v == nullptr) fail(origin_, ": no \"", key, "\" (a ", family_, " config.json has it)");
  std::int64_t value = 0;
  if (!v->integer(value) || value < 1 || value > (1 << 30))
    fail(at(*v), ": \"", key, "\" must be a positive integer");
  return static_cast<int>(value);
}

int HfConfigJson::positive_or(const char* key, int fallback) const {
  const JsonValue* v = find(key);
  return v == nullptr || v->is(JsonValue::Kind::null) ? fallback : positive(key);
}

double HfConfigJson::number_or(const char* key, double fallback) const {
  const JsonValue* v = find(key);
  if (v == nullptr) return fallback;
  if (!v->is(JsonValue::Kind::number)) fail(at(*v), ": \"", key, "\" must be a number");
  return v->number;
}

bool HfConfigJson::boolean_or(const char* key, bool fallback) const {
  const JsonValue* v = find(key);
  if (v == nullptr) return fallback;
  if (!v->is(JsonValue::Kind::boolean)) fail(at(*v), ": \"", key, "\" must be true or false");
  return v->boolean;
}

std::string HfConfigJson::text_or_empty(const char* key) const {
  const JsonValue* v = find(key);
  if (v == nullptr) return "";
  if (!v->is(JsonValue::Kind::string)) fail(at(*v), ": \"", key, "\" must be a string");
  return v->text;
}

std::string hf_model_type(const std::string& text, const std::string& origin) {
  return HfConfigJson(text, origin, "Hugging Face").text_or_empty("model_type");
}

std::string shortest_number_format(double value) {
  // A whole number as Python's json writes a float (10000.0): Python reads it as one.
  if (value == std::floor(value) && std::fabs(value) < 1e15) return "%.1f";
  for (int digits = 1; digits < 17; ++digits) {
    const std::string format = "%." + std::to_string(digits) + "g";
    char text[40];
    std::snprintf(text, sizeof(text), format.c_str(), value);
    if (std::strtod(text, nullptr) == value) return format;
  }
  return "%.17g";
}

}  // namespace strata
