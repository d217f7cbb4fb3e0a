#include "hydraulis/data/json_lines.h"

#include <cstdint>
#include <nlohmann/json.hpp>

#include "ascii_text.h"
#include "hydraulis/base/error.h"
#include "hydraulis/base/internal/json_text.h"
#include "hydraulis/data/document_length.h"

namespace hydraulis {
namespace {

using data_internal::IsAsciiSpace;
using data_internal::Trim;

std::string TypeName(const nlohmann::json& j) { return j.type_name(); }

// The value of an integer length field; InvalidInput (via `fail`) for anything that is not
// an integer in [min_len, kMaxDocumentTokens], checked before any int64 conversion (an
// unsigned 2^63 would wrap negative, 1e30 does not fit).
template <typename Fail>
std::int64_t LengthValue(const nlohmann::json& v, std::int64_t min_len, Fail fail) {
  std::int64_t len = 0;
  switch (CheckJsonInteger(v, min_len, kMaxDocumentTokens, &len)) {
    case JsonIntegerCheck::kInRange:
      return len;
    case JsonIntegerCheck::kAboveMax:
      fail(DocumentTooLongMessage(JsonForMessage(v)));
      break;
    case JsonIntegerCheck::kBelowMin:
    case JsonIntegerCheck::kNotAnInteger:
      break;
  }
  fail("a length must be an integer >= " + std::to_string(min_len) + ", got " + JsonForMessage(v));
  return 0;  // not reached: fail throws
}

}  // namespace

std::int64_t CountUtf8Bytes(std::string_view text) {
  return static_cast<std::int64_t>(text.size());
}

std::int64_t CountWhitespaceWords(std::string_view text) {
  std::int64_t words = 0;
  bool in_word = false;
  for (char c : text) {
    const bool space = IsAsciiSpace(c);
    if (!space && !in_word) ++words;
    in_word = !space;
  }
  return words;
}

std::vector<std::int64_t> ParseJsonLinesLengths(std::string_view text, const std::string& source,
                                                const LengthSourceOptions& options) {
  const bool count_text = !options.text_field.empty();
  const std::string& field = count_text ? options.text_field : options.length_field;
  if (field.empty()) throw InvalidInput(source + ": no JSON field named for the length");
  const TokenCounter& counter = options.count_tokens;
  const std::int64_t min_len = options.skip_empty ? 0 : 1;
  std::vector<std::int64_t> out;
  std::size_t line_no = 0, pos = 0;
  while (pos < text.size()) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    ++line_no;
    const std::string_view line = Trim(text.substr(pos, end - pos));
    pos = end + 1;
    if (line.empty()) continue;
    const std::string where = source + ":" + std::to_string(line_no) + ": ";
    auto fail = [&](const std::string& problem) {
      throw InvalidInput(where + "field " + QuoteForMessage(field) + ": " + problem);
    };
    const nlohmann::json j = ParseJson(line, source + ":" + std::to_string(line_no));
    if (!j.is_object()) throw InvalidInput(where + "expected a JSON object, got " + TypeName(j));
    const auto it = j.find(field);
    if (it == j.end()) throw InvalidInput(where + "missing field " + QuoteForMessage(field));
    std::int64_t len = 0;
    if (count_text) {
      if (!it->is_string()) fail("expected a string, got " + TypeName(*it));
      const auto& s = it->get_ref<const std::string&>();
      len = counter ? counter(s) : CountUtf8Bytes(s);
      if (len < 0) fail("the token counter returned " + std::to_string(len));
      if (len == 0 && !options.skip_empty) fail("no tokens (an empty document)");
    } else {
      len = LengthValue(*it, min_len, fail);
    }
    if (len > kMaxDocumentTokens) fail(DocumentTooLongMessage(len));
    if (len > 0) out.push_back(len);
  }
  if (out.empty()) throw InvalidInput(source + ": no document lengths");
  return out;
}

}  // namespace hydraulis
