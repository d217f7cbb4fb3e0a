#include "regex_splitter.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <array>

#include "hydraulis/base/error.h"

namespace hydraulis::data_internal {
namespace {

constexpr std::size_t kMaxJitStackBytes = std::size_t{64} << 20;

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
  std::size_t n = lead < 0x80 ? 1 : (lead >> 5) == 0x6 ? 2 : (lead >> 4) == 0xe ? 3
                                : (lead >> 3) == 0x1e ? 4 : 1;
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
  if (holder.stack == nullptr) holder.stack = pcre2_jit_stack_create(32 << 10, kMaxJitStackBytes, nullptr);
  return holder.stack;
}

}  // namespace

struct RegexSplitter::Compiled {
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Compiled() { pcre2_code_free(code); }
};

RegexSplitter::RegexSplitter(std::string_view pattern, bool literal, const std::string& where)
    : compiled_(std::make_unique<Compiled>()), where_(where) {
  const std::uint32_t options = PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF |
                                (literal ? PCRE2_LITERAL : 0);
  int error = 0;
  PCRE2_SIZE offset = 0;
  compiled_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                  options, &error, &offset, nullptr);
  if (compiled_->code == nullptr) {
    throw InvalidInput(where + ": the pattern does not compile at byte " + std::to_string(offset) +
                       ": " + Pcre2Message(error));
  }
  // Without JIT (a platform PCRE2 lacks it for) matching is slower but the same.
  compiled_->jit = pcre2_jit_compile(compiled_->code, PCRE2_JIT_COMPLETE) == 0;
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
