// An enum's names in files, flags and messages, kept in one table per enum, so printing a
// value and parsing a name cannot drift apart.
#pragma once

#include <array>
#include <cstddef>
#include <string>
#include <string_view>

#include "hydraulis/base/error.h"

namespace hydraulis {

// One row of an enum's name table. An alias is accepted when parsing but never printed.
template <typename E>
struct EnumName {
  E value;
  std::string_view name;
  bool alias = false;
};

template <typename E, std::size_t N>
using EnumNames = std::array<EnumName<E>, N>;

// The name of `value`: its first row that is not an alias ("?" when the table lacks it,
// which is a bug in the table).
template <typename E, std::size_t N>
std::string_view NameOf(E value, const EnumNames<E, N>& names) {
  for (const auto& row : names) {
    if (row.value == value && !row.alias) return row.name;
  }
  return "?";
}

// "a, b or c": the names that are not aliases, for messages and help texts.
template <typename E, std::size_t N>
std::string NameList(const EnumNames<E, N>& names) {
  std::string out;
  std::size_t listed = 0, total = 0;
  for (const auto& row : names) total += row.alias ? 0 : 1;
  for (const auto& row : names) {
    if (row.alias) continue;
    if (listed > 0) out += listed + 1 == total ? " or " : ", ";
    out += row.name;
    ++listed;
  }
  return out;
}

// The value named `name`. Otherwise InvalidInput "`what`: expected a, b or c, got 'x'",
// where `what` is the caller's name for the value: a field, a keyword argument or a flag.
template <typename E, std::size_t N>
E ParseName(std::string_view name, const EnumNames<E, N>& names, std::string_view what) {
  for (const auto& row : names) {
    if (row.name == name) return row.value;
  }
  throw InvalidInput(std::string(what) + ": expected " + NameList(names) + ", got " +
                     QuoteForMessage(name));
}

}  // namespace hydraulis
