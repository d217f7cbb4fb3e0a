// Hugging Face tokenizer.json: the pieces checked against brute force or worked out by
// hand (merge order, added-token matching, regex iteration, Split behaviours, template,
// normalization), and every refusal naming its field. Parity with the `tokenizers` package
// on real text is tests/hf_tokenizer_parity_test.py.
#include "hydraulis/data/hf_tokenizer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "../base/test_support.h"
#include "added_token_matcher.h"
#include "bpe_merges.h"
#include "byte_level.h"
#include "hydraulis/base/error.h"
#include "regex_splitter.h"
#include "test_files.h"

namespace hydraulis {
namespace {

using data_internal::AddedTokenMatcher;
using data_internal::BpeMerges;
using data_internal::RegexSplitter;
using Ids = std::vector<std::int64_t>;
using nlohmann::json;
using test_support::InvalidInputMessage;

// tokenizers' merge order by brute force: among the current adjacent pairs that are
// merges, the lowest rank, then the leftmost (by the left symbol's original position).
std::vector<std::int32_t> MergeByBruteForce(
    std::vector<std::int32_t> word,
    const std::vector<std::tuple<std::int32_t, std::int32_t, std::int32_t>>& merges) {
  std::vector<std::size_t> origin(word.size());
  for (std::size_t i = 0; i < origin.size(); ++i) origin[i] = i;
  for (;;) {
    std::size_t best = word.size();
    std::uint32_t best_rank = std::numeric_limits<std::uint32_t>::max();
    std::int32_t merged = -1;
    for (std::size_t i = 0; i + 1 < word.size(); ++i) {
      // The last rank of a pair wins, as in BpeMerges::Add.
      for (std::uint32_t r = 0; r < merges.size(); ++r) {
        const auto& [l, rt, m] = merges[r];
        if (l == word[i] && rt == word[i + 1] &&
            (r < best_rank || (r == best_rank && origin[i] < origin[best]))) {
          bool later = false;
          for (std::uint32_t r2 = r + 1; r2 < merges.size(); ++r2) {
            later = later || (std::get<0>(merges[r2]) == l && std::get<1>(merges[r2]) == rt);
          }
          if (later) continue;
          best = i;
          best_rank = r;
          merged = m;
        }
      }
    }
    if (best == word.size()) return word;
    word[best] = merged;
    word.erase(word.begin() + static_cast<std::ptrdiff_t>(best) + 1);
    origin.erase(origin.begin() + static_cast<std::ptrdiff_t>(best) + 1);
  }
}

TEST(BpeMergesTest, MatchesBruteForceOnRandomTables) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 400; ++trial) {
    const int alphabet = 2 + static_cast<int>(rng() % 4);
    std::vector<std::tuple<std::int32_t, std::int32_t, std::int32_t>> merges;
    BpeMerges table;
    std::int32_t next_id = alphabet;
    const int count = 1 + static_cast<int>(rng() % 12);
    for (int r = 0; r < count; ++r) {
      // Pairs over all ids made so far (results merge again), a pair may repeat (the
      // later rank wins), and a result may come up in a pair ranked before its own merge,
      // so queue entries go stale. Each merge has its own result, as in a vocabulary
      // where a+b names the result (tokenizers judges staleness by the result alone).
      const auto l = static_cast<std::int32_t>(rng() % static_cast<unsigned>(next_id));
      const auto rt = static_cast<std::int32_t>(rng() % static_cast<unsigned>(next_id + 1));
      const std::int32_t m = next_id++;
      merges.emplace_back(l, rt, m);
      table.Add(l, rt, static_cast<std::uint32_t>(r), m);
    }
    std::vector<std::int32_t> word(1 + rng() % 12);
    for (auto& s : word) s = static_cast<std::int32_t>(rng() % static_cast<unsigned>(alphabet));
    std::vector<std::int32_t> ours = word;
    table.MergeWord(ours);
    ASSERT_EQ(ours, MergeByBruteForce(word, merges)) << "trial " << trial;
  }
}

TEST(BpeMergesTest, EqualRanksMergeLeftmostFirst) {
  BpeMerges table;
  table.Add(0, 0, 0, 1);  // "a a" -> "aa"
  std::vector<std::int32_t> word = {0, 0, 0};
  table.MergeWord(word);
  EXPECT_EQ(word, (std::vector<std::int32_t>{1, 0}));
}

