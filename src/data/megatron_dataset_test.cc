// Megatron-LM datasets with tokens: the writer's exact bytes, round trips for every
// integer dtype, multi-sequence documents written by hand, and every error path.
#include "hydraulis/data/megatron_dataset.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "../base/test_support.h"
#include "hydraulis/base/error.h"
#include "hydraulis/base/file_io.h"
#include "hydraulis/base/rng.h"
#include "test_files.h"

namespace hydraulis {
namespace {

using Tokens = std::vector<std::int64_t>;
using test_support::InvalidInputMessage;
using test_support::TempDir;

// Little-endian bytes, written independently of the library's encoder.
class Bytes {
 public:
  Bytes& Raw(const std::string& s) {
    bytes_ += s;
    return *this;
  }
  Bytes& Le(std::uint64_t v, int n) {
    for (int i = 0; i < n; ++i) bytes_ += static_cast<char>((v >> (8 * i)) & 0xff);
    return *this;
  }
  const std::string& str() const { return bytes_; }

 private:
  std::string bytes_;
};

const std::string kMagic("MMIDIDX\0\0", 9);

// An index of `lengths` (one pointer per sequence, contiguous) split into documents.
std::string HandIndex(std::uint8_t dtype_code, int token_bytes,
                      const std::vector<std::int32_t>& lengths, const Tokens& document_indices) {
  Bytes b;
  b.Raw(kMagic).Le(1, 8).Le(dtype_code, 1).Le(lengths.size(), 8).Le(document_indices.size(), 8);
  for (std::int32_t len : lengths) b.Le(static_cast<std::uint32_t>(len), 4);
  std::uint64_t at = 0;
  for (std::int32_t len : lengths) {
    b.Le(at, 8);
    at += static_cast<std::uint64_t>(len) * static_cast<std::uint64_t>(token_bytes);
  }
  for (std::int64_t d : document_indices) b.Le(static_cast<std::uint64_t>(d), 8);
  return b.str();
}

void Write(const std::string& prefix, const std::vector<Tokens>& docs, MegatronDType dtype) {
  MegatronDatasetWriter writer(prefix, dtype);
  for (const Tokens& d : docs) writer.AddDocument(d);
  writer.Finish();
}

bool Exists(const std::string& path) { return std::filesystem::exists(path); }

TEST(MegatronDatasetTest, DTypeForVocab) {
  EXPECT_EQ(MegatronDTypeForVocab(1), MegatronDType::kUInt16);
  EXPECT_EQ(MegatronDTypeForVocab(256), MegatronDType::kUInt16);
  EXPECT_EQ(MegatronDTypeForVocab(65536), MegatronDType::kUInt16);
  EXPECT_EQ(MegatronDTypeForVocab(65537), MegatronDType::kInt32);
  EXPECT_EQ(MegatronDTypeForVocab(50257), MegatronDType::kUInt16);
  EXPECT_EQ(MegatronDTypeForVocab(std::int64_t{1} << 31), MegatronDType::kInt32);
  EXPECT_NE(InvalidInputMessage([] { MegatronDTypeForVocab(0); }).find("vocabulary size 0"),
            std::string::npos);
  EXPECT_FALSE(
      InvalidInputMessage([] { MegatronDTypeForVocab((std::int64_t{1} << 31) + 1); }).empty());
  EXPECT_EQ(MegatronDTypeName(MegatronDType::kUInt16), "uint16");
  EXPECT_EQ(MegatronDTypeName(MegatronDType::kFloat32), "float32");
}

TEST(MegatronDatasetTest, WritesTheExactMegatronFormat) {
  TempDir dir;
  const std::string prefix = dir.path() + "/d";
  Write(prefix, {{1, 2, 3}, {}, {65535}}, MegatronDType::kUInt16);
  Bytes idx;
  idx.Raw(kMagic).Le(1, 8).Le(8, 1).Le(3, 8).Le(4, 8);  // version, uint16, 3 seqs, 4 doc idx
  idx.Le(3, 4).Le(0, 4).Le(1, 4);                       // lengths
  idx.Le(0, 8).Le(6, 8).Le(6, 8);                       // pointers
  idx.Le(0, 8).Le(1, 8).Le(2, 8).Le(3, 8);              // document_indices
  EXPECT_EQ(ReadFileText(prefix + ".idx"), idx.str());
  EXPECT_EQ(ReadFileText(prefix + ".bin"), std::string("\x01\x00\x02\x00\x03\x00\xff\xff", 8));
  EXPECT_FALSE(Exists(prefix + ".bin.tmp"));
  EXPECT_FALSE(Exists(prefix + ".idx.tmp"));
  // The length reader agrees (the empty document is Megatron-legal).
  EXPECT_EQ(ReadMegatronDocumentLengths(prefix + ".idx", /*skip_empty=*/true), (Tokens{3, 1}));
}

TEST(MegatronDatasetTest, RoundTripEveryIntegerDType) {
  struct Case {
    MegatronDType dtype;
    std::int64_t max_id;
  };
  const Case cases[] = {
      {MegatronDType::kUInt8, 255},       {MegatronDType::kInt8, 127},
      {MegatronDType::kInt16, 32767},     {MegatronDType::kUInt16, 65535},
      {MegatronDType::kInt32, INT32_MAX}, {MegatronDType::kInt64, INT64_MAX},
  };
  Rng rng(7);
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(MegatronDTypeName(c.dtype)));
    TempDir dir;
    const std::string prefix = dir.path() + "/corpus";
    std::vector<Tokens> docs;
    std::int64_t total = 0;
    for (int d = 0; d < 40; ++d) {
      Tokens doc(static_cast<std::size_t>(rng.Below(31)));
      for (auto& t : doc) {
        t = rng.Below(50) == 0 ? c.max_id : static_cast<std::int64_t>(rng.Below(128));
      }
      total += static_cast<std::int64_t>(doc.size());
      docs.push_back(doc);
    }
    docs.push_back({0, c.max_id});
    total += 2;
    Write(prefix, docs, c.dtype);
    const MegatronDataset ds(prefix);
    EXPECT_EQ(ds.dtype(), c.dtype);
    EXPECT_EQ(ds.prefix(), prefix);
    ASSERT_EQ(ds.num_documents(), docs.size());
    EXPECT_EQ(ds.num_tokens(), total);
    for (std::size_t i = 0; i < docs.size(); ++i) {
      EXPECT_EQ(ds.DocumentLength(i), static_cast<std::int64_t>(docs[i].size()));
      EXPECT_EQ(ds.Document(i), docs[i]) << "document " << i;
    }
  }
}

