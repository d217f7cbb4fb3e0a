#include "hydraulis/data/document_length.h"

namespace hydraulis {

std::string DocumentTooLongMessage(std::int64_t tokens) {
  return "a length must be at most " + std::to_string(kMaxDocumentTokens) + " tokens (2^32), got " +
         std::to_string(tokens);
}

}  // namespace hydraulis
