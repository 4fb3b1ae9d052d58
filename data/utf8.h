// Strict UTF-8 validation (RFC 3629) and encoding of code points.
//
// Documents must be valid UTF-8 before they reach SentencePiece, which would otherwise map bad
// bytes silently. "Strict" means: no overlong forms, no UTF-16 surrogates (U+D800..U+DFFF), nothing
// above U+10FFFF, no truncated sequences. Offsets are byte offsets from the start of the input.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace strata {

// The byte offset of the first byte that does not start a valid sequence, or nullopt if `text`
// is entirely valid UTF-8.
std::optional<std::size_t> find_invalid_utf8(std::string_view text);

// Appends the UTF-8 encoding of `code_point` (must be a Unicode scalar value) to `out`.
void append_utf8(std::string& out, char32_t code_point);

}  // namespace strata
