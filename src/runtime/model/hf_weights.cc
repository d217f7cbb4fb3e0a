#include "hydraulis/runtime/model/hf_weights.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "hydraulis/base/error.h"
#include "hydraulis/base/file_io.h"
#include "hydraulis/spec/hf_config.h"

namespace hydraulis {

std::string HfParameterName(const std::string& full_name) {
  if (full_name == "embed") return "model.embed_tokens.weight";
  if (full_name == "final_norm") return "model.norm.weight";
  if (full_name == "head") return "lm_head.weight";
  static const std::map<std::string, std::string> kLayerFields = {
      {"attn_norm", "input_layernorm.weight"}, {"wq", "self_attn.q_proj.weight"},
      {"wk", "self_attn.k_proj.weight"},       {"wv", "self_attn.v_proj.weight"},
      {"wo", "self_attn.o_proj.weight"},       {"mlp_norm", "post_attention_layernorm.weight"},
      {"w_gate", "mlp.gate_proj.weight"},      {"w_up", "mlp.up_proj.weight"},
      {"w_down", "mlp.down_proj.weight"},      {"bq", "self_attn.q_proj.bias"},
      {"bk", "self_attn.k_proj.bias"},         {"bv", "self_attn.v_proj.bias"},
      {"q_norm", "self_attn.q_norm.weight"},   {"k_norm", "self_attn.k_norm.weight"},
  };
  const std::size_t dot = full_name.find('.', 7);
  if (full_name.rfind("layers.", 0) == 0 && dot != std::string::npos) {
    const auto it = kLayerFields.find(full_name.substr(dot + 1));
    if (it != kLayerFields.end()) {
      return "model." + full_name.substr(0, dot) + "." + it->second;
    }
  }
  throw InternalError("HfParameterName: not a parameter of the model: " + full_name);
}

InitialWeights HfInitialWeights(const HfCheckpoint& checkpoint) {
  return [&checkpoint](const FullParameter& p) {
    const HfCheckpoint::Located at = checkpoint.Find(HfParameterName(p.name));
    const std::span<const std::byte> bytes = at.file->Bytes(*at.tensor);
    at::ScalarType type = at::kFloat;
    switch (at.tensor->dtype) {
      case SafetensorsDType::kF32:
        break;
      case SafetensorsDType::kBF16:
        type = at::kBFloat16;
        break;
      case SafetensorsDType::kF16:
        type = at::kHalf;
        break;
      default:  // HfCheckpoint admits only the three
        throw InternalError("HfInitialWeights: unexpected dtype");
    }
    // The mapping is read-only and may be unaligned for the dtype: copy the bytes first.
    at::Tensor raw = at::empty({static_cast<std::int64_t>(bytes.size())}, at::kByte);
    std::memcpy(raw.data_ptr(), bytes.data(), bytes.size());
    // Each tensor is read once: its mapped pages need not stay resident beside the model.
    at.file->Release(*at.tensor);
    return raw.view(type).reshape(at::IntArrayRef(at.tensor->shape)).to(at::kFloat);
  };
}

namespace {

// The export's files: which parameters go into which weights file, and their names.
struct ShardPlan {
  std::vector<std::pair<std::size_t, std::size_t>> ranges;  // [first, end) of the parameters
  std::uint64_t total_bytes = 0;

