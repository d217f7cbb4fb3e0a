#include "hydraulis/checkpoint/hf_checkpoint.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "hydraulis/base/error.h"
#include "hydraulis/base/file_io.h"
#include "hydraulis/base/internal/json_text.h"
#include "hydraulis/spec/hf_config.h"

namespace hydraulis {
namespace {

namespace fs = std::filesystem;

std::string ShapeText(const std::vector<std::int64_t>& shape) {
  std::string text = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    text += (i ? ", " : "") + std::to_string(shape[i]);
  }
  return text + "]";
}

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

std::vector<HfTensorSpec> HfModelTensors(const ModelConfig& c) {
  const std::int64_t hidden = c.shape.hidden, ffn = c.shape.ffn, vocab = c.shape.vocab;
  const std::int64_t q = std::int64_t{c.shape.heads} * c.head_dim();
  const std::int64_t kv = std::int64_t{c.shape.kv_heads} * c.head_dim();
  std::vector<HfTensorSpec> out = {{"model.embed_tokens.weight", {vocab, hidden}}};
  for (int i = 0; i < c.shape.layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    out.push_back({p + "self_attn.q_proj.weight", {q, hidden}});
    out.push_back({p + "self_attn.k_proj.weight", {kv, hidden}});
    out.push_back({p + "self_attn.v_proj.weight", {kv, hidden}});
    out.push_back({p + "self_attn.o_proj.weight", {hidden, q}});
    if (c.qkv_bias()) {
      out.push_back({p + "self_attn.q_proj.bias", {q}});
      out.push_back({p + "self_attn.k_proj.bias", {kv}});
      out.push_back({p + "self_attn.v_proj.bias", {kv}});
    }
    if (c.qk_norm()) {
      out.push_back({p + "self_attn.q_norm.weight", {c.head_dim()}});
      out.push_back({p + "self_attn.k_norm.weight", {c.head_dim()}});
    }
    out.push_back({p + "mlp.gate_proj.weight", {ffn, hidden}});
    out.push_back({p + "mlp.up_proj.weight", {ffn, hidden}});
    out.push_back({p + "mlp.down_proj.weight", {hidden, ffn}});
    out.push_back({p + "input_layernorm.weight", {hidden}});
    out.push_back({p + "post_attention_layernorm.weight", {hidden}});
  }
  out.push_back({"model.norm.weight", {hidden}});
  if (!c.tie_embeddings) out.push_back({"lm_head.weight", {vocab, hidden}});
  return out;
}

std::map<std::string, std::string> ParseSafetensorsIndex(const std::string& json_text,
                                                         const std::string& source) {
  const nlohmann::json j = ParseJson(json_text, source);
  if (!j.is_object() || !j.contains("weight_map") || !j.at("weight_map").is_object()) {
    throw InvalidInput(source + ": weight_map: missing or not an object of tensor -> file");
  }
  std::map<std::string, std::string> map;
  for (const auto& [tensor, file] : j.at("weight_map").items()) {
    const std::string where = source + ": weight_map: " + QuoteForMessage(tensor) + ": ";
    if (!file.is_string()) {
      throw InvalidInput(where + "expected a file name, got " + JsonForMessage(file));
    }
    const std::string name = file.get<std::string>();
    if (name.find('/') != std::string::npos || name.find('\\') != std::string::npos ||
        name.empty() || name[0] == '.' || !EndsWith(name, ".safetensors")) {
      throw InvalidInput(where + QuoteForMessage(name) +
                         " is not a plain *.safetensors file name in the checkpoint directory");
    }
    map.emplace(tensor, name);
  }
  return map;
}

namespace {

// Opening a checkpoint, phase by phase (HfCheckpoint's constructor): the config, where
// each tensor is (one file, or the shards an index names), then each tensor the config
// needs checked for presence, dtype and shape.

// Opens the safetensors file(s) of `dir` into `files` and records every tensor's place in
// `where`: model.safetensors alone, or the shards model.safetensors.index.json names, each
// opened once.
void LocateTensors(const std::string& dir, std::vector<std::unique_ptr<SafetensorsFile>>& files,
                   std::map<std::string, HfCheckpoint::Located>& where) {
  const std::string single = dir + "/model.safetensors";
  const std::string index_path = dir + "/model.safetensors.index.json";
  std::map<std::string, std::string> index;  // tensor -> file; empty: one file
  if (fs::exists(index_path)) {
    index = ParseSafetensorsIndex(ReadFileText(index_path), index_path);
  } else if (!fs::exists(single)) {
    throw InvalidInput(dir +
                       ": neither model.safetensors nor model.safetensors.index.json "
                       "(only safetensors weights are read, not pytorch_model.bin)");
  }
  std::map<std::string, std::size_t> opened;  // file name -> files position
  auto open = [&](const std::string& name) -> const SafetensorsFile& {
    const auto [it, added] = opened.emplace(name, files.size());
    if (added) {
      const std::string path = dir + "/" + name;
      if (!fs::exists(path)) {
        throw InvalidInput(path + ": missing (a shard " +
                           (index.empty() ? std::string("") : "model.safetensors.index.json ") +
                           "names)");
      }
      files.push_back(std::make_unique<SafetensorsFile>(path));
    }
    return *files[it->second];
  };
  if (index.empty()) {
    const SafetensorsFile& file = open("model.safetensors");
    for (const SafetensorsTensor& t : file.header().tensors)
      where.emplace(t.name, HfCheckpoint::Located{&file, &t});
    return;
  }
  for (const auto& [tensor, name] : index) {
    const SafetensorsFile& file = open(name);
    if (!file.Contains(tensor)) {
      throw InvalidInput(file.path() + ": no tensor " + QuoteForMessage(tensor) + ", which " +
                         index_path + " places there");
    }
    where.emplace(tensor, HfCheckpoint::Located{&file, &file.Find(tensor)});
  }
}

// Every tensor of `tensors` (what config.json implies) is in `where`, in F32, BF16 or F16,
// with its shape.
void CheckTensors(const std::string& dir, const std::vector<HfTensorSpec>& tensors,
                  const std::map<std::string, HfCheckpoint::Located>& where) {
  for (const HfTensorSpec& spec : tensors) {
    const auto it = where.find(spec.name);
    if (it == where.end()) {
      throw InvalidInput(dir + ": tensor " + QuoteForMessage(spec.name) +
                         " is missing (config.json describes a model that needs it)");
    }
    const SafetensorsTensor& t = *it->second.tensor;
    if (t.dtype != SafetensorsDType::kF32 && t.dtype != SafetensorsDType::kBF16 &&
        t.dtype != SafetensorsDType::kF16) {
      throw InvalidInput(it->second.file->path() + ": tensor " + QuoteForMessage(spec.name) +
                         ": dtype " + std::string(SafetensorsDTypeName(t.dtype)) +
                         " (weights must be F32, BF16 or F16)");
    }
    if (t.shape != spec.shape) {
      throw InvalidInput(it->second.file->path() + ": tensor " + QuoteForMessage(spec.name) +
                         ": shape " + ShapeText(t.shape) + ", but config.json implies " +
                         ShapeText(spec.shape));
    }
  }
}

}  // namespace

HfCheckpoint::HfCheckpoint(const std::string& dir) : dir_(dir) {
  if (!fs::is_directory(dir)) {
    throw InvalidInput(dir +
                       ": not a directory (expected a Hugging Face checkpoint: "
                       "config.json and model.safetensors)");
  }
  config_ = LoadHfConfig(dir + "/config.json");
  tensors_ = HfModelTensors(config_);
  LocateTensors(dir, files_, where_);
  CheckTensors(dir, tensors_, where_);
}

HfCheckpoint::~HfCheckpoint() = default;
HfCheckpoint::HfCheckpoint(HfCheckpoint&&) noexcept = default;
HfCheckpoint& HfCheckpoint::operator=(HfCheckpoint&&) noexcept = default;

HfCheckpoint::Located HfCheckpoint::Find(const std::string& name) const {
  const auto it = where_.find(name);
  if (it == where_.end()) throw InvalidInput(dir_ + ": no tensor " + QuoteForMessage(name));
  return it->second;
}

}  // namespace hydraulis
