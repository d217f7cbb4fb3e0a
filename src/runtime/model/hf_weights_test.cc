#include "hydraulis/runtime/model/hf_weights.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <ATen/ATen.h>

#include <filesystem>
#include <set>
#include <string>

#include "hydraulis/base/error.h"
#include "hydraulis/runtime/model/packed_batch.h"
#include "hydraulis/spec/model_config.h"
#include "runtime/testing/test_documents.h"

namespace hydraulis {
namespace {

ModelConfig Tiny() {
  return LoadModelConfig(std::string(HYDRAULIS_SOURCE_DIR) + "/configs/models/tiny.json");
}

class HfWeightsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (std::filesystem::temp_directory_path() /
            ("hydraulis-hfw-" + std::to_string(::getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name()))
               .string();
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_;
};

// Our names map one to one onto the tensors transformers saves, with the same shapes.
TEST_F(HfWeightsTest, NamesAgreeWithTransformersTensors) {
  for (const auto& [tied, architecture] : {std::pair{false, "llama"}, std::pair{true, "llama"},
                                           std::pair{false, "qwen2"}, std::pair{true, "qwen3"}}) {
    ModelConfig c = Tiny();
    c.tie_embeddings = tied;
    c.architecture = architecture;
    std::map<std::string, std::vector<std::int64_t>> hf;
    for (const HfTensorSpec& t : HfModelTensors(c)) hf.emplace(t.name, t.shape);
    std::set<std::string> mapped;
    for (const FullParameter& p : FullParameters(c)) {
      const std::string name = HfParameterName(p.name);
      ASSERT_TRUE(hf.contains(name)) << p.name << " -> " << name;
      EXPECT_EQ(hf.at(name), p.shape) << name;
      mapped.insert(name);
    }
    EXPECT_EQ(mapped.size(), hf.size());
  }
  EXPECT_EQ(HfParameterName("layers.1.w_down"), "model.layers.1.mlp.down_proj.weight");
  EXPECT_EQ(HfParameterName("layers.0.bk"), "model.layers.0.self_attn.k_proj.bias");
  EXPECT_EQ(HfParameterName("layers.0.q_norm"), "model.layers.0.self_attn.q_norm.weight");
  EXPECT_THROW(HfParameterName("layers.1.bias"), InternalError);
}

TEST_F(HfWeightsTest, WrittenCheckpointLoadsBackExactly) {
  const ModelConfig c = Tiny();
  const Transformer original(c, 3);
  WriteHfCheckpoint(dir_, c, original.GatherFullParameters(), SafetensorsDType::kF32);
  const HfCheckpoint checkpoint(dir_);
  EXPECT_EQ(checkpoint.config().shape.kv_heads, c.shape.kv_heads);
  // A different seed: every weight must come from the file.
  const Transformer loaded(checkpoint.config(), 99, nullptr, {}, {}, HfInitialWeights(checkpoint));
  ASSERT_EQ(loaded.named_parameters().size(), original.named_parameters().size());
  for (std::size_t i = 0; i < loaded.named_parameters().size(); ++i) {
    EXPECT_TRUE(at::equal(loaded.named_parameters()[i].value, original.named_parameters()[i].value))
        << loaded.named_parameters()[i].name;
  }
  const PackedBatch batch = PackDocuments(
      test_support::RandomDocuments({7, 3, 12}, 5, static_cast<int>(c.shape.vocab)), c.shape.vocab);
  EXPECT_TRUE(at::equal(loaded.Forward(batch), original.Forward(batch)));
  // A pipeline stage reads only its own part, with the same values.
  const Transformer stage(c, 99, nullptr, ModelPart::Stage(c, 1, 2), {},
                          HfInitialWeights(checkpoint));
  for (const NamedParameter& p : stage.named_parameters()) {
    for (const NamedParameter& q : original.named_parameters()) {
      if (q.name == p.name) {
        EXPECT_TRUE(at::equal(p.value, q.value)) << p.name;
      }
    }
  }
}

TEST_F(HfWeightsTest, Bf16CheckpointsLoadAsTheirRoundedValues) {
  const ModelConfig c = Tiny();
  const Transformer original(c, 3);
  WriteHfCheckpoint(dir_, c, original.GatherFullParameters(), SafetensorsDType::kBF16);
  const HfCheckpoint checkpoint(dir_);
  const Transformer loaded(c, 99, nullptr, {}, {}, HfInitialWeights(checkpoint));
  for (std::size_t i = 0; i < loaded.named_parameters().size(); ++i) {
    const at::Tensor rounded =
        original.named_parameters()[i].value.detach().to(at::kBFloat16).to(at::kFloat);
    EXPECT_TRUE(at::equal(loaded.named_parameters()[i].value, rounded))
        << loaded.named_parameters()[i].name;
  }
  EXPECT_THROW(WriteHfCheckpoint(dir_, c, original.GatherFullParameters(), SafetensorsDType::kI64),
               InvalidInput);
}

}  // namespace
}  // namespace hydraulis
