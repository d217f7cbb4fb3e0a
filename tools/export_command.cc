// `hydraulis export`: a training checkpoint (our sharded optimizer state) written as a
// Hugging Face checkpoint transformers loads (config.json + model.safetensors); the driver
// is job/checkpoint_export.h.
#include <fmt/core.h>

#include <charconv>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>

#include "commands.h"
#include "hydraulis/base/error.h"
#include "hydraulis/runtime/job/checkpoint_export.h"
#include "parsed_option.h"

namespace hydraulis::tools {
namespace {

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

int RunExport(const ExportOptions& options) {
  const ExportedCheckpoint exported = ExportCheckpoint(options);
  fmt::print("wrote {} (config.json and safetensors weights) from {} (step {})\n", options.output,
             exported.checkpoint, exported.step);
  return 0;
}

}  // namespace

Command AddExportCommand(CLI::App& app) {
  auto* cmd = app.add_subcommand("export", RuntimeCommandSummary("export"));
  auto o = std::make_shared<ExportOptions>();
  cmd->add_option("--checkpoint-dir", o->checkpoint_dir,
                  "the run's --checkpoint-dir (its newest checkpoint)")
      ->required();
  cmd->add_option("--model", o->model,
                  "the model config the run trained (default: the one the checkpoint records; "
                  "needed for checkpoints that record none)");
  AddEnumOption(cmd, "--format", o->format, kExportFormatNames, "output format");
  AddEnumOption(cmd, "--dtype", o->dtype, kExportDTypeNames, "weights' dtype");
  cmd->add_option("-o,--output", o->output, "output directory (created; must be new or empty)")
      ->required();
  cmd->add_flag("--overwrite", o->overwrite,
                "write into a non-empty output directory, replacing only the files export "
                "writes (refused when it holds weights of another layout)");
  AddParsedOption(cmd, "--max-shard-size", o->max_shard_bytes, ParseShardSize,
                  "largest weights file; larger models are split into model-0000k-of-0000n "
                  "files with model.safetensors.index.json (as save_pretrained)",
                  "5GB");
  return [o] { return RunExport(*o); };
}

}  // namespace hydraulis::tools
