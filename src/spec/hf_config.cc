#include "hydraulis/spec/hf_config.h"

#include <nlohmann/json.hpp>

#include "hydraulis/base/error.h"
#include "hydraulis/base/file_io.h"
#include "hydraulis/base/internal/json_text.h"
#include "hydraulis/spec/internal/json_reader.h"

namespace hydraulis {

namespace {

// The families read and written: model_type, the class transformers loads them as.
struct HfFamily {
  const char* model_type;
  const char* class_name;
};
constexpr HfFamily kFamilies[] = {{"llama", "LlamaForCausalLM"},
                                  {"mistral", "MistralForCausalLM"},
                                  {"qwen2", "Qwen2ForCausalLM"},
                                  {"qwen3", "Qwen3ForCausalLM"}};

const HfFamily* FamilyOf(const std::string& model_type) {
  for (const HfFamily& f : kFamilies) {
    if (model_type == f.model_type) return &f;
  }
  return nullptr;
}

[[noreturn]] void RefuseFamily(JsonObjectReader& r, const std::string& model_type) {
  // The names themselves (e.g. ["Qwen2MoeForCausalLM"]), each quoted and bounded.
  std::string architectures;
  if (r.Has("architectures") && r.Value("architectures").is_array()) {
    for (const nlohmann::json& name : r.Value("architectures")) {
      if (!name.is_string() || architectures.size() > 200) continue;
      architectures +=
          (architectures.empty() ? "" : ", ") + QuoteForMessage(name.get<std::string>());
    }
    if (!architectures.empty()) architectures = " (architectures " + architectures + ")";
  }
  std::string supported;
  for (const HfFamily& f : kFamilies) {
    supported += std::string(supported.empty() ? "" : ", ") + "\"" + f.model_type + "\" (" +
                 f.class_name + ")";
  }
  r.Fail("model_type", QuoteForMessage(model_type) + " is not supported" + architectures +
                           "; supported: " + supported);
}

bool IsTrue(const nlohmann::json& v) { return v.is_boolean() && v.get<bool>(); }

// RoPE's base: transformers 5 writes it inside rope_parameters (with rope_type "default"
// for plain RoPE), earlier versions as rope_theta beside rope_scaling.
double RopeTheta(JsonObjectReader& r) {
  if (r.Has("rope_scaling") && !r.Value("rope_scaling").is_null()) {
    r.Fail("rope_scaling", "RoPE scaling is not supported (must be null or absent)");
  }
  if (r.Has("rope_parameters") && !r.Value("rope_parameters").is_null()) {
    JsonObjectReader rope = r.Object("rope_parameters");
    const std::string type = rope.StringOr("rope_type", "default");
    if (type != "default") {
      rope.Fail("rope_type", "RoPE scaling is not supported (must be \"default\"), got " +
                                 QuoteForMessage(type));
    }
    if (rope.Has("rope_theta")) return rope.Number("rope_theta", 0.0);
  }
  return r.NumberOr("rope_theta", 10000.0, 0.0);
}

// The window every layer applies (0: none). Mistral's applies to every layer when set;
// Qwen's only with use_sliding_window, and then to the layers from max_window_layers on,
// which the model here does not represent: refused.
std::int64_t SlidingWindow(JsonObjectReader& r, const std::string& model_type) {
  if (model_type == "mistral") {
    if (!r.Has("sliding_window") || r.Value("sliding_window").is_null()) return 0;
    return r.Int("sliding_window", 1, JsonObjectReader::kIntMax);
  }
  if (model_type == "qwen2" || model_type == "qwen3") {
    const char* field = nullptr;  // the field that asks for a window
    if (r.Has("use_sliding_window") && IsTrue(r.Value("use_sliding_window"))) {
      field = "use_sliding_window";
    } else if (r.Has("layer_types") && r.Value("layer_types").is_array()) {
      for (const nlohmann::json& t : r.Value("layer_types")) {
        if (t.is_string() && t.get<std::string>() == "sliding_attention") field = "layer_types";
      }
    }
    if (field != nullptr) {
      r.Fail(field, "sliding-window attention on some layers is not supported for " +
                        QuoteForMessage(model_type) +
                        " (must be false / every layer full_attention)");
    }
  }
  return 0;
}

}  // namespace

ModelConfig ParseHfConfig(const std::string& json_text, const std::string& source_name) {
  const nlohmann::json doc = ParseJson(json_text, source_name);
  JsonObjectReader r(doc, source_name, "");
  const std::string model_type = r.String("model_type");
  if (FamilyOf(model_type) == nullptr) RefuseFamily(r, model_type);
  ModelConfig c;
  c.architecture = model_type;
  c.shape.name = "hf-" + model_type;
  c.sliding_window = SlidingWindow(r, model_type);
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
  c.rope_theta = RopeTheta(r);
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
  // Qwen3's config defaults head_dim to 128 when absent; the others to hidden / heads. Kept
  // only when it is not hidden / heads, so such configs stay as they were.
  const bool head_dim_given = r.Has("head_dim") && !r.Value("head_dim").is_null();
  if ((head_dim_given || model_type == "qwen3") && c.shape.heads > 0) {
    const std::int64_t head_dim = head_dim_given ? r.Int("head_dim", 1) : 128;
    if (head_dim * c.shape.heads != c.shape.hidden) c.shape.head_dim = static_cast<int>(head_dim);
  }
  // Qwen2's q/k/v biases are part of its network (transformers ignores attention_bias
  // there); elsewhere a bias is a layer this model does not have.
  for (const char* bias : {"attention_bias", "mlp_bias"}) {
    if (model_type == "qwen2" && std::string(bias) == "attention_bias") continue;
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
       "num_key_value_heads", "vocab_size", "rope_theta", "rms_norm_eps", "head_dim"});
  return c;
}

ModelConfig LoadHfConfig(const std::string& path) {
  return ParseHfConfig(ReadFileText(path), path);
}

std::string HfConfigJson(const ModelConfig& config, const std::string& torch_dtype) {
  const HfFamily* family = FamilyOf(config.architecture);
  if (family == nullptr) {
    throw InvalidInput("Hugging Face export: architecture " + QuoteForMessage(config.architecture) +
                       " has no Hugging Face family");
  }
  nlohmann::ordered_json j;
  j["architectures"] = {family->class_name};
  j["model_type"] = family->model_type;
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
  // Qwen3's config would default it to 128; the others' to hidden / heads.
  if (config.shape.head_dim > 0 || config.architecture == "qwen3")
    j["head_dim"] = config.head_dim();
  if (config.architecture == "mistral") {
    j["sliding_window"] = config.sliding_window > 0 ? nlohmann::ordered_json(config.sliding_window)
                                                    : nlohmann::ordered_json(nullptr);
  } else if (config.architecture == "llama") {
    j["attention_bias"] = false;
    j["mlp_bias"] = false;
  } else {
    if (config.architecture == "qwen3") j["attention_bias"] = false;
    j["use_sliding_window"] = false;
    j["sliding_window"] = nullptr;
  }
  j["torch_dtype"] = torch_dtype;
  return j.dump(2) + "\n";
}

}  // namespace hydraulis
