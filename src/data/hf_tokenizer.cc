#include "hydraulis/data/hf_tokenizer.h"

#include <algorithm>
#include <array>
#include <deque>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <unordered_map>
#include <utility>

#include "added_token_matcher.h"
#include "bpe_merges.h"
#include "byte_level.h"
#include "hydraulis/base/error.h"
#include "hydraulis/base/file_io.h"
#include "hydraulis/base/internal/json_text.h"
#include "regex_splitter.h"
#include "unicode_normalizer.h"

namespace hydraulis {
namespace {

using data_internal::AddedTokenMatcher;
using data_internal::BpeMerges;
using data_internal::RegexSplitter;
using data_internal::TextMatch;
using data_internal::UnicodeForm;
using nlohmann::json;

// The pattern tokenizers' ByteLevel pre-tokenizer splits by when use_regex is on (GPT-2's).
constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

// One Split pre-tokenizer step.
struct SplitStep {
  RegexSplitter regex;
  SplitBehavior behavior;
  bool invert;
};

// A field path inside tokenizer.json, for messages: "FILE: model.merges[3]".
class Where {
 public:
  Where(std::string file, std::string path) : file_(std::move(file)), path_(std::move(path)) {}
  Where operator/(std::string_view key) const {
    return {file_, path_.empty() ? std::string(key) : path_ + "." + std::string(key)};
  }
  Where operator[](std::size_t index) const {
    return {file_, path_ + "[" + std::to_string(index) + "]"};
  }
  std::string str() const { return path_.empty() ? file_ : file_ + ": " + path_; }
  [[noreturn]] void Fail(const std::string& what) const { throw InvalidInput(str() + ": " + what); }

