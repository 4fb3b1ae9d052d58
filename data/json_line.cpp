// The "text" member of one JSON Lines object, read through the project's JSON parser.
#include "data/json_line.h"

#include "data/json_value.h"
#include "model/core/error.h"

namespace strata {

std::string json_line_text(std::string_view line) {
  // Rejected before parsing, so a line that is not an object says so rather than where its
  // contents first go wrong.
  const std::size_t first = line.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos || line[first] != '{')
    fail(json_location(line, first == std::string_view::npos ? line.size() : first),
         ": expected a JSON object");
  const JsonValue object = parse_json(line);
  const JsonValue* text = object.find("text");
  if (text == nullptr) fail("column 1: object has no string field \"text\"");
  if (!text->is(JsonValue::Kind::string))
    fail(json_location(line, text->position), ": field \"text\" is not a string");
  return text->text;
}

}  // namespace strata
