// The one way hydraulis parses JSON a user can hand it (spec files, lengths, JSON lines,
// plans, checkpoint meta, tokenizer vocabularies), so every input gets the same guards.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <string_view>

namespace hydraulis {

// Deepest nesting accepted: far above what any hydraulis format uses (<= 5), far below
// what would exhaust a stack anywhere the value is later walked.
inline constexpr int kMaxJsonDepth = 64;

// Parses `text` as one JSON value. InvalidInput, naming `source`, for a syntax error (the
// parser's position, with any echoed text bounded), nesting deeper than kMaxJsonDepth, or
// a key repeated in one object (which JSON leaves undefined and nlohmann resolves by
// silently keeping the last).
nlohmann::json ParseJson(std::string_view text, const std::string& source);

// `value` as it may appear in an error message: a scalar as JSON, cut to a bounded length;
// an array or object by its kind and size, never dumped (it may be huge or deep).
std::string JsonForMessage(const nlohmann::json& value);

// An integer field checked against the range of the C++ type it is read into, before any
// conversion: nlohmann keeps an integer above INT64_MAX as unsigned (get<int64_t> wraps
// 2^63 to a negative count) and one beyond UINT64_MAX as a double (casting 1e30 to an
// integer is undefined), so a reader that converts first can turn a huge number into a
// small or negative one.
enum class JsonIntegerCheck {
  kInRange,       // an integer in [min_value, max_value]; *out holds it
  kAboveMax,      // a number (of any size, integral or not) above max_value
  kBelowMin,      // a number below min_value
  kNotAnInteger,  // not a number, a fraction, or an integral double past 2^53 (inexact)
};
// Compares exactly (no number is converted to int64 before it is known to fit); the range
// check comes first, so 1e30 for a field of at most 2^31 - 1 reads as too large, not as
// "not an integer". `out` is written only for kInRange.
JsonIntegerCheck CheckJsonInteger(const nlohmann::json& value, std::int64_t min_value,
                                  std::int64_t max_value, std::int64_t* out);

}  // namespace hydraulis