TEST(AddedTokenMatcherTest, LeftmostThenLongest) {
  AddedTokenMatcher m;
  m.Add("<a>", 1);
  m.Add("<a><b>", 2);
  m.Add("b><", 3);
  const auto s = m.Split("x<a><b>y<a>b><");
  ASSERT_EQ(s.size(), 5u);
  EXPECT_EQ(s[0].token_id, -1);  // "x"
  EXPECT_EQ(s[1].token_id, 2);   // "<a><b>": longest at the leftmost start
  EXPECT_EQ(s[2].token_id, -1);  // "y"
  EXPECT_EQ(s[3].token_id, 1);   // "<a>" starts before "b><"
  EXPECT_EQ(s[4].token_id, 3);
  EXPECT_EQ(s[4].end, 14u);
}

std::vector<std::pair<std::size_t, std::size_t>> Matches(const RegexSplitter& r,
                                                         std::string_view text) {
  std::vector<std::pair<std::size_t, std::size_t>> out;
  for (const auto& m : r.Find(text)) out.emplace_back(m.begin, m.end);
  return out;
}

TEST(RegexSplitterTest, IteratesEmptyMatchesAsTokenizersDoes) {
  // Oniguruma's find_iter in tokenizers: an empty match right after a match is skipped.
  const RegexSplitter r("a*", false, "test");
  using P = std::pair<std::size_t, std::size_t>;
  EXPECT_EQ(Matches(r, "baab"), (std::vector<P>{{0, 0}, {1, 3}, {4, 4}}));
  EXPECT_EQ(Matches(r, ""), (std::vector<P>{{0, 0}}));
}

TEST(RegexSplitterTest, ClassesFollowOniguruma) {
  // U+180E is not a space to Oniguruma; U+1C89 (Unicode 16) is a letter; U+10D40 a digit.
  const RegexSplitter space("\\s+", false, "test");
  EXPECT_TRUE(space.Find("\xe1\xa0\x8e").empty());
  const RegexSplitter letters("\\p{L}+", false, "test");
  EXPECT_EQ(Matches(letters, "a\xe1\xb2\x89z!").size(), 1u);
  const RegexSplitter not_letters("[^\\s\\p{L}]+", false, "test");
  EXPECT_EQ(Matches(not_letters, "\xe1\xa0\x8e"),
            (std::vector<std::pair<std::size_t, std::size_t>>{{0, 3}}));
  const RegexSplitter digits("\\d", false, "test");
  EXPECT_EQ(Matches(digits, "\xf0\x90\xb5\x80").size(), 1u);
}

TEST(RegexSplitterTest, RefusesEscapesItCannotMatchExactly) {
  for (const char* pattern : {"\\w+", "a\\b", "\\p{Han}", "[^\\S]", "[[:alpha:]]", "\\h"}) {
    const std::string m =
        InvalidInputMessage([&] { RegexSplitter(pattern, false, "tok.json: pattern"); });
    EXPECT_NE(m.find("tok.json: pattern: the pattern uses"), std::string::npos) << m;
  }
  const std::string bad = InvalidInputMessage([] { RegexSplitter("(ab", false, "p"); });
  EXPECT_NE(bad.find("p: the pattern does not compile at byte 3"), std::string::npos) << bad;
  // A literal is matched as written, brackets and all.
  EXPECT_EQ(Matches(RegexSplitter("[a]", true, "p"), "x[a]").size(), 1u);
}

// A Sequence pre-tokenizer: one Split step (`regex`, `behavior`), then ByteLevel.
json SplitThenByteLevel(const std::string& regex, const std::string& behavior) {
  return {
      {"type", "Sequence"},
      {"pretokenizers",
       json::array({{{"type", "Split"}, {"pattern", {{"Regex", regex}}}, {"behavior", behavior}},
                    {{"type", "ByteLevel"}, {"add_prefix_space", false}}})}};
}