 private:
  std::string file_;
  std::string path_;
};

const json* Find(const json& object, std::string_view key) {
  const auto it = object.find(key);
  return it == object.end() ? nullptr : &*it;
}

const json& Require(const json& object, std::string_view key, const Where& where) {
  const json* value = Find(object, key);
  if (value == nullptr) where.Fail("missing field '" + std::string(key) + "'");
  return *value;
}

const json& RequireObject(const json& value, const Where& where) {
  if (!value.is_object()) where.Fail("expected a JSON object, got " + JsonForMessage(value));
  return value;
}

const json& RequireArray(const json& value, const Where& where) {
  if (!value.is_array()) where.Fail("expected a JSON array, got " + JsonForMessage(value));
  return value;
}

const std::string& RequireString(const json& value, const Where& where) {
  if (!value.is_string()) where.Fail("expected a string, got " + JsonForMessage(value));
  return value.get_ref<const std::string&>();
}

bool BoolOr(const json& object, std::string_view key, bool fallback, const Where& where) {
  const json* value = Find(object, key);
  if (value == nullptr || value->is_null()) return fallback;
  if (!value->is_boolean())
    (where / key).Fail("expected true or false, got " + JsonForMessage(*value));
  return value->get<bool>();
}

std::int32_t RequireId(const json& value, const Where& where) {
  if (!value.is_number_integer() ||
      (value.is_number_unsigned()
           ? value.get<std::uint64_t>() > 0x7fffffffu
           : value.get<std::int64_t>() < 0 || value.get<std::int64_t>() > 0x7fffffff)) {
    where.Fail("an id must be an integer from 0 to 2^31 - 1, got " + JsonForMessage(value));
  }
  return static_cast<std::int32_t>(value.get<std::int64_t>());
}

const std::string& TypeOf(const json& object, const Where& where) {
  RequireObject(object, where);
  return RequireString(Require(object, "type", where), where / "type");
}

[[noreturn]] void Unsupported(const Where& where, const std::string& type,
                              const std::string& supported) {
  where.Fail("type " + QuoteForMessage(type) + " is not supported (supported: " + supported +
             "); hydraulis reads byte-level BPE tokenizers only");
}

// The byte each byte-level symbol stands for: inverse of ByteLevelSymbols, by code point.
// Symbols are U+0021..U+0143; -1 marks code points that are not symbols.
std::array<int, 0x144> ByteOfSymbol() {
  std::array<int, 0x144> byte_of;
  byte_of.fill(-1);
  const auto symbols = data_internal::ByteLevelSymbols();
  for (int b = 0; b < 256; ++b) {
    const std::string& s = symbols[static_cast<std::size_t>(b)];
    const auto c0 = static_cast<unsigned char>(s[0]);
    const std::uint32_t cp =
        s.size() == 1 ? c0 : ((c0 & 0x1fu) << 6) | (static_cast<unsigned char>(s[1]) & 0x3fu);
    byte_of[cp] = b;
  }
  return byte_of;
}

// The bytes a vocabulary entry stands for, or nullopt when some character of it is not a
// byte-level symbol (such an entry can never come out of a byte-level word).
std::optional<std::string> SymbolBytes(std::string_view symbol) {
  static const std::array<int, 0x144> byte_of = ByteOfSymbol();
  std::string bytes;
  for (std::size_t i = 0; i < symbol.size();) {
    const auto c0 = static_cast<unsigned char>(symbol[i]);
    std::uint32_t cp = 0;
    if (c0 < 0x80) {
      cp = c0;
      i += 1;
    } else if ((c0 >> 5) == 0x6 && i + 1 < symbol.size()) {
      cp = ((c0 & 0x1fu) << 6) | (static_cast<unsigned char>(symbol[i + 1]) & 0x3fu);
      i += 2;
    } else {
      return std::nullopt;
    }
    if (cp >= byte_of.size() || byte_of[cp] < 0) return std::nullopt;
    bytes += static_cast<char>(byte_of[cp]);
  }
  return bytes;
}

// Appends the pieces of `text` that a Split step keeps, as tokenizers' NormalizedString::split
// computes them from the matches; empty pieces are dropped, as PreTokenizedString does.
void ApplySplit(const SplitStep& step, std::string_view text, std::vector<std::string_view>& out) {
  if (text.empty()) return;
  struct Span {
    std::size_t begin, end;
    bool is_match;
  };
  std::vector<Span> spans;
  std::size_t prev = 0;
  for (const TextMatch& m : step.regex.Find(text)) {
    if (prev != m.begin) spans.push_back({prev, m.begin, false});
    spans.push_back({m.begin, m.end, true});
    prev = m.end;
  }
  if (prev != text.size()) spans.push_back({prev, text.size(), false});
  if (step.invert) {
    for (Span& s : spans) s.is_match = !s.is_match;
  }
  std::vector<Span> pieces;  // is_match now means "remove"
  switch (step.behavior) {
    case SplitBehavior::kRemoved:
      pieces = spans;
      break;
    case SplitBehavior::kIsolated:
      for (const Span& s : spans) pieces.push_back({s.begin, s.end, false});
      break;
    case SplitBehavior::kContiguous:
    case SplitBehavior::kMergedWithPrevious: {
      // Contiguous joins a span to the one before when both match or both do not;
      // MergedWithPrevious joins a match to the non-match before it.
      const bool contiguous = step.behavior == SplitBehavior::kContiguous;
      bool previous_match = false;
      for (const Span& s : spans) {
        const bool join = contiguous ? s.is_match == previous_match : s.is_match && !previous_match;
        if (join && !pieces.empty()) {
          pieces.back().end = s.end;
        } else {
          pieces.push_back({s.begin, s.end, false});
        }
        previous_match = s.is_match;
      }
      break;
    }
    case SplitBehavior::kMergedWithNext: {
      bool previous_match = false;
      for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
        if (it->is_match && !previous_match && !pieces.empty()) {
          pieces.back().begin = it->begin;
        } else {
          pieces.push_back({it->begin, it->end, false});
        }
        previous_match = it->is_match;
      }
      std::reverse(pieces.begin(), pieces.end());
      break;
    }
  }
  for (const Span& p : pieces) {
    if (!p.is_match && p.end > p.begin) out.push_back(text.substr(p.begin, p.end - p.begin));
  }
}

}  // namespace

