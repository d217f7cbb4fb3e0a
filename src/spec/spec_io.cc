#include "hydraulis/spec/spec_io.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "hydraulis/base/error.h"
#include "hydraulis/base/internal/json_text.h"
#include "hydraulis/spec/internal/json_reader.h"

namespace hydraulis {
namespace {

constexpr const char* kProfileFormat = "hydraulis.profile/1";
constexpr const char* kCandidatesFormat = "hydraulis.candidates/1";

int ToInt(std::int64_t v) { return static_cast<int>(v); }
constexpr std::int64_t kMaxGpus = 1 << 20;

void CheckFormat(JsonObjectReader& r, const char* expected) {
  std::string format = r.String("format");
  if (format != expected) {
    r.Fail("format", "expected \"" + std::string(expected) + "\", got " + QuoteForMessage(format));
  }
}

// A tensor-parallel degree written as `prefix` + canonical decimal ("4", "tp4").
int TpKey(const JsonObjectReader& r, const std::string& key, const std::string& prefix) {
  const std::string digits = key.rfind(prefix, 0) == 0 ? key.substr(prefix.size()) : "";
  int tp = 0;
  if (!digits.empty() && digits.size() <= 7 &&
      std::all_of(digits.begin(), digits.end(), [](char ch) { return ch >= '0' && ch <= '9'; })) {
    tp = std::stoi(digits);
  }
  if (tp < 1 || std::to_string(tp) != digits) {
    r.Fail(key, "key must be " + prefix + "<tensor-parallel degree >= 1, no leading zeros>");
  }
  return tp;
}

// Keys of per-tp maps are the decimal tp degree ("1", "16").
std::map<int, double> ReadTpMap(JsonObjectReader& parent, const std::string& key) {
  JsonObjectReader r = parent.Object(key);
  std::map<int, double> out;
  const nlohmann::json& obj = parent.Value(key);
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    const int tp = TpKey(r, it.key(), "");
    out[tp] = r.Number(it.key(), 0.0);
  }
  return out;
}

}  // namespace

Scheme ReadScheme(JsonObjectReader& r) {
  Scheme s;
  s.cp = ToInt(r.IntOr("cp", 1, 1, kMaxGpus));
  s.tp = ToInt(r.IntOr("tp", 1, 1, kMaxGpus));
  s.pp = ToInt(r.IntOr("pp", 1, 1, kMaxGpus));
  if (std::int64_t{s.cp} * s.tp * s.pp > kMaxGpus) {
    r.Fail("tp", "cp*tp*pp is larger than " + std::to_string(kMaxGpus) + " GPUs");
  }
  return s;
}