// A byte-level BPE tokenizer.json: the 256 byte symbols (ids 0..255 in byte order), plus
// `merges` whose results get the next ids in order.
json MakeTokenizer(const std::vector<std::pair<std::string, std::string>>& merges = {}) {
  const auto symbols = data_internal::ByteLevelSymbols();
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[symbols[static_cast<std::size_t>(b)]] = b;
  json merge_list = json::array();
  int next = 256;
  for (const auto& [a, b] : merges) {
    vocab[a + b] = next++;
    merge_list.push_back(json::array({a, b}));
  }
  return json{
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", json::array()},
      {"normalizer", nullptr},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
      {"post_processor", nullptr},
      {"decoder", nullptr},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", nullptr},
        {"continuing_subword_prefix", nullptr},
        {"end_of_word_suffix", nullptr},
        {"fuse_unk", false},
        {"byte_fallback", false},
        {"ignore_merges", false},
        {"vocab", vocab},
        {"merges", merge_list}}}};
}

HfTokenizer Load(const json& j, std::string_view eos = {}) {
  return HfTokenizer::Parse(j.dump(), "tok.json", eos);
}

Ids Bytes(std::string_view text) {
  Ids ids;
  for (char c : text) ids.push_back(static_cast<unsigned char>(c));
  return ids;
}

TEST(HfTokenizerTest, MergesWithinGpt2Pieces) {
  // "Ġ" is the symbol of the space byte.
  const HfTokenizer t = Load(MakeTokenizer({{"h", "i"}, {"\xc4\xa0", "hi"}}));
  EXPECT_EQ(t.vocab_size(), 258);
  // " hi" is one GPT-2 piece (space joins the letters); "!" another.
  EXPECT_EQ(t.Encode("hi hi!"), (Ids{256, 257, '!'}));
  EXPECT_EQ(t.Encode(""), Ids{});
  EXPECT_EQ(t.eod_id(), std::nullopt);
  // Bytes that are not UTF-8 are encoded as bytes, never dropped.
  EXPECT_EQ(t.Encode("\xff\xfe"), (Ids{0xff, 0xfe}));
}

TEST(HfTokenizerTest, LegacyMergeStringsEqualPairs) {
  json j = MakeTokenizer({{"h", "i"}});
  j["model"]["merges"] = json::array({"#version: 0.2", "h i"});
  EXPECT_EQ(Load(j).Encode("hi"), Ids{256});
}

TEST(HfTokenizerTest, IgnoreMergesTakesWholeWordsFromTheVocabulary) {
  json j = MakeTokenizer({{"h", "i"}});
  j["model"]["vocab"]["hey"] = 300;  // no merge makes it
  EXPECT_EQ(Load(j).Encode("hey"), Bytes("hey"));
  j["model"]["ignore_merges"] = true;
  EXPECT_EQ(Load(j).Encode("hey"), Ids{300});
  EXPECT_EQ(Load(j).vocab_size(), 301);
}

