// Keeping a few candidate strategies out of many by planning sample batches with all of
// them (docs/propose.md, "Keeping strategies by planning sample batches").
//
// The proposal plans each strategy for the expected batch whose longest documents lie in
// one bin; which of them serve real batches well is something only plans show: on the
// 256-GPU 128K batches the strategies the planner picks most serve bins whose batch share
// is a thousandth, and ranking by share keeps others.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "hydraulis/assign/planner.h"
#include "hydraulis/spec/profile.h"
#include "hydraulis/spec/strategy.h"

namespace hydraulis {

struct CandidateSelection {
  // Indices into the candidate set, ascending: `always` and the chosen ones.
  std::vector<int> kept;
  // Per batch: the best candidate's value over every candidate, and over the kept ones
  // (estimated step ms plus the candidate's PlannerOptions overhead).
  std::vector<double> all_ms, kept_ms;
};

// Greedy selection over a value table ms[candidate][batch] (+inf: cannot hold it): the
// candidates in `always` count from the start; then, up to `more` (>= 0) times, the one
// that most lowers the per-batch least value summed over batches is added (first by the
// batches no candidate holds, ties: the lower index); it stops early when none lowers it.
// Returns the added indices in the order chosen.
std::vector<int> GreedyCoverSelection(const std::vector<std::vector<double>>& ms,
                                      std::span<const int> always, int more);

// The candidates of `candidates` at the indices `kept` (ascending, valid), in that order.
CandidateSet KeptCandidates(const CandidateSet& candidates, std::span<const int> kept);

// Plans every batch with ours over all of `candidates` (PlannerOptions `options`, whose
// only_strategy must be -1) and keeps `always` plus up to `more` candidates chosen by
// GreedyCoverSelection. A candidate's value on a batch is its planned step time, or where the
// planner pruned it the larger of its lower bound and the chosen plan's step (its plan would
// be no faster than the chosen one, or at most options.prune_tolerance faster), or +inf
// where it cannot hold the batch; plus its overhead. Deterministic: the
// same inputs give the same selection on every thread count. `progress`, when set, is
// called with (batches planned, batches) after each batch, from the planning threads one
// at a time.
CandidateSelection SelectCandidatesByPlans(
    const Profile& profile, const CandidateSet& candidates,
    std::span<const std::vector<std::int64_t>> batches, std::span<const int> always, int more,
    const PlannerOptions& options, const std::function<void(int done, int total)>& progress = {});

}  // namespace hydraulis
