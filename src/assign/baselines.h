// Baseline assigners for side-by-side comparison with ours (docs/design.md, "Baselines");
// the published planner, which needs CBC, is in published.h.
#pragma once

#include <cstdint>

#include "hydraulis/assign/pack.h"
#include "hydraulis/assign/problem.h"

namespace hydraulis {

// Megatron-LM/NeMo practice: documents packed first-fit-decreasing on tokens into bins of
// `bin_tokens` (the context length, <= every pipeline's capacity), one bin per
// micro-batch, bins handed to pipelines round-robin by count (largest bin first).
Assignment AssignStaticFixed(const AssignProblem& problem, std::int64_t bin_tokens);

// RL post-training practice: Karmarkar-Karp (largest differencing) balancing of sum s^2
// across the pipelines, then our balanced packing inside each pipeline.
Assignment AssignKarmarkarKarp(const AssignProblem& problem, const PackOptions& pack = {});

}  // namespace hydraulis
