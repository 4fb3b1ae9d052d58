#include "data/multiple_choice.h"

#include <cstdint>
#include <fstream>

#include "data/json_value.h"
#include "model/core/error.h"

namespace strata {

namespace {

// The string member `key` of `object`.
const std::string& string_member(const JsonValue& object, const char* key) {
  const JsonValue* value = object.find(key);
  if (!value) fail("no \"", key, "\" field");
  if (!value->is(JsonValue::Kind::string))
    fail("\"", key, "\" is ", json_kind_name(value->kind), ", not a string");
  return value->text;
}

MultipleChoiceExample parse_example(const std::string& text, const Tokenizer& tokenizer,
                                    int seq_len) {
  JsonValue object;
  try {
    object = parse_json(text);
  } catch (const Error& e) {
    fail("not JSON: ", e.what());
  }
  if (!object.is(JsonValue::Kind::object))
    fail("a line must be a JSON object, got ", json_kind_name(object.kind));
  MultipleChoiceExample example;
  example.context = tokenizer.encode(string_member(object, "ctx"));
  if (example.context.empty()) example.context.push_back(tokenizer.eos_id());

  const JsonValue* endings = object.find("endings");
  if (!endings) fail("no \"endings\" field");
  if (!endings->is(JsonValue::Kind::array))
    fail("\"endings\" is ", json_kind_name(endings->kind), ", not an array");
  if (endings->items.size() < 2)
    fail("\"endings\" has ", endings->items.size(), " entries; a choice needs at least 2");
  for (std::size_t k = 0; k < endings->items.size(); ++k) {
    const JsonValue& ending = endings->items[k];
    if (!ending.is(JsonValue::Kind::string))
      fail("ending ", k, " is ", json_kind_name(ending.kind), ", not a string");
    if (ending.text.empty()) fail("ending ", k, " is empty");
    std::vector<int> ids = tokenizer.encode_after_space(ending.text);
    if (ids.empty()) fail("ending ", k, " has no tokens");
    if (static_cast<int>(ids.size()) > seq_len)
      fail("ending ", k, " has ", ids.size(), " tokens, more than the model's seq_len ", seq_len);
    example.endings.push_back(std::move(ids));
  }

  const JsonValue* label = object.find("label");
  if (!label) fail("no \"label\" field");
  std::int64_t index = -1;
  if (!label->integer(index))
    fail("\"label\" is ", json_kind_name(label->kind), ", not an integer");
  if (index < 0 || index >= static_cast<std::int64_t>(example.endings.size()))
    fail("\"label\" ", index, " is out of range for ", example.endings.size(), " endings");
  example.label = static_cast<int>(index);
  return example;
}

}  // namespace

std::vector<MultipleChoiceExample> read_multiple_choice(const std::string& path,
                                                        const Tokenizer& tokenizer, int seq_len) {
  std::ifstream in(path);
  if (!in) fail("cannot open multiple-choice file '", path, "'");
  std::vector<MultipleChoiceExample> examples;
  std::string text;
  for (int line = 1; std::getline(in, text); ++line) {
    if (!text.empty() && text.back() == '\r') text.pop_back();
    if (text.find_first_not_of(" \t") == std::string::npos) continue;
    try {
      examples.push_back(parse_example(text, tokenizer, seq_len));
    } catch (const Error& e) {
      fail(path, ":", line, ": ", e.what());
    }
    examples.back().line = line;
  }
  if (in.bad()) fail("cannot read multiple-choice file '", path, "'");
  if (examples.empty()) fail(path, ": no multiple-choice examples");
  return examples;
}

}  // namespace strata
