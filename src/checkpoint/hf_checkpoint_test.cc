#include "hydraulis/checkpoint/hf_checkpoint.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "../base/test_support.h"
#include "hydraulis/base/error.h"
#include "hydraulis/base/file_io.h"
#include "hydraulis/spec/hf_config.h"

namespace hydraulis {
namespace {

class HfCheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (std::filesystem::temp_directory_path() /
            ("hydraulis-hf-" + std::to_string(::getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name()))
               .string();
    std::filesystem::create_directories(dir_);
    config_.shape = {"tiny", 2, 16, 24, 4, 2, 40};  // name, layers, hidden, ffn, heads, kv, vocab
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // Every tensor of config_ in F32 (values = their index), split over `files` shards.
  void Write(int files, const std::string& corrupt_name = "",
             std::vector<std::int64_t> corrupt_shape = {}) {
    WriteFileAtomically(dir_ + "/config.json", HfConfigJson(config_, "float32"));
    const std::vector<HfTensorSpec> specs = HfModelTensors(config_);
    data_.clear();
    data_.reserve(specs.size());
    std::vector<std::vector<SafetensorsEntry>> shards(static_cast<std::size_t>(files));
    std::string weight_map;
    for (std::size_t i = 0; i < specs.size(); ++i) {
      std::vector<std::int64_t> shape = specs[i].shape;
      if (specs[i].name == corrupt_name) shape = corrupt_shape;
      std::int64_t n = 1;
      for (std::int64_t d : shape) n *= d;
      data_.emplace_back(static_cast<std::size_t>(n), static_cast<float>(i));
      const std::size_t shard = i % static_cast<std::size_t>(files);
      shards[shard].push_back(
          {specs[i].name, SafetensorsDType::kF32, shape, std::as_bytes(std::span(data_.back()))});
      weight_map += (weight_map.empty() ? "" : ", ") +
                    ("\"" + specs[i].name + "\": \"" + ShardName(shard, files) + "\"");
    }
    for (int s = 0; s < files; ++s) {
      WriteSafetensors(dir_ + "/" + ShardName(static_cast<std::size_t>(s), files),
                       shards[static_cast<std::size_t>(s)], {{"format", "pt"}});
    }
    if (files > 1) {
      WriteFileAtomically(
          dir_ + "/model.safetensors.index.json",
          "{\"metadata\": {\"total_size\": 1}, \"weight_map\": {" + weight_map + "}}");
    }
  }
  static std::string ShardName(std::size_t shard, int files) {
    if (files == 1) return "model.safetensors";
    return "model-0000" + std::to_string(shard + 1) + "-of-0000" + std::to_string(files) +
           ".safetensors";
  }

  std::string dir_;
  ModelConfig config_;
  std::vector<std::vector<float>> data_;
};

TEST_F(HfCheckpointTest, NamesEveryTensorOfTheModel) {
  const std::vector<HfTensorSpec> t = HfModelTensors(config_);
  ASSERT_EQ(t.size(), 1u + 2 * 9 + 2);
  EXPECT_EQ(t[0].name, "model.embed_tokens.weight");
  EXPECT_EQ(t[2].name, "model.layers.0.self_attn.k_proj.weight");
  EXPECT_EQ(t[2].shape, (std::vector<std::int64_t>{8, 16}));  // 2 kv heads x head_dim 4
  EXPECT_EQ(t.back().name, "lm_head.weight");
  config_.tie_embeddings = true;
  EXPECT_EQ(HfModelTensors(config_).back().name, "model.norm.weight");
}

TEST_F(HfCheckpointTest, OpensOneFileAndShards) {
  for (int files : {1, 3}) {
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    Write(files);
    const HfCheckpoint ckpt(dir_);
    EXPECT_EQ(ckpt.num_files(), static_cast<std::size_t>(files));
    EXPECT_EQ(ckpt.config().shape.kv_heads, 2);
    const auto down = ckpt.Find("model.layers.1.mlp.down_proj.weight");
    EXPECT_EQ(down.tensor->shape, (std::vector<std::int64_t>{16, 24}));
    const float first = *reinterpret_cast<const float*>(down.file->Bytes(*down.tensor).data());
    EXPECT_EQ(first, 16.0f);  // the 17th tensor in HfModelTensors' order
  }
}

TEST_F(HfCheckpointTest, RefusesDirectoriesThatDisagreeWithTheirConfig) {
  Write(1, "model.layers.1.self_attn.v_proj.weight", {16, 16});
  EXPECT_NE(test_support::InvalidInputMessage([&] { HfCheckpoint c(dir_); })
                .find("model.safetensors: tensor 'model.layers.1.self_attn.v_proj.weight': "
                      "shape [16, 16], but config.json implies [8, 16]"),
            std::string::npos);
  config_.tie_embeddings = true;  // the file then lacks lm_head; the config says untied
  Write(1);
  std::string config = ReadFileText(dir_ + "/config.json");
  const std::string tied = "\"tie_word_embeddings\": true";
  config.replace(config.find(tied), tied.size(), "\"tie_word_embeddings\": false");
  WriteFileAtomically(dir_ + "/config.json", config);
  EXPECT_NE(test_support::InvalidInputMessage([&] { HfCheckpoint c(dir_); })
                .find("tensor 'lm_head.weight' is missing (config.json describes a model that "
                      "needs it)"),
            std::string::npos);
}

TEST_F(HfCheckpointTest, RefusesMissingAndEscapingShards) {
  Write(2);
  std::filesystem::remove(dir_ + "/model-00002-of-00002.safetensors");
  EXPECT_NE(test_support::InvalidInputMessage([&] {
              HfCheckpoint c(dir_);
            }).find("model-00002-of-00002.safetensors: missing"),
            std::string::npos);
  EXPECT_NE(test_support::InvalidInputMessage([&] {
              ParseSafetensorsIndex(R"({"weight_map": {"a": "../../etc/x.safetensors"}})",
                                    "i.json");
            }).find("not a plain *.safetensors file name"),
            std::string::npos);
  EXPECT_NE(test_support::InvalidInputMessage([&] {
              ParseSafetensorsIndex(R"({"metadata": {}})", "i.json");
            }).find("i.json: weight_map: missing"),
            std::string::npos);
  std::filesystem::remove_all(dir_);
  std::filesystem::create_directories(dir_);
  WriteFileAtomically(dir_ + "/config.json", HfConfigJson(config_, "float32"));
  EXPECT_NE(test_support::InvalidInputMessage([&] {
              HfCheckpoint c(dir_);
            }).find("neither model.safetensors nor model.safetensors.index.json"),
            std::string::npos);
  EXPECT_NE(test_support::InvalidInputMessage([&] {
              HfCheckpoint c(dir_ + "/absent");
            }).find("not a directory"),
            std::string::npos);
}

}  // namespace
}  // namespace hydraulis
