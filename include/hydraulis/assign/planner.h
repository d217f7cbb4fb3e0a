// Per-step planning: for one global batch, apply the long-document rule, run the chosen
// algorithm on every candidate strategy that can hold the batch, and keep the strategy
// with the least estimated step time. Every plan carries the lower bound.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "hydraulis/assign/baselines.h"
#include "hydraulis/assign/pipeline_relaxation.h"
#include "hydraulis/assign/problem.h"
#include "hydraulis/assign/two_stage.h"
#include "hydraulis/spec/profile.h"
#include "hydraulis/spec/strategy.h"

namespace hydraulis {

enum class Algorithm { kOurs, kStaticFixed, kPublished, kKarmarkarKarp };

// "ours", "static-fixed", "published", "kk".
std::string AlgorithmName(Algorithm algorithm);
// The algorithm named `name`; InvalidInput naming `what` (the caller's name for the value:
// a field, a keyword argument or a flag) and the value when unknown.
Algorithm ParseAlgorithm(std::string_view name, std::string_view what = "algorithm");

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
};

struct Truncation {
  int index = 0;
  std::int64_t original = 0;
  std::int64_t kept = 0;
};

enum class CandidateStatus {
  kPlanned,     // assigned; estimated_step_ms is its plan's time
  kPruned,      // its lower bound is >= the chosen plan's time, so it cannot win
  kCannotHold,  // its widest pipeline cannot hold the batch's longest document
  kNotUsed,     // the algorithm does not consider it (static baselines)
};
std::string CandidateStatusName(CandidateStatus status);

// How a plan stands, as HiGHS' and OR-tools' results say it. The gap is the plan's
// estimated_step_ms over the batch's lower bound, minus 1.
enum class SolveStatus {
  kOptimal,    // its time equals the proven lower bound (within base/tolerance.h)
  kWithinGap,  // valid, at most `gap` from the optimum
  kTimeLimit,  // valid, but a solver stopped at its time limit (published: CBC) for some
               // candidate, so the choice itself is unproven; the gap still holds
};
// "optimal", "within-gap", "time-limit".
std::string SolveStatusName(SolveStatus status);

struct CandidateReport {
  int index = 0;
  std::string name;
  CandidateStatus status = CandidateStatus::kNotUsed;
  double estimated_step_ms = 0;  // valid when planned
  double lower_bound_ms = 0;     // +inf when it cannot hold the batch
};

struct PipelinePlan {
  Scheme scheme;
  std::int64_t capacity_tokens = 0;
  MicroBatches micro_batches;
  double estimated_ms = 0;
  // The published closed form (max stage time) * (pp - 1 + v), for comparison with the
  // exact 1F1B time above (never below it).
  double closed_form_ms = 0;
  std::int64_t tokens = 0;
};

struct Plan {
  Algorithm algorithm = Algorithm::kOurs;
  int strategy_index = 0;
  Strategy strategy;
  std::vector<PipelinePlan> pipelines;
  double estimated_step_ms = 0;       // exact 1F1B time of the slowest pipeline
  double lower_bound_ms = 0;          // bound on the best step time over all candidates
  double planning_ms = 0;             // wall-clock; the only non-deterministic field
  double overhead_ms = 0;             // the chosen candidate's PlannerOptions overhead
  std::vector<std::int64_t> lengths;  // after the long-document rule
  std::vector<Truncation> truncated;
  std::vector<CandidateReport> candidates;
  SolveStatus status = SolveStatus::kWithinGap;
  int time_limited_solves = 0;  // over every candidate the algorithm assigned
};

// Holds the candidate set with each pipeline's time model and capacity, computed once.
// Not thread-safe: PlanBatch fills a cache, so one thread at a time may call it (the Python
// binding serialises calls with a lock; the trainer plans on one look-ahead thread).
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
  // Capacity (tokens) of the widest pipeline of each candidate.
  std::int64_t MaxCapacity(int strategy_index) const;
  // The homogeneous candidate the static baselines run by default (largest capacity,
  // first in file); -1 when there is none.
  int StaticStrategyIndex() const { return static_index_; }
  const CandidateSet& candidates() const { return candidates_; }
  const PlannerOptions& options() const { return options_; }

 private:
  CandidateSet candidates_;
  PlannerOptions options_;
  std::vector<std::vector<PipelineModel>> models_;
  int static_index_ = -1;
  // Memoised 1F1B relaxations for pp > 1 (bounds and packing targets); a cache only, so
  // plans do not depend on what was planned before.
  mutable RelaxationTable relaxations_;
};

// How far a step time may be from optimal: estimated / lower bound - 1. Empty when there is
// no positive bound to compare with (the plan JSON then writes null).
std::optional<double> RelativeGap(double estimated_step_ms, double lower_bound_ms);

// The plan as JSON (docs/plan-format.md), one line when `pretty` is false. With
// `include_timing` false, planning_ms is left out so the text is byte-identical across runs.
std::string PlanToJson(const Plan& plan, bool pretty, bool include_timing = true);

}  // namespace hydraulis
