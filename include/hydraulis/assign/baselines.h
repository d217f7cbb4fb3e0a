// Baseline assigners for side-by-side comparison with ours (docs/design.md, "Baselines").
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

// The published Hydraulis planner (method.md 2.3).
struct PublishedOptions {
  int shuffles = 50;               // randomised greedy dispatch restarts (>= 1)
  int micro_batch_counts = 16;     // values of v tried per pipeline (>= 1)
  double milp_time_limit_s = 0.5;  // CBC wall-clock limit per MILP (> 0)
};

// Randomised greedy dispatch over `shuffles` seeded shuffles (documents that fit only the
// widest pipelines go first; each to the eligible pipeline minimising the resulting
// maximum of sum of costs + (pp-1) * largest cost), then per pipeline a min-max MILP (CBC)
// for each v from ceil(tokens/capacity), keeping the v minimising (max + c)*(pp - 1 + v).
// `published_estimate_ms` (optional) receives the published objective of the result:
// the max over pipelines of (max_j work_j + c) * (pp - 1 + v). The only assigner whose
// result may depend on the wall clock (CBC time limits), as published; the result's
// time_limited_solves counts the MILPs CBC stopped at the limit instead of proving.
Assignment AssignPublished(const AssignProblem& problem, const PublishedOptions& options,
                           std::uint64_t seed, double* published_estimate_ms = nullptr);

}  // namespace hydraulis
