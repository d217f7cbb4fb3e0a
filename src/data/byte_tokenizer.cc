#include "hydraulis/data/tokenizer.h"

namespace hydraulis {

std::vector<std::int64_t> ByteTokenizer::Encode(std::string_view text) const {
  std::vector<std::int64_t> ids;
  ids.reserve(text.size());
  for (char c : text) ids.push_back(static_cast<unsigned char>(c));
  return ids;
}

}  // namespace hydraulis
