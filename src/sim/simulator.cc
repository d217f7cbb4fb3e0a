#include "hydraulis/sim/simulator.h"

#include <algorithm>
#include <chrono>

#include "hydraulis/base/error.h"
#include "hydraulis/data/batch_sampler.h"
#include "hydraulis/sim/step_planner.h"
#include "hydraulis/sim/sync_cost.h"
#include "units.h"

namespace hydraulis {

SimResult Simulate(const Profile& profile, const CandidateSet& candidates,
                   std::span<const std::int64_t> dataset, const SimOptions& options,
                   const SimProgress& progress) {
  ValidateSimOptions(options);
  if (dataset.empty()) throw InvalidInput("dataset: no document lengths");
  if (options.sampler.documents_per_batch == 0 &&
      options.sampler.tokens_per_batch < options.sampler.max_len) {
    throw InvalidInput("tokens-per-batch " + std::to_string(options.sampler.tokens_per_batch) +
                       " is smaller than one full-length document (max-len " +
                       std::to_string(options.sampler.max_len) + ")");
  }
  PlannerOptions planner_options;
  planner_options.context_tokens = options.sampler.max_len;
  planner_options.seed = options.planner_seed;
  planner_options.schedule = options.schedule;
  if (options.system == System::kOurs && options.sync_aware && options.comm.enabled) {
    // The sync cost depends on the strategy only, so it is computed once per candidate.
    for (const Strategy& s : candidates.strategies) {
      const SyncCost cost = ComputeSyncCost(profile, s, candidates.optimizer_layout,
                                            candidates.gpus, options.comm, options.optimizer);
      planner_options.strategy_overhead_ms.push_back(cost.materialize_ms + cost.reduce_scatter_ms);
    }
  }
  const StepPlanner planner(profile, candidates, options.system, planner_options);
  {
    // Every document is cut to max-len; it must then fit a pipeline the system can use (the
    // one candidate a static system's planner is restricted to, or any), or documents would
    // be cut again silently.
    const int only = planner.planner().options().only_strategy;
    std::int64_t capacity = 0;
    for (int i = 0; i < static_cast<int>(candidates.strategies.size()); ++i) {
      if (only < 0 || i == only) capacity = std::max(capacity, planner.planner().MaxCapacity(i));
    }
    if (options.sampler.max_len > capacity) {
      throw InvalidInput("max-len " + std::to_string(options.sampler.max_len) +
                         " exceeds the largest micro-batch capacity (" + std::to_string(capacity) +
                         " tokens) of the strategies system " + SystemName(options.system) +
                         " can use: every longer document would be truncated");
    }
  }
  const StepTimer timer(profile, candidates, options);
  BatchSampler sampler(dataset, options.sampler);

  SimResult result;
  result.options = options;
  double bubble_sum = 0;
  for (int step = 0; step < options.steps; ++step) {
    const SampledBatch batch = sampler.Next();
    const auto t0 = std::chrono::steady_clock::now();
    const Plan plan = planner.Plan(batch.lengths);
    result.planning_wall_ms +=
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    StepResult r = timer.Time(plan, planner.padded_tokens());
    r.step = step;
    r.start_ms = result.total_time_ms;
    result.total_time_ms += r.step_ms;
    result.total_tokens += r.tokens;
    bubble_sum += r.bubble_share;
    result.steps.push_back(std::move(r));
    if (progress) progress(step + 1, options.steps);
  }
  result.mean_step_ms = result.total_time_ms / options.steps;
  result.mean_bubble_share = bubble_sum / options.steps;
  result.tokens_per_second = result.total_time_ms > 0
                                 ? static_cast<double>(result.total_tokens) /
                                       (result.total_time_ms / sim_units::kMsPerSecond)
                                 : 0.0;
  return result;
}

}  // namespace hydraulis
