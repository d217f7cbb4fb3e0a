#include "hydraulis/data/length_source.h"

#include <filesystem>
#include <iostream>
#include <iterator>

#include "hydraulis/base/enum_names.h"
#include "hydraulis/base/error.h"
#include "hydraulis/base/file_io.h"
#include "hydraulis/data/json_lines.h"
#include "hydraulis/data/lengths.h"
#include "hydraulis/data/megatron_index.h"

namespace hydraulis {
namespace {

constexpr EnumNames<LengthFormat, 7> kLengthFormatNames{
    {{LengthFormat::kAuto, "auto"},
     {LengthFormat::kText, "text"},
     {LengthFormat::kJsonLines, "jsonl"},
     {LengthFormat::kMegatronIndex, "idx"},
     {LengthFormat::kText, "txt", true},
     {LengthFormat::kJsonLines, "json-lines", true},
     {LengthFormat::kMegatronIndex, "megatron", true}}};

constexpr std::string_view kStdinPath = "-";
constexpr std::string_view kStdinName = "<stdin>";

std::string Extension(const std::string& path) {
  return std::filesystem::path(path).extension().string();
}

// Text and JSON lines share the reader; kAuto tells them apart by the first non-blank
// character, which is '{' only in JSON lines.
std::vector<std::int64_t> ParseTextual(const std::string& text, const std::string& source,
                                       LengthFormat format, const LengthSourceOptions& options) {
  if (format == LengthFormat::kAuto) {
    const std::size_t first = text.find_first_not_of(" \t\r\n");
    format = first != std::string::npos && text[first] == '{' ? LengthFormat::kJsonLines
                                                              : LengthFormat::kText;
  }
  if (format == LengthFormat::kJsonLines) return ParseJsonLinesLengths(text, source, options);
  return ParseLengths(text, source);
}

}  // namespace

LengthFormat ParseLengthFormat(std::string_view name, std::string_view what) {
  return ParseName(name, kLengthFormatNames, what);
}

std::string_view LengthFormatName(LengthFormat format) {
  return NameOf(format, kLengthFormatNames);
}

LengthFormat FormatFromExtension(const std::string& path) {
  const std::string ext = Extension(path);
  if (ext == ".idx") return LengthFormat::kMegatronIndex;
  if (ext == ".jsonl" || ext == ".ndjson") return LengthFormat::kJsonLines;
  return LengthFormat::kAuto;
}

TokenCounter ParseTokenCounter(std::string_view name, std::string_view what) {
  if (name == "bytes") return CountUtf8Bytes;
  if (name == "words") return CountWhitespaceWords;
  throw InvalidInput(std::string(what) + ": expected bytes or words, got " + QuoteForMessage(name));
}

LengthSourceOptions LengthSourceSpec::ToOptions(std::string_view format_what,
                                                std::string_view counter_what) const {
  LengthSourceOptions options;
  options.format = ParseLengthFormat(format, format_what);
  options.length_field = length_field;
  options.text_field = text_field;
  options.count_tokens = ParseTokenCounter(token_counter, counter_what);
  options.skip_empty = skip_empty;
  return options;
}

std::vector<std::int64_t> LoadLengths(const std::string& path, const LengthSourceOptions& options) {
  if (path == kStdinPath) {
    if (options.format == LengthFormat::kMegatronIndex) {
      throw InvalidInput(std::string(kStdinName) +
                         ": a Megatron-LM index cannot be read from standard input; give the "
                         ".idx path");
    }
    std::string text((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
    return ParseTextual(text, std::string(kStdinName), options.format, options);
  }
  LengthFormat format = options.format;
  if (format == LengthFormat::kAuto) {
    if (Extension(path) == ".bin") {
      throw InvalidInput(path +
                         ": a Megatron-LM data file; give its index (the .idx beside it) instead");
    }
    format = FormatFromExtension(path);
  }
  if (format == LengthFormat::kMegatronIndex) {
    std::vector<std::int64_t> out = ReadMegatronDocumentLengths(path, options.skip_empty);
    if (out.empty()) throw InvalidInput(path + ": no document lengths");
    return out;
  }
  return ParseTextual(ReadFileText(path), path, format, options);
}

}  // namespace hydraulis