TEST(MegatronDatasetTest, EmptyDatasetRoundTrips) {
  TempDir dir;
  Write(dir.path() + "/e", {}, MegatronDType::kInt32);
  const MegatronDataset ds(dir.path() + "/e");
  EXPECT_EQ(ds.num_documents(), 0u);
  EXPECT_EQ(ds.num_tokens(), 0);
}

TEST(MegatronDatasetTest, DocumentsOfSeveralSequencesAreConcatenated) {
  // Two documents: sequences [2, 1] and [3], int32, written by hand.
  TempDir dir;
  dir.Write("m.idx", HandIndex(4, 4, {2, 1, 3}, {0, 2, 3}));
  Bytes bin;
  for (std::uint32_t t : {10u, 11u, 12u, 20u, 21u, 22u}) bin.Le(t, 4);
  dir.Write("m.bin", bin.str());
  MegatronDataset ds(dir.path() + "/m");
  ASSERT_EQ(ds.num_documents(), 2u);
  EXPECT_EQ(ds.DocumentLength(0), 3);
  EXPECT_EQ(ds.Document(0), (Tokens{10, 11, 12}));
  EXPECT_EQ(ds.Document(1), (Tokens{20, 21, 22}));
  // Movable: the moved-to object reads the same mapping.
  MegatronDataset moved = std::move(ds);
  EXPECT_EQ(moved.Document(1), (Tokens{20, 21, 22}));
}

