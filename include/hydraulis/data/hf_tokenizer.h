// Hugging Face tokenizers of the byte-level BPE family (GPT-2, LLaMA-3, Qwen, Mistral's
// newer ones), read from their tokenizer.json and encoding as the `tokenizers` package does.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "hydraulis/data/tokenizer.h"

namespace hydraulis {
namespace data_internal {
struct HfPipeline;
}

// A tokenizer.json of the byte-level BPE family. Encode gives the ids `tokenizers`'
// Tokenizer.encode(text).ids gives (add_special_tokens on, special tokens in the text
// recognised): added tokens are cut out of the text first, the rest normalized,
// pre-tokenized, byte-mapped and merged, then the post-processor's template adds its
// tokens (a BOS, say). What it accepts, and refuses rather than tokenize differently
// (docs/runtime.md, "Hugging Face tokenizers"):
//  - normalizer: none, NFC, NFD, NFKC, NFKD, or a Sequence of them;
//  - pre_tokenizer: ByteLevel, or a Sequence of Split steps (regex or string, any
//    behavior, inverted or not) ending in one ByteLevel;
//  - model: BPE with every one of the 256 byte symbols, no dropout, no subword prefix or
//    suffix; merges as "a b" strings or [a, b] pairs; ignore_merges honoured;
//  - post_processor: none, ByteLevel, TemplateProcessing (its single-sequence template),
//    or a Sequence of them;
//  - added_tokens without lstrip, rstrip or single_word; no truncation or padding.
class HfTokenizer final : public Tokenizer {
 public:
  // Reads `path`, and tokenizer_config.json beside it when there is one: its eos_token is
  // the end-of-document id (`preprocess --append-eod`). InvalidInput naming the file and
  // the field for anything it cannot read or does not support.
  static HfTokenizer Load(const std::string& path);
  // The same from the file's text; `path` names it in messages. `eos_token` (the token's
  // text, or empty for none) gives eod_id.
  static HfTokenizer Parse(std::string_view json_text, const std::string& path,
                           std::string_view eos_token = {});

  ~HfTokenizer() override;
  HfTokenizer(HfTokenizer&&) noexcept;
  HfTokenizer& operator=(HfTokenizer&&) noexcept;

  // As Tokenizer::Encode, plus the template's tokens, which empty text gets too.
  std::vector<std::int64_t> Encode(std::string_view text) const override;
  std::int64_t vocab_size() const override;
  std::optional<std::int64_t> eod_id() const override;

  // The id of `token` (an added token or a vocabulary entry), or nullopt.
  std::optional<std::int64_t> TokenId(std::string_view token) const;

 private:
  explicit HfTokenizer(std::unique_ptr<const data_internal::HfPipeline> pipeline);
  std::unique_ptr<const data_internal::HfPipeline> pipeline_;
};

}  // namespace hydraulis
