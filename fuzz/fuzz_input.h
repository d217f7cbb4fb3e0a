// Shared by the libFuzzer targets (fuzz/README.md): what counts as a finding.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "hydraulis/base/error.h"

namespace hydraulis::fuzz {

// Longest error message accepted: messages echo at most a bounded part of the input.
inline constexpr std::size_t kMaxMessageBytes = 4096;

// Aborts (a finding) when `message` is not one printable line of bounded length.
inline void CheckMessage(std::string_view message) {
  bool printable = !message.empty() && message.size() <= kMaxMessageBytes;
  for (char c : message) printable = printable && (static_cast<unsigned char>(c) >= 0x20);
  if (!printable) {
    std::fprintf(stderr,
                 "fuzz: bad error message (%zu bytes, empty, too long or not one "
                 "printable line)\n",
                 message.size());
    std::abort();
  }
}

// Aborts (a finding) with `what` when `condition` is false.
inline void Require(bool condition, const char* what) {
  if (!condition) {
    std::fprintf(stderr, "fuzz: property violated: %s\n", what);
    std::abort();
  }
}

// Runs `parse`. InvalidInput is the expected answer to bad input (its message is checked);
// anything else that escapes (another exception type, an InternalError) reaches libFuzzer
// as a crash, as do the sanitizers' reports.
template <typename Parse>
void ExpectValidOrInvalidInput(Parse parse) {
  try {
    parse();
  } catch (const InvalidInput& e) {
    CheckMessage(e.what());
  }
}

inline std::string AsText(const std::uint8_t* data, std::size_t size) {
  return std::string(reinterpret_cast<const char*>(data), size);
}

// The first `parts` pieces of a several-file input whose files are separated by two NUL
// bytes (the last piece is the rest); empty when there are fewer separators.
inline std::vector<std::string_view> SplitAtNulPairs(std::string_view input, std::size_t parts) {
  constexpr std::string_view kSeparator("\0\0", 2);
  std::vector<std::string_view> out;
  while (out.size() + 1 < parts) {
    const std::size_t at = input.find(kSeparator);
    if (at == std::string_view::npos) return {};
    out.push_back(input.substr(0, at));
    input.remove_prefix(at + kSeparator.size());
  }
  out.push_back(input);
  return out;
}

}  // namespace hydraulis::fuzz
