#include "gpt2_pretokenizer.h"

#include <cstddef>
#include <cstdint>

namespace hydraulis::data_internal {
namespace {

enum class CharClass { kLetter, kNumber, kSpace, kOther };

struct CodePoint {
  std::size_t begin = 0;  // byte offset in the text
  std::size_t bytes = 1;
  std::uint32_t value = 0;
  CharClass cls = CharClass::kOther;
};

// Python's str \s (what the `regex` module GPT-2 used matches): ASCII \t \n \v \f \r,
// the separators 0x1c-0x1f, space, and the Unicode White_Space characters.
bool IsPythonSpace(std::uint32_t c) {
  return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f ||
         c == 0x205f || c == 0x3000;
}

CharClass Classify(std::uint32_t c) {
  if (IsPythonSpace(c)) return CharClass::kSpace;
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return CharClass::kLetter;
  if (c >= '0' && c <= '9') return CharClass::kNumber;
  if (c < 0x80) return CharClass::kOther;
  return CharClass::kLetter;  // the documented approximation for non-ASCII
}

bool IsContinuation(unsigned char b) { return (b & 0xc0) == 0x80; }

// Decodes the code point at `at`; an invalid sequence yields its first byte alone.
CodePoint DecodeAt(std::string_view text, std::size_t at) {
  const auto lead = static_cast<unsigned char>(text[at]);
  CodePoint cp{at, 1, lead, CharClass::kLetter};
  std::size_t need = 0;
  std::uint32_t value = 0;
  if (lead < 0x80) {
    cp.cls = Classify(lead);
    return cp;
  } else if (lead >= 0xc2 && lead <= 0xdf) {
    need = 1;
    value = lead & 0x1fu;
  } else if (lead >= 0xe0 && lead <= 0xef) {
    need = 2;
    value = lead & 0x0fu;
  } else if (lead >= 0xf0 && lead <= 0xf4) {
    need = 3;
    value = lead & 0x07u;
  } else {
    return cp;
  }
  if (at + need >= text.size()) return cp;  // truncated at the end of the text
  for (std::size_t k = 1; k <= need; ++k) {
    const auto b = static_cast<unsigned char>(text[at + k]);
    if (!IsContinuation(b)) return cp;
    value = (value << 6) | (b & 0x3fu);
  }
  cp.bytes = need + 1;
  cp.value = value;
  cp.cls = Classify(value);
  return cp;
}

// The contraction ('s 't 're 've 'm 'll 'd, case-sensitive as in GPT-2) at byte `at`, as a
// byte count, or 0.
std::size_t ContractionAt(std::string_view text, std::size_t at) {
  if (text[at] != '\'') return 0;
  const std::string_view rest = text.substr(at + 1);
  for (std::string_view suffix : {"re", "ve", "ll"}) {
    if (rest.starts_with(suffix)) return 1 + suffix.size();
  }
  if (!rest.empty() && (rest[0] == 's' || rest[0] == 't' || rest[0] == 'm' || rest[0] == 'd')) {
    return 2;
  }
  return 0;
}

}  // namespace

std::vector<std::string_view> Gpt2PreTokenize(std::string_view text) {
  std::vector<CodePoint> cps;
  for (std::size_t at = 0; at < text.size();) {
    cps.push_back(DecodeAt(text, at));
    at += cps.back().bytes;
  }
  const std::size_t n = cps.size();
  auto byte_at = [&](std::size_t i) { return i < n ? cps[i].begin : text.size(); };
  // End (in code points) of the run of `cls` starting at i.
  auto run_end = [&](std::size_t i, CharClass cls) {
    while (i < n && cps[i].cls == cls) ++i;
    return i;
  };
  std::vector<std::string_view> pieces;
  std::size_t i = 0;
  while (i < n) {
    std::size_t end = i;
    if (const std::size_t c = ContractionAt(text, cps[i].begin); c > 0) {
      end = i + c;  // contractions are ASCII: one code point per byte
    } else {
      // ` ?\p{L}+`, ` ?\p{N}+`, ` ?[^\s\p{L}\p{N}]+`: an optional ASCII space, then a run
      // of one class (the space only when a run follows; else these fail at a space).
      const std::size_t head = (cps[i].value == ' ' && i + 1 < n) ? i + 1 : i;
      if (cps[head].cls != CharClass::kSpace) {
        end = run_end(head, cps[head].cls);
      } else {
        // `\s+(?!\S)` takes the whitespace run but leaves its last character when a
        // non-space follows (that character then prefixes the next piece); `\s+` takes a
        // lone whitespace character before a non-space.
        const std::size_t run = run_end(i, CharClass::kSpace);
        end = (run < n && run - i >= 2) ? run - 1 : run;
      }
    }
    pieces.push_back(text.substr(byte_at(i), byte_at(end) - byte_at(i)));
    i = end;
  }
  return pieces;
}

}  // namespace hydraulis::data_internal