struct data_internal::HfPipeline {
  std::vector<UnicodeForm> normalizers;
  AddedTokenMatcher raw_added;         // added tokens matched before normalization
  AddedTokenMatcher normalized_added;  // ... and after it
  std::vector<SplitStep> splits;
  bool add_prefix_space = false;
  std::optional<RegexSplitter> byte_level_regex;
  std::array<std::int32_t, 256> byte_ids{};
  std::unordered_map<std::string, std::int32_t> bytes_vocab;  // entries by the bytes they stand for
  BpeMerges merges;
  bool ignore_merges = false;
  std::vector<std::int64_t> prefix_ids, suffix_ids;  // the post-processor's template
  std::unordered_map<std::string, std::int64_t> token_ids;
  std::int64_t vocab_size = 0;
  std::optional<std::int64_t> eod_id;

  std::string Normalize(std::string_view text) const {
    std::string s(text);
    for (UnicodeForm form : normalizers) s = data_internal::NormalizeUnicode(s, form);
    return s;
  }

  // Pre-tokenizes and merges one run of normalized text between added tokens.
  void EncodeRun(std::string_view text, std::vector<std::int64_t>& out) const {
    std::vector<std::string_view> pieces{text}, next;
    for (const SplitStep& step : splits) {
      next.clear();
      for (std::string_view p : pieces) ApplySplit(step, p, next);
      pieces.swap(next);
    }
    std::deque<std::string> prefixed;  // owns pieces that got a space in front
    next.clear();
    for (std::string_view p : pieces) {
      if (add_prefix_space && !p.starts_with(' ')) p = prefixed.emplace_back(" " + std::string(p));
      if (byte_level_regex) {
        // Isolated: the matches and the gaps between them are all pieces.
        std::size_t prev = 0;
        for (const TextMatch& m : byte_level_regex->Find(p)) {
          if (prev < m.begin) next.push_back(p.substr(prev, m.begin - prev));
          if (m.end > m.begin) next.push_back(p.substr(m.begin, m.end - m.begin));
          prev = m.end;
        }
        if (prev < p.size()) next.push_back(p.substr(prev));
      } else if (!p.empty()) {
        next.push_back(p);
      }
    }
    std::vector<std::int32_t> word;
    for (std::string_view piece : next) {
      if (ignore_merges) {
        if (const auto it = bytes_vocab.find(std::string(piece)); it != bytes_vocab.end()) {
          out.push_back(it->second);
          continue;
        }
      }
      word.clear();
      for (char c : piece) word.push_back(byte_ids[static_cast<unsigned char>(c)]);
      merges.MergeWord(word);
      out.insert(out.end(), word.begin(), word.end());
    }
  }
};

