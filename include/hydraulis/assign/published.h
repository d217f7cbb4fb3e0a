// The published Hydraulis planner (method.md 2.3), kept for comparison with ours. Its
// per-pipeline MILPs are solved by CBC, so it lives in its own library, hydraulis_milp:
// the planner (planner.h) runs it only when a program passes AssignPublished in
// PlannerOptions::published_assigner, and programs that never run it (the training
// runtime) do not link CBC (docs/design.md, "Layers").
#pragma once

#include <cstdint>

#include "hydraulis/assign/problem.h"

namespace hydraulis {

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

// AssignPublished's type, as the planner holds it (PlannerOptions::published_assigner).
using PublishedAssigner = Assignment (*)(const AssignProblem& problem,
                                         const PublishedOptions& options, std::uint64_t seed,
                                         double* published_estimate_ms);

}  // namespace hydraulis
