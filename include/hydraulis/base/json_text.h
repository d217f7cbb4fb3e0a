// The one way hydraulis parses JSON a user can hand it (spec files, lengths, JSON lines,
// plans, checkpoint meta, tokenizer vocabularies), so every input gets the same guards.
#pragma once

#include <nlohmann/json.hpp>

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

}  // namespace hydraulis
