// A Hugging Face checkpoint directory of a LLaMA-family model, as transformers'
// `save_pretrained` writes it: config.json and the weights in one model.safetensors, or
// sharded as model.safetensors.index.json ({"weight_map": {tensor: file}}) plus the
// files it names. Opening validates the whole directory (config, every shard's header,
// the index against the shards, every expected tensor's presence, dtype and shape against
// the config) before any weight is read; the shards stay memory-mapped, so reading a
// tensor copies only that tensor. Torch-free: the runtime slices the bytes it is given.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "hydraulis/checkpoint/safetensors.h"
#include "hydraulis/spec/model_config.h"

namespace hydraulis {

// A tensor a LLaMA model of `config` has under Hugging Face's names, and its shape.
struct HfTensorSpec {
  std::string name;
  std::vector<std::int64_t> shape;
};

// Every tensor transformers' model of `config`'s architecture (LlamaForCausalLM, ...)
// saves, in a fixed order: model.embed_tokens.weight, per layer i the q/k/v/o projections
// (with Qwen2's q/k/v biases, self_attn.q_proj.bias, ...; with Qwen3's self_attn.q_norm and
// k_norm weights), the gate/up/down MLP projections and both norms
// (model.layers.{i}.self_attn.q_proj.weight, ...,
// model.layers.{i}.post_attention_layernorm.weight), model.norm.weight, and lm_head.weight
// unless the embeddings are tied.
std::vector<HfTensorSpec> HfModelTensors(const ModelConfig& config);

// Parses model.safetensors.index.json: its weight_map (tensor -> shard file name).
// InvalidInput naming `source` when weight_map is missing or not an object of strings, or
// a file name is not a plain file name ending in .safetensors (no directories, so an index
// cannot point outside its checkpoint).
std::map<std::string, std::string> ParseSafetensorsIndex(const std::string& json_text,
                                                         const std::string& source);

class HfCheckpoint {
 public:
  // Opens and validates `dir` (see above). InvalidInput naming the file and the tensor:
  // a missing config.json or weights file, a missing shard, a damaged safetensors file, a
  // tensor the index names but its shard lacks, a tensor the model needs but no file has,
  // a tensor of a floating dtype other than F32, BF16 or F16, or a shape that disagrees
  // with the config.
  explicit HfCheckpoint(const std::string& dir);
  ~HfCheckpoint();
  HfCheckpoint(HfCheckpoint&&) noexcept;
  HfCheckpoint& operator=(HfCheckpoint&&) noexcept;

  const ModelConfig& config() const { return config_; }
  // The tensors the model needs (HfModelTensors(config())).
  const std::vector<HfTensorSpec>& tensors() const { return tensors_; }
  // Where tensor `name` is: its file and header entry. InvalidInput when absent.
  struct Located {
    const SafetensorsFile* file;
    const SafetensorsTensor* tensor;
  };
  Located Find(const std::string& name) const;
  // Shard files in use (1 when unsharded).
  std::size_t num_files() const { return files_.size(); }

 private:
  std::string dir_;
  ModelConfig config_;
  std::vector<HfTensorSpec> tensors_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, Located> where_;
};

}  // namespace hydraulis
