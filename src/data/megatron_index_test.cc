// Megatron-LM .idx reading: indices written byte by byte here, every field checked, and
// every kind of damage rejected with the file and field named.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "../base/test_support.h"
#include "hydraulis/base/error.h"
#include "hydraulis/base/rng.h"
#include "hydraulis/data/document_length.h"
#include "hydraulis/data/length_source.h"
#include "hydraulis/data/lengths.h"
#include "hydraulis/data/megatron_index.h"
#include "test_files.h"

namespace hydraulis {
namespace {

using Lengths = std::vector<std::int64_t>;
using test_support::InvalidInputMessage;
using test_support::TempDir;

// Appends little-endian values, independently of the reader's decoding.
class ByteWriter {
 public:
  void Raw(const std::string& s) { bytes_ += s; }
  void U8(std::uint8_t v) { bytes_ += static_cast<char>(v); }
  void U64(std::uint64_t v) { Le(v, 8); }
  void I32(std::int32_t v) { Le(static_cast<std::uint32_t>(v), 4); }
  void I64(std::int64_t v) { Le(static_cast<std::uint64_t>(v), 8); }
  const std::string& bytes() const { return bytes_; }

 private:
  void Le(std::uint64_t v, int n) {
    for (int i = 0; i < n; ++i) bytes_ += static_cast<char>((v >> (8 * i)) & 0xff);
  }
  std::string bytes_;
};

const std::string kMagic("MMIDIDX\0\0", 9);

// What to write; pointers and counts follow from the lengths unless overridden, so a test
// can damage exactly one field.
struct IdxSpec {
  std::string magic = kMagic;
  std::uint64_t version = 1;
  std::uint8_t dtype_code = 4;  // int32
  std::vector<std::int32_t> lengths;
  std::optional<std::vector<std::int64_t>> pointers;
  std::vector<std::int64_t> document_indices;
  std::optional<std::uint64_t> sequence_count;
  std::optional<std::uint64_t> document_count;
  std::vector<std::int8_t> modes;
  std::string trailing;
};

std::int64_t TokenBytes(std::uint8_t code) {
  switch (code) {
    case 1:
    case 2:
      return 1;
    case 3:
    case 8:
      return 2;
    case 5:
    case 6:
      return 8;
    default:
      return 4;
  }
}

std::vector<std::int64_t> ConsistentPointers(const std::vector<std::int32_t>& lengths,
                                             std::uint8_t code) {
  std::vector<std::int64_t> p;
  std::int64_t at = 0;
  for (std::int32_t len : lengths) {
    p.push_back(at);
    at += std::int64_t{len} * TokenBytes(code);
  }
  return p;
}

std::string BuildIdx(const IdxSpec& s) {
  ByteWriter w;
  w.Raw(s.magic);
  w.U64(s.version);
  w.U8(s.dtype_code);
  w.U64(s.sequence_count.value_or(s.lengths.size()));
  w.U64(s.document_count.value_or(s.document_indices.size()));
  for (std::int32_t len : s.lengths) w.I32(len);
  for (std::int64_t p : s.pointers.value_or(ConsistentPointers(s.lengths, s.dtype_code))) w.I64(p);
  for (std::int64_t d : s.document_indices) w.I64(d);
  for (std::int8_t m : s.modes) w.U8(static_cast<std::uint8_t>(m));
  w.Raw(s.trailing);
  return w.bytes();
}

std::span<const std::byte> AsBytes(const std::string& s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

// Four sequences in three documents: [5], [0, 7], [3].
IdxSpec ThreeDocuments() {
  IdxSpec s;
  s.dtype_code = 8;  // uint16, as GPT tokenizers with vocabularies below 65,536 write
  s.lengths = {5, 0, 7, 3};
  s.document_indices = {0, 1, 3, 4};
  return s;
}

// Parses the bytes as "data.idx" and returns the error message (with a failure if none).
std::string ParseError(const std::string& bytes) {
  return InvalidInputMessage([&] { ParseMegatronIndex(AsBytes(bytes), "data.idx"); });
}

void ExpectParseError(const IdxSpec& spec, const std::string& fragment) {
  const std::string msg = ParseError(BuildIdx(spec));
  EXPECT_EQ(msg.rfind("data.idx: ", 0), 0u) << msg;
  EXPECT_NE(msg.find(fragment), std::string::npos) << msg << "\nexpected: " << fragment;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
}

TEST(MegatronIndexTest, ReadsEveryFieldFromAMappedFile) {
  TempDir dir;
  const std::string bytes = BuildIdx(ThreeDocuments());
  // Header 34 + 4 x 4 lengths + 4 x 8 pointers + 4 x 8 document indices.
  ASSERT_EQ(bytes.size(), 34u + 16u + 32u + 32u);
  const std::string path = dir.Write("data.idx", bytes);
  const MegatronIndex index = ReadMegatronIndex(path);
  EXPECT_EQ(index.version, 1u);
  EXPECT_EQ(index.dtype, MegatronDType::kUInt16);
  EXPECT_EQ(index.sequence_lengths, (std::vector<std::int32_t>{5, 0, 7, 3}));
  // uint16 tokens: 2 bytes each.
  EXPECT_EQ(index.sequence_pointers, (Lengths{0, 10, 10, 24}));
  EXPECT_EQ(index.document_indices, (Lengths{0, 1, 3, 4}));
  EXPECT_TRUE(index.sequence_modes.empty());

  EXPECT_EQ(MegatronDocumentLengths(index, path, false), (Lengths{5, 7, 3}));
  EXPECT_EQ(ReadMegatronDocumentLengths(path, false), (Lengths{5, 7, 3}));
  EXPECT_EQ(LoadLengths(path), (Lengths{5, 7, 3}));
  EXPECT_EQ(ReadLengths(path), (Lengths{5, 7, 3}));
  // The .bin is never opened: it does not even exist here.
  EXPECT_FALSE(std::filesystem::exists(dir.path() + "/data.bin"));
}

TEST(MegatronIndexTest, EveryDtypeCode) {
  const MegatronDType expected[] = {MegatronDType::kUInt8,   MegatronDType::kInt8,
                                    MegatronDType::kInt16,   MegatronDType::kInt32,
                                    MegatronDType::kInt64,   MegatronDType::kFloat64,
                                    MegatronDType::kFloat32, MegatronDType::kUInt16};
  const std::int64_t bytes[] = {1, 1, 2, 4, 8, 8, 4, 2};
  for (std::uint8_t code = 1; code <= 8; ++code) {
    SCOPED_TRACE("dtype code " + std::to_string(code));
    IdxSpec s = ThreeDocuments();
    s.dtype_code = code;
    const std::string raw = BuildIdx(s);
    const MegatronIndex index = ParseMegatronIndex(AsBytes(raw), "data.idx");
    EXPECT_EQ(index.dtype, expected[code - 1]);
    EXPECT_EQ(MegatronDTypeBytes(index.dtype), bytes[code - 1]);
    EXPECT_EQ(index.sequence_pointers[3], 12 * bytes[code - 1]);
  }
}

TEST(MegatronIndexTest, PointersMustMatchTheDtypeSize) {
  IdxSpec s = ThreeDocuments();                   // uint16
  s.pointers = ConsistentPointers(s.lengths, 4);  // written as if int32
  ExpectParseError(s, "sequence_pointers[1]: 20, expected 10");
}

TEST(MegatronIndexTest, MultimodalSequenceModes) {
  IdxSpec s = ThreeDocuments();
  s.modes = {0, 1, 0, -1};
  const std::string raw = BuildIdx(s);
  const MegatronIndex index = ParseMegatronIndex(AsBytes(raw), "data.idx");
  EXPECT_EQ(index.sequence_modes, (std::vector<std::int8_t>{0, 1, 0, -1}));
  EXPECT_EQ(MegatronDocumentLengths(index, "data.idx", false), (Lengths{5, 7, 3}));
}

TEST(MegatronIndexTest, EmptyIndexHasNoDocuments) {
  IdxSpec s;
  s.document_indices = {0};
  const std::string raw = BuildIdx(s);
  ASSERT_EQ(raw.size(), 34u + 8u);
  const MegatronIndex index = ParseMegatronIndex(AsBytes(raw), "data.idx");
  EXPECT_TRUE(index.sequence_lengths.empty());
  EXPECT_EQ(index.document_indices, (Lengths{0}));
  EXPECT_TRUE(MegatronDocumentLengths(index, "data.idx", false).empty());
  TempDir dir;
  const std::string path = dir.Write("empty.idx", raw);
  const std::string msg = InvalidInputMessage([&] { LoadLengths(path); });
  EXPECT_NE(msg.find(path + ": no document lengths"), std::string::npos) << msg;
}

TEST(MegatronIndexTest, EmptyDocumentsAreRejectedUnlessSkipped) {
  TempDir dir;
  IdxSpec s;
  s.lengths = {4, 0, 0, 6};
  // Document 1 has no sequences, document 2 only a zero-length one.
  s.document_indices = {0, 1, 1, 3, 4};
  const std::string path = dir.Write("holes.idx", BuildIdx(s));
  const std::string msg = InvalidInputMessage([&] { ReadMegatronDocumentLengths(path, false); });
  EXPECT_NE(msg.find(path + ": document 1 (sequences 1 to 1): no tokens"), std::string::npos)
      << msg;
  EXPECT_EQ(ReadMegatronDocumentLengths(path, true), (Lengths{4, 6}));
  LengthSourceOptions o;
  o.skip_empty = true;
  EXPECT_EQ(LoadLengths(path, o), (Lengths{4, 6}));
  s.document_indices = {0, 1, 3, 4};
  const std::string msg2 = InvalidInputMessage(
      [&] { ReadMegatronDocumentLengths(dir.Write("zero.idx", BuildIdx(s)), false); });
  EXPECT_NE(msg2.find("document 1 (sequences 1 to 3): no tokens"), std::string::npos) << msg2;
}

// A document's sequences may sum past kMaxDocumentTokens; the reader rejects it by index.
TEST(MegatronIndexTest, DocumentsOverTheMaximumLengthAreRejected) {
  TempDir dir;
  IdxSpec s;
  s.lengths = {5, INT32_MAX, INT32_MAX, 2, 3};
  s.document_indices = {0, 1, 4, 5};  // document 1: 2^32 - 2 + 2 = 2^32 tokens, the maximum
  EXPECT_EQ(ReadMegatronDocumentLengths(dir.Write("max.idx", BuildIdx(s)), false),
            (Lengths{5, kMaxDocumentTokens, 3}));
  s.lengths = {5, INT32_MAX, INT32_MAX, 3, 3};
  const std::string msg = InvalidInputMessage(
      [&] { ReadMegatronDocumentLengths(dir.Write("over.idx", BuildIdx(s)), false); });
  EXPECT_NE(msg.find(": document 1: a length must be at most 4294967296 tokens (2^32), got "
                     "4294967297"),
            std::string::npos)
      << msg;
}

TEST(MegatronIndexTest, HeaderErrors) {
  IdxSpec s = ThreeDocuments();
  s.magic = std::string("MMIDIDY\0\0", 9);
  ExpectParseError(s, "magic: not a Megatron-LM index");
  s.magic = std::string("TNTIDX\0\0\0", 9);
  ExpectParseError(s, "magic: a legacy (non-mmap) Megatron index");
  s = ThreeDocuments();
  s.version = 2;
  ExpectParseError(s, "version: unsupported version 2 (expected 1)");
  s.version = 0x0100000000000000ULL;  // 1 written big-endian
  ExpectParseError(s, "version: unsupported version");
  for (int code : {0, 9, 255}) {
    s = ThreeDocuments();
    s.dtype_code = static_cast<std::uint8_t>(code);
    ExpectParseError(s, "dtype: unknown dtype code " + std::to_string(code));
  }
  s = ThreeDocuments();
  s.document_count = 0;
  ExpectParseError(s, "document_count: 0");
  // A file that is not an index at all.
  EXPECT_NE(ParseError("1\n2\n3\n").find("data.idx: magic: not a Megatron-LM index"),
            std::string::npos);
}

TEST(MegatronIndexTest, CountsBeyondTheFileAreTruncation) {
  IdxSpec s = ThreeDocuments();
  // 8 lengths fit in the bytes written for 4 lengths and 2 pointers; the pointers run short.
  s.sequence_count = 8;
  ExpectParseError(s, "sequence_pointers: truncated file: sequence_count 8");
  // With 5 sequences the two arrays fit and the document indices run short.
  s.sequence_count = 5;
  ExpectParseError(s, "document_indices: truncated file: document_count 4");
  s.sequence_count = 1000;
  ExpectParseError(s, "sequence_lengths: truncated file: sequence_count 1000");
  // Counts whose byte size overflows 64 bits must not wrap around into a small size.
  s.sequence_count = UINT64_MAX / 4 + 2;
  ExpectParseError(s, "sequence_lengths: truncated file");
  s = ThreeDocuments();
  s.document_count = 5;
  ExpectParseError(s, "document_indices: truncated file: document_count 5");
  s.document_count = UINT64_MAX;
  ExpectParseError(s, "document_indices: truncated file");
  // Counts smaller than the arrays leave bytes that are not sequence modes.
  s = ThreeDocuments();
  s.document_count = 3;
  ExpectParseError(s, "file size: 114 bytes, but the counts give 106");
  s = ThreeDocuments();
  s.trailing = "x";
  ExpectParseError(s, "file size: 115 bytes");
}

// Every proper prefix of a valid index fails, naming the field where the bytes ran out.
TEST(MegatronIndexTest, EveryTruncationNamesTheField) {
  const std::string full = BuildIdx(ThreeDocuments());
  auto field_at = [](std::size_t size) -> std::string {
    if (size < 9) return "magic";
    if (size < 17) return "version";
    if (size < 18) return "dtype";
    if (size < 26) return "sequence_count";
    if (size < 34) return "document_count";
    if (size < 34 + 16) return "sequence_lengths";
    if (size < 34 + 16 + 32) return "sequence_pointers";
    return "document_indices";
  };
  for (std::size_t size = 0; size < full.size(); ++size) {
    SCOPED_TRACE("first " + std::to_string(size) + " bytes");
    const std::string msg = ParseError(full.substr(0, size));
    EXPECT_EQ(msg.rfind("data.idx: " + field_at(size) + ": truncated file", 0), 0u) << msg;
  }
  // The same through a mapped file, including an empty one.
  TempDir dir;
  for (std::size_t size : {std::size_t{0}, std::size_t{20}, full.size() - 1}) {
    const std::string path = dir.Write("cut.idx", full.substr(0, size));
    const std::string msg = InvalidInputMessage([&] { LoadLengths(path); });
    EXPECT_EQ(msg.rfind(path + ": " + field_at(size) + ": truncated file", 0), 0u) << msg;
  }
}

TEST(MegatronIndexTest, ArrayErrors) {
  IdxSpec s = ThreeDocuments();
  s.lengths[2] = -3;
  s.pointers = std::vector<std::int64_t>{0, 10, 10, 4};
  ExpectParseError(s, "sequence_lengths[2]: negative length -3");

  s = ThreeDocuments();
  s.pointers = std::vector<std::int64_t>{2, 12, 12, 26};
  ExpectParseError(s, "sequence_pointers[0]: 2, expected 0");
  s.pointers = std::vector<std::int64_t>{0, 10, 11, 24};
  ExpectParseError(s, "sequence_pointers[2]: 11, expected 10");
  s.pointers = std::vector<std::int64_t>{0, 10, 10, 25};
  ExpectParseError(s, "sequence_pointers[3]: 25, expected 24");

  s = ThreeDocuments();
  s.document_indices = {1, 1, 3, 4};
  ExpectParseError(s, "document_indices[0]: 1, expected 0");
  s.document_indices = {0, 3, 1, 4};
  ExpectParseError(s, "document_indices[2]: not non-decreasing (1 after 3)");
  s.document_indices = {0, 9, 9, 4};
  ExpectParseError(s, "document_indices[1]: 9 is past sequence_count 4");
  s.document_indices = {0, 1, 2, 3};
  ExpectParseError(s, "document_indices[3]: 3, expected sequence_count 4");
  s.document_indices = {0, -1, 3, 4};
  ExpectParseError(s, "document_indices[1]: not non-decreasing (-1 after 0)");
}

TEST(MegatronIndexTest, HandBuiltIndexIsChecked) {
  MegatronIndex index;
  index.sequence_lengths = {3, 4};
  index.document_indices = {0, 2, 1};
  InvalidInputMessage([&] { MegatronDocumentLengths(index, "x", false); });
  index.document_indices = {0, 1};
  InvalidInputMessage([&] { MegatronDocumentLengths(index, "x", false); });
  index.document_indices = {0, 1, 2};
  index.sequence_lengths = {3, -4};
  InvalidInputMessage([&] { MegatronDocumentLengths(index, "x", false); });
}

TEST(MegatronIndexTest, RandomIndexRoundTrip) {
  Rng rng(21);
  IdxSpec s;
  Lengths expected;
  s.document_indices = {0};
  for (int d = 0; d < 3000; ++d) {
    const auto sequences = 1 + static_cast<int>(rng.Below(4));  // sentence-split documents
    std::int64_t sum = 0;
    for (int q = 0; q < sequences; ++q) {
      s.lengths.push_back(1 + static_cast<std::int32_t>(rng.Below(40'000)));
      sum += s.lengths.back();
    }
    expected.push_back(sum);
    s.document_indices.push_back(static_cast<std::int64_t>(s.lengths.size()));
  }
  TempDir dir;
  const std::string path = dir.Write("shard_text_document.idx", BuildIdx(s));
  EXPECT_EQ(LoadLengths(path), expected);
  const MegatronIndex index = ReadMegatronIndex(path);
  EXPECT_EQ(index.document_indices, s.document_indices);
  EXPECT_EQ(MegatronDocumentLengths(index, path, false), expected);
  // An explicit format reads an index whatever its name.
  const std::string renamed = dir.Write("shard.dat", BuildIdx(s));
  LengthSourceOptions o;
  o.format = LengthFormat::kMegatronIndex;
  EXPECT_EQ(LoadLengths(renamed, o), expected);
}

TEST(MegatronIndexTest, FileErrors) {
  TempDir dir;
  const std::string missing = dir.path() + "/missing.idx";
  EXPECT_EQ(InvalidInputMessage([&] { LoadLengths(missing); }).rfind(missing + ": cannot open", 0),
            0u);
  EXPECT_NE(InvalidInputMessage([&] { ReadMegatronIndex(dir.path()); }).find("not a regular file"),
            std::string::npos);
  const std::string bin = dir.Write("data.bin", "\x01\x02");
  EXPECT_NE(InvalidInputMessage([&] { LoadLengths(bin); }).find("give its index"),
            std::string::npos);
}

}  // namespace
}  // namespace hydraulis
