#include "hydraulis/data/lengths.h"

#include <cctype>
#include <charconv>
#include <nlohmann/json.hpp>

#include "hydraulis/base/error.h"
#include "hydraulis/base/internal/json_text.h"
#include "hydraulis/data/document_length.h"
#include "hydraulis/data/length_source.h"

namespace hydraulis {

std::vector<std::int64_t> ParseLengths(const std::string& text, const std::string& source) {
  std::vector<std::int64_t> out;
  std::size_t first = text.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && text[first] == '[') {
    const nlohmann::json j = ParseJson(text, source);
    for (std::size_t i = 0; i < j.size(); ++i) {
      const std::string where = source + ": [" + std::to_string(i) + "]: ";
      std::int64_t v = 0;
      switch (CheckJsonInteger(j[i], 1, kMaxDocumentTokens, &v)) {
        case JsonIntegerCheck::kInRange:
          break;
        case JsonIntegerCheck::kAboveMax:
          // 2^63 or 1e30 included: checked before any int64 conversion could wrap it.
          throw InvalidInput(where + DocumentTooLongMessage(JsonForMessage(j[i])));
        case JsonIntegerCheck::kBelowMin:
        case JsonIntegerCheck::kNotAnInteger:
          throw InvalidInput(where + "a length must be an integer >= 1, got " +
                             JsonForMessage(j[i]));
      }
      out.push_back(v);
    }
  } else {
    std::size_t line_no = 0, pos = 0;
    while (pos <= text.size()) {
      std::size_t end = text.find('\n', pos);
      if (end == std::string::npos) end = text.size();
      ++line_no;
      std::string_view line(text.data() + pos, end - pos);
      while (!line.empty() && std::isspace(static_cast<unsigned char>(line.back()))) {
        line.remove_suffix(1);
      }
      while (!line.empty() && std::isspace(static_cast<unsigned char>(line.front()))) {
        line.remove_prefix(1);
      }
      if (!line.empty() && line[0] != '#') {
        std::int64_t v = 0;
        auto [ptr, ec] = std::from_chars(line.data(), line.data() + line.size(), v);
        if (ec == std::errc::result_out_of_range && ptr == line.data() + line.size() &&
            line[0] != '-') {
          // Digits beyond int64: too long, not malformed.
          throw InvalidInput(source + ":" + std::to_string(line_no) + ": " +
                             DocumentTooLongMessage(QuoteForMessage(line)));
        }
        if (ec != std::errc() || ptr != line.data() + line.size() || v < 1) {
          throw InvalidInput(source + ":" + std::to_string(line_no) +
                             ": a length must be an integer >= 1, got " + QuoteForMessage(line));
        }
        if (v > kMaxDocumentTokens) {
          throw InvalidInput(source + ":" + std::to_string(line_no) + ": " +
                             DocumentTooLongMessage(v));
        }
        out.push_back(v);
      }
      pos = end + 1;
    }
  }
  if (out.empty()) throw InvalidInput(source + ": no document lengths");
  return out;
}

std::vector<std::int64_t> ReadLengths(const std::string& path) { return LoadLengths(path); }

}  // namespace hydraulis
