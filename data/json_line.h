// JSON Lines documents: one object per line, whose text field (a string) is the document.
//
// The line must be exactly one RFC 8259 JSON object (data/json_value.h parses it); members other
// than the text field are validated and ignored. The input must already be valid UTF-8
// (documents.cpp checks each line first), so raw string bytes are copied through unchanged.
//
// The field is named by `--text-field` (default "text"). A name with dots is a path into nested
// objects: "meta.content" is the member "content" of the object in member "meta". A member whose
// own name is the whole text, dots included, is taken first, so a layout with a literal
// "meta.content" key reads as it is written.
#pragma once

#include <string>
#include <string_view>

namespace strata {

// Returns the string at `field` of the JSON object on `line` (if a member appears twice, the last
// wins). Throws strata::Error "column C: reason" (C counts bytes from 1) when the line is not a
// single JSON object, or when the field is missing or not a string; the caller adds the file and
// line.
std::string json_line_text(std::string_view line, std::string_view field = "text");

}  // namespace strata
