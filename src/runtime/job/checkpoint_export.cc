#include "hydraulis/runtime/job/checkpoint_export.h"

#include <ATen/ATen.h>

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "hydraulis/base/error.h"
#include "hydraulis/runtime/communication/comm_group.h"
#include "hydraulis/runtime/job/checkpoint.h"
#include "hydraulis/runtime/model/hf_weights.h"
#include "hydraulis/runtime/step/sharded_optimizer.h"

namespace hydraulis {
namespace {

// The model to export: options.model checked against the one `checkpoint` records, or the
// recorded one.
ModelConfig ExportedModel(const ExportOptions& options, const std::string& checkpoint,
                          const std::optional<ModelConfig>& given) {
  const std::optional<ModelConfig> recorded = CheckpointModel(checkpoint);
  const std::string recorded_path = checkpoint + "/" + kCheckpointModelFile;
  if (!given) {
    if (!recorded) {
      throw InvalidInput("export: " + checkpoint +
                         " does not record its model (written before checkpoints did); give "
                         "--model, the model config the run trained");
    }
    return *recorded;
  }
  if (recorded) {
    const std::string difference = WeightLayoutDifference(*given, *recorded);
    if (!difference.empty()) {
      throw InvalidInput("export: --model " + options.model + " is not the model of " +
                         recorded_path + " (" + difference + ")");
    }
  }
  return *given;
}

}  // namespace

ExportedCheckpoint ExportCheckpoint(const ExportOptions& options) {
  // The output first: a refusal must come before minutes of loading. The stale-weights
  // part of the check needs the model, below.
  if (!options.overwrite) CheckHfCheckpointTarget(options.output, {}, false, "-o");
  std::optional<ModelConfig> given;
  if (!options.model.empty()) given = LoadModelConfig(options.model);
  const std::optional<std::string> latest = LatestCheckpoint(options.checkpoint_dir);
  if (!latest) throw InvalidInput("--checkpoint-dir " + options.checkpoint_dir + ": no checkpoint");
  ExportedCheckpoint exported;
  exported.checkpoint = *latest;
  exported.model = ExportedModel(options, *latest, given);
  const std::vector<std::string> files =
      HfCheckpointFiles(exported.model, options.dtype, options.max_shard_bytes);
  CheckHfCheckpointTarget(options.output, files, options.overwrite, "-o");
  // One in-process rank holds the whole optimizer state: a checkpoint loads on any number
  // of ranks (every rank reads every shard).
  FakeCommWorld world(1);
  const std::unique_ptr<CommGroup> group = world.Group(0, "world");
  ShardedAdamW optimizer(exported.model, UninitializedWeights(), *group, AdamWOptions{});
  exported.step = LoadCheckpoint(*latest, optimizer).step;
  const at::Tensor full = optimizer.full_parameters();
  std::vector<NamedParameter> parameters;
  for (const FlatParameter& p : optimizer.layout().parameters) {
    NamedParameter named;
    named.name = p.parameter.name;
    named.full_name = p.parameter.name;
    named.value = full.slice(0, p.offset, p.offset + p.numel).view(p.parameter.shape);
    parameters.push_back(std::move(named));
  }
  switch (options.format) {
    case ExportFormat::kHf:
      WriteHfCheckpoint(options.output, exported.model, parameters, options.dtype,
                        options.max_shard_bytes);
      break;
  }
  return exported;
}

}  // namespace hydraulis