  std::string FileName(std::size_t k) const {
    if (ranges.size() == 1) return "model.safetensors";
    std::array<char, 64> name{};
    std::snprintf(name.data(), name.size(), "model-%05zu-of-%05zu.safetensors", k + 1,
                  ranges.size());
    return std::string(name.data());
  }
};

// Phase 1: the model's parameters in order; shards are cut greedily by size in the file's
// dtype.
ShardPlan PlanShards(const std::vector<FullParameter>& expected, std::uint64_t item_bytes,
                     std::uint64_t max_shard_bytes) {
  ShardPlan plan;
  std::uint64_t shard_bytes = 0;
  for (std::size_t i = 0; i < expected.size(); ++i) {
    std::uint64_t bytes = item_bytes;
    for (std::int64_t d : expected[i].shape) bytes *= static_cast<std::uint64_t>(d);
    if (plan.ranges.empty() || (shard_bytes > 0 && shard_bytes + bytes > max_shard_bytes)) {
      plan.ranges.emplace_back(i, i);
      shard_bytes = 0;
    }
    plan.ranges.back().second = i + 1;
    shard_bytes += bytes;
    plan.total_bytes += bytes;
  }
  return plan;
}

void CheckParameters(const std::vector<NamedParameter>& full,
                     const std::vector<FullParameter>& expected) {
  if (full.size() != expected.size()) {
    throw InvalidInput("Hugging Face export: " + std::to_string(full.size()) +
                       " parameters, the model has " + std::to_string(expected.size()));
  }
  for (std::size_t i = 0; i < full.size(); ++i) {
    if (full[i].name != expected[i].name || full[i].value.sizes().vec() != expected[i].shape) {
      throw InvalidInput("Hugging Face export: parameter " + std::to_string(i) + " is " +
                         full[i].name + ", the model's is " + expected[i].name);
    }
  }
}

void CheckExportArguments(SafetensorsDType dtype, std::uint64_t max_shard_bytes) {
  if (dtype != SafetensorsDType::kF32 && dtype != SafetensorsDType::kBF16) {
    throw InvalidInput("Hugging Face export: dtype must be F32 or BF16, got " +
                       std::string(SafetensorsDTypeName(dtype)));
  }
  if (max_shard_bytes == 0) throw InvalidInput("Hugging Face export: the shard size limit is 0");
}

std::uint64_t ItemBytes(SafetensorsDType dtype) { return dtype == SafetensorsDType::kF32 ? 4 : 2; }

bool IsHfWeightsFile(const std::string& name) {
  return name == "model.safetensors" || name == "model.safetensors.index.json" ||
         (name.starts_with("model-") && name.ends_with(".safetensors"));
}

// Phase 2: every file written into `tmp` (weights, the index when sharded, config.json);
// returns the names of the weight and index files.
std::vector<std::string> WriteFiles(const std::string& tmp, const ModelConfig& config,
                                    const std::vector<NamedParameter>& full,
                                    const std::vector<FullParameter>& expected,
                                    const ShardPlan& shards, SafetensorsDType dtype) {
  const at::ScalarType type = dtype == SafetensorsDType::kF32 ? at::kFloat : at::kBFloat16;
  std::vector<std::string> files;
  nlohmann::ordered_json weight_map = nlohmann::ordered_json::object();
  for (std::size_t k = 0; k < shards.ranges.size(); ++k) {
    std::vector<at::Tensor> converted;  // this shard's tensors in the file's dtype
    std::vector<SafetensorsEntry> entries;
    for (std::size_t i = shards.ranges[k].first; i < shards.ranges[k].second; ++i) {
      converted.push_back(full[i].value.detach().to(at::kCPU).to(type).contiguous());
      const at::Tensor& t = converted.back();
      entries.push_back({HfParameterName(full[i].name), dtype, expected[i].shape,
                         std::span(static_cast<const std::byte*>(t.data_ptr()),
                                   static_cast<std::size_t>(t.nbytes()))});
      weight_map[entries.back().name] = shards.FileName(k);
    }
    WriteSafetensors(tmp + "/" + shards.FileName(k), entries, {{"format", "pt"}});
    files.push_back(shards.FileName(k));
  }
  if (shards.ranges.size() > 1) {
    const nlohmann::ordered_json index = {{"metadata", {{"total_size", shards.total_bytes}}},
                                          {"weight_map", weight_map}};
    WriteFileAtomically(tmp + "/model.safetensors.index.json", index.dump(2) + "\n");
    files.push_back("model.safetensors.index.json");
  }
  WriteFileAtomically(
      tmp + "/config.json",
      HfConfigJson(config, dtype == SafetensorsDType::kF32 ? "float32" : "bfloat16"));
  return files;
}

// Phase 3: the weights moved into `dir`, then config.json last, so a reader that finds the
// new config.json finds the new weights. Only the files written are replaced.
void MoveIntoPlace(const std::string& tmp, const std::string& dir,
                   const std::vector<std::string>& files) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw IoError(dir + ": cannot create: " + ec.message());
  for (const std::string& name : files) {
    fs::rename(tmp + "/" + name, dir + "/" + name, ec);
    if (ec) throw IoError(dir + "/" + name + ": cannot move into place: " + ec.message());
  }
  fs::rename(tmp + "/config.json", dir + "/config.json", ec);
  if (ec) throw IoError(dir + "/config.json: cannot move into place: " + ec.message());
}

}  // namespace