namespace {

std::vector<UnicodeForm> ParseNormalizer(const json& value, const Where& where) {
  if (value.is_null()) return {};
  const std::string& type = TypeOf(value, where);
  static const std::unordered_map<std::string, UnicodeForm> kForms = {{"NFC", UnicodeForm::kNfc},
                                                                      {"NFD", UnicodeForm::kNfd},
                                                                      {"NFKC", UnicodeForm::kNfkc},
                                                                      {"NFKD", UnicodeForm::kNfkd}};
  if (const auto it = kForms.find(type); it != kForms.end()) return {it->second};
  if (type == "Sequence") {
    const Where list = where / "normalizers";
    const json& items = RequireArray(Require(value, "normalizers", where), list);
    std::vector<UnicodeForm> forms;
    for (std::size_t i = 0; i < items.size(); ++i) {
      const Where item = list[i];
      const std::string& t = TypeOf(items[i], item);
      const auto it = kForms.find(t);
      if (it == kForms.end()) Unsupported(item / "type", t, "NFC, NFD, NFKC, NFKD");
      forms.push_back(it->second);
    }
    return forms;
  }
  Unsupported(where / "type", type, "null, NFC, NFD, NFKC, NFKD, Sequence");
}

SplitStep ParseSplit(const json& value, const Where& where) {
  const Where pattern_where = where / "pattern";
  const json& pattern = RequireObject(Require(value, "pattern", where), pattern_where);
  const json* regex = Find(pattern, "Regex");
  const json* literal = Find(pattern, "String");
  if ((regex == nullptr) == (literal == nullptr) || pattern.size() != 1) {
    pattern_where.Fail("expected {\"Regex\": PATTERN} or {\"String\": TEXT}");
  }
  const Where text_where = pattern_where / (regex != nullptr ? "Regex" : "String");
  const std::string& text = RequireString(regex != nullptr ? *regex : *literal, text_where);
  if (text.empty()) text_where.Fail("the pattern is empty");
  static const std::unordered_map<std::string, SplitBehavior> kBehaviors = {
      {"Removed", SplitBehavior::kRemoved},
      {"Isolated", SplitBehavior::kIsolated},
      {"MergedWithPrevious", SplitBehavior::kMergedWithPrevious},
      {"MergedWithNext", SplitBehavior::kMergedWithNext},
      {"Contiguous", SplitBehavior::kContiguous}};
  const Where behavior_where = where / "behavior";
  const std::string& behavior = RequireString(Require(value, "behavior", where), behavior_where);
  const auto it = kBehaviors.find(behavior);
  if (it == kBehaviors.end()) {
    behavior_where.Fail("unknown behavior " + QuoteForMessage(behavior) +
                        " (Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous)");
  }
  return SplitStep{RegexSplitter(text, literal != nullptr, text_where.str()), it->second,
                   BoolOr(value, "invert", false, where)};
}

void ParseByteLevel(const json& value, const Where& where, data_internal::HfPipeline& p) {
  const json& add = Require(value, "add_prefix_space", where);
  if (!add.is_boolean()) (where / "add_prefix_space").Fail("expected true or false");
  p.add_prefix_space = add.get<bool>();
  if (BoolOr(value, "use_regex", true, where)) {
    p.byte_level_regex.emplace(kGpt2Pattern, false, (where / "use_regex").str());
  }
}

void ParsePreTokenizer(const json& value, const Where& where, data_internal::HfPipeline& p) {
  if (value.is_null()) {
    where.Fail("is null; a byte-level BPE tokenizer needs a ByteLevel pre-tokenizer");
  }
  const std::string& type = TypeOf(value, where);
  if (type == "ByteLevel") return ParseByteLevel(value, where, p);
  if (type != "Sequence")
    Unsupported(where / "type", type, "ByteLevel, Sequence of Split and ByteLevel");
  const Where list = where / "pretokenizers";
  const json& steps = RequireArray(Require(value, "pretokenizers", where), list);
  if (steps.empty()) list.Fail("is empty; it must end with a ByteLevel step");
  for (std::size_t i = 0; i < steps.size(); ++i) {
    const Where step = list[i];
    const std::string& t = TypeOf(steps[i], step);
    const bool last = i + 1 == steps.size();
    if (t == "Split" && !last) {
      p.splits.push_back(ParseSplit(steps[i], step));
    } else if (t == "ByteLevel" && last) {
      ParseByteLevel(steps[i], step, p);
    } else if (t == "Split" || t == "ByteLevel") {
      (step / "type").Fail("the sequence must be Split steps then one ByteLevel step, last");
    } else {
      Unsupported(step / "type", t, "Split, ByteLevel");
    }
  }
}

void ParseModel(const json& value, const Where& where, data_internal::HfPipeline& p) {
  const std::string& type = TypeOf(value, where);
  if (type != "BPE") Unsupported(where / "type", type, "BPE");
  if (const json* d = Find(value, "dropout");
      d != nullptr && !d->is_null() && !(d->is_number() && d->get<double>() == 0.0)) {
    (where / "dropout")
        .Fail("dropout is not supported (it makes tokenization random); got " + JsonForMessage(*d));
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (const json* v = Find(value, key);
        v != nullptr && !v->is_null() &&
        !(v->is_string() && v->get_ref<const std::string&>().empty())) {
      (where / key).Fail("is not supported by byte-level BPE; got " + JsonForMessage(*v));
    }
  }
  p.ignore_merges = BoolOr(value, "ignore_merges", false, where);

  const Where vocab_where = where / "vocab";
  const json& vocab = RequireObject(Require(value, "vocab", where), vocab_where);
  std::unordered_map<std::string, std::int32_t> ids;
  std::unordered_map<std::int32_t, const std::string*> symbol_of_id;
  for (const auto& [symbol, id_value] : vocab.items()) {
    const Where entry = vocab_where / QuoteForMessage(symbol);
    const std::int32_t id = RequireId(id_value, entry);
    const auto [it, added] = ids.emplace(symbol, id);
    if (const auto [other, fresh] = symbol_of_id.emplace(id, &it->first); !fresh) {
      entry.Fail("id " + std::to_string(id) + " is also the id of " +
                 QuoteForMessage(*other->second));
    }
    p.vocab_size = std::max<std::int64_t>(p.vocab_size, std::int64_t{id} + 1);
    p.token_ids.emplace(symbol, id);
    if (auto bytes = SymbolBytes(symbol)) p.bytes_vocab.emplace(std::move(*bytes), id);
  }
  const auto symbols = data_internal::ByteLevelSymbols();
  for (int b = 0; b < 256; ++b) {
    const auto it = ids.find(symbols[static_cast<std::size_t>(b)]);
    if (it == ids.end()) {
      vocab_where.Fail("the symbol " + QuoteForMessage(symbols[static_cast<std::size_t>(b)]) +
                       " of byte " + std::to_string(b) +
                       " is missing; a byte-level BPE vocabulary needs all 256 byte symbols");
    }
    p.byte_ids[static_cast<std::size_t>(b)] = it->second;
  }

  const Where merges_where = where / "merges";
  const json& merges = RequireArray(Require(value, "merges", where), merges_where);
  std::uint32_t rank = 0;
  for (std::size_t i = 0; i < merges.size(); ++i) {
    const Where m = merges_where[i];
    std::string first, second;
    if (merges[i].is_string()) {
      const std::string& line = merges[i].get_ref<const std::string&>();
      if (line.starts_with("#version")) continue;  // not a merge, and not ranked
      const std::size_t space = line.find(' ');
      if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos) {
        m.Fail("expected \"FIRST SECOND\" (two symbols, one space), got " + QuoteForMessage(line));
      }
      first = line.substr(0, space);
      second = line.substr(space + 1);
    } else if (merges[i].is_array() && merges[i].size() == 2 && merges[i][0].is_string() &&
               merges[i][1].is_string()) {
      first = merges[i][0].get<std::string>();
      second = merges[i][1].get<std::string>();
    } else {
      m.Fail("expected \"FIRST SECOND\" or [FIRST, SECOND], got " + JsonForMessage(merges[i]));
    }
    std::array<std::int32_t, 3> parts{};
    const std::array<std::string, 3> names = {first, second, first + second};
    for (std::size_t k = 0; k < 3; ++k) {
      const auto it = ids.find(names[k]);
      if (it == ids.end()) m.Fail(QuoteForMessage(names[k]) + " is not in model.vocab");
      parts[k] = it->second;
    }
    p.merges.Add(parts[0], parts[1], rank++, parts[2]);
  }
}

