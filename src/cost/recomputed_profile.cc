#include "hydraulis/cost/recomputed_profile.h"

#include "hydraulis/base/error.h"

namespace hydraulis {

double ActivationElementsPerTokenLayer(const ModelSpec& m, int tp, Recompute mode,
                                       bool flash_attention) {
  const double hidden = m.hidden;
  const double head_dim = HeadDim(m);
  const double width = QueryWidth(m);  // q's and the attention output's
  const double kv_width = static_cast<double>(m.kv_heads) * head_dim;
  // Every tp rank: the attention and MLP RMSNorms' input and output (2 each; the norm keeps
  // no normalised copy), their two per-token rsqrt values, and the rotary cos and sin tables
  // of q and k.
  const double replicated = 4 * hidden + 2 + 4 * head_dim;
  // This rank's shard: q and k after rotary (the rotation keeps neither its input nor a
  // rotated copy), v, the attention output; off the flash path also each document's output
  // before they are concatenated and one log-sum-exp per head.
  const double core = flash_attention ? 0.0 : width + m.heads;
  const double attention = 2 * width + 2 * kv_width + core;
  // The SwiGLU's gate, silu(gate), up and their product.
  const double swiglu = 4.0 * m.ffn;
  const double kept = replicated + (attention + swiglu) / tp;
  const double layers = m.layers;
  switch (mode) {
    case Recompute::kNone:
      return kept;
    case Recompute::kSelective: {
      const double again = (m.ffn + core) / tp;
      return kept - again + again / layers;
    }
    case Recompute::kFull:
      return hidden + kept / layers;
  }
  return kept;
}

SchemeProfile RecomputedTimes(const SchemeProfile& kept, Recompute mode) {
  constexpr double kForwardAgain = 4.0 / 3.0, kExchangeAgain = 3.0 / 2.0;
  SchemeProfile s = kept;
  if (mode == Recompute::kFull) {
    s.a_ms_per_token2 *= kForwardAgain;
    s.b_ms_per_token *= kForwardAgain;
    s.c_ms *= kForwardAgain;
    s.kv_ms_per_token *= kExchangeAgain;
  } else if (mode == Recompute::kSelective) {
    s.a_ms_per_token2 *= kForwardAgain;
    s.kv_ms_per_token *= kExchangeAgain;
  }
  return s;
}

Profile RecomputedProfile(const Profile& profile, Recompute mode) {
  if (profile.recompute == mode) return profile;
  if (profile.recompute != Recompute::kNone) {
    throw InvalidInput("profile: it is for recompute " + ToString(profile.recompute) +
                       "; a profile for " + ToString(mode) +
                       " is made only from one that keeps every activation (none)");
  }
  Profile out = profile;
  for (auto& [tp, bytes] : out.memory.activation_bytes_by_tp) {
    bytes *= ActivationElementsPerTokenLayer(profile.model, tp, mode) /
             ActivationElementsPerTokenLayer(profile.model, tp, Recompute::kNone);
  }
  for (SchemeProfile& s : out.schemes) s = RecomputedTimes(s, mode);
  out.recompute = mode;
  return out;
}

}  // namespace hydraulis
