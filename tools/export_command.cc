// `hydraulis export`: a training checkpoint (our sharded optimizer state) written as a
// Hugging Face checkpoint transformers loads (config.json + model.safetensors).
#include <fmt/core.h>

#include <ATen/ATen.h>

#include <charconv>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "commands.h"
#include "hydraulis/base/error.h"
#include "hydraulis/runtime/communication/comm_group.h"
#include "hydraulis/runtime/job/checkpoint.h"
#include "hydraulis/runtime/model/hf_weights.h"
#include "hydraulis/runtime/step/sharded_optimizer.h"
#include "hydraulis/spec/model_config.h"

namespace hydraulis::tools {
namespace {

struct ExportArgs {
  std::string checkpoint_dir;
  std::string model;
  std::string format = "hf";
  std::string dtype = "f32";
  std::string output;
  std::string max_shard_size = "5GB";
};

// "5GB", "500MB", "100KB", "2GiB" or a count of bytes: transformers' max_shard_size forms
// (KB/MB/GB powers of 10, KiB/MiB/GiB of 2).
std::uint64_t ParseShardSize(const std::string& text) {
  static const std::pair<const char*, std::uint64_t> kUnits[] = {{"KiB", 1ull << 10},
                                                                 {"MiB", 1ull << 20},
                                                                 {"GiB", 1ull << 30},
                                                                 {"KB", 1'000},
                                                                 {"MB", 1'000'000},
                                                                 {"GB", 1'000'000'000},
                                                                 {"B", 1}};
  std::string number = text;
  std::uint64_t unit = 1;
  for (const auto& [suffix, scale] : kUnits) {
    if (text.size() > std::strlen(suffix) && text.ends_with(suffix)) {
      number = text.substr(0, text.size() - std::strlen(suffix));
      unit = scale;
      break;
    }
  }
  std::uint64_t value = 0;
  const auto [end, ec] = std::from_chars(number.data(), number.data() + number.size(), value);
  if (ec != std::errc() || end != number.data() + number.size() || value == 0 ||
      value > UINT64_MAX / unit) {
    throw InvalidInput(
        "export: --max-shard-size must be a positive size such as 5GB, 500MB or "
        "1073741824, got " +
        QuoteForMessage(text));
  }
  return value * unit;
}

int RunExport(const ExportArgs& a) {
  if (a.format != "hf") {
    throw InvalidInput("export: --format must be hf, got " + QuoteForMessage(a.format));
  }
  if (a.dtype != "f32" && a.dtype != "bf16") {
    throw InvalidInput("export: --dtype must be f32 or bf16, got " + QuoteForMessage(a.dtype));
  }
  const std::uint64_t max_shard_bytes = ParseShardSize(a.max_shard_size);
  const ModelConfig config = LoadModelConfig(a.model);
  const std::optional<std::string> latest = LatestCheckpoint(a.checkpoint_dir);
  if (!latest) throw InvalidInput("--checkpoint-dir " + a.checkpoint_dir + ": no checkpoint");
  // One in-process rank holds the whole optimizer state: a checkpoint loads on any number
  // of ranks (every rank reads every shard).
  FakeCommWorld world(1);
  const std::unique_ptr<CommGroup> group = world.Group(0, "world");
  ShardedAdamW optimizer(config, UninitializedWeights(), *group, AdamWOptions{});
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
                    a.dtype == "f32" ? SafetensorsDType::kF32 : SafetensorsDType::kBF16,
                    max_shard_bytes);
  fmt::print("wrote {} (config.json and safetensors weights) from {} (step {})\n", a.output,
             *latest, meta.step);
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
  cmd->add_option("--max-shard-size", a->max_shard_size,
                  "largest weights file; larger models are split into model-0000k-of-0000n "
                  "files with model.safetensors.index.json (as save_pretrained)")
      ->capture_default_str();
  return [a] { return RunExport(*a); };
}

}  // namespace hydraulis::tools
