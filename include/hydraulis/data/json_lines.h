// Document lengths from JSON lines: one object per line with an integer length field, or
// a text field whose tokens a TokenCounter counts.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "hydraulis/data/length_source.h"

namespace hydraulis {

// The byte-level tokenizer: one token per UTF-8 byte (JSON escapes are decoded first, so
// "\u00e9" counts 2). An upper bound on any byte-level BPE's count, with no vocabulary.
std::int64_t CountUtf8Bytes(std::string_view text);

// One token per maximal run of non-whitespace characters (ASCII space, tab, newline,
// carriage return, vertical tab, form feed separate words).
std::int64_t CountWhitespaceWords(std::string_view text);

// Parses JSON lines: every non-blank line is a JSON object; its length is the integer
// options.length_field (>= 1), or, when options.text_field is set, the count of that
// string field (options.count_tokens, CountUtf8Bytes when empty). Other fields are
// ignored. Documents with no tokens are rejected unless options.skip_empty. InvalidInput
// "<source>:<line>: ..." naming the field; "<source>: no document lengths" when none.
std::vector<std::int64_t> ParseJsonLinesLengths(std::string_view text, const std::string& source,
                                                const LengthSourceOptions& options);

}  // namespace hydraulis
