// ASCII whitespace trimming shared by the data layer's line readers (private header).
#pragma once

#include <string_view>

namespace hydraulis::data_internal {

// The characters std::isspace accepts in the "C" locale, without a locale lookup.
inline bool IsAsciiSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

// `s` without leading and trailing ASCII whitespace.
inline std::string_view Trim(std::string_view s) {
  while (!s.empty() && IsAsciiSpace(s.front())) s.remove_prefix(1);
  while (!s.empty() && IsAsciiSpace(s.back())) s.remove_suffix(1);
  return s;
}

}  // namespace hydraulis::data_internal
