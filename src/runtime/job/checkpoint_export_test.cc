// Tests of ExportCheckpoint and of the model a checkpoint records: the export of a checkpoint
// saved from a known model gives back its exact weights, with or without --model, and the
// model is checked, or asked for when an old checkpoint records none.
#include "hydraulis/runtime/job/checkpoint_export.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "data/test_files.h"
#include "hydraulis/base/error.h"
#include "hydraulis/base/file_io.h"
#include "hydraulis/checkpoint/hf_checkpoint.h"
#include "hydraulis/runtime/communication/comm_group.h"
#include "hydraulis/runtime/job/checkpoint.h"
#include "hydraulis/runtime/model/hf_weights.h"
#include "hydraulis/runtime/model/transformer.h"
#include "hydraulis/runtime/step/sharded_optimizer.h"

namespace hydraulis {
namespace {

namespace fs = std::filesystem;

std::string TinyPath() { return std::string(HYDRAULIS_SOURCE_DIR) + "/configs/models/tiny.json"; }

// A checkpoint (step 3) of the tiny model drawn from seed 7, in a fresh directory.
class CheckpointExportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    FakeCommWorld world(1);
    const std::unique_ptr<CommGroup> group = world.Group(0, "world");
    ShardedAdamW optimizer(model_, *group, AdamWOptions{});
    CheckpointMeta meta;
    meta.step = 3;
    SaveCheckpoint(root_ + "/ckpt", meta, optimizer, config_, *group);
  }
  ExportOptions Options() const {
    ExportOptions o;
    o.checkpoint_dir = root_ + "/ckpt";
    o.output = root_ + "/hf";
    return o;
  }
  // Every weight of the export equals the model's, bit for bit.
  void ExpectModelsWeights(const std::string& dir) const {
    const HfCheckpoint exported(dir);
    const Transformer back(exported.config(), 0, nullptr, {}, {}, HfInitialWeights(exported));
    ASSERT_EQ(back.named_parameters().size(), model_.named_parameters().size());
    for (std::size_t i = 0; i < back.named_parameters().size(); ++i) {
      EXPECT_TRUE(at::equal(back.named_parameters()[i].value, model_.named_parameters()[i].value))
          << model_.named_parameters()[i].full_name;
    }
  }
  std::string ErrorOf(const ExportOptions& o) const {
    try {
      ExportCheckpoint(o);
    } catch (const InvalidInput& e) {
      return e.what();
    }
    return "no error";
  }

  const ModelConfig config_ = LoadModelConfig(TinyPath());
  const Transformer model_{config_, 7};
  const test_support::TempDir directory_;  // the data layer's
  const std::string root_ = directory_.path();
};

TEST_F(CheckpointExportTest, CheckpointRecordsItsModel) {
  const std::string step_dir = root_ + "/ckpt/step-00000003";
  const std::optional<ModelConfig> recorded = CheckpointModel(step_dir);
  ASSERT_TRUE(recorded.has_value());
  EXPECT_EQ(ModelConfigToJson(*recorded), ModelConfigToJson(config_));
  fs::remove(step_dir + "/" + kCheckpointModelFile);
  EXPECT_FALSE(CheckpointModel(step_dir).has_value());
}

TEST_F(CheckpointExportTest, ExportsTheRecordedModelsExactWeightsWithoutModel) {
  const ExportedCheckpoint exported = ExportCheckpoint(Options());
  EXPECT_EQ(exported.step, 3);
  EXPECT_EQ(exported.checkpoint, root_ + "/ckpt/step-00000003");
  EXPECT_EQ(ModelConfigToJson(exported.model), ModelConfigToJson(config_));
  ExpectModelsWeights(root_ + "/hf");
}

TEST_F(CheckpointExportTest, BF16ExportRoundsTheWeights) {
  ExportOptions o = Options();
  o.dtype = SafetensorsDType::kBF16;
  ExportCheckpoint(o);
  const HfCheckpoint exported(o.output);
  const Transformer back(exported.config(), 0, nullptr, {}, {}, HfInitialWeights(exported));
  for (std::size_t i = 0; i < back.named_parameters().size(); ++i) {
    const at::Tensor& want = model_.named_parameters()[i].value;
    EXPECT_TRUE(at::equal(back.named_parameters()[i].value, want.to(at::kBFloat16).to(at::kFloat)));
  }
}