namespace {

ModelSpec ReadProfileModel(JsonObjectReader& root) {
  JsonObjectReader m = root.Object("model");
  ModelSpec model;
  model.name = m.StringOr("name", "");
  model.layers = ToInt(m.Int("layers", 1));
  model.hidden = ToInt(m.Int("hidden", 1));
  model.ffn = ToInt(m.Int("ffn", 1));
  model.heads = ToInt(m.Int("heads", 1));
  model.kv_heads = ToInt(m.Int("kv_heads", 1));
  model.vocab = ToInt(m.Int("vocab", 1));
  model.head_dim = ToInt(m.IntOr("head_dim", 0, 2));
  if (model.head_dim % 2 != 0) m.Fail("head_dim", "must be even (rotary embedding rotates pairs)");
  if (model.head_dim == 0 && model.hidden % model.heads != 0) {
    m.Fail("heads", "must divide hidden (" + std::to_string(model.hidden) + "), got " +
                        std::to_string(model.heads));
  }
  if (model.heads % model.kv_heads != 0) {
    m.Fail("kv_heads", "must divide heads (" + std::to_string(model.heads) + "), got " +
                           std::to_string(model.kv_heads));
  }
  m.RejectUnknown();
  return model;
}

ClusterSpec ReadCluster(JsonObjectReader& root) {
  JsonObjectReader c = root.Object("cluster");
  ClusterSpec cluster;
  cluster.gpus_per_node = ToInt(c.Int("gpus_per_node", 1));
  cluster.gpu_memory_bytes = c.Int("gpu_memory_bytes", 1, std::int64_t{1} << 50);
  c.RejectUnknown();
  return cluster;
}

MemoryModel ReadMemoryModel(JsonObjectReader& root) {
  JsonObjectReader mem = root.Object("memory");
  MemoryModel memory;
  memory.activation_bytes_by_tp = ReadTpMap(mem, "activation_bytes_per_token_hidden_layer");
  memory.state_bytes_per_h2_layer = mem.Number("state_bytes_per_h2_layer", 0.0);
  memory.optimizer_share = mem.Number("optimizer_share", 0.0);
  if (memory.optimizer_share > 1.0) mem.Fail("optimizer_share", "must be <= 1");
  memory.context_bytes = mem.Number("context_bytes", 0.0);
  memory.reserved_bytes = mem.Number("reserved_bytes", 0.0);
  mem.RejectUnknown();
  return memory;
}

// One entry of "schemes": the scheme and its time coefficients, each within range.
SchemeProfile ReadSchemeProfile(JsonObjectReader& s) {
  SchemeProfile sp;
  sp.scheme = ReadScheme(s);
  sp.a_ms_per_token2 = s.Number("a_ms_per_token2", 0.0);
  sp.b_ms_per_token = s.Number("b_ms_per_token", 0.0);
  sp.c_ms = s.Number("c_ms", 0.0);
  sp.kv_ms_per_token = s.NumberOr("kv_ms_per_token", 0.0, 0.0);
  if (sp.scheme.cp == 1 && sp.kv_ms_per_token != 0) {
    s.Fail("kv_ms_per_token", "must be 0 (or absent) for a scheme with cp 1: nothing is sharded");
  }
  if (sp.a_ms_per_token2 == 0 && sp.b_ms_per_token == 0) {
    s.Fail("b_ms_per_token", "a and b are both zero: documents would cost nothing");
  }
  // Times are summed over millions of documents: a coefficient that makes one
  // million-token document take longer than ~30 years is a mistake, and would overflow.
  constexpr double kReferenceTokens = 1 << 20, kMaxMs = 1e12;
  if (sp.a_ms_per_token2 * kReferenceTokens * kReferenceTokens > kMaxMs) {
    s.Fail("a_ms_per_token2", "out of range: a 2^20-token document would take more than 1e12 ms");
  }
  if (sp.b_ms_per_token * kReferenceTokens > kMaxMs) {
    s.Fail("b_ms_per_token", "out of range: a 2^20-token document would take more than 1e12 ms");
  }
  if (sp.c_ms > kMaxMs) s.Fail("c_ms", "out of range: more than 1e12 ms per micro-batch");
  if (sp.kv_ms_per_token * kReferenceTokens > kMaxMs) {
    s.Fail("kv_ms_per_token", "out of range: a 2^20-token document would take more than 1e12 ms");
  }
  s.RejectUnknown();
  return sp;
}

}  // namespace

Profile ParseProfile(const std::string& json_text, const std::string& source) {
  nlohmann::json doc = ParseJson(json_text, source);
  JsonObjectReader root(doc, source, "");
  CheckFormat(root, kProfileFormat);
  Profile p;
  p.model = ReadProfileModel(root);
  p.cluster = ReadCluster(root);
  p.memory = ReadMemoryModel(root);

  if (root.Has("utilization_tokens")) {
    JsonObjectReader u = root.Object("utilization_tokens");
    for (const auto& [k, v] : root.Value("utilization_tokens").items()) {
      p.utilization_tokens_by_tp[TpKey(u, k, "")] = ToInt(u.Int(k, 0));
    }
    u.RejectUnknown();
  }

  const std::string recompute = root.StringOr("recompute", "none");
  if (recompute != "none" && recompute != "selective" && recompute != "full") {
    root.Fail("recompute", "expected none, selective or full, got '" + recompute + "'");
  }
  p.recompute = ParseRecompute(recompute, "recompute");

  const auto& schemes = root.Array("schemes");
  if (schemes.empty()) root.Fail("schemes", "must list at least one scheme");
  for (std::size_t i = 0; i < schemes.size(); ++i) {
    JsonObjectReader s = root.Element("schemes", schemes, i);
    const SchemeProfile sp = ReadSchemeProfile(s);
    if (p.Find(sp.scheme)) s.Fail("tp", "duplicate scheme " + SchemeName(sp.scheme));
    if (!p.memory.activation_bytes_by_tp.count(sp.scheme.tp)) {
      s.Fail("tp", "no memory.activation_bytes_per_token_hidden_layer entry for tp " +
                       std::to_string(sp.scheme.tp));
    }
    p.schemes.push_back(sp);
  }
  root.RejectUnknown();
  return p;
}

