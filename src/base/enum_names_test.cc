#include "hydraulis/base/enum_names.h"

#include <gtest/gtest.h>

#include "hydraulis/base/tolerance.h"

namespace hydraulis {
namespace {

enum class Colour { kRed, kGreen, kBlue };

constexpr EnumNames<Colour, 4> kColours{{{Colour::kRed, "red"},
                                         {Colour::kGreen, "green"},
                                         {Colour::kBlue, "blue"},
                                         {Colour::kGreen, "vert", true}}};

TEST(EnumNamesTest, NamesParseBackAndAliasesAreAcceptedButNeverPrinted) {
  for (Colour c : {Colour::kRed, Colour::kGreen, Colour::kBlue}) {
    EXPECT_EQ(ParseName(NameOf(c, kColours), kColours, "colour"), c);
  }
  EXPECT_EQ(ParseName("vert", kColours, "colour"), Colour::kGreen);
  EXPECT_EQ(NameOf(Colour::kGreen, kColours), "green");
  EXPECT_EQ(NameList(kColours), "red, green or blue");
  EXPECT_EQ(NameOf(static_cast<Colour>(7), kColours), "?");
}

TEST(EnumNamesTest, UnknownNameNamesTheCallersFieldAndQuotesTheValue) {
  try {
    ParseName("pur\nple", kColours, "--colour");
    FAIL() << "no error";
  } catch (const InvalidInput& e) {
    EXPECT_STREQ(e.what(), "--colour: expected red, green or blue, got 'pur\\x0aple'");
  }
}

TEST(ToleranceTest, RelativeWithAOneMillisecondFloor) {
  EXPECT_TRUE(DefinitelyLess(1000.0, 1000.0 + 2e-6));
  EXPECT_FALSE(DefinitelyLess(1000.0, 1000.0 + 0.5e-6));  // within 1e-9 relative
  EXPECT_TRUE(DefinitelyLess(0.0, 2e-9));                 // the floor: absolute near zero
  EXPECT_FALSE(DefinitelyLess(0.0, 0.5e-9));
  EXPECT_TRUE(DefinitelyLess(1e300, kInf));
  EXPECT_FALSE(DefinitelyLess(kInf, kInf));
  EXPECT_TRUE(NearlyEqual(5000.0, 5000.0 + 4e-6));
  EXPECT_FALSE(NearlyEqual(5000.0, 5000.0 + 6e-6));
  EXPECT_TRUE(NearlyEqual(kInf, kInf));
  EXPECT_FALSE(NearlyEqual(kInf, 1e308));
}

}  // namespace
}  // namespace hydraulis
