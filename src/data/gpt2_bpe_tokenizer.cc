#include "hydraulis/data/tokenizer.h"

#include <algorithm>
#include <cstddef>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>

#include "byte_level.h"
#include "gpt2_pretokenizer.h"
#include "hydraulis/base/error.h"
#include "hydraulis/base/file_io.h"
#include "hydraulis/base/internal/json_text.h"

namespace hydraulis {
namespace {

constexpr std::string_view kEndOfText = "<|endoftext|>";
constexpr std::string_view kVersionLine = "#version";
constexpr int kByteValues = 256;

}  // namespace

Gpt2BpeTokenizer::Gpt2BpeTokenizer(const std::string& vocab_json_path,
                                   const std::string& merges_txt_path)
    : Gpt2BpeTokenizer() {
  const std::string vocab = ReadFileText(vocab_json_path);  // named first when both are missing
  Load(vocab, vocab_json_path, ReadFileText(merges_txt_path), merges_txt_path);
}

Gpt2BpeTokenizer::Gpt2BpeTokenizer() : byte_symbols_(data_internal::ByteLevelSymbols()) {}

Gpt2BpeTokenizer Gpt2BpeTokenizer::Parse(const std::string& vocab_json,
                                         const std::string& vocab_json_path,
                                         const std::string& merges,
                                         const std::string& merges_txt_path) {
  Gpt2BpeTokenizer t;
  t.Load(vocab_json, vocab_json_path, merges, merges_txt_path);
  return t;
}

void Gpt2BpeTokenizer::Load(const std::string& vocab_json, const std::string& vocab_json_path,
                            const std::string& merges, const std::string& merges_txt_path) {
  // vocab.json: {"symbol": id, ...}.
  const nlohmann::json vocab = ParseJson(vocab_json, vocab_json_path);
  if (!vocab.is_object()) {
    throw InvalidInput(vocab_json_path + ": expected a JSON object of symbol -> id, got " +
                       std::string(vocab.type_name()));
  }
  std::unordered_map<std::int64_t, std::string> symbol_of_id;
  std::int64_t max_id = -1;
  for (const auto& [symbol, value] : vocab.items()) {
    const std::string where = vocab_json_path + ": key " + QuoteForMessage(symbol) + ": ";
    if (!value.is_number_integer() ||
        (value.is_number_unsigned() &&
         value.get<std::uint64_t>() >
             static_cast<std::uint64_t>(std::numeric_limits<std::int32_t>::max())) ||
        value.get<std::int64_t>() < 0) {
      throw InvalidInput(where + "the id must be an integer from 0 to 2^31 - 1, got " +
                         JsonForMessage(value));
    }
    const auto id = value.get<std::int64_t>();
    if (const auto [it, added] = symbol_of_id.emplace(id, symbol); !added) {
      throw InvalidInput(where + "id " + std::to_string(id) + " is also the id of " +
                         QuoteForMessage(it->second));
    }
    ids_.emplace(symbol, id);
    max_id = std::max(max_id, id);
  }
  for (int b = 0; b < kByteValues; ++b) {
    if (!ids_.contains(byte_symbols_[b])) {
      throw InvalidInput(vocab_json_path + ": key " + QuoteForMessage(byte_symbols_[b]) +
                         " (the symbol of byte " + std::to_string(b) +
                         ") is missing; a byte-level BPE vocabulary needs all 256 byte symbols");
    }
  }
  vocab_size_ = max_id + 1;
  if (const auto it = ids_.find(std::string(kEndOfText)); it != ids_.end()) eod_id_ = it->second;

  // merges.txt: "first second" per line, by rank.
  std::size_t pos = 0, line_no = 0;
  std::int64_t rank = 0;
  while (pos < merges.size()) {
    std::size_t end = merges.find('\n', pos);
    if (end == std::string::npos) end = merges.size();
    std::string_view line(merges.data() + pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty() || (line_no == 1 && line.starts_with(kVersionLine))) continue;
    const std::string where = merges_txt_path + ":" + std::to_string(line_no) + ": ";
    const std::size_t space = line.find(' ');
    if (space == 0 || space == std::string_view::npos || space + 1 == line.size() ||
        line.find(' ', space + 1) != std::string_view::npos) {
      throw InvalidInput(where + "expected two symbols separated by one space, got " +
                         QuoteForMessage(std::string(line)));
    }
    const std::string first(line.substr(0, space));
    const std::string second(line.substr(space + 1));
    for (const std::string& symbol : {first, second, first + second}) {
      if (!ids_.contains(symbol)) {
        throw InvalidInput(where + "merge " + QuoteForMessage(std::string(line)) + ": " +
                           QuoteForMessage(symbol) + " is not in " + vocab_json_path);
      }
    }
    // A repeated merge keeps its first (lowest) rank, as GPT-2's dictionary of ranks
    // would if built first-wins.
    merge_ranks_.emplace(std::string(line), rank++);
  }
}

std::vector<std::int64_t> Gpt2BpeTokenizer::Encode(std::string_view text) const {
  std::vector<std::int64_t> ids;
  for (std::string_view piece : data_internal::Gpt2PreTokenize(text)) EncodePiece(piece, ids);
  return ids;
}

void Gpt2BpeTokenizer::EncodePiece(std::string_view piece, std::vector<std::int64_t>& out) const {
  std::vector<std::string> symbols;
  symbols.reserve(piece.size());
  for (char c : piece) symbols.push_back(byte_symbols_[static_cast<unsigned char>(c)]);
  // Merge the lowest-ranked adjacent pair everywhere it occurs (left to right, without
  // overlap), until no adjacent pair is a merge: GPT-2's bpe(). Quadratic in the piece's
  // length, which pre-tokenisation keeps short for text.
  constexpr std::int64_t kNoMerge = std::numeric_limits<std::int64_t>::max();
  std::string key;
  while (symbols.size() > 1) {
    std::int64_t best = kNoMerge;
    std::string best_key;
    for (std::size_t i = 0; i + 1 < symbols.size(); ++i) {
      key.assign(symbols[i]).append(" ").append(symbols[i + 1]);
      if (const auto it = merge_ranks_.find(key); it != merge_ranks_.end() && it->second < best) {
        best = it->second;
        best_key = key;
      }
    }
    if (best == kNoMerge) break;
    std::vector<std::string> merged;
    merged.reserve(symbols.size());
    for (std::size_t i = 0; i < symbols.size(); ++i) {
      if (i + 1 < symbols.size()) {
        key.assign(symbols[i]).append(" ").append(symbols[i + 1]);
        if (key == best_key) {
          merged.push_back(symbols[i] + symbols[i + 1]);
          ++i;
          continue;
        }
      }
      merged.push_back(std::move(symbols[i]));
    }
    symbols = std::move(merged);
  }
  for (const std::string& symbol : symbols) {
    const auto it = ids_.find(symbol);
    // The constructor checked every byte symbol and every merge result.
    if (it == ids_.end())
      throw InternalError("Gpt2BpeTokenizer: no id for " + QuoteForMessage(symbol));
    out.push_back(it->second);
  }
}

}  // namespace hydraulis
