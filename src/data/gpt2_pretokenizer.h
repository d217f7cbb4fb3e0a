// GPT-2's pre-tokenisation (internal to the data layer): the regular expression
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// implemented by hand, so the data layer needs no regex library with Unicode classes.
#pragma once

#include <string_view>
#include <vector>

namespace hydraulis::data_internal {

// Splits `text` into the pieces the pattern matches, in order; the pieces concatenate to
// `text`. \s is Python's Unicode whitespace; \p{L} and \p{N} are exact for ASCII, and
// every other non-ASCII code point counts as a letter (tokenizer.h explains the
// approximation). A byte that is not part of valid UTF-8 is one code point, a letter.
std::vector<std::string_view> Gpt2PreTokenize(std::string_view text);

}  // namespace hydraulis::data_internal
