#include "hydraulis/spec/hf_config.h"

#include <nlohmann/json.hpp>

#include "hydraulis/base/error.h"
#include "hydraulis/base/file_io.h"
#include "hydraulis/base/json_text.h"
#include "hydraulis/spec/json_reader.h"

namespace hydraulis {

ModelConfig ParseHfConfig(const std::string& json_text, const std::string& source_name) {
  const nlohmann::json doc = ParseJson(json_text, source_name);
  JsonObjectReader r(doc, source_name, "");
  const std::string model_type = r.String("model_type");
  if (model_type != "llama" && model_type != "mistral") {
    // The names themselves (e.g. ["Qwen2ForCausalLM"]), each quoted and bounded.
    std::string architectures;
    if (r.Has("architectures") && r.Value("architectures").is_array()) {
      for (const nlohmann::json& name : r.Value("architectures")) {
        if (!name.is_string() || architectures.size() > 200) continue;
        architectures +=
            (architectures.empty() ? "" : ", ") + QuoteForMessage(name.get<std::string>());
      }
      if (!architectures.empty()) architectures = " (architectures " + architectures + ")";
    }
    r.Fail("model_type", QuoteForMessage(model_type) + " is not supported" + architectures +
                             "; supported: \"llama\" (LlamaForCausalLM) and \"mistral\" "
                             "(MistralForCausalLM)");
  }
  ModelConfig c;
  c.architecture = model_type;
  c.shape.name = "hf-" + model_type;
  if (model_type == "mistral" && r.Has("sliding_window") && !r.Value("sliding_window").is_null()) {
    c.sliding_window = r.Int("sliding_window", 1, JsonObjectReader::kIntMax);
  }
  if (r.Has("_name_or_path") && r.Value("_name_or_path").is_string() &&
      !r.Value("_name_or_path").get<std::string>().empty()) {
    c.shape.name = r.String("_name_or_path");
  }
  c.shape.hidden = static_cast<int>(r.Int("hidden_size", 1));
  c.shape.layers = static_cast<int>(r.Int("num_hidden_layers", 1));
  c.shape.heads = static_cast<int>(r.Int("num_attention_heads", 1));
  c.shape.kv_heads = static_cast<int>(r.IntOr("num_key_value_heads", c.shape.heads, 1));
  c.shape.ffn = static_cast<int>(r.Int("intermediate_size", 1));
  c.shape.vocab = static_cast<int>(r.Int("vocab_size", 1));
  c.rope_theta = r.NumberOr("rope_theta", 10000.0, 0.0);
  c.norm_eps = r.NumberOr("rms_norm_eps", 1e-6, 0.0);
  if (r.Has("tie_word_embeddings")) {
    const nlohmann::json& v = r.Value("tie_word_embeddings");
    if (!v.is_boolean()) {
      r.Fail("tie_word_embeddings", "expected true or false, got " + JsonForMessage(v));
    }
    c.tie_embeddings = v.get<bool>();
  }
  if (r.Has("hidden_act") && r.StringOr("hidden_act", "silu") != "silu") {
    r.Fail("hidden_act",
           "only \"silu\" (SwiGLU) is supported, got " + JsonForMessage(r.Value("hidden_act")));
  }
  if (r.Has("head_dim") && !r.Value("head_dim").is_null() &&
      r.Int("head_dim", 1) * c.shape.heads != c.shape.hidden) {
    r.Fail("head_dim", "must be hidden_size / num_attention_heads (" +
                           std::to_string(c.shape.hidden / c.shape.heads) + "), got " +
                           JsonForMessage(r.Value("head_dim")));
  }
  if (r.Has("rope_scaling") && !r.Value("rope_scaling").is_null()) {
    r.Fail("rope_scaling", "RoPE scaling is not supported (must be null or absent)");
  }
  for (const char* bias : {"attention_bias", "mlp_bias"}) {
    if (r.Has(bias)) {
      const nlohmann::json& v = r.Value(bias);
      if (!v.is_boolean() || v.get<bool>()) {
        r.Fail(bias, "biases are not supported (must be false), got " + JsonForMessage(v));
      }
    }
  }
  ValidateModelConfig(
      c, source_name,
      {"num_hidden_layers", "hidden_size", "intermediate_size", "num_attention_heads",
       "num_key_value_heads", "vocab_size", "rope_theta", "rms_norm_eps"});
  return c;
}

ModelConfig LoadHfConfig(const std::string& path) {
  return ParseHfConfig(ReadFileText(path), path);
}

std::string HfConfigJson(const ModelConfig& config, const std::string& torch_dtype) {
  nlohmann::ordered_json j;
  const bool mistral = config.architecture == "mistral";
  j["architectures"] = {mistral ? "MistralForCausalLM" : "LlamaForCausalLM"};
  j["model_type"] = mistral ? "mistral" : "llama";
  j["hidden_act"] = "silu";
  j["hidden_size"] = config.shape.hidden;
  j["intermediate_size"] = config.shape.ffn;
  j["num_hidden_layers"] = config.shape.layers;
  j["num_attention_heads"] = config.shape.heads;
  j["num_key_value_heads"] = config.shape.kv_heads;
  j["vocab_size"] = config.shape.vocab;
  j["rope_theta"] = config.rope_theta;
  j["rms_norm_eps"] = config.norm_eps;
  j["tie_word_embeddings"] = config.tie_embeddings;
  if (mistral) {
    j["sliding_window"] = config.sliding_window > 0 ? nlohmann::ordered_json(config.sliding_window)
                                                    : nlohmann::ordered_json(nullptr);
  } else {
    j["attention_bias"] = false;
    j["mlp_bias"] = false;
  }
  j["torch_dtype"] = torch_dtype;
  return j.dump(2) + "\n";
}

}  // namespace hydraulis
