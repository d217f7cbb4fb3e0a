// JSON-lines length sources: integer fields, text fields through the tokenizer hook, and
// errors naming the line and the field.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "../base/test_support.h"
#include "hydraulis/base/error.h"
#include "hydraulis/data/document_length.h"
#include "hydraulis/data/json_lines.h"

namespace hydraulis {
namespace {

using Lengths = std::vector<std::int64_t>;
using test_support::InvalidInputMessage;

LengthSourceOptions TextField(const std::string& field, TokenCounter counter = {}) {
  LengthSourceOptions o;
  o.text_field = field;
  o.count_tokens = std::move(counter);
  return o;
}

void ExpectError(const std::string& text, const LengthSourceOptions& o,
                 const std::string& fragment) {
  SCOPED_TRACE("input: " + text);
  const std::string msg = InvalidInputMessage([&] { ParseJsonLinesLengths(text, "d.jsonl", o); });
  EXPECT_EQ(msg.rfind("d.jsonl", 0), 0u) << msg;
  EXPECT_NE(msg.find(fragment), std::string::npos) << msg << "\nexpected: " << fragment;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
}

TEST(TokenCounterTest, Utf8Bytes) {
  EXPECT_EQ(CountUtf8Bytes(""), 0);
  EXPECT_EQ(CountUtf8Bytes("hello"), 5);
  EXPECT_EQ(CountUtf8Bytes("h\xc3\xa9llo"), 6);              // é is two bytes
  EXPECT_EQ(CountUtf8Bytes("\xe6\x97\xa5\xe6\x9c\xac"), 6);  // 日本
  EXPECT_EQ(CountUtf8Bytes(std::string_view("a\0b", 3)), 3);
}

TEST(TokenCounterTest, WhitespaceWords) {
  EXPECT_EQ(CountWhitespaceWords(""), 0);
  EXPECT_EQ(CountWhitespaceWords("   \t\n"), 0);
  EXPECT_EQ(CountWhitespaceWords("one"), 1);
  EXPECT_EQ(CountWhitespaceWords("  the quick\tbrown\r\nfox  "), 4);
  EXPECT_EQ(CountWhitespaceWords("a\vb\fc"), 3);
  EXPECT_EQ(CountWhitespaceWords("don't stop-me now."), 3);
}

TEST(JsonLinesTest, IntegerLengthField) {
  const std::string text =
      "{\"length\": 5}\n"
      "\n"
      "  {\"id\": 2, \"text\": \"ignored\", \"length\": 7}  \r\n"
      "{\"length\": 4294967296}";
  EXPECT_EQ(ParseJsonLinesLengths(text, "d.jsonl", {}), (Lengths{5, 7, kMaxDocumentTokens}));
  LengthSourceOptions o;
  o.length_field = "num_tokens";
  EXPECT_EQ(ParseJsonLinesLengths("{\"num_tokens\": 3, \"length\": 99}\n", "d.jsonl", o),
            (Lengths{3}));
}

TEST(JsonLinesTest, TextFieldCountedByTheHook) {
  // JSON escapes are decoded before counting: \u00e9 is the two UTF-8 bytes of é.
  const std::string text =
      "{\"text\": \"hello world\"}\n"
      "{\"text\": \"caf\\u00e9\", \"length\": 1}\n"
      "{\"text\": \"\xe6\x97\xa5\xe6\x9c\xac\"}\n";
  EXPECT_EQ(ParseJsonLinesLengths(text, "d.jsonl", TextField("text")), (Lengths{11, 5, 6}));
  EXPECT_EQ(ParseJsonLinesLengths(text, "d.jsonl", TextField("text", CountWhitespaceWords)),
            (Lengths{2, 1, 1}));
  // A custom tokenizer: roughly four bytes per token, at least one.
  auto four = [](std::string_view s) { return static_cast<std::int64_t>((s.size() + 3) / 4); };
  EXPECT_EQ(ParseJsonLinesLengths(text, "d.jsonl", TextField("text", four)), (Lengths{3, 2, 2}));
  // The hook sees exactly the field's text.
  std::vector<std::string> seen;
  auto record = [&](std::string_view s) {
    seen.emplace_back(s);
    return std::int64_t{1};
  };
  ParseJsonLinesLengths("{\"body\": \"a b\", \"text\": \"x\"}\n{\"body\": \"\\n\"}", "d.jsonl",
                        TextField("body", record));
  EXPECT_EQ(seen, (std::vector<std::string>{"a b", "\n"}));
}

TEST(JsonLinesTest, EmptyDocumentsAreRejectedUnlessSkipped) {
  ExpectError("{\"length\": 3}\n{\"length\": 0}\n", {}, "d.jsonl:2: field 'length'");
  ExpectError("{\"text\": \"a\"}\n{\"text\": \"\"}\n", TextField("text"),
              "d.jsonl:2: field 'text': no tokens");
  ExpectError("{\"text\": \"  \"}\n", TextField("text", CountWhitespaceWords),
              "d.jsonl:1: field 'text': no tokens");
  LengthSourceOptions o;
  o.skip_empty = true;
  EXPECT_EQ(ParseJsonLinesLengths("{\"length\": 0}\n{\"length\": 4}\n", "d.jsonl", o),
            (Lengths{4}));
  ExpectError("{\"length\": -1}\n", o,
              "d.jsonl:1: field 'length': a length must be an integer >= 0");
  o.text_field = "text";
  EXPECT_EQ(ParseJsonLinesLengths("{\"text\": \"\"}\n{\"text\": \"ab\"}\n", "d.jsonl", o),
            (Lengths{2}));
  ExpectError("{\"text\": \"\"}\n", o, "d.jsonl: no document lengths");
}

TEST(JsonLinesTest, ErrorsNameTheLineAndField) {
  const LengthSourceOptions plain;
  ExpectError("{\"length\": 1}\n{\"length\": 2\n", plain, "d.jsonl:2: invalid JSON");
  ExpectError("{\"length\": 1}\n[1, 2]\n", plain, "d.jsonl:2: expected a JSON object, got array");
  ExpectError("5\n", plain, "d.jsonl:1: expected a JSON object, got number");
  ExpectError("{\"length\": 1}\n\n{\"len\": 2}\n", plain, "d.jsonl:3: missing field 'length'");
  ExpectError("{\"length\": \"12\"}", plain, "d.jsonl:1: field 'length': a length must be");
  ExpectError("{\"length\": 2.5}", plain, "got 2.5");
  ExpectError("{\"length\": -4}", plain, "got -4");
  ExpectError("{\"length\": null}", plain, "got null");
  ExpectError("{\"length\": true}", plain, "got true");
  // Beyond int64 (unsigned, or beyond uint64 and so a double): too long, never wrapped.
  for (const char* huge_length :
       {"9223372036854775808", "18446744073709551615", "18446744073709551616", "1e30"}) {
    ExpectError(std::string("{\"length\": ") + huge_length + "}", plain,
                "d.jsonl:1: field 'length': a length must be at most 4294967296 tokens (2^32), "
                "got ");
  }
  ExpectError("{\"length\": 18446744073709551615}", plain, "got 18446744073709551615");
  ExpectError("{\"length\": 1}\n{\"length\": 9223372036854775807}", plain,
              "d.jsonl:2: field 'length': a length must be at most 4294967296 tokens (2^32), got "
              "9223372036854775807");
  auto huge = [](std::string_view) { return kMaxDocumentTokens + 1; };
  ExpectError("{\"text\": \"x\"}", TextField("text", huge),
              "d.jsonl:1: field 'text': a length must be at most 4294967296 tokens");
  ExpectError("{\"length\": 1} {\"length\": 2}\n", plain, "d.jsonl:1: invalid JSON");
  ExpectError("{\"text\": 5}", TextField("text"), "d.jsonl:1: field 'text': expected a string");
  ExpectError("{\"length\": 5}", TextField("text"), "d.jsonl:1: missing field 'text'");
  auto negative = [](std::string_view) { return std::int64_t{-1}; };
  ExpectError("{\"text\": \"x\"}", TextField("text", negative),
              "field 'text': the token counter returned -1");
  for (const std::string empty : {"", "\n", "  \r\n\n"}) ExpectError(empty, plain, "no document");
  LengthSourceOptions unnamed;
  unnamed.length_field = "";
  ExpectError("{\"length\": 1}", unnamed, "no JSON field named");
}

}  // namespace
}  // namespace hydraulis
