#include "hydraulis/data/document_pieces.h"

#include <algorithm>

#include "hydraulis/base/error.h"

namespace hydraulis {

std::vector<DocumentPiece> MakeDocumentPieces(std::span<const std::int64_t> lengths,
                                              std::int64_t max_len, LongDocuments rule,
                                              std::string_view source) {
  if (max_len < 2) {
    throw InvalidInput("max-len must be >= 2 to split or train documents, got " +
                       std::to_string(max_len));
  }
  std::vector<DocumentPiece> pieces;
  pieces.reserve(lengths.size());
  std::int64_t longer = 0, first_longer = -1;
  for (std::size_t i = 0; i < lengths.size(); ++i) {
    const std::int64_t s = lengths[i];
    const auto d = static_cast<std::int64_t>(i);
    if (s < 1) {
      throw InvalidInput(std::string(source) + ": document " + std::to_string(i) + " has length " +
                         std::to_string(s) + "; lengths must be >= 1");
    }
    if (s > max_len) {
      if (first_longer < 0) first_longer = d;
      ++longer;
    }
    if (s <= max_len || rule != LongDocuments::kSplit) {
      pieces.push_back({d, 0, s});
      continue;
    }
    // Each piece after the first starts at its predecessor's last token, which it only
    // reads: the piece's targets are the tokens after it.
    const std::int64_t stride = max_len - 1;
    for (std::int64_t offset = 0; offset + 1 < s; offset += stride) {
      pieces.push_back({d, offset, std::min(max_len, s - offset)});
    }
  }
  if (rule == LongDocuments::kReject && longer > 0) {
    throw InvalidInput(
        std::string(source) + ": document " + std::to_string(first_longer) + " has " +
        std::to_string(lengths[static_cast<std::size_t>(first_longer)]) +
        " tokens, more than the context length " + std::to_string(max_len) + " (" +
        std::to_string(longer) +
        " such document(s)); --long-documents split trains them in pieces, truncate cuts them");
  }
  return pieces;
}

std::vector<std::int64_t> PieceTokens(std::vector<std::int64_t> document,
                                      const DocumentPiece& piece) {
  if (piece.offset < 0 || piece.length < 0 ||
      piece.offset + piece.length > static_cast<std::int64_t>(document.size())) {
    throw InternalError("PieceTokens: piece [" + std::to_string(piece.offset) + ", +" +
                        std::to_string(piece.length) + ") outside a document of " +
                        std::to_string(document.size()) + " tokens");
  }
  if (piece.offset == 0 && piece.length == static_cast<std::int64_t>(document.size())) {
    return document;
  }
  return {document.begin() + piece.offset, document.begin() + piece.offset + piece.length};
}

}  // namespace hydraulis
