// What a training run samples: the dataset's documents, or stretches of them where a
// document is longer than the context (docs/runtime.md, "Long documents").
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "hydraulis/base/enum_names.h"

namespace hydraulis {

// How a run treats a document longer than its context length (`--long-documents`).
enum class LongDocuments {
  kSplit,     // trained in context-length pieces, every token once per epoch
  kTruncate,  // cut to the context length; the rest is not trained
  kReject,    // the run refuses the dataset
};

inline constexpr EnumNames<LongDocuments, 3> kLongDocumentsNames{{
    {LongDocuments::kSplit, "split"},
    {LongDocuments::kTruncate, "truncate"},
    {LongDocuments::kReject, "reject"},
}};

// One stretch of a dataset document that the run trains as a document of its own:
// tokens [offset, offset + length) of dataset document `document`.
struct DocumentPiece {
  std::int64_t document = 0;
  std::int64_t offset = 0;
  std::int64_t length = 0;
};

// The pieces of `lengths` (each >= 1) at context length `max_len` (>= 2), in dataset order.
// kSplit: a document of up to max_len tokens is one piece; a longer one is cut into pieces
// of max_len tokens that overlap by one token (starts 0, max_len - 1, 2 (max_len - 1), ...,
// the last piece what is left, at least 2 tokens), as Megatron's GPT samples of
// seq_length + 1 tokens do: every token after a document's first is a next-token target in
// exactly one piece. kTruncate and kReject: one piece per document, whole (the sampler cuts
// it to max_len under kTruncate). kReject: InvalidInput naming `source`, the first such
// document, its length and how many there are, when a document exceeds max_len.
std::vector<DocumentPiece> MakeDocumentPieces(std::span<const std::int64_t> lengths,
                                              std::int64_t max_len, LongDocuments rule,
                                              std::string_view source);

// The piece's tokens out of its whole document's.
std::vector<std::int64_t> PieceTokens(std::vector<std::int64_t> document,
                                      const DocumentPiece& piece);

}  // namespace hydraulis
