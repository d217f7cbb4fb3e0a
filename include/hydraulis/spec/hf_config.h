// Hugging Face `config.json` of the LLaMA, Mistral, Qwen2 and Qwen3 families, read into and written
// from ModelConfig, so a checkpoint saved by transformers' `save_pretrained` describes the model
// hydraulis trains (docs/runtime.md, "Hugging Face formats").
#pragma once

#include <string>

#include "hydraulis/spec/model_config.h"

namespace hydraulis {

// Parses a config.json. Reads model_type (one of kArchitectures; another type is refused
// naming it and the config's `architectures`, never loaded as something it is not),
// hidden_size, num_hidden_layers,
// num_attention_heads, num_key_value_heads (default: the heads), intermediate_size,
// vocab_size, rope_theta (rope_parameters.rope_theta where given; default 10000),
// rms_norm_eps (default 1e-6), tie_word_embeddings (default false), Mistral's
// sliding_window, head_dim (kept in shape.head_dim when it is not hidden_size / heads;
// Qwen3's absent head_dim is 128). Refused, naming the field, because the model would compute
// something else: hidden_act other than "silu", a non-null rope_scaling or a rope_type other than
// "default", attention_bias (except on Qwen2, whose q/k/v biases are its own) or mlp_bias true,
// Qwen's use_sliding_window true. Other fields (transformers writes dozens)
// are ignored. The name is _name_or_path when it is a non-empty string, else "hf-" + model_type.
// InvalidInput "<source>: <field>: ..." on any error, then ValidateModelConfig's checks.
ModelConfig ParseHfConfig(const std::string& json_text, const std::string& source_name);
ModelConfig LoadHfConfig(const std::string& path);

// A config.json that transformers reads as the same model, of the config's architecture
// (e.g. ["Qwen2ForCausalLM"], model_type "qwen2"): hidden_act "silu", the sizes,
// rope_theta, rms_norm_eps, tie_word_embeddings, the family's window and bias fields, and
// torch_dtype (e.g. "float32", "bfloat16").
std::string HfConfigJson(const ModelConfig& config, const std::string& torch_dtype);

}  // namespace hydraulis
