#include "regex_splitter.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <array>

#include "hydraulis/base/error.h"

namespace hydraulis::data_internal {
namespace {

constexpr std::size_t kMaxJitStackBytes = std::size_t{64} << 20;

// Where the Unicode tables of Debian's PCRE2 (10.42: Unicode 14) and of the Oniguruma inside
// tokenizers (Unicode 16) disagree, per class escape: the code points only Oniguruma puts
// in the class, and those only PCRE2 puts in it. Found by testing every code point against
// both (gen/onig_class_differences.py): mostly what Unicode 15 and 16 added, and U+180E,
// which PCRE2 still counts as a space.
struct ClassDifference {
  std::string_view escape;  // after the backslash: "s", "d", "p{L}", ...
  std::string_view add;
  std::string_view remove;
};
constexpr ClassDifference kClassDifferences[] = {
#include "onig_class_differences.inc"
};

const ClassDifference* DifferenceOf(std::string_view escape) {
  for (const ClassDifference& d : kClassDifferences) {
    if (d.escape == escape) return &d;
  }
  return nullptr;
}

// The escape starting at pattern[i] (a backslash): its whole text, so that \x{...},
// \p{...} and \Q...\E are copied or recognised as one unit.
std::string_view EscapeAt(std::string_view pattern, std::size_t i) {
  if (i + 1 >= pattern.size()) return pattern.substr(i);
  const char c = pattern[i + 1];
  if (c == 'Q') {
    const std::size_t end = pattern.find("\\E", i + 2);
    return pattern.substr(i, end == std::string_view::npos ? std::string_view::npos : end + 2 - i);
  }
  if ((c == 'p' || c == 'P' || c == 'x' || c == 'o' || c == 'g' || c == 'k') &&
      i + 2 < pattern.size() && pattern[i + 2] == '{') {
    const std::size_t end = pattern.find('}', i + 3);
    return pattern.substr(i, end == std::string_view::npos ? std::string_view::npos : end + 1 - i);
  }
  return pattern.substr(i, 2);
}

// The bracket class starting at pattern[i] ('['): its whole text, nested POSIX classes
// ([:alpha:]) and escapes included; a ']' right after '[' or '[^' is a literal.
std::string_view ClassAt(std::string_view pattern, std::size_t i) {
  std::size_t j = i + 1;
  if (j < pattern.size() && pattern[j] == '^') ++j;
  if (j < pattern.size() && pattern[j] == ']') ++j;
  while (j < pattern.size() && pattern[j] != ']') {
    if (pattern[j] == '\\') {
      j += EscapeAt(pattern, j).size();
    } else if (pattern[j] == '[' && j + 1 < pattern.size() && pattern[j + 1] == ':') {
      const std::size_t end = pattern.find(":]", j + 2);
      j = end == std::string_view::npos ? pattern.size() : end + 2;
    } else {
      ++j;
    }
  }
  return pattern.substr(i, j < pattern.size() ? j + 1 - i : std::string_view::npos);
}

[[noreturn]] void RefuseEscape(const std::string& where, std::string_view escape,
                               std::string_view why) {
  // A \p{...} escape may hold anything; quote it unless it is printable ASCII.
  const bool printable = std::all_of(escape.begin(), escape.end(), [](char c) {
    return static_cast<unsigned char>(c) >= 0x20 && static_cast<unsigned char>(c) < 0x7f;
  });
  throw InvalidInput(where + ": the pattern uses " +
                     (printable ? std::string(escape) : QuoteForMessage(escape)) + ", " +
                     std::string(why) +
                     "; hydraulis refuses it rather than split text differently from tokenizers "
                     "(docs/runtime.md, \"Hugging Face tokenizers\")");
}

// The class escape `e` (\\s, \\D, \\p{L}, \\P{N}, ...) as its positive form's table entry, and
// whether it is negated; nullptr for an escape that is not a class.
const ClassDifference* ClassEscape(std::string_view e, bool& negated, const std::string& where) {
  if (e.size() < 2) return nullptr;
  const char c = e[1];
  negated = c == 'S' || c == 'D' || c == 'P';
  if (c == 's' || c == 'S' || c == 'd' || c == 'D') {
    return DifferenceOf(std::string(1, static_cast<char>(c | 0x20)));
  }
  if (c == 'w' || c == 'W' || c == 'b' || c == 'B') {
    RefuseEscape(where, e,
                 "whose Unicode meaning PCRE2 and tokenizers' Oniguruma define differently");
  }
  if (c == 'h' || c == 'H') {
    RefuseEscape(where, e, "a hexadecimal digit to Oniguruma but horizontal space to PCRE2");
  }
  if (c != 'p' && c != 'P') return nullptr;
  const std::string positive = "p" + std::string(e.substr(2));
  const ClassDifference* d = DifferenceOf(positive);
  if (d == nullptr) {
    RefuseEscape(where, e,
                 "a property whose tables were not compared with tokenizers' (only \\s, \\d and "
                 "the general categories \\p{L}, \\p{Lu}, ... are)");
  }
  return d;
}

std::string Bracketed(std::string_view ranges) { return "[" + std::string(ranges) + "]"; }

// `pattern` rewritten so that PCRE2 classifies characters as tokenizers' Oniguruma does:
// each class escape gains the code points only Oniguruma has in it and loses those only
// PCRE2 has (a bracket class holding such an escape becomes a group around it). Escapes
// whose meaning differs beyond the tables (\\w, \\b, \\h, properties not compared, a
// negated class escape or POSIX class inside brackets) are refused: InvalidInput naming
// `where`.
std::string OnigCompatiblePattern(std::string_view pattern, const std::string& where) {
  std::string out;
  for (std::size_t i = 0; i < pattern.size();) {
    if (pattern[i] == '\\') {
      const std::string_view e = EscapeAt(pattern, i);
      i += e.size();
      bool negated = false;
      const ClassDifference* d = ClassEscape(e, negated, where);
      if (d == nullptr || (d->add.empty() && d->remove.empty())) {
        out += e;
        continue;
      }
      const std::string positive =
          "\\" + std::string(1, static_cast<char>(e[1] | 0x20)) + std::string(e.substr(2));
      if (!negated) {
        const std::string with_added =
            d->add.empty() ? positive : "[" + positive + std::string(d->add) + "]";
        out += d->remove.empty() ? with_added
                                 : "(?:(?!" + Bracketed(d->remove) + ")" + with_added + ")";
      } else {
        const std::string without = "[^" + positive + std::string(d->add) + "]";
        out += d->remove.empty() ? without : "(?:" + Bracketed(d->remove) + "|" + without + ")";
      }
    } else if (pattern[i] == '[') {
      const std::string_view c = ClassAt(pattern, i);
      i += c.size();
      const bool negated = c.size() > 1 && c[1] == '^';
      std::string body, removed;
      for (std::size_t j = negated ? 2 : 1; j < c.size();) {
        if (c[j] == '\\') {
          const std::string_view e = EscapeAt(c, j);
          j += e.size();
          bool negated_escape = false;
          const ClassDifference* d = ClassEscape(e, negated_escape, where);
          if (d != nullptr && negated_escape) {
            RefuseEscape(where, e, "negated inside a bracket class, which cannot be adapted");
          }
          body += e;
          if (d != nullptr) {
            body += d->add;
            removed += d->remove;
          }
        } else if (c[j] == '[' && j + 1 < c.size() && c[j + 1] == ':') {
          RefuseEscape(where, c.substr(j, c.find(":]", j) + 2 - j),
                       "a POSIX class whose Unicode meaning differs between the engines");
        } else {
          body += c[j++];
        }
      }
      const std::string cls = std::string(negated ? "[^" : "[") + body;  // body ends in ']'
      if (removed.empty()) {
        out += cls;
      } else if (negated) {
        out += "(?:" + Bracketed(removed) + "|" + cls + ")";
      } else {
        out += "(?:(?!" + Bracketed(removed) + ")" + cls + ")";
      }
    } else {
      out += pattern[i++];
    }
  }
  return out;
}

std::string Pcre2Message(int code) {
  std::array<PCRE2_UCHAR, 256> buffer{};
  if (pcre2_get_error_message(code, buffer.data(), buffer.size()) < 0) {
    return "PCRE2 error " + std::to_string(code);
  }
  return reinterpret_cast<const char*>(buffer.data());
}

// Length of the UTF-8 character starting at `text[at]`; 1 for a byte that does not start
// a valid sequence (such a byte never matches, so stepping over it alone is exact).
std::size_t CharLength(std::string_view text, std::size_t at) {
  const auto lead = static_cast<unsigned char>(text[at]);
  const std::size_t n = lead < 0x80           ? 1
                        : (lead >> 5) == 0x6  ? 2
                        : (lead >> 4) == 0xe  ? 3
                        : (lead >> 3) == 0x1e ? 4
                                              : 1;
  if (at + n > text.size()) return 1;
  for (std::size_t i = 1; i < n; ++i) {
    if ((static_cast<unsigned char>(text[at + i]) & 0xc0) != 0x80) return 1;
  }
  return n;
}

// A JIT stack for patterns whose matches outgrow the default 32 KiB (one per thread,
// made on first need).
pcre2_jit_stack* LargeJitStack() {
  struct Holder {
    pcre2_jit_stack* stack = nullptr;
    ~Holder() { pcre2_jit_stack_free(stack); }
  };
  thread_local Holder holder;
  if (holder.stack == nullptr) {
    holder.stack = pcre2_jit_stack_create(32 << 10, kMaxJitStackBytes, nullptr);
  }
  return holder.stack;
}

}  // namespace

struct RegexSplitter::Compiled {
  pcre2_code* code = nullptr;
  ~Compiled() { pcre2_code_free(code); }
};

RegexSplitter::RegexSplitter(std::string_view pattern, bool literal, const std::string& where)
    : compiled_(std::make_unique<Compiled>()), where_(where) {
  // PCRE2 refuses UCP beside LITERAL, where it would mean nothing anyway.
  const std::uint32_t options =
      PCRE2_UTF | PCRE2_MATCH_INVALID_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP);
  int error = 0;
  PCRE2_SIZE offset = 0;
  // Checked as written first, so that an error's position is the user's.
  compiled_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                  options, &error, &offset, nullptr);
  if (compiled_->code == nullptr) {
    throw InvalidInput(where + ": the pattern does not compile at byte " + std::to_string(offset) +
                       ": " + Pcre2Message(error));
  }
  if (!literal) {
    const std::string onig = OnigCompatiblePattern(pattern, where);
    pcre2_code_free(compiled_->code);
    compiled_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(onig.data()), onig.size(), options,
                                    &error, &offset, nullptr);
    if (compiled_->code == nullptr) {
      throw InvalidInput(where +
                         ": the pattern does not compile once adapted to Oniguruma's "
                         "character classes (at byte " +
                         std::to_string(offset) + "): " + Pcre2Message(error));
    }
  }
  // Without JIT (a platform PCRE2 lacks it for) matching is slower but the same.
  (void)pcre2_jit_compile(compiled_->code, PCRE2_JIT_COMPLETE);
}

