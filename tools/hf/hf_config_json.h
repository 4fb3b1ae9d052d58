// config.json as a Hugging Face family's parser reads it (tools/hf/hf_gpt2.h, hf_llama.h): every
// error names the file, the line and column in it, and the field.
#pragma once

#include <string>

#include "data/json_value.h"

namespace strata {

class HfConfigJson {
 public:
  // Error (naming `origin`) when `text` is not a JSON object. `family` ("GPT-2") names what a
  // missing field's config.json would have held.
  HfConfigJson(std::string text, std::string origin, std::string family);

  // The field, or null when absent.
  const JsonValue* find(const char* key) const { return root_.find(key); }
  // A required positive integer.
  int positive(const char* key) const;
  // An optional positive integer, `fallback` when absent or null.
  int positive_or(const char* key, int fallback) const;
  // An optional number or boolean, `fallback` when absent (null is an error: transformers never
  // writes one for these fields).
  double number_or(const char* key, double fallback) const;
  bool boolean_or(const char* key, bool fallback) const;
  // An optional string: "" when absent.
  std::string text_or_empty(const char* key) const;

  // "ORIGIN: line L, column C" of `value`.
  std::string at(const JsonValue& value) const;
  // Error "ORIGIN: line L, column C: "KEY" WHY": a field of a model Strata does not compute.
  [[noreturn]] void unsupported(const JsonValue& value, const char* key,
                                const std::string& why) const;
  const std::string& origin() const { return origin_; }

 private:
  std::string text_, origin_, family_;
  JsonValue root_;
};

// The model_type of config.json `text` ("" when it has none). Error (naming `origin`) when the
// text is not a JSON object or model_type is not a string.
std::string hf_model_type(const std::string& text, const std::string& origin);

// A printf format writing `value` with the fewest digits that read back as `value` exactly
// (1e-05, not 1.0000000000000001e-05), a whole number with one decimal (10000.0, so that Python
// reads a float): config.json's numbers, for people to read.
std::string shortest_number_format(double value);

}  // namespace strata
