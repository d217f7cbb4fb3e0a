#include "hydraulis/base/error.h"

#include <algorithm>
#include <cstdio>

namespace hydraulis {

std::string QuoteForMessage(std::string_view value, std::size_t max_chars) {
  std::string out = "'";
  const std::size_t shown = std::min(value.size(), max_chars);
  for (std::size_t i = 0; i < shown; ++i) {
    const auto c = static_cast<unsigned char>(value[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out += static_cast<char>(c);
    } else {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", c);
      out += hex;
    }
  }
  out += "'";
  if (shown < value.size()) out += "...(" + std::to_string(value.size()) + " bytes)";
  return out;
}

}  // namespace hydraulis
