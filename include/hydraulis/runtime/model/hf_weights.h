// The model's weights in Hugging Face's LLaMA layout: our parameter names to
// transformers' names, initial weights read from a checkpoint (HfCheckpoint), and a model
// written back as a checkpoint transformers loads.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "hydraulis/checkpoint/hf_checkpoint.h"
#include "hydraulis/checkpoint/safetensors.h"
#include "hydraulis/runtime/model/transformer.h"

namespace hydraulis {

// transformers' name of a full parameter: "embed" -> "model.embed_tokens.weight",
// "layers.3.wq" -> "model.layers.3.self_attn.q_proj.weight", ..., "final_norm" ->
// "model.norm.weight", "head" -> "lm_head.weight". The layouts agree, so no tensor is
// transposed or permuted: both store projections as [out, in], and both rotate halves in
// RoPE (so q_proj and k_proj rows are in transformers' order). InternalError for a name
// that is not one of FullParameters'.
std::string HfParameterName(const std::string& full_name);

// Initial weights (for Transformer and DistributedTrainer) read from `checkpoint`, which
// must outlive their use: each tensor converted from its F32, BF16 or F16 bytes to fp32
// when asked for, so at most one tensor is copied at a time.
InitialWeights HfInitialWeights(const HfCheckpoint& checkpoint);

// transformers' default largest shard (save_pretrained's max_shard_size "5GB").
inline constexpr std::uint64_t kHfDefaultMaxShardBytes = 5'000'000'000;

// The files WriteHfCheckpoint writes for `config`: the weights file(s), the index when
// sharded, config.json. InvalidInput as WriteHfCheckpoint for the dtype and the limit.
std::vector<std::string> HfCheckpointFiles(const ModelConfig& config, SafetensorsDType dtype,
                                           std::uint64_t max_shard_bytes);

// Whether `dir` may receive a checkpoint of `files` (HfCheckpointFiles): absent, or an empty
// directory, or with `overwrite` a directory whose Hugging Face weight files are all among
// `files` (others would be read beside the new ones). InvalidInput naming `what` (the
// caller's name for the output, e.g. "-o") and the path otherwise.
void CheckHfCheckpointTarget(const std::string& dir, const std::vector<std::string>& files,
                             bool overwrite, const std::string& what);

// Writes `full` (the whole model's parameters in FullParameters' order, as
// GatherFullParameters gives them) as a Hugging Face checkpoint in `dir`: config.json and
// the weights in `dtype` (F32 or BF16): model.safetensors when they fit in
// `max_shard_bytes`, else model-0000k-of-0000n.safetensors (tensors in order, a new shard
// when the next tensor would pass the limit; a larger tensor alone) and
// model.safetensors.index.json, as save_pretrained writes them. Tensors are converted one
// shard at a time, so at most one shard's worth is held beside `full`. Every file is
// written into a temporary directory beside `dir` and moved in (weights, index, then
// config.json), so a failure leaves `dir` as it was (IoError). Only those files are replaced;
// weight files of an earlier export that this one does not write are InvalidInput
// (CheckHfCheckpointTarget), as they would be read instead of the new ones. InvalidInput for
// another dtype, a zero limit, or parameters that are not the model's.
void WriteHfCheckpoint(const std::string& dir, const ModelConfig& config,
                       const std::vector<NamedParameter>& full, SafetensorsDType dtype,
                       std::uint64_t max_shard_bytes = kHfDefaultMaxShardBytes);

}  // namespace hydraulis
