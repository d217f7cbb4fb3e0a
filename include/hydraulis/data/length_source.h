// One entry point for document-length datasets: text, JSON lines or a Megatron-LM index,
// chosen by the file's extension or an explicit format.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace hydraulis {

enum class LengthFormat {
  kAuto,           // by extension: .idx index, .jsonl/.ndjson JSON lines, else by content
  kText,           // one integer per line, or a JSON array of integers (ParseLengths)
  kJsonLines,      // one JSON object per line (ParseJsonLinesLengths)
  kMegatronIndex,  // Megatron-LM .idx, memory-mapped (ReadMegatronDocumentLengths)
};

// Counts the tokens of one document's text; must return >= 0. The hook through which a
// real tokenizer plugs in; the library ships CountUtf8Bytes and CountWhitespaceWords.
using TokenCounter = std::function<std::int64_t(std::string_view text)>;

struct LengthSourceOptions {
  // Which reader to use; kAuto decides by extension (see LengthFormat).
  LengthFormat format = LengthFormat::kAuto;
  // JSON lines: the integer field holding a document's length in tokens.
  std::string length_field = "length";
  // JSON lines: when non-empty, the string field whose text is counted by count_tokens
  // instead of reading length_field.
  std::string text_field;
  // JSON lines with text_field: the token counter; empty means CountUtf8Bytes.
  TokenCounter count_tokens;
  // JSON lines and .idx: drop documents with no tokens (an empty text, a length of 0, an
  // index document without sequences) instead of rejecting them. Real Megatron-LM
  // indices can hold empty documents (preprocessing keeps empty texts as documents).
  bool skip_empty = false;
};

// Parses a format name: auto, text (txt), jsonl (json-lines), idx (megatron). Otherwise
// InvalidInput naming `what` (the caller's name for the value) and the accepted names.
LengthFormat ParseLengthFormat(std::string_view name, std::string_view what = "format");

// The canonical name of a format (the first of each list above).
std::string_view LengthFormatName(LengthFormat format);

// The format kAuto picks for `path` before looking at its content: kMegatronIndex for
// .idx, kJsonLines for .jsonl and .ndjson, kAuto (decide by content) otherwise.
LengthFormat FormatFromExtension(const std::string& path);

// Parses a token-counter name: bytes (CountUtf8Bytes) or words (CountWhitespaceWords).
// InvalidInput naming `what` (the caller's name for the value) otherwise.
TokenCounter ParseTokenCounter(std::string_view name, std::string_view what = "token counter");

// A length source's settings as names, the way the CLI's flags and Python's keywords hold
// them, so both front ends build LengthSourceOptions alike.
struct LengthSourceSpec {
  std::string format = "auto";  // a ParseLengthFormat name
  std::string length_field = "length";
  std::string text_field;
  std::string token_counter = "bytes";  // a ParseTokenCounter name
  bool skip_empty = false;

  // The checked options; InvalidInput naming a bad format by `format_what` and a bad
  // counter by `counter_what` (the caller's names for them: flags or keywords).
  LengthSourceOptions ToOptions(std::string_view format_what = "format",
                                std::string_view counter_what = "token counter") const;
};

// Loads the document lengths (tokens, each >= 1) of a dataset; "-" reads standard input
// (text or JSON lines). With kAuto, a file that is not .idx/.jsonl/.ndjson is JSON lines
// when its first non-blank character is '{', else text. A .bin path (the Megatron-LM
// data file) is rejected with a hint to pass the .idx. InvalidInput naming the file and
// the line, field or index on any malformed input, and when there are no documents.
std::vector<std::int64_t> LoadLengths(const std::string& path,
                                      const LengthSourceOptions& options = {});

}  // namespace hydraulis
