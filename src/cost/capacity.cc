#include "hydraulis/cost/capacity.h"

#include <cmath>

#include "hydraulis/base/error.h"
#include "hydraulis/cost/cp_layout.h"
#include "hydraulis/cost/kv_exchange.h"

namespace hydraulis {
namespace {

// Embedding/head bytes per H*V: both live on one stage when pp == 1 (tied to the first and
// last stage otherwise), hence twice the per-stage figure.
double EmbeddingBytes(int pp) { return pp == 1 ? 32.0 : 16.0; }

}  // namespace

double ModelStateBytes(const Profile& p, const Scheme& s, const OptimizerLayout& os) {
  const double L = p.model.layers, H = p.model.hidden, V = p.model.vocab;
  const double B = p.memory.state_bytes_per_h2_layer, alpha = p.memory.optimizer_share;
  return (L / os.pp) * (H * H / os.tp) * B * (alpha / os.dp) +
         (L / s.pp) * (H * H / s.tp) * B * (1 - alpha) +
         (H * V / os.tp) * EmbeddingBytes(os.pp) * (alpha / os.dp) +
         (H * V / s.tp) * EmbeddingBytes(s.pp) * (1 - alpha);
}

namespace {

constexpr double kBf16Bytes = 2;

double ActivationBytes(const Profile& p, int tp) {
  auto it = p.memory.activation_bytes_by_tp.find(tp);
  if (it == p.memory.activation_bytes_by_tp.end()) {
    throw InvalidInput("profile has no activation bytes for tp " + std::to_string(tp));
  }
  return it->second;
}

}  // namespace

double KvMemoryRatio(const Profile& p, int tp) {
  // One layer's gathered keys and values at a time, against the activations of every
  // layer a rank keeps for a token (RawCapacityTokens: L layers' worth under 1F1B).
  const double activation =
      p.model.layers * (static_cast<double>(p.model.hidden) / tp) * ActivationBytes(p, tp);
  return KvBytesPerTokenLayer(p.model, tp, kBf16Bytes) / activation;
}

double RawCapacityTokens(const Profile& p, const Scheme& s, const OptimizerLayout& os) {
  const double activation_bytes = ActivationBytes(p, s.tp);
  const double free_bytes = static_cast<double>(p.cluster.gpu_memory_bytes) -
                            p.memory.reserved_bytes - ModelStateBytes(p, s, os) -
                            p.memory.context_bytes;
  // 1F1B: stage 0 holds pp in-flight micro-batches of L/pp layers, i.e. L layers' worth.
  const double per_token =
      p.model.layers * (static_cast<double>(p.model.hidden) / s.tp) * activation_bytes;
  const double rank_tokens = free_bytes / per_token;
  if (s.cp == 1) return rank_tokens;
  return rank_tokens * s.cp / (1.0 + KvMemoryRatio(p, s.tp) * (s.cp - 1));
}

std::int64_t CapacityTokens(const Profile& p, const Scheme& s, const OptimizerLayout& os) {
  const double raw = RawCapacityTokens(p, s, os);
  if (raw < kTokenAlignment) return 0;
  return static_cast<std::int64_t>(std::floor(raw / kTokenAlignment)) * kTokenAlignment;
}

ShardCost MakeShardCost(const Profile& p, const SchemeProfile& entry,
                        std::int64_t capacity_tokens) {
  const int cp = entry.scheme.cp;
  return MakeShardCost(cp, TimeModel::From(entry), capacity_tokens, entry.kv_ms_per_token,
                       cp > 1 ? KvMemoryRatio(p, entry.scheme.tp) : 0.0,
                       CpTopologyOf(p.cluster, entry.scheme.tp));
}

}  // namespace hydraulis
