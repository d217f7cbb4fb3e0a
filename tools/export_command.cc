// `hydraulis export`: a training checkpoint (our sharded optimizer state) written as a
// Hugging Face checkpoint transformers loads (config.json + model.safetensors).
#include <fmt/core.h>

#include <ATen/ATen.h>

#include <memory>
#include <string>
#include <vector>

#include "commands.h"
#include "hydraulis/base/error.h"
#include "hydraulis/runtime/checkpoint.h"
#include "hydraulis/runtime/distributed.h"
#include "hydraulis/runtime/hf_weights.h"
#include "hydraulis/runtime/sharded_optimizer.h"
#include "hydraulis/spec/model_config.h"

namespace hydraulis::tools {
namespace {

struct ExportArgs {
  std::string checkpoint_dir;
  std::string model;
  std::string format = "hf";
  std::string dtype = "f32";
  std::string output;
};

int RunExport(const ExportArgs& a) {
  if (a.format != "hf") {
    throw InvalidInput("export: --format must be hf, got " + QuoteForMessage(a.format));
  }
  if (a.dtype != "f32" && a.dtype != "bf16") {
    throw InvalidInput("export: --dtype must be f32 or bf16, got " + QuoteForMessage(a.dtype));
  }
  const ModelConfig config = LoadModelConfig(a.model);
  const std::optional<std::string> latest = LatestCheckpoint(a.checkpoint_dir);
  if (!latest) throw InvalidInput("--checkpoint-dir " + a.checkpoint_dir + ": no checkpoint");
  // One in-process rank holds the whole optimizer state: a checkpoint loads on any number
  // of ranks (every rank reads every shard).
  FakeCommWorld world(1);
  const std::unique_ptr<CommGroup> group = world.Group(0, "world");
  ShardedAdamW optimizer(Transformer(config, 0), *group, AdamWOptions{});
  const CheckpointMeta meta = LoadCheckpoint(*latest, optimizer);
  const at::Tensor full = optimizer.full_parameters();
  std::vector<NamedParameter> parameters;
  for (const FlatParameter& p : optimizer.layout().parameters) {
    NamedParameter named;
    named.name = p.parameter.name;
    named.full_name = p.parameter.name;
    named.value = full.slice(0, p.offset, p.offset + p.numel).view(p.parameter.shape);
    parameters.push_back(std::move(named));
  }
  WriteHfCheckpoint(a.output, config, parameters,
                    a.dtype == "f32" ? SafetensorsDType::kF32 : SafetensorsDType::kBF16);
  fmt::print("wrote {} (config.json, model.safetensors) from {} (step {})\n", a.output, *latest,
             meta.step);
  return 0;
}

}  // namespace

Command AddExportCommand(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "export",
      "Write a training checkpoint as a Hugging Face checkpoint (config.json + safetensors)");
  auto a = std::make_shared<ExportArgs>();
  cmd->add_option("--checkpoint-dir", a->checkpoint_dir,
                  "the run's --checkpoint-dir (its newest checkpoint)")
      ->required();
  cmd->add_option("--model", a->model, "the model config the run trained")->required();
  cmd->add_option("--format", a->format, "output format: hf")->capture_default_str();
  cmd->add_option("--dtype", a->dtype, "weights' dtype: f32 or bf16")->capture_default_str();
  cmd->add_option("-o,--output", a->output, "output directory (created)")->required();
  return [a] { return RunExport(*a); };
}

}  // namespace hydraulis::tools
