#include "hydraulis/spec/model_config.h"

#include <nlohmann/json.hpp>

#include <utility>

#include "hydraulis/base/error.h"
#include "hydraulis/base/file_io.h"
#include "hydraulis/base/internal/json_text.h"
#include "hydraulis/spec/hf_config.h"
#include "hydraulis/spec/internal/json_reader.h"

namespace hydraulis {
namespace {

// Smallest RoPE base that still gives distinct frequencies per pair of dimensions.
constexpr double kMinRopeTheta = 1.0;

void Require(bool ok, const std::string& source, const std::string& field,
             const std::string& message) {
  if (!ok) throw InvalidInput(source + ": " + field + ": " + message);
}

}  // namespace

void ValidateModelConfig(const ModelConfig& config, const std::string& source_name,
                         const ModelConfigFieldNames& names) {
  const ModelSpec& s = config.shape;
  Require(s.layers >= 1, source_name, names.layers, "must be >= 1");
  Require(s.hidden >= 1, source_name, names.hidden, "must be >= 1");
  Require(s.ffn >= 1, source_name, names.ffn, "must be >= 1");
  Require(s.vocab >= 1, source_name, names.vocab, "must be >= 1");
  Require(s.heads >= 1 && (s.head_dim > 0 || s.hidden % s.heads == 0), source_name, names.heads,
          "must divide " + std::string(names.hidden) + " (" + std::to_string(s.hidden) + "), got " +
              std::to_string(s.heads) + " (or give the head width, " + names.head_dim + ")");
  Require(s.head_dim >= 0, source_name, names.head_dim,
          "must be > 0 when given, got " + std::to_string(s.head_dim));
  Require(s.kv_heads >= 1 && s.heads % s.kv_heads == 0, source_name, names.kv_heads,
          "must divide " + std::string(names.heads) + " (" + std::to_string(s.heads) + "), got " +
              std::to_string(s.kv_heads));
  // Rotary embedding rotates pairs of dimensions.
  Require(config.head_dim() % 2 == 0, source_name, s.head_dim > 0 ? names.head_dim : names.heads,
          (s.head_dim > 0 ? std::string(names.head_dim)
                          : std::string(names.hidden) + " / " + names.heads) +
              " must be even for rotary embedding, got " + std::to_string(config.head_dim()));
  Require(config.rope_theta > kMinRopeTheta, source_name, names.rope_theta,
          "must be > 1, got " + std::to_string(config.rope_theta));
  Require(config.norm_eps > 0.0, source_name, names.norm_eps,
          "must be > 0, got " + std::to_string(config.norm_eps));
}

bool IsArchitecture(const std::string& name) {
  for (const char* a : kArchitectures) {
    if (name == a) return true;
  }
  return false;
}

double ModelParameterCount(const ModelConfig& config) {
  const ModelSpec& s = config.shape;
  const double dim = config.head_dim();
  double per_layer = 0;
  if (config.qkv_bias()) per_layer = (s.heads + 2.0 * s.kv_heads) * dim;
  if (config.qk_norm()) per_layer = 2.0 * dim;
  return ParameterCount(s, config.tie_embeddings) + per_layer * s.layers;
}

ModelConfig ParseModelConfig(const std::string& json_text, const std::string& source_name) {
  nlohmann::json doc = ParseJson(json_text, source_name);
  JsonObjectReader r(doc, source_name, "");
  ModelConfig c;
  c.shape.name = r.String("name");
  c.shape.layers = static_cast<int>(r.Int("layers", 1));
  c.shape.hidden = static_cast<int>(r.Int("hidden", 1));
  c.shape.ffn = static_cast<int>(r.Int("ffn", 1));
  c.shape.heads = static_cast<int>(r.Int("heads", 1));
  c.shape.kv_heads = static_cast<int>(r.Int("kv_heads", 1));
  c.shape.vocab = static_cast<int>(r.Int("vocab", 1));
  c.shape.head_dim = static_cast<int>(r.IntOr("head_dim", 0, 1));
  if (r.Has("tie_embeddings")) {
    const nlohmann::json& v = r.Value("tie_embeddings");
    if (!v.is_boolean())
      r.Fail("tie_embeddings", "expected true or false, got " + JsonForMessage(v));
    c.tie_embeddings = v.get<bool>();
  }
  c.rope_theta = r.NumberOr("rope_theta", c.rope_theta, 0.0);
  c.norm_eps = r.NumberOr("norm_eps", c.norm_eps, 0.0);
  c.architecture = r.StringOr("architecture", c.architecture);
  if (!IsArchitecture(c.architecture)) {
    r.Fail("architecture", "expected \"llama\", \"mistral\", \"qwen2\" or \"qwen3\", got " +
                               QuoteForMessage(c.architecture));
  }
  c.sliding_window = r.IntOr("sliding_window", 0, 0, JsonObjectReader::kIntMax);
  if (c.sliding_window > 0 && c.architecture == "llama") {
    r.Fail("sliding_window", "a \"llama\" architecture has no sliding window");
  }
  r.RejectUnknown();
  ValidateModelConfig(c, source_name);
  return c;
}

std::string ModelConfigToJson(const ModelConfig& config) {
  nlohmann::ordered_json j;
  j["name"] = config.shape.name;
  j["layers"] = config.shape.layers;
  j["hidden"] = config.shape.hidden;
  j["ffn"] = config.shape.ffn;
  j["heads"] = config.shape.heads;
  j["kv_heads"] = config.shape.kv_heads;
  j["vocab"] = config.shape.vocab;
  if (config.shape.head_dim > 0) j["head_dim"] = config.shape.head_dim;
  j["tie_embeddings"] = config.tie_embeddings;
  j["rope_theta"] = config.rope_theta;
  j["norm_eps"] = config.norm_eps;
  // Written only when not LLaMA's, so the configs written before them read and write back
  // unchanged.
  if (config.architecture != "llama") j["architecture"] = config.architecture;
  if (config.sliding_window > 0) j["sliding_window"] = config.sliding_window;
  return j.dump(2) + "\n";
}

std::string WeightLayoutDifference(const ModelConfig& a, const ModelConfig& b) {
  const ModelSpec &x = a.shape, &y = b.shape;
  const std::pair<const char*, std::pair<int, int>> sizes[] = {
      {"layers", {x.layers, y.layers}},
      {"hidden", {x.hidden, y.hidden}},
      {"ffn", {x.ffn, y.ffn}},
      {"heads", {x.heads, y.heads}},
      {"kv_heads", {x.kv_heads, y.kv_heads}},
      {"vocab", {x.vocab, y.vocab}},
      {"head_dim", {HeadDim(x), HeadDim(y)}}};
  for (const auto& [field, values] : sizes) {
    if (values.first != values.second) {
      return std::string(field) + ": " + std::to_string(values.first) + " vs " +
             std::to_string(values.second);
    }
  }
  if (a.tie_embeddings != b.tie_embeddings) {
    return std::string("tie_embeddings: ") + (a.tie_embeddings ? "true" : "false") + " vs " +
           (b.tie_embeddings ? "true" : "false");
  }
  return "";
}

void RequireWithinSlidingWindow(const ModelConfig& config, std::int64_t max_len,
                                const std::string& flag, const std::string& source) {
  if (config.sliding_window > 0 && max_len > config.sliding_window) {
    throw InvalidInput(flag + " " + std::to_string(max_len) + ": " + source +
                       " has sliding_window " + std::to_string(config.sliding_window) +
                       ", and windowed attention is not implemented: attention here is full "
                       "within each document, which is the window's only for documents of at "
                       "most " +
                       std::to_string(config.sliding_window) + " tokens; give " + flag +
                       " <= " + std::to_string(config.sliding_window));
  }
}

ModelConfig LoadModelConfig(const std::string& path) {
  const std::string text = ReadFileText(path);
  const nlohmann::json doc = ParseJson(text, path);
  if (doc.is_object() && doc.contains("model_type")) return ParseHfConfig(text, path);
  return ParseModelConfig(text, path);
}

}  // namespace hydraulis