TEST_F(CheckpointExportTest, ModelOverrideIsCheckedAgainstTheRecordedModel) {
  ExportOptions o = Options();
  o.model = TinyPath();
  EXPECT_EQ(ExportCheckpoint(o).step, 3);
  ExpectModelsWeights(o.output);

  ModelConfig wider = config_;
  wider.shape.hidden = 128;
  o.model = root_ + "/wider.json";
  o.overwrite = true;  // the model is checked, not the output's contents
  WriteFileAtomically(o.model, ModelConfigToJson(wider));
  const std::string error = ErrorOf(o);
  EXPECT_NE(error.find(o.model), std::string::npos) << error;
  EXPECT_NE(error.find(root_ + "/ckpt/step-00000003/model.json"), std::string::npos) << error;
  EXPECT_NE(error.find("hidden: 128 vs 64"), std::string::npos) << error;
}

TEST_F(CheckpointExportTest, CheckpointWithoutRecordedModelNeedsModel) {
  fs::remove(root_ + "/ckpt/step-00000003/" + kCheckpointModelFile);
  const std::string error = ErrorOf(Options());
  EXPECT_NE(error.find("give --model"), std::string::npos) << error;
  EXPECT_EQ(error.find('\n'), std::string::npos) << error;
  ExportOptions o = Options();
  o.model = TinyPath();
  EXPECT_EQ(ExportCheckpoint(o).step, 3);
  ExpectModelsWeights(o.output);
}

// A used output directory is refused before the checkpoint is read, unless --overwrite;
// then only the export's own files are replaced, and weights of another layout, which
// transformers would read instead, are refused; nothing of the directory is lost.
TEST_F(CheckpointExportTest, AUsedOutputIsRefusedOrOnlyItsOwnFilesReplaced) {
  ExportOptions o = Options();
  fs::create_directories(o.output);
  WriteFileAtomically(o.output + "/notes.txt", "mine\n");
  o.checkpoint_dir = root_ + "/missing";  // the output is checked first
  std::string error = ErrorOf(o);
  EXPECT_NE(error.find("-o " + o.output + ": not empty"), std::string::npos) << error;
  EXPECT_NE(error.find("--overwrite"), std::string::npos) << error;
  o.checkpoint_dir = root_ + "/ckpt";
  EXPECT_EQ(ErrorOf(o), error);

  o.overwrite = true;
  ExportCheckpoint(o);
  ExpectModelsWeights(o.output);
  EXPECT_EQ(ReadFileText(o.output + "/notes.txt"), "mine\n");
  ExportCheckpoint(o);  // the same layout again replaces its own files
  ExpectModelsWeights(o.output);

  // Sharded into the single file's directory: model.safetensors would be read instead.
  o.max_shard_bytes = 20'000;
  const std::vector<std::string> sharded = HfCheckpointFiles(config_, o.dtype, o.max_shard_bytes);
  ASSERT_GT(sharded.size(), 3u);
  error = ErrorOf(o);
  EXPECT_NE(error.find(o.output + "/model.safetensors: weights of an earlier export"),
            std::string::npos)
      << error;
  EXPECT_FALSE(fs::exists(o.output + "/" + sharded.front()));
  ExpectModelsWeights(o.output);  // the single file is still there and whole

  // A file where the directory should be.
  o.output = root_ + "/file";
  WriteFileAtomically(o.output, "x");
  EXPECT_NE(ErrorOf(o).find("-o " + o.output + ": exists and is not a directory"),
            std::string::npos);
  o.overwrite = false;
  EXPECT_NE(ErrorOf(o).find("exists and is not a directory"), std::string::npos);
}

TEST_F(CheckpointExportTest, NoCheckpointIsNamed) {
  ExportOptions o = Options();
  o.checkpoint_dir = root_ + "/empty";
  fs::create_directories(o.checkpoint_dir);
  EXPECT_EQ(ErrorOf(o), "--checkpoint-dir " + o.checkpoint_dir + ": no checkpoint");
}

}  // namespace
}  // namespace hydraulis
