// Streaming the texts of a JSON-lines corpus: decoded strings in order, blank lines
// skipped, and errors naming the file, the line and the field.
#include "hydraulis/data/json_lines_text.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "../base/test_support.h"
#include "test_files.h"

namespace hydraulis {
namespace {

using test_support::InvalidInputMessage;
using test_support::TempDir;

std::vector<std::string> ReadAll(const std::string& path, const std::string& field) {
  JsonLinesTextReader reader(path, field);
  std::vector<std::string> texts;
  std::string text;
  while (reader.Next(text)) texts.push_back(text);
  return texts;
}

TEST(JsonLinesTextReaderTest, ReadsTheFieldOfEveryObject) {
  TempDir dir;
  const std::string path = dir.Write(
      "c.jsonl",
      "{\"text\": \"caf\\u00e9\\n\", \"id\": 1}\n\n  \t\r\n{\"id\": 2, \"text\": \"\"}\r\n"
      "{\"text\": \"last\", \"body\": \"other\"}");
  EXPECT_EQ(ReadAll(path, "text"), (std::vector<std::string>{"caf\xc3\xa9\n", "", "last"}));
  JsonLinesTextReader reader(path, "text");
  std::string text;
  EXPECT_EQ(reader.line(), 0u);
  ASSERT_TRUE(reader.Next(text));
  EXPECT_EQ(reader.line(), 1u);
  ASSERT_TRUE(reader.Next(text));
  EXPECT_EQ(reader.line(), 4u);
}

TEST(JsonLinesTextReaderTest, ErrorsNameTheFileLineAndField) {
  TempDir dir;
  auto error = [&](const std::string& content) {
    const std::string path = dir.Write("e.jsonl", "{\"text\": \"ok\"}\n" + content);
    std::string msg = InvalidInputMessage([&] { ReadAll(path, "text"); });
    return msg.substr(msg.find("e.jsonl"));
  };
  EXPECT_EQ(error("[1]"), "e.jsonl:2: expected a JSON object, got array");
  EXPECT_EQ(error("{\"body\": \"x\"}"), "e.jsonl:2: missing field 'text'");
  EXPECT_EQ(error("{\"text\": 5}"), "e.jsonl:2: field 'text': expected a string, got number");
  EXPECT_EQ(error("{\"text\": \"x\"").rfind("e.jsonl:2: invalid JSON", 0), 0u);
  EXPECT_EQ(error("{\"text\": \"\xff\"}").rfind("e.jsonl:2: invalid JSON", 0), 0u);  // not UTF-8
  const std::string missing = InvalidInputMessage([&] { ReadAll(dir.path() + "/no.jsonl", "t"); });
  EXPECT_EQ(missing.rfind(dir.path() + "/no.jsonl: cannot open", 0), 0u) << missing;
}

}  // namespace
}  // namespace hydraulis
