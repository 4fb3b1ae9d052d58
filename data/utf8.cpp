// Table 3-7 of the Unicode Standard ("Well-Formed UTF-8 Byte Sequences") drives the validator: the
// allowed range of the second byte depends on the lead byte, which is what excludes overlongs,
// surrogates and code points above U+10FFFF.
#include "data/utf8.h"

#include <cstdint>

namespace strata {

std::optional<std::size_t> find_invalid_utf8(std::string_view text) {
  const auto* bytes = reinterpret_cast<const unsigned char*>(text.data());
  const std::size_t size = text.size();
  std::size_t i = 0;
  while (i < size) {
    const unsigned char lead = bytes[i];
    if (lead < 0x80) {
      ++i;
      continue;
    }
    int continuation = 0;
    unsigned char second_min = 0x80, second_max = 0xBF;
    if (lead >= 0xC2 && lead <= 0xDF) {
      continuation = 1;
    } else if (lead >= 0xE0 && lead <= 0xEF) {
      continuation = 2;
      if (lead == 0xE0) second_min = 0xA0;  // below: overlong
      if (lead == 0xED) second_max = 0x9F;  // above: surrogates
    } else if (lead >= 0xF0 && lead <= 0xF4) {
      continuation = 3;
      if (lead == 0xF0) second_min = 0x90;  // below: overlong
      if (lead == 0xF4) second_max = 0x8F;  // above: beyond U+10FFFF
    } else {
      return i;  // a stray continuation byte, an overlong 2-byte lead (C0, C1) or F5..FF
    }
    if (i + continuation >= size) return i;  // truncated at the end of the input
    if (bytes[i + 1] < second_min || bytes[i + 1] > second_max) return i;
    for (int k = 2; k <= continuation; ++k) {
      if (bytes[i + k] < 0x80 || bytes[i + k] > 0xBF) return i;
    }
    i += continuation + 1;
  }
  return std::nullopt;
}

void append_utf8(std::string& out, char32_t code_point) {
  const auto cp = static_cast<std::uint32_t>(code_point);
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

}  // namespace strata
