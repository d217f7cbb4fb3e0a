#include "length_flags.h"

namespace hydraulis::tools {

void LengthFlags::AddTo(CLI::App* cmd) {
  cmd->add_option("--format", format, "lengths format: auto (by extension), text, jsonl or idx")
      ->capture_default_str();
  cmd->add_option("--length-field", length_field, "JSON lines: integer length field")
      ->capture_default_str();
  cmd->add_option("--text-field", text_field,
                  "JSON lines: count the tokens of this text field instead");
  cmd->add_option("--tokenizer", tokenizer,
                  "token counter for --text-field: bytes (UTF-8 bytes) or words")
      ->capture_default_str();
  cmd->add_flag("--skip-empty", skip_empty,
                "drop documents with no tokens (JSON lines, .idx) instead of failing");
}

LengthSourceOptions LengthFlags::ToOptions() const {
  LengthSourceOptions source;
  source.format = ParseLengthFormat(format, "--format");
  source.length_field = length_field;
  source.text_field = text_field;
  source.count_tokens = ParseTokenCounter(tokenizer);
  source.skip_empty = skip_empty;
  return source;
}

}  // namespace hydraulis::tools
