#include "hydraulis/sim/simulator.h"

#include <algorithm>
#include <chrono>
#include <optional>

#include "hydraulis/base/error.h"
#include "hydraulis/data/batch_sampler.h"
#include "hydraulis/sim/comm_overlap.h"
#include "hydraulis/sim/dynamic_cp.h"
#include "hydraulis/sim/sync_cost.h"
#include "hydraulis/spec/model.h"
#include "step_planner.h"
#include "units.h"

namespace hydraulis {
namespace {

// dynamic-cp runs on the static candidate: homogeneous <1, tp, 1> pipelines, each one of
// Megatron-Core's dp x cp ranks of tp GPUs.
struct DynamicCpRanks {
  int strategy_index = 0;
  const SchemeProfile* entry = nullptr;
  int ranks = 0;
  std::int64_t tokens_per_rank = 0;
};

DynamicCpRanks DynamicCpRanksOf(const Profile& profile, const CandidateSet& candidates,
                                const Planner& planner) {
  DynamicCpRanks out;
  out.strategy_index = planner.options().only_strategy;
  const Strategy& s = candidates.strategies.at(static_cast<std::size_t>(out.strategy_index));
  const Scheme scheme = s.pipelines.front();
  if (scheme.cp != 1 || scheme.pp != 1) {
    throw InvalidInput("system dynamic-cp: the static candidate " + QuoteForMessage(s.name) +
                       " must be <1, tp, 1> pipelines (Megatron-Core's dp x cp ranks of tp "
                       "GPUs each), got " +
                       SchemeName(scheme));
  }
  out.entry = profile.Find(scheme);
  out.ranks = static_cast<int>(s.pipelines.size());
  out.tokens_per_rank = planner.MaxCapacity(out.strategy_index);
  return out;
}

// A dynamic-cp rank's windows: it runs each group as one micro-batch (forward, then
// backward), groups one after another from the end of the previous group's slowest rank.
PipelineWindows DynamicCpRankWindows(const std::vector<std::vector<double>>& rank_ms,
                                     std::size_t rank, const ScheduleOptions& schedule) {
  PipelineWindows windows;
  if (rank_ms.empty()) return windows;
  const double forward_share = 1.0 / (1.0 + schedule.backward_to_forward);
  double last_start = 0;
  for (std::size_t g = 0; g + 1 < rank_ms.size(); ++g) {
    last_start += *std::max_element(rank_ms[g].begin(), rank_ms[g].end());
  }
  const double first = rank_ms.front()[rank], last = rank_ms.back()[rank];
  StageWindow w;
  w.first_forward_end_ms = first * forward_share;
  w.last_backward_start_ms = last_start + last * forward_share;
  w.last_backward_end_ms = last_start + last;
  windows.push_back(w);
  return windows;
}

// One dynamic-cp step: the peer's schedule, timed group by group (DynamicCpComputeMs);
// each rank is reported as a pipeline whose micro-batches are its groups.
StepResult DynamicCpStep(const Profile& profile, const CandidateSet& candidates,
                         const DynamicCpRanks& ranks, const SyncCost& sync,
                         const SimOptions& options, std::span<const double> bucket_bounds,
                         std::span<const std::int64_t> lengths) {
  const DynamicCpSchedule schedule = ScheduleDynamicCp(lengths, ranks.ranks, ranks.tokens_per_rank);
  const Strategy& strategy =
      candidates.strategies.at(static_cast<std::size_t>(ranks.strategy_index));
  StepResult r;
  r.strategy_index = ranks.strategy_index;
  r.strategy = strategy.name;
  r.strategy_description = StrategyDescription(strategy);
  r.documents = static_cast<int>(lengths.size());
  for (std::int64_t s : lengths) r.tokens += s;
  const std::vector<std::vector<double>> rank_ms =
      DynamicCpRankMs(profile, *ranks.entry, lengths, schedule);
  r.compute_ms = DynamicCpComputeMs(rank_ms);
  r.planned_ms = r.compute_ms;
  std::vector<PipelineWindows> windows;
  for (std::size_t rank = 0; rank < static_cast<std::size_t>(ranks.ranks); ++rank) {
    windows.push_back(DynamicCpRankWindows(rank_ms, rank, options.schedule));
  }
  SetSyncPhases(r, sync, options.comm.overlap, windows, bucket_bounds, /*synchronised=*/true);
  r.pipelines.resize(static_cast<std::size_t>(ranks.ranks));
  for (std::size_t g = 0; g < schedule.groups.size(); ++g) {
    const auto& group = schedule.groups[g];
    const std::vector<int> copies = GroupCpSizes(group, lengths.size());
    for (std::size_t rank = 0; rank < group.size(); ++rank) {
      PipelineStepResult& p = r.pipelines[rank];
      p.scheme = ranks.entry->scheme;
      ++p.micro_batches;
      std::int64_t tokens = 0;
      for (int d : group[rank]) {
        tokens += lengths[static_cast<std::size_t>(d)] / copies[static_cast<std::size_t>(d)];
      }
      p.tokens += tokens;
      p.micro_batch_tokens.push_back(tokens);
      p.micro_batch_documents.push_back(static_cast<int>(group[rank].size()));
      p.busy_ms += rank_ms[g][rank];
    }
  }
  for (PipelineStepResult& p : r.pipelines) {
    p.pipeline_ms = r.compute_ms;
    p.planned_ms = r.compute_ms;
  }
  CompleteStepResult(r);
  return r;
}

// The planner's options; ours, sync-aware with communication on, is charged each
// strategy's synchronisation.
PlannerOptions SimPlannerOptions(const Profile& profile, const CandidateSet& candidates,
                                 const SimOptions& options) {
  PlannerOptions planner_options;
  planner_options.context_tokens = options.sampler.max_len;
  planner_options.seed = options.planner_seed;
  planner_options.schedule = options.schedule;
  planner_options.cp_layout_space = options.cp_layout_space;
  if (options.system == System::kOurs && options.sync_aware && options.comm.enabled) {
    // The sync cost depends on the strategy only, so it is computed once per candidate.
    // With overlap, what a step waits for depends on its plan; the planner is charged the
    // part no plan hides: the first bucket's all-gather and the last one's reduce-scatter.
    const double first_bucket = options.comm.overlap ? BucketBounds(ParameterCount(profile.model),
                                                                    options.comm.bucket_elements)[1]
                                                     : 1.0;
    for (const Strategy& s : candidates.strategies) {
      const SyncCost cost = ComputeSyncCost(profile, s, candidates.optimizer_layout,
                                            candidates.gpus, options.comm, options.optimizer);
      planner_options.strategy_overhead_ms.push_back(
          options.comm.overlap
              ? 2 * cost.collective_latency_ms +
                    first_bucket * (cost.materialize_transfer_ms + cost.reduce_scatter_transfer_ms)
              : cost.materialize_ms + cost.reduce_scatter_ms);
    }
  }
  return planner_options;
}

// dynamic-cp's ranks, which must hold a max-len document over all of them.
DynamicCpRanks CheckedDynamicCpRanks(const Profile& profile, const CandidateSet& candidates,
                                     const StepPlanner& planner, const SimOptions& options) {
  const DynamicCpRanks ranks = DynamicCpRanksOf(profile, candidates, planner.planner());
  const std::int64_t widest = static_cast<std::int64_t>(ranks.ranks) * ranks.tokens_per_rank;
  if (options.sampler.max_len > widest) {
    throw InvalidInput("max-len " + std::to_string(options.sampler.max_len) + " exceeds what " +
                       std::to_string(ranks.ranks) + " dynamic-cp ranks of " +
                       std::to_string(ranks.tokens_per_rank) + " tokens hold (" +
                       std::to_string(widest) + ")");
  }
  return ranks;
}

// Every document is cut to max-len; it must then fit a pipeline the system can use (the
// one candidate a static system's planner is restricted to, or any), or documents would
// be cut again silently.
void CheckMaxLenFitsAPipeline(const CandidateSet& candidates, const StepPlanner& planner,
                              const SimOptions& options) {
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

}  // namespace

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
  const StepPlanner planner(profile, candidates, options.system,
                            SimPlannerOptions(profile, candidates, options));
  std::optional<DynamicCpRanks> dynamic_cp;
  if (options.system == System::kDynamicCp) {
    dynamic_cp = CheckedDynamicCpRanks(profile, candidates, planner, options);
  } else {
    CheckMaxLenFitsAPipeline(candidates, planner, options);
  }
  const SyncCost dynamic_cp_sync =
      dynamic_cp
          ? ComputeSyncCost(
                profile,
                candidates.strategies[static_cast<std::size_t>(dynamic_cp->strategy_index)],
                candidates.optimizer_layout, candidates.gpus, options.comm, options.optimizer)
          : SyncCost{};
  const StepTimer timer(profile, candidates, options);
  BatchSampler sampler(dataset, options.sampler);

  SimResult result;
  result.options = options;
  double bubble_sum = 0;
  for (int step = 0; step < options.steps; ++step) {
    const SampledBatch batch = sampler.Next();
    const auto t0 = std::chrono::steady_clock::now();
    StepResult r;
    if (dynamic_cp) {
      r = DynamicCpStep(profile, candidates, *dynamic_cp, dynamic_cp_sync, options,
                        timer.BucketBoundaries(), batch.lengths);
      result.planning_wall_ms +=
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    } else {
      const Plan plan = planner.Plan(batch.lengths);
      result.planning_wall_ms +=
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      r = timer.Time(plan, planner.padded_tokens());
    }
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
