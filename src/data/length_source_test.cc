// LoadLengths: format by extension, by content and by option; standard input.
#include <gtest/gtest.h>

#include <cstdint>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "../base/test_support.h"
#include "hydraulis/base/error.h"
#include "hydraulis/data/json_lines.h"
#include "hydraulis/data/length_source.h"
#include "hydraulis/data/lengths.h"
#include "test_files.h"

namespace hydraulis {
namespace {

using Lengths = std::vector<std::int64_t>;
using test_support::InvalidInputMessage;
using test_support::TempDir;

// Replaces std::cin's buffer for the object's lifetime.
class StdinFrom {
 public:
  explicit StdinFrom(const std::string& text) : in_(text), old_(std::cin.rdbuf(in_.rdbuf())) {}
  ~StdinFrom() { std::cin.rdbuf(old_); }
  StdinFrom(const StdinFrom&) = delete;
  StdinFrom& operator=(const StdinFrom&) = delete;

 private:
  std::istringstream in_;
  std::streambuf* old_;
};

TEST(LengthFormatTest, NamesRoundTrip) {
  for (LengthFormat f : {LengthFormat::kAuto, LengthFormat::kText, LengthFormat::kJsonLines,
                         LengthFormat::kMegatronIndex}) {
    EXPECT_EQ(ParseLengthFormat(LengthFormatName(f)), f);
  }
  EXPECT_EQ(ParseLengthFormat("txt"), LengthFormat::kText);
  EXPECT_EQ(ParseLengthFormat("json-lines"), LengthFormat::kJsonLines);
  EXPECT_EQ(ParseLengthFormat("megatron"), LengthFormat::kMegatronIndex);
  const std::string msg = InvalidInputMessage([] { ParseLengthFormat("csv"); });
  EXPECT_NE(msg.find("'csv'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("auto, text, jsonl or idx"), std::string::npos) << msg;
}

TEST(LengthFormatTest, ByExtension) {
  EXPECT_EQ(FormatFromExtension("a/b/data_text_document.idx"), LengthFormat::kMegatronIndex);
  EXPECT_EQ(FormatFromExtension("docs.jsonl"), LengthFormat::kJsonLines);
  EXPECT_EQ(FormatFromExtension("docs.ndjson"), LengthFormat::kJsonLines);
  EXPECT_EQ(FormatFromExtension("docs.txt"), LengthFormat::kAuto);
  EXPECT_EQ(FormatFromExtension("docs.json"), LengthFormat::kAuto);
  EXPECT_EQ(FormatFromExtension("docs"), LengthFormat::kAuto);
  EXPECT_EQ(FormatFromExtension("idx"), LengthFormat::kAuto);
}

TEST(TokenCounterTest, ByName) {
  EXPECT_EQ(ParseTokenCounter("bytes")("a b"), 3);
  EXPECT_EQ(ParseTokenCounter("words")("a b"), 2);
  EXPECT_NE(InvalidInputMessage([] { ParseTokenCounter("gpt2"); }).find("'gpt2'"),
            std::string::npos);
}

TEST(LoadLengthsTest, ChoosesTheReader) {
  TempDir dir;
  const std::string lines = "# lengths\n3\n1\n4\n";
  const std::string array = "[3, 1, 4]";
  const std::string json_lines = "{\"length\": 3}\n{\"length\": 1}\n{\"length\": 4}\n";
  const Lengths want = {3, 1, 4};
  EXPECT_EQ(LoadLengths(dir.Write("a.txt", lines)), want);
  EXPECT_EQ(LoadLengths(dir.Write("a.json", array)), want);
  EXPECT_EQ(LoadLengths(dir.Write("lines.json", json_lines)), want);  // sniffed: '{'
  EXPECT_EQ(LoadLengths(dir.Write("a.jsonl", json_lines)), want);
  EXPECT_EQ(LoadLengths(dir.Write("a.ndjson", json_lines)), want);
  EXPECT_EQ(LoadLengths(dir.Write("noext", lines)), want);
  EXPECT_EQ(LoadLengths(dir.Write("noext.jl", json_lines)), want);
  EXPECT_EQ(ReadLengths(dir.path() + "/a.jsonl"), want);

  // An explicit format overrides the extension.
  LengthSourceOptions text;
  text.format = LengthFormat::kText;
  EXPECT_EQ(LoadLengths(dir.Write("ints.jsonl", lines), text), want);
  const std::string msg = InvalidInputMessage([&] { LoadLengths(dir.path() + "/a.jsonl", text); });
  EXPECT_NE(msg.find("a.jsonl:1:"), std::string::npos) << msg;
  LengthSourceOptions jsonl;
  jsonl.format = LengthFormat::kJsonLines;
  EXPECT_EQ(LoadLengths(dir.Write("b.txt", json_lines), jsonl), want);
  const std::string msg2 = InvalidInputMessage([&] { LoadLengths(dir.path() + "/a.txt", jsonl); });
  EXPECT_NE(msg2.find("a.txt:1: invalid JSON"), std::string::npos) << msg2;
  // A .jsonl of integers is still JSON lines by extension, so it fails on its first lines.
  EXPECT_NE(InvalidInputMessage([&] {
              LoadLengths(dir.path() + "/ints.jsonl");
            }).find("ints.jsonl:1: invalid JSON"),
            std::string::npos);
  EXPECT_NE(InvalidInputMessage([&] {
              LoadLengths(dir.Write("n.jsonl", "7\n"));
            }).find("n.jsonl:1: expected a JSON object, got number"),
            std::string::npos);
}

TEST(LoadLengthsTest, PassesJsonOptions) {
  TempDir dir;
  const std::string path =
      dir.Write("docs.jsonl", "{\"text\": \"to be or not\"}\n{\"text\": \"x\", \"n\": 2}\n");
  LengthSourceOptions o;
  o.text_field = "text";
  EXPECT_EQ(LoadLengths(path, o), (Lengths{12, 1}));
  o.count_tokens = CountWhitespaceWords;
  EXPECT_EQ(LoadLengths(path, o), (Lengths{4, 1}));
  LengthSourceOptions field;
  field.length_field = "n";
  EXPECT_NE(
      InvalidInputMessage([&] { LoadLengths(path, field); }).find(path + ":1: missing field 'n'"),
      std::string::npos);
}

TEST(LoadLengthsTest, StandardInput) {
  {
    StdinFrom in("10\n20\n");
    EXPECT_EQ(LoadLengths("-"), (Lengths{10, 20}));
  }
  {
    StdinFrom in("{\"length\": 8}\n");
    EXPECT_EQ(LoadLengths("-"), (Lengths{8}));
  }
  {
    StdinFrom in("{\"n\": 8}\n");
    LengthSourceOptions o;
    o.format = LengthFormat::kJsonLines;
    o.length_field = "n";
    EXPECT_EQ(LoadLengths("-", o), (Lengths{8}));
  }
  {
    StdinFrom in("x\n");
    EXPECT_EQ(InvalidInputMessage([] { LoadLengths("-"); }).rfind("<stdin>:1:", 0), 0u);
  }
  LengthSourceOptions idx;
  idx.format = LengthFormat::kMegatronIndex;
  EXPECT_NE(InvalidInputMessage([&] { LoadLengths("-", idx); }).find("standard input"),
            std::string::npos);
}

TEST(LoadLengthsTest, MissingFilesNameThePath) {
  TempDir dir;
  for (const std::string name : {"none.txt", "none.jsonl", "none.idx", "none"}) {
    const std::string path = dir.path() + "/" + name;
    const std::string msg = InvalidInputMessage([&] { LoadLengths(path); });
    EXPECT_EQ(msg.rfind(path + ": cannot open", 0), 0u) << msg;
  }
}

}  // namespace
}  // namespace hydraulis
