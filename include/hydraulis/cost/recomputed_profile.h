// A profile measured keeping every activation, turned into the one of a run under
// activation recomputation (docs/runtime.md, "Activation recomputation"): what the layers
// keep per token, and each stage's time with the forward work run again.
#pragma once

#include "hydraulis/spec/model.h"
#include "hydraulis/spec/profile.h"
#include "hydraulis/spec/recompute.h"

namespace hydraulis {

// Elements one layer keeps for the backward per token on one of `tp` ranks, as the
// engine's transformer keeps them (docs/runtime.md, "Memory: an analytic count"): the two
// RMSNorms' inputs, outputs and rsqrt values and the rotary tables on every rank; q, k, v,
// the attention output and the SwiGLU's four tensors over tp; off the flash path
// (`flash_attention` false) the attention core's per-document outputs and log-sum-exps too.
// Under `mode` this shrinks, and one layer's share comes back while that layer runs backward
// (counted per layer, L x this being the total): selective drops the SwiGLU's silu and the
// core's extras, full keeps the layer's input (hidden, replicated).
double ActivationElementsPerTokenLayer(const ModelSpec& model, int tp, Recompute mode,
                                       bool flash_attention = true);

// A stage's time under `mode` from its time keeping every activation, with the backward
// twice the forward: full runs every term's forward again (a, b, c times 4/3; the cp
// exchange's forward all-gather again, kv times 3/2); selective the attention core (a times
// 4/3, kv times 3/2) and the SwiGLU's elementwise activation, which b does not resolve.
SchemeProfile RecomputedTimes(const SchemeProfile& kept, Recompute mode);

// `profile` under `mode`: itself when it is already for `mode`; from a profile for none,
// each tp's activation bytes scaled by the engine's count (ActivationElementsPerTokenLayer,
// flash attention) under `mode` against none, and every scheme's RecomputedTimes.
// InvalidInput when the profile is for another recomputation than none or `mode`.
Profile RecomputedProfile(const Profile& profile, Recompute mode);

}  // namespace hydraulis
