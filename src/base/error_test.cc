#include "hydraulis/base/error.h"

#include <gtest/gtest.h>

#include <string>

namespace hydraulis {
namespace {

TEST(QuoteForMessageTest, ReadableTextStaysReadable) {
  EXPECT_EQ(QuoteForMessage("plain"), "'plain'");
  // A byte-level BPE symbol and CJK text are shown as they are.
  EXPECT_EQ(QuoteForMessage("\xc4\xa0the \xe4\xb8\xad\xe6\x96\x87"),
            "'\xc4\xa0the \xe4\xb8\xad\xe6\x96\x87'");
}

TEST(QuoteForMessageTest, WhatCouldBreakOrReorderTheLineIsEscaped) {
  EXPECT_EQ(QuoteForMessage("a\tb\r\n\\"), "'a\\x09b\\x0d\\x0a\\x5c'");
  EXPECT_EQ(QuoteForMessage("\xc2\x85"), "'\\xc2\\x85'");           // NEL, a C1 control
  EXPECT_EQ(QuoteForMessage("\xe2\x80\xa8"), "'\\xe2\\x80\\xa8'");  // line separator
  EXPECT_EQ(QuoteForMessage("\xe2\x80\xae"), "'\\xe2\\x80\\xae'");  // right-to-left override
  // Not UTF-8: a lone continuation byte, an overlong '/', a surrogate, a cut sequence.
  EXPECT_EQ(QuoteForMessage("\x80"), "'\\x80'");
  EXPECT_EQ(QuoteForMessage("\xc0\xaf"), "'\\xc0\\xaf'");
  EXPECT_EQ(QuoteForMessage("\xed\xa0\x80"), "'\\xed\\xa0\\x80'");
  EXPECT_EQ(QuoteForMessage("x\xe4\xb8"), "'x\\xe4\\xb8'");
}

TEST(QuoteForMessageTest, LongValuesAreCutAtACharacterWithTheirSize) {
  EXPECT_EQ(QuoteForMessage(std::string(100, 'a'), 5), "'aaaaa'...(100 bytes)");
  // Five characters of three bytes each: the cut never splits one.
  std::string cjk;
  for (int i = 0; i < 10; ++i) cjk += "\xe4\xb8\xad";
  EXPECT_EQ(QuoteForMessage(cjk, 5), "'" + cjk.substr(0, 15) + "'...(30 bytes)");
  EXPECT_EQ(QuoteForMessage(std::string(60, 'b')), "'" + std::string(60, 'b') + "'");
}

}  // namespace
}  // namespace hydraulis