void ParseAddedTokens(const json& value, const Where& where, data_internal::HfPipeline& p) {
  if (value.is_null()) return;
  RequireArray(value, where);
  for (std::size_t i = 0; i < value.size(); ++i) {
    const Where t = where[i];
    RequireObject(value[i], t);
    const std::int32_t id = RequireId(Require(value[i], "id", t), t / "id");
    const std::string& content = RequireString(Require(value[i], "content", t), t / "content");
    if (content.empty()) (t / "content").Fail("an added token cannot be empty");
    for (const char* key : {"lstrip", "rstrip", "single_word"}) {
      if (BoolOr(value[i], key, false, t)) {
        (t / key).Fail("is true for " + QuoteForMessage(content) + "; not supported");
      }
    }
    if (BoolOr(value[i], "normalized", true, t)) {
      p.normalized_added.Add(p.Normalize(content), id);
    } else {
      p.raw_added.Add(content, id);
    }
    p.token_ids[content] = id;
    p.vocab_size = std::max<std::int64_t>(p.vocab_size, std::int64_t{id} + 1);
  }
}

// The ids a template's SpecialToken item stands for.
std::vector<std::int64_t> TemplateTokenIds(const json& processor, const std::string& name,
                                           const Where& where) {
  const Where table_where = where / "special_tokens";
  const json& table = RequireObject(Require(processor, "special_tokens", where), table_where);
  const json* entry = Find(table, name);
  if (entry == nullptr)
    table_where.Fail("no entry for the template's token " + QuoteForMessage(name));
  const Where entry_where = table_where / QuoteForMessage(name);
  const json& ids = RequireArray(Require(RequireObject(*entry, entry_where), "ids", entry_where),
                                 entry_where / "ids");
  std::vector<std::int64_t> out;
  for (std::size_t i = 0; i < ids.size(); ++i)
    out.push_back(RequireId(ids[i], (entry_where / "ids")[i]));
  return out;
}

