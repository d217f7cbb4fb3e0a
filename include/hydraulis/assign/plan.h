// The plan of one global batch, the one plan type from planner to executor: the chosen
// candidate strategy, each pipeline's micro-batches of document indices, the estimated step
// time with its lower bound and status, and every candidate's report. Readers of plans (the
// runtime, the simulator, the Python package, the CLI) include this header without the
// solvers'; planner.h makes plans, plan_json.h writes them, plan_lines.h reads them back.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "hydraulis/assign/problem.h"
#include "hydraulis/spec/scheme.h"
#include "hydraulis/spec/strategy.h"

namespace hydraulis {

enum class Algorithm { kOurs, kStaticFixed, kPublished, kKarmarkarKarp };

// "ours", "static-fixed", "published", "kk".
std::string AlgorithmName(Algorithm algorithm);
// The algorithm named `name`; InvalidInput naming `what` (the caller's name for the value:
// a field, a keyword argument or a flag) and the value when unknown.
Algorithm ParseAlgorithm(std::string_view name, std::string_view what = "algorithm");

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
// The status named `name`; InvalidInput naming `what` and the value when unknown.
CandidateStatus ParseCandidateStatus(std::string_view name, std::string_view what);

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
// The status named `name`; InvalidInput naming `what` and the value when unknown.
SolveStatus ParseSolveStatus(std::string_view name, std::string_view what);

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
  // cp > 1: per micro-batch, where each of its documents lies on the cp ranks
  // (cost/cp_layout.h: a rank, or kSharded); empty for cp = 1 pipelines.
  std::vector<CpLayout> cp_layouts;
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

// How far a step time may be from optimal: estimated / lower bound - 1. Empty when there is
// no positive bound to compare with (the plan JSON then writes null).
std::optional<double> RelativeGap(double estimated_step_ms, double lower_bound_ms);

}  // namespace hydraulis
