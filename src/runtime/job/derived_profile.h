// A cost and memory profile for a model no profile was fitted for, derived from one fitted
// on this engine for another model (docs/runtime.md, "Profiles for other models"), so
// `hydraulis train --init-from` any checkpoint can plan without a profiling run first.
#pragma once

#include "hydraulis/spec/model_config.h"
#include "hydraulis/spec/profile.h"

namespace hydraulis {

// `fitted` (fitted for another model on this engine) rescaled to `model`, scheme by scheme:
// the quadratic (attention) term by the ratio of the stage's attention work (layers x
// hidden), the linear term by the ratio of its weight multiplications per token (the
// layers' projections and MLP divided by tp, plus the unsplit embedding and head), the fixed
// term by the ratio of layers per stage; the engine's analytic memory model for `model`
// (EngineMemoryModel); and a memory budget that gives the first scheme the token capacity it
// has in `fitted` (with the fitted cluster's ranks as the optimizer's data-parallel size).
// The planner then weighs attention against the rest in the right proportion; absolute
// times are estimates, and a run on a derived profile says so. InvalidInput when `model`
// does not split over a fitted scheme's tp or pp.
// The profile keeps `fitted`'s recomputation.
Profile DeriveProfile(const Profile& fitted, const ModelConfig& model);

// The same for a run under `mode` from a profile fitted keeping every activation (or
// already under `mode`): the budget as above under `fitted`'s mode, then the memory model of
// `mode` (so capacities grow as recomputation frees activations) and each scheme's times with
// the forward work run again (docs/design.md, "Activation recomputation"). InvalidInput when
// `fitted` is under another recomputation than none or `mode`.
Profile DeriveProfile(const Profile& fitted, const ModelConfig& model, Recompute mode);

}  // namespace hydraulis