void ParseTemplate(const json& processor, const Where& where, data_internal::HfPipeline& p) {
  if (!p.prefix_ids.empty() || !p.suffix_ids.empty()) {
    where.Fail("a second TemplateProcessing would add its tokens twice; not supported");
  }
  const Where single_where = where / "single";
  const json& single = RequireArray(Require(processor, "single", where), single_where);
  bool seen_sequence = false;
  for (std::size_t i = 0; i < single.size(); ++i) {
    const Where item = single_where[i];
    RequireObject(single[i], item);
    if (const json* special = Find(single[i], "SpecialToken"); special != nullptr) {
      const Where s = item / "SpecialToken";
      const std::string& name =
          RequireString(Require(RequireObject(*special, s), "id", s), s / "id");
      const auto ids = TemplateTokenIds(processor, name, where);
      auto& target = seen_sequence ? p.suffix_ids : p.prefix_ids;
      target.insert(target.end(), ids.begin(), ids.end());
    } else if (const json* sequence = Find(single[i], "Sequence"); sequence != nullptr) {
      const Where s = item / "Sequence";
      const std::string& id =
          RequireString(Require(RequireObject(*sequence, s), "id", s), s / "id");
      if (id != "A" || seen_sequence)
        (s / "id").Fail("the single template must hold sequence A once");
      seen_sequence = true;
    } else {
      item.Fail("expected {\"SpecialToken\": ...} or {\"Sequence\": ...}");
    }
  }
  if (!seen_sequence) single_where.Fail("the template has no {\"Sequence\": {\"id\": \"A\"}}");
}

void ParsePostProcessor(const json& value, const Where& where, data_internal::HfPipeline& p) {
  if (value.is_null()) return;
  const std::string& type = TypeOf(value, where);
  if (type == "ByteLevel") return;  // offsets only; the ids are unchanged
  if (type == "TemplateProcessing") return ParseTemplate(value, where, p);
  if (type != "Sequence") {
    Unsupported(where / "type", type, "null, ByteLevel, TemplateProcessing, Sequence");
  }
  const Where list = where / "processors";
  const json& items = RequireArray(Require(value, "processors", where), list);
  for (std::size_t i = 0; i < items.size(); ++i) {
    const std::string& t = TypeOf(items[i], list[i]);
    if (t == "TemplateProcessing") {
      ParseTemplate(items[i], list[i], p);
    } else if (t != "ByteLevel") {
      Unsupported(list[i] / "type", t, "ByteLevel, TemplateProcessing");
    }
  }
}

}  // namespace

HfTokenizer::HfTokenizer(std::unique_ptr<const data_internal::HfPipeline> pipeline)
    : pipeline_(std::move(pipeline)) {}
HfTokenizer::~HfTokenizer() = default;
HfTokenizer::HfTokenizer(HfTokenizer&&) noexcept = default;
HfTokenizer& HfTokenizer::operator=(HfTokenizer&&) noexcept = default;

