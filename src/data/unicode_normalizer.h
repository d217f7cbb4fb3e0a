// Unicode normalization forms for Hugging Face normalizers (internal to the data layer).
#pragma once

#include <string>
#include <string_view>

namespace hydraulis::data_internal {

enum class UnicodeForm { kNfc, kNfd, kNfkc, kNfkd };

// `text` in `form` (utf8proc). Text that is not valid UTF-8 is returned unchanged: it cannot
// come from a JSON document, and Tokenizer::Encode never rejects bytes.
std::string NormalizeUnicode(std::string_view text, UnicodeForm form);

}  // namespace hydraulis::data_internal
