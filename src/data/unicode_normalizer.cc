#include "unicode_normalizer.h"

#include <utf8proc.h>

#include <cstdlib>
#include <new>

namespace hydraulis::data_internal {

std::string NormalizeUnicode(std::string_view text, UnicodeForm form) {
  int options = UTF8PROC_STABLE;
  switch (form) {
    case UnicodeForm::kNfc:
      options |= UTF8PROC_COMPOSE;
      break;
    case UnicodeForm::kNfd:
      options |= UTF8PROC_DECOMPOSE;
      break;
    case UnicodeForm::kNfkc:
      options |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT;
      break;
    case UnicodeForm::kNfkd:
      options |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT;
      break;
  }
  utf8proc_uint8_t* out = nullptr;
  const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                                          static_cast<utf8proc_ssize_t>(text.size()), &out,
                                          static_cast<utf8proc_option_t>(options));
  if (n == UTF8PROC_ERROR_NOMEM) throw std::bad_alloc();
  if (n < 0) return std::string(text);
  std::string result(reinterpret_cast<const char*>(out), static_cast<std::size_t>(n));
  std::free(out);
  return result;
}

}  // namespace hydraulis::data_internal
