#include "hydraulis/data/document_length.h"

namespace hydraulis {

std::string DocumentTooLongMessage(std::int64_t tokens) {
  return DocumentTooLongMessage(std::to_string(tokens));
}

std::string DocumentTooLongMessage(const std::string& shown) {
  return "a length must be at most " + std::to_string(kMaxDocumentTokens) + " tokens (2^32), got " +
         shown;
}

}  // namespace hydraulis
