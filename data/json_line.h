// JSON Lines documents: one object per line, whose "text" member (a string) is the document.
//
// The line must be exactly one RFC 8259 JSON object (data/json_value.h parses it); members other
// than "text" are validated and ignored. The input must already be valid UTF-8
// (documents.cpp checks the whole file first), so raw string bytes are copied through unchanged.
#pragma once

#include <string>
#include <string_view>

namespace strata {

// Returns the "text" member of the JSON object on `line` (if it appears twice, the last wins).
// Throws strata::Error "column C: reason" (C counts bytes from 1) when the line is not a single
// JSON object, or when "text" is missing or not a string; the caller adds the file and line.
std::string json_line_text(std::string_view line);

}  // namespace strata
