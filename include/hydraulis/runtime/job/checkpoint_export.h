// A training checkpoint (job/checkpoint.h: the optimizer's sharded fp32 master weights)
// written in a format other tools read: Hugging Face's (config.json + safetensors weights,
// as save_pretrained writes them; docs/runtime.md, "Hugging Face formats").
#pragma once

#include <cstdint>
#include <string>

#include "hydraulis/base/enum_names.h"
#include "hydraulis/checkpoint/safetensors.h"
#include "hydraulis/runtime/model/hf_weights.h"
#include "hydraulis/spec/model_config.h"

namespace hydraulis {

enum class ExportFormat { kHf };
inline constexpr EnumNames<ExportFormat, 1> kExportFormatNames{{{ExportFormat::kHf, "hf"}}};
// The weights' dtypes an export writes, by their names in flags.
inline constexpr EnumNames<SafetensorsDType, 2> kExportDTypeNames{
    {{SafetensorsDType::kF32, "f32"}, {SafetensorsDType::kBF16, "bf16"}}};

struct ExportOptions {
  // A run's checkpoint directory (job/checkpoint.h); its newest complete checkpoint is
  // exported.
  std::string checkpoint_dir;
  // A model config file (LoadModelConfig: ours or a Hugging Face config.json). Empty: the
  // model the checkpoint records. Given: it is the model written (its name, rope_theta and
  // norm_eps go into config.json), and must have the recorded model's weight layout; a
  // checkpoint written before checkpoints recorded their model needs it.
  std::string model;
  ExportFormat format = ExportFormat::kHf;
  SafetensorsDType dtype = SafetensorsDType::kF32;  // of the weights: kF32 or kBF16
  std::string output;                               // the directory written (created)
  // Replace the files the export writes in a non-empty `output`; without it a non-empty
  // directory is InvalidInput (CheckHfCheckpointTarget), before the checkpoint is read.
  bool overwrite = false;
  // Largest weights file in bytes (> 0); larger models are split into shards with an index.
  std::uint64_t max_shard_bytes = kHfDefaultMaxShardBytes;
};

// What was exported.
struct ExportedCheckpoint {
  std::string checkpoint;  // the checkpoint directory read (LatestCheckpoint)
  std::int64_t step = 0;   // its step
  ModelConfig model;       // the model written
};

// Writes the newest checkpoint under options.checkpoint_dir to options.output (one
// in-process rank loads the whole optimizer state: a checkpoint loads on any number of
// ranks). InvalidInput when options.output is not a place it may write
// (CheckHfCheckpointTarget: checked first), when there is no checkpoint, when it is damaged
// (LoadCheckpoint),
// when options.model differs from the recorded model in its weights' layout (naming both
// files and the field), or when neither names the model. IoError when the output cannot be
// written (WriteHfCheckpoint: a failure leaves options.output as it was).
ExportedCheckpoint ExportCheckpoint(const ExportOptions& options);

}  // namespace hydraulis
