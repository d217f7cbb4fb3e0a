#include "hydraulis/spec/model_config.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "hydraulis/base/error.h"
#include "hydraulis/spec/model_flops.h"

namespace hydraulis {
namespace {

ModelConfig Example() {
  ModelConfig c;
  c.shape = {"example", 3, 96, 260, 6, 2, 1000};
  c.tie_embeddings = true;
  c.rope_theta = 500000.0;
  c.norm_eps = 1.0 / 3.0;  // no short decimal form: the writer must keep every digit
  return c;
}

TEST(ModelConfigJsonTest, RoundTripsEveryField) {
  const ModelConfig c = Example();
  const ModelConfig back = ParseModelConfig(ModelConfigToJson(c), "written.json");
  EXPECT_EQ(back.shape.name, "example");
  EXPECT_EQ(back.shape.layers, 3);
  EXPECT_EQ(back.shape.hidden, 96);
  EXPECT_EQ(back.shape.ffn, 260);
  EXPECT_EQ(back.shape.heads, 6);
  EXPECT_EQ(back.shape.kv_heads, 2);
  EXPECT_EQ(back.shape.vocab, 1000);
  EXPECT_TRUE(back.tie_embeddings);
  EXPECT_EQ(back.rope_theta, 500000.0);
  EXPECT_EQ(back.norm_eps, 1.0 / 3.0);
  EXPECT_EQ(ModelConfigToJson(back), ModelConfigToJson(c));
}

TEST(ModelConfigJsonTest, WeightLayoutDifferenceNamesTheFirstField) {
  const ModelConfig a = Example();
  ModelConfig b = a;
  b.shape.name = "renamed";
  b.rope_theta = 10000.0;
  b.norm_eps = 1e-6;
  EXPECT_EQ(WeightLayoutDifference(a, b), "");
  b.shape.ffn = 300;
  b.shape.vocab = 2000;
  EXPECT_EQ(WeightLayoutDifference(a, b), "ffn: 260 vs 300");
  b = a;
  b.tie_embeddings = false;
  EXPECT_EQ(WeightLayoutDifference(a, b), "tie_embeddings: true vs false");
}

// A size too large for its int is refused at parse time naming the file and the field, as
// too large: 2^63 used to wrap to -2^63 ("must be >= 1") and 1e30 read as "not an integer".
TEST(ModelConfigJsonTest, SizesBeyondAnIntNameTheField) {
  const std::string json = ModelConfigToJson(Example());
  for (const auto& [field, value] :
       {std::pair{"vocab", "9223372036854775808"}, std::pair{"hidden", "18446744073709551616"},
        std::pair{"layers", "1e30"}, std::pair{"ffn", "2147483648"}}) {
    nlohmann::json doc = nlohmann::json::parse(json);
    std::string text = doc.dump();
    const std::string from = "\"" + std::string(field) + "\":" + doc[field].dump();
    text.replace(text.find(from), from.size(), "\"" + std::string(field) + "\":" + value);
    try {
      ParseModelConfig(text, "m.json");
      ADD_FAILURE() << field << " = " << value << ": no error";
    } catch (const InvalidInput& e) {
      EXPECT_EQ(std::string(e.what()).rfind(
                    "m.json: " + std::string(field) + ": must be <= 2147483647, got ", 0),
                0u)
          << e.what();
    }
  }
}

// The weights of every matrix product counted by hand: per layer q 4x4, k and v 4x2 each,
// o 4x4, gate, up and down 4x8 each (144), two layers plus the 10x4 head (328); documents
// of 3 and 5 tokens (8 tokens, 34 = 9 + 25 squared).
TEST(ModelFlopsTest, CountsEveryMatrixProductAndCausalAttentionPerDocument) {
  ModelConfig c;
  c.shape.layers = 2;
  c.shape.hidden = 4;
  c.shape.heads = 2;
  c.shape.kv_heads = 1;
  c.shape.ffn = 8;
  c.shape.vocab = 10;
  const std::vector<std::int64_t> lengths = {3, 5};
  EXPECT_DOUBLE_EQ(TrainingFlops(c, lengths), 6.0 * 328 * 8 + 6.0 * 2 * 4 * 34);
  // Attention is per document: one document of 8 tokens costs more than the two.
  const std::vector<std::int64_t> one = {8};
  EXPECT_DOUBLE_EQ(TrainingFlops(c, one) - TrainingFlops(c, lengths), 6.0 * 2 * 4 * (64 - 34));
  EXPECT_EQ(TrainingFlops(c, {}), 0.0);
}

}  // namespace
}  // namespace hydraulis
