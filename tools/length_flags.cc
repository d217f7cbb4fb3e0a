#include "length_flags.h"

namespace hydraulis::tools {

void LengthFlags::AddTo(CLI::App* cmd) {
  cmd->add_option("--format", spec.format,
                  "lengths format: auto (by extension), text, jsonl or idx")
      ->capture_default_str();
  cmd->add_option("--length-field", spec.length_field, "JSON lines: integer length field")
      ->capture_default_str();
  cmd->add_option("--text-field", spec.text_field,
                  "JSON lines: count the tokens of this text field instead");
  cmd->add_option("--tokenizer", spec.token_counter,
                  "token counter for --text-field: bytes (UTF-8 bytes) or words")
      ->capture_default_str();
  cmd->add_flag("--skip-empty", spec.skip_empty,
                "drop documents with no tokens (JSON lines, .idx) instead of failing");
}

LengthSourceOptions LengthFlags::ToOptions() const {
  return spec.ToOptions("--format", "--tokenizer");
}

}  // namespace hydraulis::tools