Profile LoadProfile(const std::string& path) { return ParseProfile(ReadFileText(path), path); }

CandidateSet ParseCandidates(const std::string& json_text, const std::string& source,
                             const Profile& profile) {
  nlohmann::json doc = ParseJson(json_text, source);
  JsonObjectReader root(doc, source, "");
  CheckFormat(root, kCandidatesFormat);
  CandidateSet set;
  set.gpus = ToInt(root.Int("gpus", 1, kMaxGpus));

  JsonObjectReader lay = root.Object("optimizer_layout");
  set.optimizer_layout.dp = ToInt(lay.Int("dp", 1));
  set.optimizer_layout.tp = ToInt(lay.Int("tp", 1));
  set.optimizer_layout.pp = ToInt(lay.Int("pp", 1));
  lay.RejectUnknown();
  const auto& L = set.optimizer_layout;
  if (static_cast<std::int64_t>(L.dp) * L.tp * L.pp != set.gpus) {
    root.Fail("optimizer_layout", "dp*tp*pp = " + std::to_string(std::int64_t{L.dp} * L.tp * L.pp) +
                                      " must equal gpus = " + std::to_string(set.gpus));
  }

  const auto& strategies = root.Array("strategies");
  if (strategies.empty()) root.Fail("strategies", "must list at least one strategy");
  for (std::size_t i = 0; i < strategies.size(); ++i) {
    JsonObjectReader s = root.Element("strategies", strategies, i);
    Strategy st;
    st.name = s.StringOr("name", "S" + std::to_string(i));
    // Plans, logs and --only-strategy name strategies: two of one name are ambiguous.
    for (const Strategy& earlier : set.strategies) {
      if (earlier.name == st.name) {
        s.Fail("name", "strategy name " + QuoteForMessage(st.name) + " is used twice");
      }
    }
    const auto& pipes = s.Array("pipelines");
    if (pipes.empty()) s.Fail("pipelines", "must list at least one pipeline");
    std::int64_t gpus = 0;
    for (std::size_t j = 0; j < pipes.size(); ++j) {
      JsonObjectReader pr = s.Element("pipelines", pipes, j);
      std::int64_t count = pr.IntOr("count", 1, 1, set.gpus);
      Scheme scheme = ReadScheme(pr);
      pr.RejectUnknown();
      // Tensor/context groups must tile the cluster; pipeline stages may not (the
      // published case study runs (TP8,PP3) on 64 GPUs), but a scheme must fit in it.
      if (set.gpus % (scheme.tp * scheme.cp) != 0) {
        pr.Fail("tp", "tp*cp = " + std::to_string(scheme.tp * scheme.cp) +
                          " does not divide the cluster's " + std::to_string(set.gpus) + " GPUs");
      }
      if (scheme.Gpus() > set.gpus) {
        pr.Fail("pp", "scheme " + SchemeName(scheme) + " needs " + std::to_string(scheme.Gpus()) +
                          " GPUs, the cluster has " + std::to_string(set.gpus));
      }
      if (!profile.Find(scheme)) {
        pr.Fail("tp", "scheme " + SchemeName(scheme) + " has no fitted entry in the profile");
      }
      gpus += count * scheme.Gpus();
      if (gpus > set.gpus) {
        pr.Fail("count", "strategy " + QuoteForMessage(st.name) +
                             " uses more GPUs than the cluster's " + std::to_string(set.gpus));
      }
      for (std::int64_t k = 0; k < count; ++k) st.pipelines.push_back(scheme);
    }
    s.RejectUnknown();
    std::stable_sort(st.pipelines.begin(), st.pipelines.end(),
                     [](const Scheme& a, const Scheme& b) {
                       if (a.Gpus() != b.Gpus()) return a.Gpus() > b.Gpus();
                       return b < a;
                     });
    set.strategies.push_back(std::move(st));
  }
  root.RejectUnknown();
  return set;
}

