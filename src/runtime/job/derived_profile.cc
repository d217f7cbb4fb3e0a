#include "derived_profile.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <vector>

#include "hydraulis/base/error.h"
#include "hydraulis/cost/capacity.h"
#include "hydraulis/cost/recomputed_profile.h"
#include "hydraulis/runtime/job/stage_profiler.h"
#include "hydraulis/runtime/model/transformer.h"

namespace hydraulis {
namespace {

// Layers of the profiled stage of a pp-stage pipeline (the most any stage holds).
double StageLayers(const ModelSpec& m, int pp) {
  return static_cast<double>((m.layers + pp - 1) / pp);
}

// Attention work of a stage per token pair (q.k and p.v over the heads a rank holds).
double AttentionWork(const ModelSpec& m, const Scheme& s) {
  return StageLayers(m, s.pp) * QueryWidth(m) / s.tp;
}

// Multiply-adds per token of a stage's weights: each layer's q, k, v, o projections and
// SwiGLU MLP split over tp, plus the embedding row and the head, which every stage's
// profile includes (ProfiledStagePart) and tp does not split.
double LinearWork(const ModelSpec& m, const Scheme& s) {
  const double head_dim = HeadDim(m);
  const double per_layer = 2.0 * m.hidden * m.heads * head_dim +         // wq, wo
                           2.0 * m.hidden * m.kv_heads * head_dim +      // wk, wv
                           3.0 * m.hidden * static_cast<double>(m.ffn);  // gate, up, down
  return StageLayers(m, s.pp) * per_layer / s.tp + static_cast<double>(m.vocab) * m.hidden;
}

}  // namespace

Profile DeriveProfile(const Profile& fitted, const ModelConfig& model) {
  return DeriveProfile(fitted, model, fitted.recompute);
}

Profile DeriveProfile(const Profile& fitted, const ModelConfig& model, Recompute mode) {
  if (fitted.recompute != mode && fitted.recompute != Recompute::kNone) {
    throw InvalidInput("derived profile: the fitted profile is for recompute " +
                       ToString(fitted.recompute) + "; a profile for " + ToString(mode) +
                       " is derived only from one that keeps every activation (none)");
  }
  if (fitted.schemes.empty())
    throw InvalidInput("derived profile: the fitted profile has no scheme");
  const ModelSpec& from = fitted.model;
  const ModelSpec& to = model.shape;
  Profile out;
  out.model = to;
  out.cluster = fitted.cluster;
  out.utilization_tokens_by_tp = fitted.utilization_tokens_by_tp;
  std::set<int> tps;
  for (const SchemeProfile& f : fitted.schemes) {
    ValidateTensorParallel(model, f.scheme.tp);
    (void)ModelPart::Stage(model, 0, f.scheme.pp);
    SchemeProfile d = f;
    d.a_ms_per_token2 *= AttentionWork(to, f.scheme) / AttentionWork(from, f.scheme);
    d.b_ms_per_token *= LinearWork(to, f.scheme) / LinearWork(from, f.scheme);
    d.c_ms *= StageLayers(to, f.scheme.pp) / StageLayers(from, f.scheme.pp);
    out.schemes.push_back(fitted.recompute == mode ? d : RecomputedTimes(d, mode));
    tps.insert(f.scheme.tp);
  }
  const std::vector<int> tp_list(tps.begin(), tps.end());
  out.memory = EngineMemoryModel(model, tp_list, fitted.recompute);
  // The same capacity in tokens as the fitted profile's first scheme: the budget is the
  // derived model's state plus that many tokens of its activations (under the fitted
  // profile's recomputation: recomputing then frees memory in the same budget).
  const Scheme& first = fitted.schemes.front().scheme;
  const OptimizerLayout layout{std::max(1, fitted.cluster.gpus_per_node), 1, 1};
  const double tokens = std::max(0.0, RawCapacityTokens(fitted, first, layout));
  const double state = ModelStateBytes(out, first, layout);
  // As RawCapacityTokens counts them: 1F1B keeps L layers' worth of activations in flight.
  const double per_token = out.memory.activation_bytes_by_tp.at(first.tp) * to.layers *
                           (static_cast<double>(to.hidden) / first.tp);
  out.cluster.gpu_memory_bytes =
      static_cast<std::int64_t>(std::ceil(state + tokens / first.cp * per_token +
                                          out.memory.context_bytes + out.memory.reserved_bytes));
  out.memory = EngineMemoryModel(model, tp_list, mode);
  out.recompute = mode;
  return out;
}

}  // namespace hydraulis
