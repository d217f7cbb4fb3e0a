// Preprocessing a JSON-lines corpus into a Megatron-LM dataset: the tokens written, empty
// documents skipped and counted, --max-documents, end-of-document ids, and errors that
// leave earlier output untouched.
#include "hydraulis/data/preprocess.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "../base/test_support.h"
#include "hydraulis/base/file_io.h"
#include "hydraulis/data/megatron_dataset.h"
#include "test_files.h"

namespace hydraulis {
namespace {

using Ids = std::vector<std::int64_t>;
using test_support::InvalidInputMessage;
using test_support::TempDir;

// One id (the word count, capped) per whitespace-separated word, end-of-document id 99,
// vocabulary 100_000 (so the dataset is int32).
class WordTokenizer final : public Tokenizer {
 public:
  std::vector<std::int64_t> Encode(std::string_view text) const override {
    std::vector<std::int64_t> ids;
    bool in_word = false;
    for (char c : text) {
      if (c != ' ' && !in_word) ids.push_back(static_cast<std::int64_t>(ids.size()) + 70000);
      in_word = c != ' ';
    }
    return ids;
  }
  std::int64_t vocab_size() const override { return 100000; }
  std::optional<std::int64_t> eod_id() const override { return 99; }
};

const char kCorpus[] =
    "{\"text\": \"ab\"}\n"
    "{\"text\": \"\"}\n"
    "\n"
    "{\"text\": \"c d e\", \"meta\": 1}\n"
    "{\"text\": \"\\u00e9\"}\n";

TEST(PreprocessTest, WritesEveryNonEmptyDocument) {
  TempDir dir;
  PreprocessOptions o;
  o.input = dir.Write("in.jsonl", kCorpus);
  o.output_prefix = dir.path() + "/out";
  const PreprocessResult r = PreprocessJsonLines(o, ByteTokenizer());
  EXPECT_EQ(r.documents, 3);
  EXPECT_EQ(r.tokens, 2 + 5 + 2);
  EXPECT_EQ(r.empty_skipped, 1);
  EXPECT_EQ(r.dtype, MegatronDType::kUInt16);
  const MegatronDataset ds(o.output_prefix);
  ASSERT_EQ(ds.num_documents(), 3u);
  EXPECT_EQ(ds.Document(0), (Ids{'a', 'b'}));
  EXPECT_EQ(ds.Document(1), (Ids{'c', ' ', 'd', ' ', 'e'}));
  EXPECT_EQ(ds.Document(2), (Ids{0xc3, 0xa9}));
  EXPECT_FALSE(std::filesystem::exists(o.output_prefix + ".bin.tmp"));
}

TEST(PreprocessTest, MaxDocumentsAndEndOfDocument) {
  TempDir dir;
  PreprocessOptions o;
  // The line after the second document is not read, so its damage goes unnoticed.
  o.input = dir.Write("in.jsonl", std::string(kCorpus) + "not json\n");
  o.output_prefix = dir.path() + "/out";
  o.max_documents = 2;
  o.append_eod = true;
  const PreprocessResult r = PreprocessJsonLines(o, WordTokenizer());
  EXPECT_EQ(r.documents, 2);
  EXPECT_EQ(r.tokens, 2 + 4);
  EXPECT_EQ(r.dtype, MegatronDType::kInt32);
  const MegatronDataset ds(o.output_prefix);
  EXPECT_EQ(ds.Document(0), (Ids{70000, 99}));
  EXPECT_EQ(ds.Document(1), (Ids{70000, 70001, 70002, 99}));
  o.max_documents = 0;
  EXPECT_NE(InvalidInputMessage([&] {
              PreprocessJsonLines(o, WordTokenizer());
            }).find("in.jsonl:6: invalid JSON"),
            std::string::npos);
}

TEST(PreprocessTest, ErrorsLeaveEarlierOutputUntouched) {
  TempDir dir;
  PreprocessOptions o;
  o.input = dir.Write("good.jsonl", kCorpus);
  o.output_prefix = dir.path() + "/out";
  PreprocessJsonLines(o, ByteTokenizer());
  const std::string bin = ReadFileText(o.output_prefix + ".bin");
  const std::string idx = ReadFileText(o.output_prefix + ".idx");

  auto error = [&](const std::string& corpus) {
    o.input = dir.Write("bad.jsonl", corpus);
    std::string msg = InvalidInputMessage([&] { PreprocessJsonLines(o, ByteTokenizer()); });
    EXPECT_EQ(ReadFileText(o.output_prefix + ".bin"), bin);
    EXPECT_EQ(ReadFileText(o.output_prefix + ".idx"), idx);
    EXPECT_FALSE(std::filesystem::exists(o.output_prefix + ".bin.tmp"));
    EXPECT_FALSE(std::filesystem::exists(o.output_prefix + ".idx.tmp"));
    return msg.substr(msg.find("bad.jsonl"));
  };
  EXPECT_EQ(error("{\"text\": \"x\"}\n{\"txt\": \"y\"}\n"), "bad.jsonl:2: missing field 'text'");
  EXPECT_EQ(error("{\"text\": \"x\"}\n{\"text\": null}\n"),
            "bad.jsonl:2: field 'text': expected a string, got null");
  EXPECT_EQ(error("{\"text\": \"\"}\n\n"), "bad.jsonl: no documents with tokens (1 empty)");
  EXPECT_EQ(error(""), "bad.jsonl: no documents with tokens (0 empty)");

  o.input = dir.path() + "/good.jsonl";
  o.append_eod = true;
  EXPECT_NE(InvalidInputMessage([&] {
              PreprocessJsonLines(o, ByteTokenizer());
            }).find("no end-of-document id"),
            std::string::npos);
  o.append_eod = false;
  o.max_documents = -1;
  EXPECT_NE(
      InvalidInputMessage([&] { PreprocessJsonLines(o, ByteTokenizer()); }).find("max_documents"),
      std::string::npos);
}

}  // namespace
}  // namespace hydraulis
