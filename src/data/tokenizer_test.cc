// Tokenizers: the byte tokenizer, and GPT-2's BPE on a tiny hand-written vocabulary and
// merge list (the first merges of GPT-2's own merges.txt, with GPT-2's ids), checked id by
// id against encodings worked out by hand.
#include "hydraulis/data/tokenizer.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "../base/test_support.h"
#include "hydraulis/base/error.h"
#include "test_files.h"

namespace hydraulis {
namespace {

using Ids = std::vector<std::int64_t>;
using test_support::InvalidInputMessage;
using test_support::TempDir;

TEST(ByteTokenizerTest, OneIdPerByte) {
  const ByteTokenizer t;
  EXPECT_EQ(t.vocab_size(), 256);
  EXPECT_EQ(t.eod_id(), std::nullopt);
  EXPECT_EQ(t.Encode(""), Ids{});
  EXPECT_EQ(t.Encode("Hi\n"), (Ids{72, 105, 10}));
  EXPECT_EQ(t.Encode("\xc3\xa9"), (Ids{195, 169}));  // é: two UTF-8 bytes
  EXPECT_EQ(t.Encode(std::string_view("\0\xff", 2)), (Ids{0, 255}));
}

// GPT-2's byte symbols, written out from the published definition independently of the
// library: printable bytes map to themselves, the rest to U+0100 onwards in byte order.
std::vector<std::string> ByteSymbolsInVocabOrder() {
  std::vector<std::uint32_t> printable, other;
  for (std::uint32_t b = 0; b < 256; ++b) {
    const bool p = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || b >= 0xae;
    (p ? printable : other).push_back(b);
  }
  auto utf8 = [](std::uint32_t c) {
    std::string s;
    if (c < 0x80) {
      s += static_cast<char>(c);
    } else {
      s += static_cast<char>(0xc0 | (c >> 6));
      s += static_cast<char>(0x80 | (c & 0x3f));
    }
    return s;
  };
  std::vector<std::string> symbols;
  for (std::uint32_t b : printable) symbols.push_back(utf8(b));
  for (std::size_t i = 0; i < other.size(); ++i) {
    symbols.push_back(utf8(static_cast<std::uint32_t>(0x100 + i)));
  }
  return symbols;
}

// The first GPT-2 merges; each result gets the next id from 256, as in GPT-2's vocab.
const std::vector<std::string> kMerges = {"\xc4\xa0 t", "\xc4\xa0 a", "h e",          "i n",
                                          "r e",        "o n",        "\xc4\xa0t he", "e r",
                                          "\xc4\xa0 s", "a t",        "\xc4\xa0 w",   "\xc4\xa0 o",
                                          "e n",        "\xc4\xa0 c", "i t",          "i s"};
constexpr std::int64_t kEndOfTextId = 300;

nlohmann::json TinyVocab(const std::vector<std::string>& merges) {
  nlohmann::json vocab = nlohmann::json::object();
  const auto symbols = ByteSymbolsInVocabOrder();
  for (std::size_t i = 0; i < symbols.size(); ++i) vocab[symbols[i]] = i;
  std::int64_t next = 256;
  for (const std::string& m : merges) {
    const auto space = m.find(' ');
    vocab[m.substr(0, space) + m.substr(space + 1)] = next++;
  }
  vocab["<|endoftext|>"] = kEndOfTextId;
  return vocab;
}

std::string MergesText(const std::vector<std::string>& merges) {
  std::string text = "#version: 0.2\n";
  for (const std::string& m : merges) text += m + "\n";
  return text;
}

class Gpt2BpeTest : public ::testing::Test {
 protected:
  Gpt2BpeTokenizer Load(const std::string& vocab_json, const std::string& merges_txt) {
    return Gpt2BpeTokenizer(dir_.Write("vocab.json", vocab_json),
                            dir_.Write("merges.txt", merges_txt));
  }
  // The error loading these files, with the temporary directory replaced by "DIR".
  std::string LoadError(const std::string& vocab_json, const std::string& merges_txt) {
    std::string msg = InvalidInputMessage([&] { Load(vocab_json, merges_txt); });
    for (std::size_t at; (at = msg.find(dir_.path())) != std::string::npos;) {
      msg.replace(at, dir_.path().size(), "DIR");
    }
    return msg;
  }
  TempDir dir_;
};

TEST_F(Gpt2BpeTest, ByteSymbolsHaveGpt2Ids) {
  const auto t = Load(TinyVocab(kMerges).dump(), MergesText(kMerges));
  EXPECT_EQ(t.vocab_size(), kEndOfTextId + 1);
  EXPECT_EQ(t.eod_id(), kEndOfTextId);
  EXPECT_EQ(t.Encode("!"), (Ids{0}));
  EXPECT_EQ(t.Encode("A"), (Ids{32}));
  EXPECT_EQ(t.Encode(" "), (Ids{220}));                        // "Ġ"
  EXPECT_EQ(t.Encode("\n"), (Ids{198}));                       // "Ċ"
  EXPECT_EQ(t.Encode(std::string_view("\0", 1)), (Ids{188}));  // "Ā"
  EXPECT_EQ(t.Encode("\xad"), (Ids{255}));                     // soft hyphen byte: "Ń"
  EXPECT_EQ(t.Encode("\xc3\xa9"), (Ids{127, 102}));            // é as "Ã" "©"
  EXPECT_EQ(t.Encode(""), Ids{});
}

TEST_F(Gpt2BpeTest, MergesApplyByRank) {
  const auto t = Load(TinyVocab(kMerges).dump(), MergesText(kMerges));
  // the -> t|he; " cat" -> Ġc|at ("a t" ranks before "Ġ c"); " is" -> Ġ|is;
  // " on" -> Ġ|on; " the" -> Ġt|h|e -> Ġt|he -> Ġthe; " mat" -> Ġ|m|at.
  EXPECT_EQ(t.Encode("the cat is on the mat"),
            (Ids{83, 258, 269, 265, 220, 271, 220, 261, 262, 220, 76, 265}));
  // Pre-tokenisation keeps merges inside pieces: "he" across "t|he" pieces is not merged.
  EXPECT_EQ(t.Encode("h e"), (Ids{71, 220, 68}));
  // Every occurrence of the best pair merges in one pass: "inin" -> in|in.
  EXPECT_EQ(t.Encode("inin"), (Ids{259, 259}));
  // Special tokens are plain text: no 300 in the ids.
  for (std::int64_t id : t.Encode("a<|endoftext|>b")) EXPECT_NE(id, kEndOfTextId);
}

TEST_F(Gpt2BpeTest, RankOrderDecides) {
  // "hello" with "l l" first: h e ll o -> he ll o -> hell o -> hello.
  // With "e l" first: h el l o -> h ell o ... -> a different split.
  const std::vector<std::string> ll_first = {"l l", "e l", "h e", "he ll", "hell o", "el l"};
  const std::vector<std::string> el_first = {"e l", "l l", "h e", "he ll", "hell o", "el l"};
  const auto a = Load(TinyVocab(ll_first).dump(), MergesText(ll_first));
  EXPECT_EQ(a.Encode("hello"), (Ids{260}));  // "hello" is the 5th merge's result
  const auto b = Load(TinyVocab(el_first).dump(), MergesText(el_first));
  // h el l o: "el l" (rank 5) is the only merge left -> h ell o.
  EXPECT_EQ(b.Encode("hello"), (Ids{71, 261, 78}));
}

TEST_F(Gpt2BpeTest, VocabularyErrorsNameTheFileAndKey) {
  const std::string merges = MergesText({});
  EXPECT_NE(LoadError("{", merges).find("DIR/vocab.json: invalid JSON"), std::string::npos);
  EXPECT_EQ(LoadError("[1, 2]", merges),
            "DIR/vocab.json: expected a JSON object of symbol -> id, got array");
  nlohmann::json v = TinyVocab({});
  v["abc"] = "7";
  EXPECT_EQ(LoadError(v.dump(), merges),
            "DIR/vocab.json: key 'abc': the id must be an integer from 0 to 2^31 - 1, got \"7\"");
  v["abc"] = -1;
  EXPECT_NE(LoadError(v.dump(), merges).find("key 'abc': the id must be"), std::string::npos);
  v["abc"] = 0;  // the id of "!"
  const std::string dup = LoadError(v.dump(), merges);
  EXPECT_NE(dup.find("id 0 is also the id of"), std::string::npos) << dup;
  v = TinyVocab({});
  v.erase("\xc4\xa0");
  EXPECT_EQ(LoadError(v.dump(), merges),
            "DIR/vocab.json: key '\xc4\xa0' (the symbol of byte 32) is missing; a byte-level "
            "BPE vocabulary needs all 256 byte symbols");
  const std::string missing = InvalidInputMessage(
      [&] { Gpt2BpeTokenizer(dir_.path() + "/none.json", dir_.path() + "/none.txt"); });
  EXPECT_EQ(missing.rfind(dir_.path() + "/none.json: cannot open", 0), 0u) << missing;
}

TEST_F(Gpt2BpeTest, MergeErrorsNameTheFileAndLine) {
  const std::string vocab = TinyVocab({"h e"}).dump();
  EXPECT_EQ(LoadError(vocab, "#version: 0.2\nh e\na b c\n"),
            "DIR/merges.txt:3: expected two symbols separated by one space, got 'a b c'");
  EXPECT_NE(LoadError(vocab, "h e\nhe\n").find("DIR/merges.txt:2: expected two symbols"),
            std::string::npos);
  EXPECT_NE(LoadError(vocab, "h e\n h\n").find("DIR/merges.txt:2:"), std::string::npos);
  EXPECT_EQ(LoadError(vocab, "h e\n\nx y\n"),
            "DIR/merges.txt:3: merge 'x y': 'xy' is not in DIR/vocab.json");
  // A "#version" line is only a header on line 1; CRLF line ends are accepted.
  EXPECT_EQ(Load(vocab, "h e\r\n").Encode("he"), (Ids{256}));
  EXPECT_NE(LoadError(vocab, "h e\n#version: 0.2\n").find("DIR/merges.txt:2:"), std::string::npos);
  // A damaged line is echoed cut, never whole (found by fuzz/gpt2_bpe: a 3.5 KB line).
  std::string long_line(4000, 'x');
  for (std::size_t i = 7; i < long_line.size(); i += 9) long_line[i] = ' ';
  const std::string cut = LoadError(vocab, "h e\n" + long_line + "\n");
  EXPECT_LT(cut.size(), 200u) << cut;
  EXPECT_NE(cut.find("...(4000 bytes)"), std::string::npos) << cut;
  // Multi-byte symbols are cut at a character boundary.
  const std::string wide = LoadError(
      vocab, "h e\n" + std::string(58, 'x') + "\xc4\xa0 a b" + std::string(20, 'y') + "\n");
  EXPECT_NE(wide.find("...(84 bytes)"), std::string::npos) << wide;
  EXPECT_EQ(wide.find("\xc4'"), std::string::npos) << wide;
}

}  // namespace
}  // namespace hydraulis
