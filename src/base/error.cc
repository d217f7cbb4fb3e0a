#include "hydraulis/base/error.h"

#include <cstdint>
#include <cstdio>

namespace hydraulis {
namespace {

// Length of the well-formed UTF-8 sequence starting `s` (its code point in `*cp`), or 0
// when the bytes there are not one (overlong forms, surrogates and values past U+10FFFF
// included).
std::size_t Utf8Sequence(std::string_view s, char32_t* cp) {
  const auto b0 = static_cast<unsigned char>(s[0]);
  std::size_t n = 0;
  char32_t min = 0;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    n = 2, min = 0x80, *cp = b0 & 0x1F;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    n = 3, min = 0x800, *cp = b0 & 0x0F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    n = 4, min = 0x10000, *cp = b0 & 0x07;
  } else {
    return 0;
  }
  if (s.size() < n) return 0;
  for (std::size_t i = 1; i < n; ++i) {
    const auto b = static_cast<unsigned char>(s[i]);
    if ((b & 0xC0) != 0x80) return 0;
    *cp = (*cp << 6) | (b & 0x3F);
  }
  if (*cp < min || *cp > 0x10FFFF || (*cp >= 0xD800 && *cp <= 0xDFFF)) return 0;
  return n;
}

// Code points that could end the line or reorder what a terminal shows: C1 controls, the
// Unicode line and paragraph separators, bidirectional controls and the BOM.
bool Disruptive(char32_t cp) {
  return cp <= 0x9F || cp == 0x2028 || cp == 0x2029 || cp == 0x200E || cp == 0x200F ||
         (cp >= 0x202A && cp <= 0x202E) || (cp >= 0x2066 && cp <= 0x2069) || cp == 0xFEFF;
}

void AppendEscaped(std::string& out, std::string_view bytes) {
  for (const char ch : bytes) {
    char hex[8];
    std::snprintf(hex, sizeof hex, "\\x%02x", static_cast<unsigned char>(ch));
    out += hex;
  }
}

}  // namespace

std::string QuoteForMessage(std::string_view value, std::size_t max_chars) {
  std::string out = "'";
  std::size_t i = 0, shown = 0;
  while (i < value.size() && shown < max_chars) {
    const auto c = static_cast<unsigned char>(value[i]);
    std::size_t n = 1;
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out += static_cast<char>(c);
    } else if (char32_t cp = 0; c >= 0x80 && (n = Utf8Sequence(value.substr(i), &cp)) > 0) {
      if (Disruptive(cp)) {
        AppendEscaped(out, value.substr(i, n));
      } else {
        out += value.substr(i, n);
      }
    } else {
      n = 1;
      AppendEscaped(out, value.substr(i, 1));
    }
    i += n;
    ++shown;
  }
  out += "'";
  if (i < value.size()) out += "...(" + std::to_string(value.size()) + " bytes)";
  return out;
}

}  // namespace hydraulis