RegexSplitter::~RegexSplitter() = default;
RegexSplitter::RegexSplitter(RegexSplitter&&) noexcept = default;
RegexSplitter& RegexSplitter::operator=(RegexSplitter&&) noexcept = default;

std::vector<TextMatch> RegexSplitter::Find(std::string_view text) const {
  std::vector<TextMatch> matches;
  struct MatchData {
    pcre2_match_data* data;
    ~MatchData() { pcre2_match_data_free(data); }
  } md{pcre2_match_data_create_from_pattern(compiled_->code, nullptr)};
  struct MatchContext {
    pcre2_match_context* context = nullptr;
    ~MatchContext() { pcre2_match_context_free(context); }
  } mc;
  if (md.data == nullptr) throw std::bad_alloc();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  std::size_t start = 0;
  bool matched_before = false;
  std::size_t last_match_end = 0;
  while (start <= text.size()) {
    int rc = pcre2_match(compiled_->code, subject, text.size(), start, 0, md.data, mc.context);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT && mc.context == nullptr) {
      mc.context = pcre2_match_context_create(nullptr);
      if (mc.context == nullptr) throw std::bad_alloc();
      pcre2_jit_stack_assign(mc.context, nullptr, LargeJitStack());
      rc = pcre2_match(compiled_->code, subject, text.size(), start, 0, md.data, mc.context);
    }
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      throw InvalidInput(where_ + ": matching a text of " + std::to_string(text.size()) +
                         " bytes failed at byte " + std::to_string(start) + ": " +
                         Pcre2Message(rc));
    }
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(md.data);
    const std::size_t begin = ovector[0], end = ovector[1];
    if (begin == end && matched_before && end == last_match_end) {
      if (start >= text.size()) break;
      start += CharLength(text, start);
      continue;
    }
    matches.push_back({begin, end});
    matched_before = true;
    last_match_end = end;
    start = end;
  }
  return matches;
}

}  // namespace hydraulis::data_internal
