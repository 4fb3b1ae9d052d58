// A minimal JSON reader for JSON Lines documents: one object per line, whose "text" member (a
// string) is the document.
//
// It accepts exactly RFC 8259 JSON: strings with every escape (\uXXXX, surrogate pairs joined into
// one code point, lone surrogates rejected), numbers, true/false/null, nested arrays and objects.
// Members other than "text" are validated and skipped. The input must already be valid UTF-8
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
