// The text field of one JSON Lines object, read through the project's JSON parser.
#include "data/json_line.h"

#include "data/json_value.h"
#include "model/core/error.h"

namespace strata {
namespace {

// The value at dotted `field` in `object`, or null when a step is missing. A step that reaches a
// value other than an object is an error pointing at that value.
const JsonValue* find_field(const JsonValue& object, std::string_view field,
                            std::string_view line) {
  if (const JsonValue* whole = object.find(field)) return whole;
  const JsonValue* current = &object;
  std::size_t start = 0;
  while (true) {
    const std::size_t dot = field.find('.', start);
    const std::string_view step = field.substr(start, dot - start);
    if (!current->is(JsonValue::Kind::object)) {
      fail(json_location(line, current->position), ": field \"", field.substr(0, start - 1),
           "\" is ", json_kind_name(current->kind), ", not an object holding \"", field, "\"");
    }
    current = current->find(step);
    if (current == nullptr || dot == std::string_view::npos) return current;
    start = dot + 1;
  }
}

}  // namespace

std::string json_line_text(std::string_view line, std::string_view field) {
  // Rejected before parsing, so a line that is not an object says so rather than where its
  // contents first go wrong.
  const std::size_t first = line.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos || line[first] != '{')
    fail(json_location(line, first == std::string_view::npos ? line.size() : first),
         ": expected a JSON object");
  const JsonValue object = parse_json(line);
  const JsonValue* text = find_field(object, field, line);
  if (text == nullptr) fail("column 1: object has no string field \"", field, "\"");
  if (!text->is(JsonValue::Kind::string))
    fail(json_location(line, text->position), ": field \"", field, "\" is not a string");
  return text->text;
}

}  // namespace strata
