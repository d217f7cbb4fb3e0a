#include "hydraulis/data/json_lines_text.h"

#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string_view>
#include <utility>

#include "ascii_text.h"
#include "hydraulis/base/error.h"
#include "hydraulis/base/internal/json_text.h"

namespace hydraulis {
namespace {

using data_internal::IsAsciiSpace;
using data_internal::Trim;

}  // namespace

JsonLinesTextReader::JsonLinesTextReader(const std::string& path, std::string field)
    : path_(path), field_(std::move(field)), in_(path, std::ios::binary) {
  if (!in_) throw InvalidInput(path_ + ": cannot open: " + std::strerror(errno));
  if (field_.empty()) throw InvalidInput(path_ + ": no JSON field named for the text");
}

bool JsonLinesTextReader::Next(std::string& text) {
  while (std::getline(in_, buffer_)) {
    ++line_;
    const std::string_view line = Trim(buffer_);
    if (line.empty()) continue;
    const std::string where = path_ + ":" + std::to_string(line_) + ": ";
    nlohmann::json j = ParseJson(line, path_ + ":" + std::to_string(line_));
    if (!j.is_object()) {
      throw InvalidInput(where + "expected a JSON object, got " + std::string(j.type_name()));
    }
    const auto it = j.find(field_);
    if (it == j.end()) throw InvalidInput(where + "missing field " + QuoteForMessage(field_));
    if (!it->is_string()) {
      throw InvalidInput(where + "field " + QuoteForMessage(field_) + ": expected a string, got " +
                         std::string(it->type_name()));
    }
    text = std::move(it->get_ref<std::string&>());
    return true;
  }
  if (in_.bad()) throw InvalidInput(path_ + ": read error");
  return false;
}

}  // namespace hydraulis