std::vector<std::string> HfCheckpointFiles(const ModelConfig& config, SafetensorsDType dtype,
                                           std::uint64_t max_shard_bytes) {
  CheckExportArguments(dtype, max_shard_bytes);
  const ShardPlan shards = PlanShards(FullParameters(config), ItemBytes(dtype), max_shard_bytes);
  std::vector<std::string> files;
  for (std::size_t k = 0; k < shards.ranges.size(); ++k) files.push_back(shards.FileName(k));
  if (shards.ranges.size() > 1) files.push_back("model.safetensors.index.json");
  files.push_back("config.json");
  return files;
}

void CheckHfCheckpointTarget(const std::string& dir, const std::vector<std::string>& files,
                             bool overwrite, const std::string& what) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status status = fs::status(dir, ec);
  if (!fs::exists(status)) return;
  if (!fs::is_directory(status)) {
    throw InvalidInput(what + " " + dir + ": exists and is not a directory");
  }
  std::vector<std::string> present;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    present.push_back(entry.path().filename().string());
  }
  if (ec) throw InvalidInput(what + " " + dir + ": cannot list: " + ec.message());
  if (present.empty()) return;
  std::sort(present.begin(), present.end());
  if (!overwrite) {
    throw InvalidInput(what + " " + dir + ": not empty (" + std::to_string(present.size()) +
                       (present.size() == 1 ? " entry, " : " entries, first ") +
                       QuoteForMessage(present.front()) +
                       "); give --overwrite to replace the files export writes there, or "
                       "choose a new or empty directory");
  }
  for (const std::string& name : present) {
    if (IsHfWeightsFile(name) && std::find(files.begin(), files.end(), name) == files.end()) {
      throw InvalidInput(dir + "/" + name +
                         ": weights of an earlier export this one does not replace (transformers "
                         "would read them instead of, or beside, the new ones); remove them or "
                         "choose another directory");
    }
  }
}

void WriteHfCheckpoint(const std::string& dir, const ModelConfig& config,
                       const std::vector<NamedParameter>& full, SafetensorsDType dtype,
                       std::uint64_t max_shard_bytes) {
  CheckExportArguments(dtype, max_shard_bytes);
  const std::vector<FullParameter> expected = FullParameters(config);
  CheckParameters(full, expected);
  const ShardPlan shards = PlanShards(expected, ItemBytes(dtype), max_shard_bytes);
  // What another export left there would be read with the new files: refused before any
  // file is written (the caller checked it before its work; a folder can change since).
  CheckHfCheckpointTarget(dir, HfCheckpointFiles(config, dtype, max_shard_bytes), true, "output");
  // Every file is written into a sibling temporary directory first, then moved into `dir`:
  // a failure leaves `dir` as it was.
  namespace fs = std::filesystem;
  const std::string tmp = dir + ".tmp-" + std::to_string(::getpid());
  std::error_code ec;
  fs::remove_all(tmp, ec);
  fs::create_directories(tmp, ec);
  if (ec) throw IoError(tmp + ": cannot create: " + ec.message());
  try {
    MoveIntoPlace(tmp, dir, WriteFiles(tmp, config, full, expected, shards, dtype));
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
  fs::remove_all(tmp, ec);
}

}  // namespace hydraulis
