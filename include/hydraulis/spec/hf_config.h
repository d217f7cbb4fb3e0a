// Hugging Face `config.json` of the LLaMA family, read into and written from ModelConfig,
// so a checkpoint saved by transformers' `save_pretrained` describes the model hydraulis
// trains (docs/runtime.md, "Hugging Face formats").
#pragma once

#include <string>

#include "hydraulis/spec/model_config.h"

namespace hydraulis {

// Parses a config.json. Reads model_type (must be "llama"; another type is refused naming
// it, never loaded as something it is not), hidden_size, num_hidden_layers,
// num_attention_heads, num_key_value_heads (default: the heads), intermediate_size,
// vocab_size, rope_theta (default 10000), rms_norm_eps (default 1e-6), tie_word_embeddings
// (default false). Refused, naming the field, because the model would compute something
// else: hidden_act other than "silu", head_dim other than hidden_size / heads, a non-null
// rope_scaling, attention_bias or mlp_bias true. Other fields (transformers writes dozens)
// are ignored. The name is _name_or_path when it is a non-empty string, else "hf-llama".
// InvalidInput "<source>: <field>: ..." on any error, then ValidateModelConfig's checks.
ModelConfig ParseHfConfig(const std::string& json_text, const std::string& source_name);
ModelConfig LoadHfConfig(const std::string& path);

// A config.json that transformers' LlamaConfig reads as the same model: architectures
// ["LlamaForCausalLM"], model_type "llama", hidden_act "silu", the sizes, rope_theta,
// rms_norm_eps, tie_word_embeddings, and torch_dtype (e.g. "float32", "bfloat16").
std::string HfConfigJson(const ModelConfig& config, const std::string& torch_dtype);

}  // namespace hydraulis