TEST(MegatronDatasetTest, BinSizeMustMatchTheIndex) {
  TempDir dir;
  const std::string prefix = dir.path() + "/t";
  Write(prefix, {{1, 2, 3}, {4, 5}}, MegatronDType::kUInt16);
  const std::string bin = ReadFileText(prefix + ".bin");
  dir.Write("t.bin", bin.substr(0, bin.size() - 1));
  std::string msg = InvalidInputMessage([&] { MegatronDataset ds(prefix); });
  EXPECT_EQ(msg.rfind(prefix + ".bin: size 9 bytes", 0), 0u) << msg;
  EXPECT_NE(msg.find("says 10"), std::string::npos) << msg;
  EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
  dir.Write("t.bin", bin + "xx");
  msg = InvalidInputMessage([&] { MegatronDataset ds(prefix); });
  EXPECT_NE(msg.find("trailing bytes"), std::string::npos) << msg;
  std::filesystem::remove(prefix + ".bin");
  msg = InvalidInputMessage([&] { MegatronDataset ds(prefix); });
  EXPECT_EQ(msg.rfind(prefix + ".bin: cannot open", 0), 0u) << msg;
}

TEST(MegatronDatasetTest, FloatDTypesAreRejectedAtOpen) {
  TempDir dir;
  for (const auto& [code, name] : {std::pair{7, "float32"}, std::pair{6, "float64"}}) {
    const int bytes = code == 7 ? 4 : 8;
    dir.Write("f.idx", HandIndex(static_cast<std::uint8_t>(code), bytes, {2}, {0, 1}));
    dir.Write("f.bin", std::string(static_cast<std::size_t>(2 * bytes), '\0'));
    const std::string msg = InvalidInputMessage([&] { MegatronDataset ds(dir.path() + "/f"); });
    EXPECT_EQ(msg.rfind(dir.path() + "/f.idx: dtype: " + name, 0), 0u) << msg;
    EXPECT_NE(msg.find("integer dtype"), std::string::npos) << msg;
  }
}

TEST(MegatronDatasetTest, MalformedIndexIsReportedByTheIndexReader) {
  TempDir dir;
  dir.Write("bad.idx", "MMIDIDX");
  dir.Write("bad.bin", "");
  const std::string msg = InvalidInputMessage([&] { MegatronDataset ds(dir.path() + "/bad"); });
  EXPECT_EQ(msg.rfind(dir.path() + "/bad.idx:", 0), 0u) << msg;
  const std::string missing =
      InvalidInputMessage([&] { MegatronDataset ds(dir.path() + "/none"); });
  EXPECT_EQ(missing.rfind(dir.path() + "/none.idx: cannot open", 0), 0u) << missing;
}

TEST(MegatronDatasetTest, DocumentOutOfRangeAndNegativeIds) {
  TempDir dir;
  dir.Write("n.idx", HandIndex(4, 4, {2}, {0, 1}));
  dir.Write("n.bin", Bytes().Le(5, 4).Le(0xfffffffe, 4).str());  // 5, -2
  const MegatronDataset ds(dir.path() + "/n");
  EXPECT_EQ(ds.DocumentLength(0), 2);
  std::string msg = InvalidInputMessage([&] { ds.Document(0); });
  EXPECT_EQ(msg, dir.path() + "/n.bin: document 0, token 1: negative id -2");
  msg = InvalidInputMessage([&] { ds.Document(1); });
  EXPECT_NE(msg.find("document 1 out of range (1 documents)"), std::string::npos) << msg;
  EXPECT_FALSE(InvalidInputMessage([&] { ds.DocumentLength(5); }).empty());
}

TEST(MegatronDatasetTest, IdsOutOfRangeAreRejectedAtWriteTime) {
  TempDir dir;
  const std::string prefix = dir.path() + "/w";
  struct Case {
    MegatronDType dtype;
    std::int64_t bad;
    std::string range;
  };
  const Case cases[] = {
      {MegatronDType::kUInt16, 65536, "uint16 (0 to 65535)"},
      {MegatronDType::kUInt16, -1, "uint16 (0 to 65535)"},
      {MegatronDType::kUInt8, 256, "uint8 (0 to 255)"},
      {MegatronDType::kInt8, 128, "int8 (0 to 127)"},
      {MegatronDType::kInt16, 32768, "int16 (0 to 32767)"},
      {MegatronDType::kInt32, std::int64_t{INT32_MAX} + 1, "int32 (0 to 2147483647)"},
      {MegatronDType::kInt64, -5, "int64"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.range);
    MegatronDatasetWriter writer(prefix, c.dtype);
    writer.AddDocument(Tokens{1, 2});
    const std::string msg = InvalidInputMessage([&] { writer.AddDocument(Tokens{3, c.bad}); });
    EXPECT_EQ(msg, prefix + ".bin: document 1, token 1: id " + std::to_string(c.bad) +
                       " does not fit " + c.range +
                       (c.dtype == MegatronDType::kInt64 ? " (0 to 9223372036854775807)" : ""));
    // Nothing of the bad document was written; the writer goes on.
    writer.AddDocument(Tokens{4});
    writer.Finish();
    const MegatronDataset ds(prefix);
    ASSERT_EQ(ds.num_documents(), 2u);
    EXPECT_EQ(ds.Document(1), (Tokens{4}));
  }
}

