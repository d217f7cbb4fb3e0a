// The training runtime's model configuration: the planner's model shape plus the few
// choices that only matter to execution (tied head, RoPE base, RMSNorm epsilon). Read from
// the JSON files in configs/models (docs/runtime.md). No libtorch here, so the CLI and the
// planner can read these files without the runtime.
#pragma once

#include <cstdint>
#include <string>

#include "hydraulis/spec/model.h"

namespace hydraulis {

struct ModelConfig {
  // Sizes (counts); kv_heads divides heads; the head width (shape.head_dim when set, else
  // hidden / heads, which heads then divides) is even.
  ModelSpec shape;
  // true: the output head reuses the token embedding matrix (one vocab x hidden parameter).
  bool tie_embeddings = false;
  // Base of the rotary position embedding's frequencies (LLaMA: 10000), > 1.
  double rope_theta = 10000.0;
  // Added to the mean square inside RMSNorm, > 0.
  double norm_eps = 1e-5;
  // The Hugging Face family the weights come from and are exported as (kArchitectures):
  // LLaMA's network, Mistral's the same with a sliding window, Qwen2's with biases on the
  // q, k and v projections, Qwen3's with an RMSNorm of each head's q and k before RoPE.
  std::string architecture = "llama";
  // Each token attends to at most this many previous tokens (0: no window). A window does
  // not bind while every document fits in it, so runs keep documents to it (--max-len <=
  // sliding_window; docs/runtime.md, "Hugging Face formats").
  std::int64_t sliding_window = 0;

  // Per-head width: shape.head_dim when set, else hidden / heads.
  int head_dim() const { return HeadDim(shape); }
  // Qwen2: the q, k and v projections add a bias (o and the MLP do not).
  bool qkv_bias() const { return architecture == "qwen2"; }
  // Qwen3: q and k are RMS-normalised per head (one weight of head_dim each) before RoPE.
  bool qk_norm() const { return architecture == "qwen3"; }
};

// The values ModelConfig::architecture takes.
inline constexpr const char* kArchitectures[] = {"llama", "mistral", "qwen2", "qwen3"};
bool IsArchitecture(const std::string& name);

// Parameters of the model: ParameterCount of its shape (spec/model.h) plus the q/k/v biases
// or q/k norms its architecture adds.
double ModelParameterCount(const ModelConfig& config);

// Loads a model config; InvalidInput naming the file and the field on any error (missing,
// unknown, wrong type, out of range, inconsistent sizes). A Hugging Face config.json (a
// JSON object with "model_type") is read by ParseHfConfig (hf_config.h), so every
// `--model` flag takes either format.
ModelConfig LoadModelConfig(const std::string& path);

// InvalidInput naming `flag` and the model's `source` when documents of `max_len` tokens
// exceed the model's sliding window: the attention here is full causal attention within a
// document, which equals windowed attention only while a document fits in the window.
void RequireWithinSlidingWindow(const ModelConfig& config, std::int64_t max_len,
                                const std::string& flag, const std::string& source);
ModelConfig ParseModelConfig(const std::string& json_text, const std::string& source_name);

// The config as hydraulis' own JSON (the format of configs/models, every field written, the
// numbers exact), which ParseModelConfig reads back as an equal config.
std::string ModelConfigToJson(const ModelConfig& config);

// The first field in which `a` and `b` differ in the layout of the model's weights, as
// "FIELD: A vs B" in the JSON's names (a size: layers, hidden, ffn, heads, kv_heads, vocab,
// head_dim; or tie_embeddings); "" when their weights have the same layout (name, rope_theta and
// norm_eps are not compared).
std::string WeightLayoutDifference(const ModelConfig& a, const ModelConfig& b);

// The names a file uses for ModelConfig's fields, so errors name what the user wrote
// (hydraulis' own configs by default; Hugging Face's in hf_config.h).
struct ModelConfigFieldNames {
  const char* layers = "layers";
  const char* hidden = "hidden";
  const char* ffn = "ffn";
  const char* heads = "heads";
  const char* kv_heads = "kv_heads";
  const char* vocab = "vocab";
  const char* rope_theta = "rope_theta";
  const char* norm_eps = "norm_eps";
  const char* head_dim = "head_dim";
};

// Checks the size constraints above; InvalidInput naming `source_name` and the field.
void ValidateModelConfig(const ModelConfig& config, const std::string& source_name,
                         const ModelConfigFieldNames& names = {});

}  // namespace hydraulis
