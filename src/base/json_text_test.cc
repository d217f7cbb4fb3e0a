#include "hydraulis/base/internal/json_text.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>
#include <utility>

#include "hydraulis/base/error.h"

namespace hydraulis {
namespace {

std::string ErrorOf(const std::string& text) {
  try {
    ParseJson(text, "in.json");
  } catch (const InvalidInput& e) {
    return e.what();
  }
  return "";
}

// Every integer spelling nlohmann can hand a reader, against the range of the type it goes
// into: no value is converted (and so wrapped) before it is known to fit.
TEST(JsonTextTest, CheckJsonIntegerComparesBeforeConverting) {
  const auto check = [](const char* text, std::int64_t lo, std::int64_t hi) {
    std::int64_t out = -7;
    const JsonIntegerCheck result = CheckJsonInteger(ParseJson(text, "x.json"), lo, hi, &out);
    return std::pair{result, out};
  };
  constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
  constexpr std::int64_t kMin = std::numeric_limits<std::int64_t>::min();
  using C = JsonIntegerCheck;
  EXPECT_EQ(check("5", 1, 10), std::pair(C::kInRange, std::int64_t{5}));
  EXPECT_EQ(check("5.0", 1, 10), std::pair(C::kInRange, std::int64_t{5}));
  EXPECT_EQ(check("9223372036854775807", 0, kMax), std::pair(C::kInRange, kMax));
  EXPECT_EQ(check("-9223372036854775808", kMin, 0), std::pair(C::kInRange, kMin));
  for (const char* huge : {"9223372036854775808", "18446744073709551615", "18446744073709551616",
                           "1e30", "9223372036854775808.0"}) {
    EXPECT_EQ(check(huge, 0, kMax).first, C::kAboveMax) << huge;
    EXPECT_EQ(check(huge, kMin, kMax).first, C::kAboveMax) << huge;
  }
  EXPECT_EQ(check("11", 1, 10).first, C::kAboveMax);
  EXPECT_EQ(check("10.5", 1, 10).first, C::kAboveMax);
  EXPECT_EQ(check("4294967296", 0, 2147483647).first, C::kAboveMax);
  EXPECT_EQ(check("5", -10, -1).first, C::kAboveMax);
  EXPECT_EQ(check("0", 1, 10).first, C::kBelowMin);
  EXPECT_EQ(check("-1e19", kMin, kMax).first, C::kBelowMin);
  EXPECT_EQ(check("-1e30", 0, 10).first, C::kBelowMin);
  EXPECT_EQ(check("3", 5, kMax).first, C::kBelowMin);  // an unsigned below a positive min
  for (const char* other : {"2.5", "\"7\"", "null", "true", "[1]", "{}", "1e16"}) {
    EXPECT_EQ(check(other, kMin, kMax), std::pair(C::kNotAnInteger, std::int64_t{-7})) << other;
  }
}

TEST(JsonTextTest, ParsesOrdinaryDocuments) {
  const auto j = ParseJson(R"({"a": [1, 2, {"b": null}], "c": "x"})", "in.json");
  EXPECT_EQ(j["a"][2]["b"], nullptr);
  EXPECT_EQ(j["c"], "x");
}

TEST(JsonTextTest, DeepNestingIsAnErrorNotACrash) {
  for (const char* open : {"[", "{\"k\":"}) {
    std::string text;
    for (int i = 0; i < 100'000; ++i) text += open;
    const std::string err = ErrorOf(text);
    EXPECT_NE(err.find("in.json: invalid JSON: nesting deeper than 64 levels"), std::string::npos)
        << err;
  }
  // Exactly the limit parses.
  std::string ok(kMaxJsonDepth, '[');
  ok += std::string(kMaxJsonDepth, ']');
  EXPECT_NO_THROW(ParseJson(ok, "in.json"));
  EXPECT_NE(ErrorOf("[" + ok + "]").find("nesting"), std::string::npos);
}

// Found by fuzz/: nlohmann reports a number beyond a double as out_of_range, not a
// parse_error, and it used to escape as an uncaught exception.
TEST(JsonTextTest, NumbersBeyondADoubleAreAnError) {
  for (const char* text : {"[1e400]", "{\"a\": -1e309}", "88888888811e308000"}) {
    const std::string err = ErrorOf(text);
    EXPECT_NE(err.find("in.json: invalid JSON: "), std::string::npos) << text;
    EXPECT_NE(err.find("number overflow"), std::string::npos) << err;
  }
  EXPECT_NO_THROW(ParseJson("[1e308, 18446744073709551616]", "in.json"));
}

TEST(JsonTextTest, DuplicateKeysAreRejectedAtAnyDepth) {
  EXPECT_NE(ErrorOf(R"({"a": 1, "a": 2})").find("duplicate key 'a'"), std::string::npos);
  EXPECT_NE(ErrorOf(R"({"x": [{"tp": 1, "pp": 2, "tp": 4}]})").find("duplicate key 'tp'"),
            std::string::npos);
  // The same key in sibling objects is fine.
  EXPECT_NO_THROW(ParseJson(R"([{"a": 1}, {"a": 2}, {"b": {"a": 3}}])", "in.json"));
}

TEST(JsonTextTest, SyntaxErrorsAreOneBoundedLine) {
  const std::string huge = "[\"" + std::string(1'000'000, 'x');  // unterminated string
  const std::string err = ErrorOf(huge);
  EXPECT_NE(err.find("in.json: invalid JSON"), std::string::npos);
  EXPECT_LT(err.size(), 400u);
  EXPECT_EQ(err.find('\n'), std::string::npos);
  EXPECT_NE(ErrorOf("{\"a\": \x01}").find("invalid JSON"), std::string::npos);
}

TEST(JsonTextTest, MessagesDescribeContainersAndCutScalars) {
  nlohmann::json deep = nlohmann::json::array();
  for (int i = 0; i < 10; ++i) deep = nlohmann::json::array({deep});
  EXPECT_EQ(JsonForMessage(deep), "an array of 1 element(s)");
  EXPECT_EQ(JsonForMessage(nlohmann::json::object()), "an object of 0 field(s)");
  EXPECT_EQ(JsonForMessage(3.5), "3.5");
  const std::string cut = JsonForMessage(std::string(500, 'y'));
  EXPECT_LT(cut.size(), 90u);
  EXPECT_NE(cut.find("(502 bytes)"), std::string::npos);
}

}  // namespace
}  // namespace hydraulis
