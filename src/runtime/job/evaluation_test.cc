// Tests of Evaluate: per-document losses equal the model's SummedTokenLoss of each document
// alone, documents are cut and skipped as documented, and the model is given exactly once.
#include "hydraulis/runtime/job/evaluation.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "data/test_files.h"
#include "hydraulis/base/error.h"
#include "hydraulis/data/megatron_dataset.h"
#include "hydraulis/runtime/model/packed_batch.h"
#include "hydraulis/runtime/model/transformer.h"
#include "hydraulis/spec/model_config.h"
#include "runtime/testing/test_documents.h"

namespace hydraulis {
namespace {

namespace fs = std::filesystem;

class EvaluationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    MegatronDatasetWriter writer(root_ + "/data", MegatronDTypeForVocab(config_.shape.vocab));
    for (const auto& doc : documents_) writer.AddDocument(doc);
    writer.Finish();
  }
  EvaluationOptions Options() const {
    EvaluationOptions o;
    o.model = model_path_;
    o.seed = 3;
    o.data = root_ + "/data";
    return o;
  }

  const std::string model_path_ = std::string(HYDRAULIS_SOURCE_DIR) + "/configs/models/tiny.json";
  const ModelConfig config_ = LoadModelConfig(model_path_);
  // The second has no target and is skipped; the third is cut to max_len.
  const test_support::Documents documents_ =
      test_support::RandomDocuments({9, 1, 30, 5}, 11, config_.shape.vocab);
  const test_support::TempDir directory_;  // the data layer's
  const std::string root_ = directory_.path();
};

TEST_F(EvaluationTest, LossesAreEachDocumentsSummedTokenLossAlone) {
  EvaluationOptions o = Options();
  o.max_documents = 2;
  o.max_len = 20;
  o.logits_file = root_ + "/logits.safetensors";
  const Evaluation evaluation = Evaluate(o);
  ASSERT_EQ(evaluation.documents.size(), 2u);
  const Transformer model(config_, 3);
  const std::vector<std::vector<std::int64_t>> expected_documents = {
      documents_[0], {documents_[2].begin(), documents_[2].begin() + 20}};
  for (std::size_t d = 0; d < expected_documents.size(); ++d) {
    const PackedBatch alone = PackDocuments({expected_documents[d]}, config_.shape.vocab);
    const TokenLoss loss = SummedTokenLoss(model.Forward(alone), alone);
    const double mean = loss.sum.item<double>() / static_cast<double>(loss.tokens);
    EXPECT_EQ(evaluation.documents[d].tokens,
              static_cast<std::int64_t>(expected_documents[d].size()));
    EXPECT_NEAR(evaluation.documents[d].loss, mean, 1e-5 * mean) << "document " << d;
  }
  EXPECT_TRUE(fs::exists(o.logits_file));
}

TEST_F(EvaluationTest, Bf16EvaluatesCloseToFp32) {
  EvaluationOptions o = Options();
  const Evaluation fp32 = Evaluate(o);
  o.precision = Precision::kBf16;
  const Evaluation bf16 = Evaluate(o);
  ASSERT_EQ(fp32.documents.size(), 3u);
  ASSERT_EQ(bf16.documents.size(), 3u);
  for (std::size_t d = 0; d < 3; ++d) {
    EXPECT_NEAR(bf16.documents[d].loss, fp32.documents[d].loss, 0.05 * fp32.documents[d].loss);
  }
}

TEST_F(EvaluationTest, ModelIsGivenExactlyOnce) {
  EvaluationOptions o = Options();
  o.init_from = root_;
  EXPECT_THROW(Evaluate(o), InvalidInput);
  o.init_from.clear();
  o.model.clear();
  EXPECT_THROW(Evaluate(o), InvalidInput);
}

TEST_F(EvaluationTest, NoDocumentWithATargetIsRefused) {
  EvaluationOptions o = Options();
  o.max_len = 1;
  try {
    Evaluate(o);
    ADD_FAILURE() << "no error";
  } catch (const InvalidInput& e) {
    EXPECT_EQ(std::string(e.what()), o.data + ": no document of 2 tokens or more");
  }
}

// A model of 2^44 + 7 * 2^28 + 3 * 2^14 parameters (a 2^30-token vocabulary of width 2^14,
// tied, one layer): 64.0 TiB of fp32 weights, 32.0 in bf16. It used to reach the allocator
// (a 27-line c10 message, an "internal error"); now its size is refused before the data is
// read or anything allocated, by the weights' bound alone (train's would be 4x that).
TEST_F(EvaluationTest, WeightsBeyondTheMachineAreRefusedBySizeBeforeAllocation) {
  const std::string path =
      directory_.Write("huge.json", R"({"name": "huge", "layers": 1, "hidden": 16384, "ffn": 16384,
      "heads": 128, "kv_heads": 128, "vocab": 1073741824, "tie_embeddings": true})");
  EvaluationOptions o = Options();
  o.model = path;
  o.data = root_ + "/no-such-data";  // never read: the size is checked first
  for (const auto& [precision, expected] :
       {std::pair{Precision::kFp32,
                  "needs at least 64.0 TiB for its weights (fp32, 4 bytes per "
                  "parameter; eval holds no gradients or optimizer state); "
                  "this machine has "},
        std::pair{Precision::kBf16,
                  "needs at least 32.0 TiB for its weights (bf16, 2 bytes per "
                  "parameter; eval holds no gradients or optimizer state); "
                  "this machine has "}}) {
    o.precision = precision;
    try {
      Evaluate(o);
      ADD_FAILURE() << "no error";
    } catch (const InvalidInput& e) {
      EXPECT_NE(std::string(e.what()).find("the model (17594065141760 parameters) "),
                std::string::npos)
          << e.what();
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace hydraulis