HfTokenizer HfTokenizer::Parse(std::string_view json_text, const std::string& path,
                               std::string_view eos_token) {
  const json root = ParseJson(json_text, path);
  const Where top(path, "");
  RequireObject(root, top);
  for (const char* key : {"truncation", "padding"}) {
    if (const json* v = Find(root, key); v != nullptr && !v->is_null()) {
      (top / key).Fail(
          "is set; hydraulis cuts documents to the context length itself and never pads, so "
          "set it to null (tokenizer.no_truncation(), no_padding())");
    }
  }
  auto p = std::make_unique<data_internal::HfPipeline>();
  if (const json* n = Find(root, "normalizer"))
    p->normalizers = ParseNormalizer(*n, top / "normalizer");
  ParsePreTokenizer(Require(root, "pre_tokenizer", top), top / "pre_tokenizer", *p);
  ParseModel(Require(root, "model", top), top / "model", *p);
  if (const json* a = Find(root, "added_tokens")) ParseAddedTokens(*a, top / "added_tokens", *p);
  if (const json* pp = Find(root, "post_processor")) {
    ParsePostProcessor(*pp, top / "post_processor", *p);
  }
  for (std::int64_t id : p->prefix_ids) {
    if (id >= p->vocab_size)
      (top / "post_processor")
          .Fail("template id " + std::to_string(id) + " is outside the vocabulary");
  }
  for (std::int64_t id : p->suffix_ids) {
    if (id >= p->vocab_size)
      (top / "post_processor")
          .Fail("template id " + std::to_string(id) + " is outside the vocabulary");
  }
  if (!eos_token.empty()) {
    const auto it = p->token_ids.find(std::string(eos_token));
    if (it == p->token_ids.end()) {
      top.Fail("the end-of-document token " + QuoteForMessage(eos_token) +
               " is neither an added token nor in model.vocab");
    }
    p->eod_id = it->second;
  }
  return HfTokenizer(std::move(p));
}

HfTokenizer HfTokenizer::Load(const std::string& path) {
  const std::string text = ReadFileText(path);
  std::string eos;
  const std::filesystem::path config =
      std::filesystem::path(path).parent_path() / "tokenizer_config.json";
  std::error_code ec;
  if (std::filesystem::is_regular_file(config, ec)) {
    const std::string config_path = config.string();
    const json c = ParseJson(ReadFileText(config_path), config_path);
    const Where where(config_path, "eos_token");
    if (!c.is_object()) Where(config_path, "").Fail("expected a JSON object");
    if (const json* e = Find(c, "eos_token"); e != nullptr && !e->is_null()) {
      eos = e->is_object() ? RequireString(Require(*e, "content", where), where / "content")
                           : RequireString(*e, where);
    }
  }
  try {
    return Parse(text, path, eos);
  } catch (const InvalidInput& e) {
    if (eos.empty() ||
        std::string_view(e.what()).find("end-of-document token") == std::string_view::npos)
      throw;
    throw InvalidInput(std::string(e.what()) + " (eos_token of " + config.string() + ")");
  }
}

std::vector<std::int64_t> HfTokenizer::Encode(std::string_view text) const {
  const data_internal::HfPipeline& p = *pipeline_;
  std::vector<std::int64_t> ids(p.prefix_ids);
  ids.reserve(text.size() / 3 + p.prefix_ids.size() + p.suffix_ids.size());
  auto encode_normalized = [&](std::string_view run) {
    if (p.normalized_added.empty()) return p.EncodeRun(run, ids);
    for (const auto& s : p.normalized_added.Split(run)) {
      if (s.token_id >= 0) {
        ids.push_back(s.token_id);
      } else {
        p.EncodeRun(run.substr(s.begin, s.end - s.begin), ids);
      }
    }
  };
  auto encode_raw = [&](std::string_view run) {
    if (p.normalizers.empty()) return encode_normalized(run);
    const std::string normalized = p.Normalize(run);
    encode_normalized(normalized);
  };
  if (p.raw_added.empty()) {
    encode_raw(text);
  } else {
    for (const auto& s : p.raw_added.Split(text)) {
      if (s.token_id >= 0) {
        ids.push_back(s.token_id);
      } else {
        encode_raw(text.substr(s.begin, s.end - s.begin));
      }
    }
  }
  ids.insert(ids.end(), p.suffix_ids.begin(), p.suffix_ids.end());
  return ids;
}

std::int64_t HfTokenizer::vocab_size() const { return pipeline_->vocab_size; }
std::optional<std::int64_t> HfTokenizer::eod_id() const { return pipeline_->eod_id; }

std::optional<std::int64_t> HfTokenizer::TokenId(std::string_view token) const {
  const auto it = pipeline_->token_ids.find(std::string(token));
  if (it == pipeline_->token_ids.end()) return std::nullopt;
  return it->second;
}

}  // namespace hydraulis
