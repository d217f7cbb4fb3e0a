// Tests of Evaluate: per-document losses equal the model's SummedTokenLoss of each document
// alone, documents are cut and skipped as documented, and the model is given exactly once.
#include "hydraulis/runtime/job/evaluation.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
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

}  // namespace
}  // namespace hydraulis
