#include "step_planner.h"

#include <algorithm>

#include "hydraulis/assign/published.h"
#include "hydraulis/base/error.h"

namespace hydraulis {
namespace {

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
    case System::kDynamicCp:  // its schedule is sim/dynamic_cp.h's; the planner names the
                              // static candidate it runs on
      options.algorithm = Algorithm::kStaticFixed;
      options.only_strategy = PlannerOptions::kStaticCandidate;
      break;
    case System::kStaticCp:
      options.algorithm = Algorithm::kStaticFixed;
      options.only_strategy = PlannerOptions::kStaticCandidate;
      options.cp_layout_space = CpLayoutSpace::kEveryRank;
      break;
    case System::kPublished:
      options.algorithm = Algorithm::kPublished;
      options.published_assigner = AssignPublished;
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
    : system_(system), planner_(PlannerFor(profile, candidates, system, options)) {
  if (system_ == System::kPadding) {
    padded_tokens_ = std::min(planner_.options().context_tokens,
                              planner_.MaxCapacity(planner_.options().only_strategy));
  }
}

Plan StepPlanner::Plan(std::span<const std::int64_t> lengths) const {
  if (system_ == System::kPadding) return PlanPadding(lengths);
  return planner_.PlanBatch(lengths);
}

// One document per micro-batch, each padded to the context length (capped at the static
// strategy's capacity), so every micro-batch costs the same; dealing them round-robin in
// batch order is then also the least-loaded assignment (counts differ by at most one). The
// plan has no lower bound (0) and no candidate reports: nothing else was considered.
Plan StepPlanner::PlanPadding(std::span<const std::int64_t> lengths) const {
  hydraulis::Plan plan;
  plan.algorithm = planner_.options().algorithm;
  plan.strategy_index = planner_.options().only_strategy;
  plan.strategy = planner_.candidates().strategies[static_cast<std::size_t>(plan.strategy_index)];
  plan.lengths.assign(lengths.begin(), lengths.end());
  for (std::size_t d = 0; d < plan.lengths.size(); ++d) {
    std::int64_t& s = plan.lengths[d];
    if (s < 1) {
      throw InvalidInput("document " + std::to_string(d) + ": length must be >= 1, got " +
                         std::to_string(s));
    }
    if (s > padded_tokens_) {
      plan.truncated.push_back({static_cast<int>(d), s, padded_tokens_});
      s = padded_tokens_;
    }
  }
  const std::vector<PipelineModel>& models = planner_.Models(plan.strategy_index);
  for (const PipelineModel& model : models) {
    PipelinePlan pp;
    pp.scheme = model.scheme;
    pp.capacity_tokens = model.capacity_tokens;
    plan.pipelines.push_back(std::move(pp));
  }
  for (std::size_t d = 0; d < plan.lengths.size(); ++d) {
    PipelinePlan& pp = plan.pipelines[d % models.size()];
    pp.micro_batches.push_back({static_cast<int>(d)});
    pp.tokens += plan.lengths[d];
  }
  for (std::size_t p = 0; p < models.size(); ++p) {
    PipelinePlan& pp = plan.pipelines[p];
    const std::int64_t padded[] = {padded_tokens_};
    const std::vector<double> stage_ms(pp.micro_batches.size(), MicroBatchMs(padded, models[p]));
    if (pp.scheme.cp > 1) {
      pp.cp_layouts.assign(pp.micro_batches.size(), LayOutMicroBatch(padded, models[p].shard));
    }
    pp.estimated_ms = OneFOneBMs(stage_ms, pp.scheme.pp, planner_.options().schedule);
    pp.closed_form_ms = OneFOneBUpperBoundMs(stage_ms, pp.scheme.pp);
    plan.estimated_step_ms = std::max(plan.estimated_step_ms, pp.estimated_ms);
  }
  return plan;
}

}  // namespace hydraulis