CandidateSet LoadCandidates(const std::string& path, const Profile& profile) {
  return ParseCandidates(ReadFileText(path), path, profile);
}

std::string ProfileToJson(const Profile& p) {
  nlohmann::ordered_json j;
  j["format"] = kProfileFormat;
  j["model"] = {{"name", p.model.name},  {"layers", p.model.layers}, {"hidden", p.model.hidden},
                {"ffn", p.model.ffn},    {"heads", p.model.heads},   {"kv_heads", p.model.kv_heads},
                {"vocab", p.model.vocab}};
  if (p.model.head_dim > 0) j["model"]["head_dim"] = p.model.head_dim;
  j["cluster"] = {{"gpus_per_node", p.cluster.gpus_per_node},
                  {"gpu_memory_bytes", p.cluster.gpu_memory_bytes}};
  nlohmann::ordered_json act;
  for (const auto& [tp, v] : p.memory.activation_bytes_by_tp) act[std::to_string(tp)] = v;
  j["memory"] = {{"activation_bytes_per_token_hidden_layer", act},
                 {"state_bytes_per_h2_layer", p.memory.state_bytes_per_h2_layer},
                 {"optimizer_share", p.memory.optimizer_share},
                 {"context_bytes", p.memory.context_bytes},
                 {"reserved_bytes", p.memory.reserved_bytes}};
  if (!p.utilization_tokens_by_tp.empty()) {
    nlohmann::ordered_json u;
    for (const auto& [tp, v] : p.utilization_tokens_by_tp) u[std::to_string(tp)] = v;
    j["utilization_tokens"] = u;
  }
  // Absent means none, so profiles written before the field read as they were.
  if (p.recompute != Recompute::kNone) j["recompute"] = ToString(p.recompute);
  j["schemes"] = nlohmann::ordered_json::array();
  for (const auto& s : p.schemes) {
    nlohmann::ordered_json e = {{"cp", s.scheme.cp},
                                {"tp", s.scheme.tp},
                                {"pp", s.scheme.pp},
                                {"a_ms_per_token2", s.a_ms_per_token2},
                                {"b_ms_per_token", s.b_ms_per_token},
                                {"c_ms", s.c_ms}};
    if (s.scheme.cp > 1) e["kv_ms_per_token"] = s.kv_ms_per_token;
    j["schemes"].push_back(e);
  }
  return j.dump(2) + "\n";
}

std::string CandidatesToJson(const CandidateSet& set) {
  nlohmann::ordered_json j;
  j["format"] = kCandidatesFormat;
  j["gpus"] = set.gpus;
  j["optimizer_layout"] = {{"dp", set.optimizer_layout.dp},
                           {"tp", set.optimizer_layout.tp},
                           {"pp", set.optimizer_layout.pp}};
  j["strategies"] = nlohmann::ordered_json::array();
  for (const auto& st : set.strategies) {
    nlohmann::ordered_json pipes = nlohmann::ordered_json::array();
    std::size_t i = 0;
    while (i < st.pipelines.size()) {
      std::size_t k = i;
      while (k < st.pipelines.size() && st.pipelines[k] == st.pipelines[i]) ++k;
      const Scheme& s = st.pipelines[i];
      pipes.push_back({{"count", k - i}, {"cp", s.cp}, {"tp", s.tp}, {"pp", s.pp}});
      i = k;
    }
    j["strategies"].push_back({{"name", st.name}, {"pipelines", pipes}});
  }
  return j.dump(2) + "\n";
}

