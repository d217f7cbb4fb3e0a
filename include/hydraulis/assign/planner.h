// Per-step planning: for one global batch, apply the long-document rule, run the chosen
// algorithm on every candidate strategy that can hold the batch, and keep the strategy
// with the least estimated step time. Every plan carries the lower bound. The plan type
// itself is plan.h's: code that only reads plans includes that, not this.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "hydraulis/assign/pipeline_relaxation.h"
#include "hydraulis/assign/plan.h"
// Only for the callers of PlanToJson that include this header alone.
#include "hydraulis/assign/plan_json.h"
#include "hydraulis/assign/problem.h"
#include "hydraulis/assign/published.h"
#include "hydraulis/assign/two_stage.h"
#include "hydraulis/spec/profile.h"
#include "hydraulis/spec/strategy.h"

namespace hydraulis {

// What happens to a document longer than every candidate's capacity.
enum class OverlongRule {
  kTruncate,  // cut to the largest capacity; the plan lists it under `truncated`
  kReject,    // Infeasible error naming the document
};

struct PlannerOptions {
  Algorithm algorithm = Algorithm::kOurs;
  OverlongRule overlong = OverlongRule::kTruncate;
  // Context length (tokens, >= 1): the bin size of static-fixed packing.
  std::int64_t context_tokens = 32'768;
  std::uint64_t seed = 1;  // randomised baselines only; ours is deterministic
  // Restrict the algorithm to this candidate (index into the candidate set), e.g. ours
  // on one static strategy; -1 considers every candidate; kStaticCandidate the default
  // static one (Planner::StaticStrategyIndex; InvalidInput when there is none). The static
  // baselines then run this candidate instead of the default static one.
  static constexpr int kStaticCandidate = -2;
  int only_strategy = -1;
  // Per-candidate step cost outside the pipelines (ms, >= 0), e.g. the disaggregated
  // design's parameter materialisation and gradient reduce-scatter, which depend on the
  // strategy but not on the batch. Ours then minimises estimated_step_ms + overhead; the
  // plan's estimated_step_ms stays compute only. Empty: no overheads.
  std::vector<double> strategy_overhead_ms;
  ScheduleOptions schedule;
  TwoStageOptions two_stage;
  PublishedOptions published;
  // How Algorithm::kPublished assigns one candidate: AssignPublished (published.h), which
  // lives with CBC in hydraulis_milp. This library does not link CBC, so the training
  // runtime (ours and static-fixed only) does not either; a program that offers the
  // published baseline links hydraulis_milp and passes AssignPublished here. nullptr:
  // the Planner rejects Algorithm::kPublished (InvalidInput).
  PublishedAssigner published_assigner = nullptr;
  // The layouts cp > 1 pipelines may give their micro-batches (cost/cp_layout.h): any rank
  // subset per document (ours), whole-or-every (Megatron-LM's hybrid context parallelism
  // runs only these), or every document over every rank (Megatron-LM's THD rule, the
  // static-cp baseline).
  CpLayoutSpace cp_layout_space = CpLayoutSpace::kAnySubset;
  // Ours skips a candidate whose lower bound is within this fraction of the best plan found
  // so far (bound >= best / (1 + tolerance)): it could lower the step by at most that much.
  // 0 (the default) plans every candidate that can beat the best at all. Candidate selection
  // (candidate_selection.h) uses a small tolerance to plan fewer strategies per batch.
  double prune_tolerance = 0.0;
  // After a first plan that misses the least cheap bound, try the other candidates tied at
  // it by their coarse LP load there, least first (planner.cc, SearchOurs); off: by index.
  // The plan's time is the same either way. Candidate selection turns it off: it credits
  // a pruned candidate with the chosen plan's time, and trying likely winners first leaves
  // more candidates with such (optimistic) credits instead of plans of their own.
  bool order_ties_by_room = true;
  // Threads that compute candidates' bounds and assignments (>= 0; 0: one per hardware
  // thread). The plan is the same for every count (planner.cc, SearchOurs); batches of
  // fewer than 2^16 pipeline-document pairs use one. The trainer's ranks plan on one
  // each (many ranks share a node); `hydraulis plan --threads` defaults to all.
  int threads = 1;
};

// Holds the candidate set with each pipeline's time model and capacity, computed once.
// PlanBatch may run on several threads at once (candidate selection plans its batches
// so): its shared mutable state, the relaxation table and the process's laid-out time
// table (problem.cc), is locked. PlanBatch itself may use several threads
// (PlannerOptions::threads). The Python binding still serialises its calls with a lock.
class Planner {
 public:
  // Precondition: `candidates` was validated against `profile` (spec_io.h).
  Planner(const Profile& profile, const CandidateSet& candidates, const PlannerOptions& options);

  // Plans one batch (lengths >= 1). Deterministic for ours, static-fixed and kk.
  Plan PlanBatch(std::span<const std::int64_t> lengths) const;

  // The assignment problem of `lengths` on candidate `strategy_index`.
  AssignProblem Problem(std::span<const std::int64_t> lengths, int strategy_index) const;

  // Each pipeline's scheme, time model and capacity of candidate `strategy_index`.
  const std::vector<PipelineModel>& Models(int strategy_index) const {
    return models_.at(static_cast<std::size_t>(strategy_index));
  }
  // Candidate `strategy_index`'s identical pipelines as groups with counts.
  const std::vector<PipelineGroup>& Groups(int strategy_index) const {
    return groups_.at(static_cast<std::size_t>(strategy_index));
  }
  // Capacity (tokens) of the widest pipeline of each candidate.
  std::int64_t MaxCapacity(int strategy_index) const;
  // The homogeneous candidate the static baselines run by default (largest capacity,
  // first in file); -1 when there is none.
  int StaticStrategyIndex() const { return static_index_; }
  // The candidate the static baselines run: options.only_strategy when it names one, else
  // StaticStrategyIndex(); resolved once, here.
  int StaticRunIndex() const { return static_run_index_; }
  const CandidateSet& candidates() const { return candidates_; }
  const PlannerOptions& options() const { return options_; }

 private:
  CandidateSet candidates_;
  PlannerOptions options_;
  std::vector<std::vector<PipelineModel>> models_;
  std::vector<std::vector<PipelineGroup>> groups_;
  int static_index_ = -1;
  int static_run_index_ = -1;
  // Memoised 1F1B relaxations for pp > 1 (bounds and packing targets); a cache only, so
  // plans do not depend on what was planned before.
  mutable RelaxationTable relaxations_;
};

}  // namespace hydraulis
