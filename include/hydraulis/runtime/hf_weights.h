// The model's weights in Hugging Face's LLaMA layout (issue 11): our parameter names to
// transformers' names, initial weights read from a checkpoint (HfCheckpoint), and a model
// written back as a checkpoint transformers loads.
#pragma once

#include <string>
#include <vector>

#include "hydraulis/checkpoint/hf_checkpoint.h"
#include "hydraulis/checkpoint/safetensors.h"
#include "hydraulis/runtime/model.h"

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

// Writes `full` (the whole model's parameters in FullParameters' order, as
// GatherFullParameters gives them) as a Hugging Face checkpoint in `dir`: config.json and
// model.safetensors in `dtype` (F32 or BF16), written into a temporary directory beside
// `dir` and moved in (weights first), so a failure leaves `dir` as it was (IoError).
// InvalidInput for another dtype or parameters that are not the model's.
void WriteHfCheckpoint(const std::string& dir, const ModelConfig& config,
                       const std::vector<NamedParameter>& full, SafetensorsDType dtype);

}  // namespace hydraulis
