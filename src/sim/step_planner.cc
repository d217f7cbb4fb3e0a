#include "hydraulis/sim/step_planner.h"

#include <algorithm>

#include "hydraulis/base/error.h"
#include "hydraulis/cost/capacity.h"

namespace hydraulis {
namespace {

std::int64_t AlignUp(std::int64_t tokens) {
  return (tokens + kTokenAlignment - 1) / kTokenAlignment * kTokenAlignment;
}

// The planner options of `system`: the static systems run the default static candidate,
// which the planner resolves.
PlannerOptions OptionsFor(System system, PlannerOptions options) {
  options.only_strategy = -1;
  options.algorithm = Algorithm::kOurs;
  switch (system) {
    case System::kPadding:
    case System::kStaticBalanced:
      options.only_strategy = PlannerOptions::kStaticCandidate;
      break;
    case System::kStaticFixed:
      options.algorithm = Algorithm::kStaticFixed;
      options.only_strategy = PlannerOptions::kStaticCandidate;
      break;
    case System::kPublished:
      options.algorithm = Algorithm::kPublished;
      break;
    case System::kOurs:
      break;
  }
  return options;
}

Planner PlannerFor(const Profile& profile, const CandidateSet& candidates, System system,
                   const PlannerOptions& options) {
  try {
    return Planner(profile, candidates, OptionsFor(system, options));
  } catch (const InvalidInput& e) {
    throw InvalidInput("system " + SystemName(system) + ": " + e.what());
  }
}

}  // namespace

StepPlanner::StepPlanner(const Profile& profile, const CandidateSet& candidates, System system,
                         const PlannerOptions& options)
    : system_(system), planner_(PlannerFor(profile, candidates, system, options)) {}

StepWork StepPlanner::Plan(std::span<const std::int64_t> lengths) const {
  if (system_ == System::kPadding) return PlanPadding(lengths);
  const hydraulis::Plan plan = planner_.PlanBatch(lengths);
  const AssignProblem problem = planner_.Problem(plan.lengths, plan.strategy_index);
  StepWork work;
  work.strategy_index = plan.strategy_index;
  work.strategy = plan.strategy;
  work.lengths = plan.lengths;
  work.planned_step_ms = plan.estimated_step_ms;
  for (const Truncation& t : plan.truncated) {
    ++work.truncated_documents;
    work.truncated_tokens += t.original - t.kept;
  }
  for (std::size_t p = 0; p < plan.pipelines.size(); ++p) {
    const PipelinePlan& pp = plan.pipelines[p];
    const TimeModel& time = problem.pipelines[p].time;
    PipelineWork pw;
    pw.scheme = pp.scheme;
    pw.planned_ms = pp.estimated_ms;
    for (const auto& mb : pp.micro_batches) {
      MicroBatchWork m;
      m.documents = mb;
      // Summed in the order PipelineMs uses, so zero-communication times match the plan's
      // bit for bit.
      m.stage_ms = time.c_ms;
      for (int d : mb) {
        const std::int64_t s = plan.lengths[static_cast<std::size_t>(d)];
        m.stage_ms += time.DocumentMs(s);
        m.tokens += s;
      }
      m.activation_tokens = AlignUp(m.tokens);
      pw.micro_batches.push_back(std::move(m));
    }
    work.pipelines.push_back(std::move(pw));
  }
  return work;
}

// One document per micro-batch, each padded to the context length (capped at the static
// strategy's capacity), so every micro-batch costs the same; dealing them round-robin in
// batch order is then also the least-loaded assignment (counts differ by at most one).
StepWork StepPlanner::PlanPadding(std::span<const std::int64_t> lengths) const {
  const int static_index = planner_.StaticStrategyIndex();
  const AssignProblem problem = planner_.Problem(lengths, static_index);
  const std::int64_t pad_tokens =
      std::min(planner_.options().context_tokens, planner_.MaxCapacity(static_index));
  StepWork work;
  work.strategy_index = static_index;
  work.strategy = planner_.candidates().strategies[static_cast<std::size_t>(static_index)];
  work.lengths.assign(lengths.begin(), lengths.end());
  for (std::size_t d = 0; d < work.lengths.size(); ++d) {
    std::int64_t& s = work.lengths[d];
    if (s < 1) {
      throw InvalidInput("document " + std::to_string(d) + ": length must be >= 1, got " +
                         std::to_string(s));
    }
    if (s > pad_tokens) {
      ++work.truncated_documents;
      work.truncated_tokens += s - pad_tokens;
      s = pad_tokens;
    }
  }
  const std::size_t num_pipelines = problem.pipelines.size();
  work.pipelines.resize(num_pipelines);
  for (std::size_t p = 0; p < num_pipelines; ++p)
    work.pipelines[p].scheme = problem.pipelines[p].scheme;
  for (std::size_t d = 0; d < work.lengths.size(); ++d) {
    const std::size_t p = d % num_pipelines;
    const TimeModel& time = problem.pipelines[p].time;
    MicroBatchWork m;
    m.documents = {static_cast<int>(d)};
    m.tokens = work.lengths[d];
    m.activation_tokens = pad_tokens;
    m.stage_ms = time.c_ms;
    m.stage_ms += time.DocumentMs(pad_tokens);
    work.pipelines[p].micro_batches.push_back(std::move(m));
  }
  for (std::size_t p = 0; p < num_pipelines; ++p) {
    PipelineWork& pw = work.pipelines[p];
    std::vector<double> stage_ms;
    for (const auto& m : pw.micro_batches) stage_ms.push_back(m.stage_ms);
    pw.planned_ms = OneFOneBMs(stage_ms, pw.scheme.pp, planner_.options().schedule);
    work.planned_step_ms = std::max(work.planned_step_ms, pw.planned_ms);
  }
  return work;
}

}  // namespace hydraulis
