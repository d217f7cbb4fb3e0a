// Tokenizers that turn document text into token ids for training data (preprocess): the
// byte tokenizer the tiny model uses, and GPT-2's byte-level BPE from its released files.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace hydraulis {

// Text -> token ids in [0, vocab_size()). Encode is const and keeps no state, so one
// tokenizer may serve several threads.
class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // The ids of `text` (UTF-8; bytes that are not valid UTF-8 are encoded too, never
  // rejected). Empty text gives no ids.
  virtual std::vector<std::int64_t> Encode(std::string_view text) const = 0;

  // Number of ids; every id Encode returns is below it.
  virtual std::int64_t vocab_size() const = 0;

  // The end-of-document id that may be appended after each document, or nullopt when the
  // vocabulary has none.
  virtual std::optional<std::int64_t> eod_id() const = 0;
};

// One id per UTF-8 byte (id = byte value), vocabulary 256. There is deliberately no
// end-of-document id: the tiny model (configs/models/tiny.json) has exactly 256 ids, and
// the packed variable-length format keeps documents apart by their boundaries, so no
// separator token is needed.
class ByteTokenizer final : public Tokenizer {
 public:
  std::vector<std::int64_t> Encode(std::string_view text) const override;
  std::int64_t vocab_size() const override { return kVocabSize; }
  std::optional<std::int64_t> eod_id() const override { return std::nullopt; }

  static constexpr std::int64_t kVocabSize = 256;
};

// GPT-2's byte-level BPE, loaded from the released vocab.json (symbol -> id) and
// merges.txt (one "first second" merge per line, by rank; an optional "#version" first
// line). Text is split by GPT-2's pre-tokenisation pattern, each piece's bytes are mapped
// to printable symbols (bytes_to_unicode), and the lowest-ranked adjacent pair is merged
// until none is left. Special tokens are not recognised in the text ("<|endoftext|>" in a
// document is encoded as plain text, as Megatron-LM's GPT2BPETokenizer does); eod_id is
// the id of "<|endoftext|>" when vocab.json has it.
//
// Approximation: the pattern's \p{L} and \p{N} are exact for ASCII only. Any non-ASCII
// code point that Python's \s does not match is classified as a letter, so non-ASCII
// digits, punctuation and combining marks join the letters around them. Text whose
// non-ASCII characters are all letters or whitespace splits exactly as GPT-2 splits it.
class Gpt2BpeTokenizer final : public Tokenizer {
 public:
  // Loads and validates both files. InvalidInput naming the file and the key or line: not
  // a JSON object of non-negative integer ids, a duplicate id, one of the 256 byte symbols
  // missing, a merge line that is not two symbols separated by one space, a merge whose
  // parts or result are not in the vocabulary. vocab_size() is the largest id plus one.
  Gpt2BpeTokenizer(const std::string& vocab_json_path, const std::string& merges_txt_path);
  // The same from the files' texts; the paths only name them in messages.
  static Gpt2BpeTokenizer Parse(const std::string& vocab_json, const std::string& vocab_json_path,
                                const std::string& merges, const std::string& merges_txt_path);

  std::vector<std::int64_t> Encode(std::string_view text) const override;
  std::int64_t vocab_size() const override { return vocab_size_; }
  std::optional<std::int64_t> eod_id() const override { return eod_id_; }

 private:
  Gpt2BpeTokenizer();
  void Load(const std::string& vocab_json, const std::string& vocab_json_path,
            const std::string& merges, const std::string& merges_txt_path);
  // Appends the ids of one pre-tokenised piece.
  void EncodePiece(std::string_view piece, std::vector<std::int64_t>& out) const;

  std::unordered_map<std::string, std::int64_t> ids_;  // symbol -> id
  // "first second" -> rank (lower merges first). Symbols never contain a space (the byte
  // 0x20 maps to U+0120), so the joined key is unambiguous.
  std::unordered_map<std::string, std::int64_t> merge_ranks_;
  std::array<std::string, 256> byte_symbols_;  // byte -> its symbol (UTF-8)
  std::int64_t vocab_size_ = 0;
  std::optional<std::int64_t> eod_id_;
};

}  // namespace hydraulis
