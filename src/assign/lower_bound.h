// Lower bounds on the optimal step time of one batch on one strategy, so every plan
// carries its distance from the optimum (docs/design.md, "Lower bound", explains each bound).
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "hydraulis/assign/pipeline_relaxation.h"
#include "hydraulis/assign/problem.h"

namespace hydraulis {

struct LowerBound {
  double ms = 0;              // the best (largest) of the bounds below
  double fractional_ms = 0;   // LP relaxation: fractional documents, fractional micro-batches
  double longest_doc_ms = 0;  // the costliest document's own pipeline time
};

// The costliest document's own pipeline time alone (cheap; +infinity when a document
// fits no pipeline).
double LongestDocumentBoundMs(const AssignProblem& problem);

// The same over a batch's distinct lengths (DistinctLengths) and its strategy's groups of
// identical pipelines (GroupPipelines): what a planner that keeps both pays per strategy.
double LongestDocumentBoundMs(std::span<const std::int64_t> distinct_lengths,
                              std::span<const PipelineGroup> groups);

// `lengths` sorted ascending without repeats.
std::vector<std::int64_t> DistinctLengths(std::span<const std::int64_t> lengths);

// Valid lower bound on min over assignments of the step time. +infinity when some
// document fits no pipeline. With `relaxations`, pipelines with pp > 1 are bounded by the
// relaxed 1F1B schedule (much tighter); without it, by their work alone.
LowerBound ComputeLowerBound(const AssignProblem& problem, RelaxationTable* relaxations = nullptr);

// The same from a strategy's groups of identical pipelines (GroupPipelines) and the
// batch's length counts (LengthCounts): what a planner that keeps both across its
// candidates pays per candidate, without rebuilding them.
LowerBound ComputeLowerBound(std::span<const PipelineGroup> groups,
                             std::span<const std::pair<std::int64_t, double>> length_counts,
                             const ScheduleOptions& schedule,
                             RelaxationTable* relaxations = nullptr);

// Not a bound: the fractional relaxation's makespan at step time `theta` over the batch's
// lengths merged into about 64 runs (each at its token-mean length), without the
// forced-document terms. Where candidates' bounds tie (the longest document sets them all),
// it says which strategy has the most room left for the rest of the batch: the planner
// tries those first. About a hundredth of a full bound's cost at 16,384 GPUs.
double CoarseLoadMs(std::span<const PipelineGroup> groups,
                    std::span<const std::pair<std::int64_t, double>> length_counts, double theta);

// The distinct lengths of `lengths`, ascending, each with how many times it occurs.
std::vector<std::pair<std::int64_t, double>> LengthCounts(std::span<const std::int64_t> lengths);

}  // namespace hydraulis
