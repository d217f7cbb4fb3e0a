#include "hydraulis/checkpoint/safetensors.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "hydraulis/base/error.h"
#include "hydraulis/base/file_io.h"

namespace hydraulis {
namespace {

std::span<const std::byte> AsBytes(const std::string& s) {
  return std::as_bytes(std::span(s.data(), s.size()));
}

template <typename T>
std::span<const std::byte> AsBytes(const std::vector<T>& v) {
  return std::as_bytes(std::span(v));
}

// The message of the InvalidInput `f` throws ("" when it throws none).
template <typename F>
std::string ErrorOf(F f) {
  try {
    f();
  } catch (const InvalidInput& e) {
    return e.what();
  }
  return "";
}

std::string ParseError(const std::string& file) {
  return ErrorOf([&] { ParseSafetensors(AsBytes(file), "m.safetensors"); });
}

// A file from a header text and data bytes, as the format lays them out.
std::string FileOf(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) {
    out[static_cast<std::size_t>(i)] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  }
  return out + header + data;
}

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("hydraulis-st-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }

  std::filesystem::path dir_;
  const std::vector<float> weight_{1.5f, -2.0f, 3.25f, 0.0f, 1e-3f, 7.0f};
  const std::vector<std::uint16_t> bf16_{0x3f80, 0xc000, 0x0001, 0x7f80};
  const std::vector<std::int64_t> scalar_{42};
  std::vector<SafetensorsEntry> Entries() const {
    return {{"model.embed_tokens.weight", SafetensorsDType::kF32, {2, 3}, AsBytes(weight_)},
            {"lm_head.weight", SafetensorsDType::kBF16, {4}, AsBytes(bf16_)},
            {"step", SafetensorsDType::kI64, {}, AsBytes(scalar_)},
            {"empty", SafetensorsDType::kF16, {0, 5}, {}}};
  }
};

TEST_F(SafetensorsTest, WritesAndReadsBack) {
  WriteSafetensors(Path("m.safetensors"), Entries(), {{"format", "pt"}});
  EXPECT_FALSE(std::filesystem::exists(Path("m.safetensors.tmp")));
  const SafetensorsFile file(Path("m.safetensors"));
  EXPECT_EQ(file.header().data_offset % 8, 0u);  // header padded as the reference does
  EXPECT_EQ(file.header().metadata.at("format"), "pt");
  ASSERT_EQ(file.header().tensors.size(), 4u);
  const SafetensorsTensor& w = file.Find("model.embed_tokens.weight");
  EXPECT_EQ(w.dtype, SafetensorsDType::kF32);
  EXPECT_EQ(w.shape, (std::vector<std::int64_t>{2, 3}));
  EXPECT_EQ(w.numel(), 6);
  std::vector<float> back(6);
  std::memcpy(back.data(), file.Bytes(w).data(), 24);
  EXPECT_EQ(back, weight_);
  EXPECT_EQ(file.Find("step").numel(), 1);
  EXPECT_EQ(file.Find("empty").numel(), 0);
  EXPECT_EQ(file.Bytes(file.Find("lm_head.weight")).size(), 8u);
  EXPECT_EQ(ErrorOf([&] { file.Find("model.norm.weight"); }),
            Path("m.safetensors") + ": no tensor 'model.norm.weight'");
}

// A released tensor's pages are read from the file again when touched: its bytes are
// unchanged (a tensor of several pages, so whole pages are really dropped).
TEST_F(SafetensorsTest, ReleasedTensorsReadBackTheSame) {
  std::vector<float> big(1 << 16);
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<float>(i) * 0.5f;
  WriteSafetensors(
      Path("big.safetensors"),
      {{"w", SafetensorsDType::kF32, {static_cast<std::int64_t>(big.size())}, AsBytes(big)}}, {});
  const SafetensorsFile file(Path("big.safetensors"));
  const SafetensorsTensor& w = file.Find("w");
  std::vector<float> first(big.size()), second(big.size());
  std::memcpy(first.data(), file.Bytes(w).data(), file.Bytes(w).size());
  file.Release(w);
  std::memcpy(second.data(), file.Bytes(w).data(), file.Bytes(w).size());
  EXPECT_EQ(first, big);
  EXPECT_EQ(second, big);
}

// The header as the reference writer lays it out (compact JSON, keys in its order).
TEST_F(SafetensorsTest, ReadsTheReferenceLayout) {
  const std::string header =
      R"({"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
      R"("b":{"dtype":"U8","shape":[1,3],"data_offsets":[8,11]}})";
  const SafetensorsHeader h =
      ParseSafetensors(AsBytes(FileOf(header, std::string(11, 'x'))), "r.safetensors");
  ASSERT_EQ(h.tensors.size(), 2u);
  EXPECT_EQ(h.tensors[1].name, "b");
  EXPECT_EQ(h.tensors[1].end, 11u);
  EXPECT_EQ(h.data_offset, 8 + header.size());
}

TEST_F(SafetensorsTest, EveryPrefixIsRejected) {
  WriteSafetensors(Path("m.safetensors"), Entries());
  const std::string whole = ReadFileText(Path("m.safetensors"));
  for (std::size_t n = 0; n < whole.size(); ++n) {
    EXPECT_NE(ParseError(whole.substr(0, n)), "") << "prefix of " << n << " bytes";
  }
  EXPECT_EQ(ParseError(whole), "");
}

TEST_F(SafetensorsTest, FlippedHeaderBytesNeverCrash) {
  WriteSafetensors(Path("m.safetensors"), Entries());
  const std::string whole = ReadFileText(Path("m.safetensors"));
  int rejected = 0;
  for (std::size_t i = 0; i < whole.size() - 40; ++i) {
    for (int bit : {0x01, 0x20, 0x80}) {
      std::string damaged = whole;
      damaged[i] = static_cast<char>(static_cast<unsigned char>(damaged[i]) ^ bit);
      rejected += ParseError(damaged).empty() ? 0 : 1;  // anything but InvalidInput escapes
    }
  }
  EXPECT_GT(rejected, 0);
}

TEST_F(SafetensorsTest, NamesTheFieldOfEveryDamage) {
  auto with = [](const std::string& tensor) {
    return FileOf(R"({"a":)" + tensor + "}", std::string(8, 'x'));
  };
  EXPECT_NE(ParseError(with(R"({"dtype":"F99","shape":[2],"data_offsets":[0,8]})"))
                .find("m.safetensors: tensor 'a': dtype: 'F99' is not a dtype this reader knows"),
            std::string::npos);
  EXPECT_NE(ParseError(with(R"({"dtype":"F32","shape":[-2],"data_offsets":[0,8]})"))
                .find("tensor 'a': shape: expected integers >= 0, got -2"),
            std::string::npos);
  EXPECT_NE(ParseError(with(R"({"dtype":"F32","shape":[3],"data_offsets":[0,8]})"))
                .find("tensor 'a': data_offsets span 8 bytes, but F32 of shape [3] needs 12"),
            std::string::npos);
  EXPECT_NE(ParseError(with(R"({"dtype":"F32","shape":[2],"data_offsets":[8,0]})"))
                .find("tensor 'a': data_offsets: begin 8 is after end 0"),
            std::string::npos);
  EXPECT_NE(ParseError(with(R"({"dtype":"F32","shape":[4],"data_offsets":[0,16]})"))
                .find("the tensors end at byte 16 of the data, but the file holds 8 data bytes "
                      "(truncated)"),
            std::string::npos);
  EXPECT_NE(ParseError(with(R"({"dtype":"F32","shape":[4294967296,4294967296,4],)"
                            R"("data_offsets":[0,8]})"))
                .find("too many elements"),
            std::string::npos);
  EXPECT_NE(ParseError(with(R"({"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":1})"))
                .find("tensor 'a': unknown field 'x'"),
            std::string::npos);
  // Overlap and gap between two tensors.
  EXPECT_NE(ParseError(FileOf(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                              R"("b":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}})",
                              std::string(6, 'x')))
                .find("tensor 'b': data_offsets begin 2, but the previous tensor ends at 4 "
                      "(overlap)"),
            std::string::npos);
  EXPECT_NE(ParseError(FileOf(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                              R"("b":{"dtype":"U8","shape":[1],"data_offsets":[5,6]}})",
                              std::string(6, 'x')))
                .find("(gap)"),
            std::string::npos);
  EXPECT_NE(ParseError(FileOf(R"({"__metadata__":{"format":1}})", ""))
                .find("__metadata__: 'format': expected a string"),
            std::string::npos);
  EXPECT_NE(ParseError(FileOf(R"({"a":{"dtype":"U8","shape":[0],"data_offsets":[0,0]},)"
                              R"("a":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}})",
                              ""))
                .find("duplicate key 'a'"),
            std::string::npos);
  std::string huge(8, '\xff');
  EXPECT_NE(ParseError(huge + "{}").find("over the 100 MB limit"), std::string::npos);
  EXPECT_NE(ParseError(FileOf("[]", "")).find("header: expected a JSON object"), std::string::npos);
  EXPECT_NE(ErrorOf([&] { SafetensorsFile(Path("absent.safetensors")); }).find("absent"),
            std::string::npos);
}

TEST_F(SafetensorsTest, WriterRefusesInconsistentEntries) {
  std::vector<SafetensorsEntry> twice = Entries();
  twice.push_back(twice[0]);
  EXPECT_NE(ErrorOf([&] { SafetensorsHeaderBytes(twice); }).find("reserved or repeated"),
            std::string::npos);
  std::vector<SafetensorsEntry> short_bytes = Entries();
  short_bytes[0].shape = {3, 3};
  EXPECT_NE(ErrorOf([&] {
              SafetensorsHeaderBytes(short_bytes);
            }).find("24 bytes do not hold F32 of shape [3, 3]"),
            std::string::npos);
  EXPECT_THROW(WriteSafetensors(Path("no/such/dir/m.safetensors"), Entries()), IoError);
}

}  // namespace
}  // namespace hydraulis
