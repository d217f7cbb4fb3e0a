// GPT-2 pre-tokenisation against the pieces Python's `regex` module finds with GPT-2's
// pattern (expected values produced by regex.findall, pasted here).
#include "gpt2_pretokenizer.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace hydraulis::data_internal {
namespace {

using Pieces = std::vector<std::string>;

Pieces Split(std::string_view text) {
  Pieces out;
  for (std::string_view p : Gpt2PreTokenize(text)) out.emplace_back(p);
  return out;
}

TEST(Gpt2PreTokenizeTest, MatchesPythonRegexOnAscii) {
  EXPECT_EQ(Split(""), Pieces{});
  EXPECT_EQ(Split("Hello world"), (Pieces{"Hello", " world"}));
  EXPECT_EQ(Split("  hello"), (Pieces{" ", " hello"}));
  EXPECT_EQ(
      Split("I'm you're they'll we'd it's don't"),
      (Pieces{"I", "'m", " you", "'re", " they", "'ll", " we", "'d", " it", "'s", " don", "'t"}));
  EXPECT_EQ(Split("'sup 's ''s"), (Pieces{"'s", "up", " '", "s", " ''", "s"}));
  EXPECT_EQ(Split("A'LL 'RE"), (Pieces{"A", "'", "LL", " '", "RE"}));  // case-sensitive
  EXPECT_EQ(Split("x 'll"), (Pieces{"x", " '", "ll"}));
  EXPECT_EQ(Split("a  b   c"), (Pieces{"a", " ", " b", "  ", " c"}));
  EXPECT_EQ(Split("x \n\n y"), (Pieces{"x", " \n\n", " y"}));
  EXPECT_EQ(Split("tab\tsep"), (Pieces{"tab", "\t", "sep"}));
  EXPECT_EQ(Split("end  "), (Pieces{"end", "  "}));
  EXPECT_EQ(Split(" "), (Pieces{" "}));
  EXPECT_EQ(Split("\n"), (Pieces{"\n"}));
  EXPECT_EQ(Split("a\r\nb"), (Pieces{"a", "\r", "\n", "b"}));
  EXPECT_EQ(Split("12345 abc123 3.14"), (Pieces{"12345", " abc", "123", " 3", ".", "14"}));
  EXPECT_EQ(Split("foo!!! ?? (bar)"), (Pieces{"foo", "!!!", " ??", " (", "bar", ")"}));
  EXPECT_EQ(Split("$100,000.00!"), (Pieces{"$", "100", ",", "000", ".", "00", "!"}));
  EXPECT_EQ(Split("a\x1c"
                  "b"),
            (Pieces{"a", "\x1c", "b"}));  // Python's \s includes 0x1c
}

TEST(Gpt2PreTokenizeTest, MatchesPythonRegexOnLettersAndUnicodeSpaces) {
  EXPECT_EQ(Split("caf\u00e9 na\u00efve"), (Pieces{"caf\u00e9", " na\u00efve"}));
  EXPECT_EQ(Split("\u65e5\u672c\u8a9e \u65e5\u672c"),
            (Pieces{"\u65e5\u672c\u8a9e", " \u65e5\u672c"}));
  EXPECT_EQ(Split("a\u00a0b"), (Pieces{"a", "\u00a0", "b"}));  // no-break space is \s
  EXPECT_EQ(Split("x\u3000 y"), (Pieces{"x", "\u3000", " y"}));
}

TEST(Gpt2PreTokenizeTest, DocumentedApproximations) {
  // Python gives ["x", "\u00bd"] (a number) and ["a", "\u00bf", "b"] (punctuation): here
  // every non-ASCII, non-space code point is a letter.
  EXPECT_EQ(Split("x\u00bd"), (Pieces{"x\u00bd"}));
  EXPECT_EQ(Split("a\u00bf"
                  "b"),
            (Pieces{"a\u00bf"
                    "b"}));
}

TEST(Gpt2PreTokenizeTest, InvalidUtf8BytesAreLettersAndNothingIsLost) {
  const std::string text = "ab\xff\xfe cd \xc3 \xe2\x82 x\xc3(";
  EXPECT_EQ(Split(text), (Pieces{"ab\xff\xfe", " cd", " \xc3", " \xe2\x82", " x\xc3", "("}));
  std::string joined;
  for (const auto& p : Split(text)) joined += p;
  EXPECT_EQ(joined, text);
}

}  // namespace
}  // namespace hydraulis::data_internal