TEST(MegatronDatasetTest, WriterRejectsFloatDTypesAndUnwritablePaths) {
  TempDir dir;
  std::string msg = InvalidInputMessage(
      [&] { MegatronDatasetWriter w(dir.path() + "/f", MegatronDType::kFloat32); });
  EXPECT_NE(msg.find("float32"), std::string::npos) << msg;
  msg = InvalidInputMessage(
      [&] { MegatronDatasetWriter w(dir.path() + "/no/such/dir/x", MegatronDType::kUInt16); });
  EXPECT_EQ(msg.rfind(dir.path() + "/no/such/dir/x.bin.tmp: cannot create", 0), 0u) << msg;
}

TEST(MegatronDatasetTest, OutputAppearsOnlyAtFinish) {
  TempDir dir;
  const std::string prefix = dir.path() + "/a";
  Write(prefix, {{7, 7}}, MegatronDType::kUInt16);
  const std::string old_bin = ReadFileText(prefix + ".bin");
  const std::string old_idx = ReadFileText(prefix + ".idx");
  {
    MegatronDatasetWriter writer(prefix, MegatronDType::kUInt16);
    writer.AddDocument(Tokens{1, 2, 3});
    EXPECT_TRUE(Exists(prefix + ".bin.tmp"));
    EXPECT_EQ(ReadFileText(prefix + ".bin"), old_bin);
    // Destroyed without Finish, as after an error.
  }
  EXPECT_FALSE(Exists(prefix + ".bin.tmp"));
  EXPECT_FALSE(Exists(prefix + ".idx.tmp"));
  EXPECT_EQ(ReadFileText(prefix + ".bin"), old_bin);
  EXPECT_EQ(ReadFileText(prefix + ".idx"), old_idx);

  MegatronDatasetWriter writer(prefix, MegatronDType::kUInt16);
  writer.AddDocument(Tokens{1, 2, 3});
  writer.Finish();
  EXPECT_EQ(writer.num_documents(), 1);
  EXPECT_EQ(writer.num_tokens(), 3);
  EXPECT_EQ(MegatronDataset(prefix).Document(0), (Tokens{1, 2, 3}));
  EXPECT_THROW(writer.AddDocument(Tokens{1}), InternalError);
  EXPECT_THROW(writer.Finish(), InternalError);
}

// Training checks the data against the model's vocabulary before it starts.
TEST(MegatronDatasetTest, FindsTheFirstIdOutsideAVocabulary) {
  TempDir dir;
  const std::string prefix = dir.path() + "/v";
  Write(prefix, {Tokens{1, 2}, Tokens{}, Tokens{3, 300, 5, 400}}, MegatronDType::kUInt16);
  const MegatronDataset data(prefix);
  const auto bad = data.FindIdOutside(256);
  ASSERT_TRUE(bad.has_value());
  EXPECT_EQ(bad->document, 2u);
  EXPECT_EQ(bad->position, 1);
  EXPECT_EQ(bad->id, 300);
  EXPECT_EQ(data.FindIdOutside(400)->id, 400);
  EXPECT_FALSE(data.FindIdOutside(401).has_value());
  EXPECT_FALSE(data.FindIdOutside(65536).has_value());  // uint16 cannot hold a larger id
  EXPECT_EQ(data.FindIdOutside(1)->id, 1);
}

}  // namespace
}  // namespace hydraulis