Profile ImportA800Profile(const std::string& path, const ModelShape& shape) {
  nlohmann::json doc = ParseJson(ReadFileText(path), path);
  JsonObjectReader root(doc, path, "");
  Profile p;
  JsonObjectReader mc = root.Object("model_config");
  p.model.name = shape.name;
  p.model.layers = ToInt(mc.Int("L", 1));
  p.model.hidden = ToInt(mc.Int("H", 1));
  p.model.vocab = ToInt(mc.Int("V", 1));
  p.model.ffn = shape.ffn;
  p.model.heads = shape.heads;
  p.model.kv_heads = shape.kv_heads;
  mc.RejectUnknown();
  // What every model shape must satisfy (docs/spec-format.md): heads split hidden evenly
  // and key/value heads split the heads evenly.
  if (shape.heads < 1 || p.model.hidden % shape.heads != 0) {
    throw InvalidInput("heads: must divide the hidden size (" + std::to_string(p.model.hidden) +
                       ", model_config.H of " + path + "), got " + std::to_string(shape.heads));
  }
  if (shape.kv_heads < 1 || shape.heads % shape.kv_heads != 0) {
    throw InvalidInput("kv-heads: must divide heads (" + std::to_string(shape.heads) + "), got " +
                       std::to_string(shape.kv_heads));
  }

  JsonObjectReader cc = root.Object("cluster_config");
  p.cluster.gpus_per_node = ToInt(cc.Int("gpus_per_node", 1));
  p.cluster.gpu_memory_bytes = cc.Int("gpu_memory_bound", 1, std::int64_t{1} << 50);
  if (cc.Has("utilization_seqlen")) {
    JsonObjectReader u = cc.Object("utilization_seqlen");
    for (const auto& [k, v] : cc.Value("utilization_seqlen").items()) {
      p.utilization_tokens_by_tp[TpKey(u, k, "tp")] = ToInt(u.Int(k, 0));
    }
    u.RejectUnknown();
  }
  cc.RejectUnknown();

  JsonObjectReader mr = root.Object("memory_regression");
  JsonObjectReader a = mr.Object("A");
  for (const auto& [k, v] : mr.Value("A").items()) {
    p.memory.activation_bytes_by_tp[TpKey(a, k, "tp")] = a.Number(k, 0.0);
  }
  a.RejectUnknown();
  p.memory.state_bytes_per_h2_layer = mr.Number("B", 0.0);
  p.memory.optimizer_share = mr.Number("alpha", 0.0);
  // The published planner uses the per-node context size for every scheme.
  JsonObjectReader gap = mr.Object("gap");
  p.memory.context_bytes = gap.Number("node", 0.0);
  for (const auto& [k, v] : mr.Value("gap").items()) gap.Number(k, 0.0);
  gap.RejectUnknown();
  p.memory.reserved_bytes = mr.Number("safe_bound", 0.0);
  mr.RejectUnknown();

  const auto& strategies = root.Array("strategies");
  for (std::size_t i = 0; i < strategies.size(); ++i) {
    JsonObjectReader s = root.Element("strategies", strategies, i);
    SchemeProfile sp;
    sp.scheme.tp = ToInt(s.Int("tp", 1));
    sp.scheme.pp = ToInt(s.Int("pp", 1));
    sp.a_ms_per_token2 = s.Number("a", 0.0);
    sp.b_ms_per_token = s.Number("b", 0.0);
    sp.c_ms = s.Number("c", 0.0);
    s.RejectUnknown();
    p.schemes.push_back(sp);
  }
  // comm_cost.hetero_dp is an estimate the published planner does not use; we read and
  // drop it so unknown-field checking still applies to everything else.
  if (root.Has("comm_cost")) {
    JsonObjectReader cc2 = root.Object("comm_cost");
    cc2.NumberOr("hetero_dp", 0.0, 0.0);
    cc2.RejectUnknown();
  }
  root.RejectUnknown();
  // Round-trip through the strict parser so the imported profile obeys every rule.
  return ParseProfile(ProfileToJson(p), path + " (converted)");
}

}  // namespace hydraulis
