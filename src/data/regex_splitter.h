// The pattern matching of Hugging Face pre-tokenizers (internal to the data layer): a
// regular expression with Unicode properties, compiled by PCRE2 with its JIT, iterated
// over a text the way tokenizers iterates its Oniguruma matches.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace hydraulis::data_internal {

// One match: bytes [begin, end) of the text.
struct TextMatch {
  std::size_t begin = 0;
  std::size_t end = 0;
};

// A compiled pattern. Thread-safe: Find keeps its state on the caller's stack.
class RegexSplitter {
 public:
  // `pattern` is a regular expression in the Perl/Oniguruma syntax tokenizers reads
  // (\p{L}, \p{N}, lookahead, (?i:...)), or with `literal` a plain string. \s and \d
  // follow Unicode (PCRE2_UCP). InvalidInput naming `where` when PCRE2 refuses it.
  RegexSplitter(std::string_view pattern, bool literal, const std::string& where);
  ~RegexSplitter();
  RegexSplitter(RegexSplitter&&) noexcept;
  RegexSplitter& operator=(RegexSplitter&&) noexcept;

  // Every match in `text`, left to right, as tokenizers' find_iter yields them: after a
  // match, the search resumes at its end, and an empty match right where the previous
  // match ended is skipped (the search then resumes one character further). Bytes that
  // are not UTF-8 never match. InvalidInput when a match needs more than the matcher's
  // stack (a pathological pattern on a long text).
  std::vector<TextMatch> Find(std::string_view text) const;

 private:
  struct Compiled;
  std::unique_ptr<Compiled> compiled_;
  std::string where_;
};

}  // namespace hydraulis::data_internal