TEST(HfTokenizerTest, AddedTokensTemplateAndEos) {
  json j = MakeTokenizer();
  j["added_tokens"] =
      json::array({{{"id", 256}, {"content", "<s>"}, {"special", true}, {"normalized", false}},
                   {{"id", 257}, {"content", "</s>"}, {"special", true}, {"normalized", false}}});
  j["post_processor"] = {
      {"type", "TemplateProcessing"},
      {"single", json::array({{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                              {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
      {"pair", json::array()},
      {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {256}}, {"tokens", {"<s>"}}}}}}};
  const HfTokenizer t = Load(j, "</s>");
  EXPECT_EQ(t.eod_id(), 257);
  EXPECT_EQ(t.TokenId("<s>"), 256);
  EXPECT_EQ(t.Encode(""), Ids{256});  // the template's BOS, as tokenizers gives
  EXPECT_EQ(t.Encode("a</s>b"), (Ids{256, 'a', 257, 'b'}));
}

TEST(HfTokenizerTest, NormalizesBeforeMatchingNormalizedTokens) {
  json j = MakeTokenizer();
  j["normalizer"] = {{"type", "NFC"}};
  j["added_tokens"] = json::array({{{"id", 300},
                                    {"content", "\xc3\xa9t\xc3\xa9"},  // "été"
                                    {"normalized", true}}});
  const HfTokenizer t = Load(j);
  // "e" + combining acute, NFC-composed to "é", then matched as the added token.
  EXPECT_EQ(t.Encode("e\xcc\x81te\xcc\x81"), Ids{300});
  EXPECT_EQ(t.Encode("e\xcc\x81"), Bytes("\xc3\xa9"));
}

TEST(HfTokenizerTest, SplitBehaviours) {
  // tokenizers' own example: "How are you doing?" split at spaces, then merges that
  // show where the pieces end ("w Ġ": only when the space stays with the word before).
  auto encode = [](const char* behavior, bool invert) {
    json j = MakeTokenizer({{"w", "\xc4\xa0"}, {"\xc4\xa0", "a"}});
    j["pre_tokenizer"] = {
        {"type", "Sequence"},
        {"pretokenizers",
         json::array(
             {{{"type", "Split"},
               {"pattern", {{"String", " "}}},
               {"behavior", behavior},
               {"invert", invert}},
              {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}})}};
    return Load(j).Encode("How are");
  };
  const Ids how = Bytes("Ho");
  auto with = [&](Ids tail) {
    Ids ids = how;
    ids.insert(ids.end(), tail.begin(), tail.end());
    return ids;
  };
  EXPECT_EQ(encode("Removed", false), with({'w', 'a', 'r', 'e'}));
  EXPECT_EQ(encode("Isolated", false), with({'w', ' ', 'a', 'r', 'e'}));
  EXPECT_EQ(encode("MergedWithPrevious", false), with({256, 'a', 'r', 'e'}));
  EXPECT_EQ(encode("MergedWithNext", false), with({'w', 257, 'r', 'e'}));
  EXPECT_EQ(encode("Contiguous", false), with({'w', ' ', 'a', 'r', 'e'}));
  // Inverted: the words are the matches; removing them leaves the space.
  EXPECT_EQ(encode("Removed", true), Ids{' '});
}

// An edit of a supported tokenizer.json and the message Load must refuse it with.
struct RefusalCase {
  std::function<void(json&)> edit;
  std::string expected;
};

// The model's fields: its type, vocabulary, merges and options.
std::vector<RefusalCase> ModelRefusals() {
  return {
      {[](json& j) { j["model"]["type"] = "WordPiece"; },
       "tok.json: model.type: type 'WordPiece' is not supported"},
      {[](json& j) { j["model"]["vocab"].erase("A"); },
       "tok.json: model.vocab: the symbol 'A' of byte 65 is missing"},
      {[](json& j) { j["model"]["merges"] = json::array({"h"}); },
       "tok.json: model.merges[0]: expected \"FIRST SECOND\""},
      {[](json& j) {
         j["model"]["merges"] = json::array({json::array({"h", "q"})});
       },
       "tok.json: model.merges[0]: 'hq' is not in model.vocab"},
      {[](json& j) { j["model"]["vocab"]["x2"] = 65; },
       "tok.json: model.vocab.'x2': id 65 is also the id of 'A'"},
      {[](json& j) { j["model"]["vocab"]["x2"] = -1; },
       "tok.json: model.vocab.'x2': an id must be an integer"},
      {[](json& j) { j["model"]["dropout"] = 0.1; },
       "tok.json: model.dropout: dropout is not supported"},
      {[](json& j) { j["model"]["continuing_subword_prefix"] = "##"; },
       "tok.json: model.continuing_subword_prefix: is not supported"},
  };
}

// Truncation, the normalizer and the pre-tokenizer.
std::vector<RefusalCase> PipelineRefusals() {
  return {
      {[](json& j) {
         j["truncation"] = json{{"max_length", 5}};
       },
       "tok.json: truncation: is set"},
      {[](json& j) {
         j["normalizer"] = {{"type", "Lowercase"}};
       },
       "tok.json: normalizer.type: type 'Lowercase' is not supported"},
      {[](json& j) { j["pre_tokenizer"] = nullptr; }, "tok.json: pre_tokenizer: is null"},
      {[](json& j) {
         j["pre_tokenizer"] = {{"type", "Metaspace"}};
       },
       "tok.json: pre_tokenizer.type: type 'Metaspace' is not supported"},
      {[](json& j) { j["pre_tokenizer"]["add_prefix_space"] = 1; },
       "tok.json: pre_tokenizer.add_prefix_space: expected true or false"},
      {[](json& j) {
         j["pre_tokenizer"] = {
             {"type", "Sequence"},
             {"pretokenizers",
              json::array(
                  {{{"type", "ByteLevel"}, {"add_prefix_space", false}},
                   {{"type", "Split"}, {"pattern", {{"Regex", "a"}}}, {"behavior", "Isolated"}}})}};
       },
       "tok.json: pre_tokenizer.pretokenizers[0].type: the sequence must be Split steps then one "
       "ByteLevel step"},
      {[](json& j) { j["pre_tokenizer"] = SplitThenByteLevel("\\w+", "Isolated"); },
       "tok.json: pre_tokenizer.pretokenizers[0].pattern.Regex: the pattern uses \\w"},
      {[](json& j) { j["pre_tokenizer"] = SplitThenByteLevel("a", "Shuffled"); },
       "tok.json: pre_tokenizer.pretokenizers[0].behavior: unknown behavior 'Shuffled'"},
      {[](json& j) {  // found by the fuzzer: a control byte echoed raw
         j["pre_tokenizer"] = SplitThenByteLevel("a", "Iso\rlated");
       },
       "unknown behavior 'Iso\\x0dlated' (Removed"},
  };
}

// Added tokens and the post-processor's template.
std::vector<RefusalCase> AddedTokenAndTemplateRefusals() {
  return {
      {[](json& j) {
         j["added_tokens"] = json::array({{{"id", 300}, {"content", "<x>"}, {"lstrip", true}}});
       },
       "tok.json: added_tokens[0].lstrip: is true for '<x>'; not supported"},
      {[](json& j) {
         j["added_tokens"] = json::array({{{"id", 300}, {"content", ""}}});
       },
       "tok.json: added_tokens[0].content: an added token cannot be empty"},
      {[](json& j) {
         j["post_processor"] = {{"type", "RobertaProcessing"}};
       },
       "tok.json: post_processor.type: type 'RobertaProcessing' is not supported"},
      {[](json& j) {
         j["post_processor"] = {{"type", "TemplateProcessing"},
                                {"single", json::array()},
                                {"special_tokens", json::object()}};
       },
       "tok.json: post_processor.single: the template has no"},
      {[](json& j) {
         j["post_processor"] = {{"type", "TemplateProcessing"},
                                {"single", json::array({{{"SpecialToken", {{"id", "<s>"}}}},
                                                        {{"Sequence", {{"id", "A"}}}}})},
                                {"special_tokens", {{"<s>", {{"ids", {999}}}}}}};
       },
       "tok.json: post_processor: template id 999 is outside the vocabulary"},
  };
}

TEST(HfTokenizerTest, RefusesWhatItDoesNotSupportNamingTheField) {
  for (auto cases : {&ModelRefusals, &PipelineRefusals, &AddedTokenAndTemplateRefusals}) {
    for (const RefusalCase& c : cases()) {
      json j = MakeTokenizer();
      c.edit(j);
      const std::string m = InvalidInputMessage([&] { Load(j); });
      EXPECT_NE(m.find(c.expected), std::string::npos)
          << "expected: " << c.expected << "\n     got: " << m;
    }
  }
  const std::string eos = InvalidInputMessage([] { Load(MakeTokenizer(), "</s>"); });
  EXPECT_NE(eos.find("the end-of-document token '</s>' is neither"), std::string::npos) << eos;
}

TEST(HfTokenizerTest, LoadReadsEosFromTheConfigBeside) {
  const test_support::TempDir dir;
  json j = MakeTokenizer();
  j["added_tokens"] = json::array({{{"id", 256}, {"content", "<|end|>"}, {"special", true}}});
  const std::string path = dir.Write("tokenizer.json", j.dump());
  EXPECT_EQ(HfTokenizer::Load(path).eod_id(), std::nullopt);
  dir.Write("tokenizer_config.json", R"({"eos_token": {"content": "<|end|>", "special": true}})");
  EXPECT_EQ(HfTokenizer::Load(path).eod_id(), 256);
  dir.Write("tokenizer_config.json", R"({"eos_token": "<|nope|>"})");
  const std::string m = InvalidInputMessage([&] { HfTokenizer::Load(path); });
  EXPECT_NE(m.find("tokenizer_config.json"), std::string::npos) << m;
}

}  // namespace
}  // namespace hydraulis
