#include "hydraulis/runtime/hf_weights.h"

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <map>

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
      {"w_down", "mlp.down_proj.weight"},
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
    return raw.view(type).reshape(at::IntArrayRef(at.tensor->shape)).to(at::kFloat);
  };
}

void WriteHfCheckpoint(const std::string& dir, const ModelConfig& config,
                       const std::vector<NamedParameter>& full, SafetensorsDType dtype) {
  if (dtype != SafetensorsDType::kF32 && dtype != SafetensorsDType::kBF16) {
    throw InvalidInput("Hugging Face export: dtype must be F32 or BF16, got " +
                       std::string(SafetensorsDTypeName(dtype)));
  }
  const std::vector<FullParameter> expected = FullParameters(config);
  if (full.size() != expected.size()) {
    throw InvalidInput("Hugging Face export: " + std::to_string(full.size()) +
                       " parameters, the model has " + std::to_string(expected.size()));
  }
  const at::ScalarType type = dtype == SafetensorsDType::kF32 ? at::kFloat : at::kBFloat16;
  std::vector<at::Tensor> converted;  // one copy of the weights, in the file's dtype
  std::vector<SafetensorsEntry> entries;
  converted.reserve(full.size());
  for (std::size_t i = 0; i < full.size(); ++i) {
    if (full[i].name != expected[i].name || full[i].value.sizes().vec() != expected[i].shape) {
      throw InvalidInput("Hugging Face export: parameter " + std::to_string(i) + " is " +
                         full[i].name + ", the model's is " + expected[i].name);
    }
    converted.push_back(full[i].value.detach().to(at::kCPU).to(type).contiguous());
    const at::Tensor& t = converted.back();
    entries.push_back({HfParameterName(full[i].name), dtype, expected[i].shape,
                       std::span(static_cast<const std::byte*>(t.data_ptr()),
                                 static_cast<std::size_t>(t.nbytes()))});
  }
  // Both files are written into a sibling temporary directory first, then moved into `dir`
  // (the weights, then config.json): a failure leaves `dir` as it was, and a reader that
  // finds the new config.json finds the new weights.
  namespace fs = std::filesystem;
  const std::string tmp = dir + ".tmp-" + std::to_string(::getpid());
  std::error_code ec;
  fs::remove_all(tmp, ec);
  fs::create_directories(tmp, ec);
  if (ec) throw IoError(tmp + ": cannot create: " + ec.message());
  try {
    WriteSafetensors(tmp + "/model.safetensors", entries, {{"format", "pt"}});
    WriteFileAtomically(
        tmp + "/config.json",
        HfConfigJson(config, dtype == SafetensorsDType::kF32 ? "float32" : "bfloat16"));
    fs::create_directories(dir, ec);
    if (ec) throw IoError(dir + ": cannot create: " + ec.message());
    for (const char* name : {"model.safetensors", "config.json"}) {
      fs::rename(tmp + "/" + name, dir + "/" + name, ec);
      if (ec) throw IoError(dir + "/" + name + ": cannot move into place: " + ec.message());
    }
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
  fs::remove_all(tmp, ec);
}

}  // namespace hydraulis
