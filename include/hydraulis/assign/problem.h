// The data-assignment problem of one global batch on one strategy (method.md 2.3).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "hydraulis/cost/pipeline_time.h"
#include "hydraulis/cost/cp_layout.h"
#include "hydraulis/cost/time_model.h"
#include "hydraulis/spec/profile.h"
#include "hydraulis/spec/scheme.h"
#include "hydraulis/spec/strategy.h"

namespace hydraulis {

// One pipeline of a strategy as the assigner sees it.
struct PipelineModel {
  Scheme scheme;
  // The additive time model every search and bound sums: exact for cp = 1; for cp > 1 a
  // document's balanced share of the cp ranks (a / cp, b / cp, the same c), which no layout
  // beats (the largest rank's time is at least the ranks' mean), so bounds built on it stay
  // valid. MicroBatchStageMs gives the laid-out time.
  TimeModel time;
  std::int64_t capacity_tokens = 0;  // most tokens one micro-batch may hold
  // The laid-out cost of a micro-batch when cp > 1 (cp = 1: unused).
  ShardCost shard;

  bool SameAs(const PipelineModel& o) const {
    return scheme == o.scheme && capacity_tokens == o.capacity_tokens &&
           time.a_ms_per_token2 == o.time.a_ms_per_token2 &&
           time.b_ms_per_token == o.time.b_ms_per_token && time.c_ms == o.time.c_ms &&
           shard.kv_ms_per_token == o.shard.kv_ms_per_token &&
           shard.kv_memory_ratio == o.shard.kv_memory_ratio;
  }
};

// The model of a pipeline of `scheme` whose documents placed whole on one cp rank cost
// `whole`, with micro-batch capacity `capacity_tokens` and, for cp > 1, the key/value
// exchange and memory terms of ShardCost.
PipelineModel MakePipelineModel(const Scheme& scheme, const TimeModel& whole,
                                std::int64_t capacity_tokens, double kv_ms_per_token = 0,
                                double kv_memory_ratio = 0);

// The model of a pipeline of `entry`'s scheme under the optimizer layout `layout`.
PipelineModel MakePipelineModel(const Profile& profile, const SchemeProfile& entry,
                                const OptimizerLayout& layout);

// Documents (lengths in tokens, >= 1) to assign to the pipelines.
struct AssignProblem {
  std::vector<std::int64_t> lengths;
  std::vector<PipelineModel> pipelines;
  ScheduleOptions schedule;
};

// Micro-batches of one pipeline in execution order; each lists document indices.
using MicroBatches = std::vector<std::vector<int>>;

// A solution: per pipeline its micro-batches and its exact 1F1B time.
struct Assignment {
  std::vector<MicroBatches> pipelines;
  std::vector<double> pipeline_ms;
  double step_ms = 0;  // max of pipeline_ms
  // Solver calls inside the assigner that stopped at their time limit rather than proving
  // their answer (the published baseline's CBC MILPs); 0 for assigners without a solver.
  int time_limited_solves = 0;
};

// The forward + backward time (ms) of one micro-batch holding documents of `lengths` (in
// its order) on one stage of `pipeline`: c plus the documents' times added in their order
// for cp = 1, the laid-out time (LayOutMicroBatch, LaidOutStageMs) for cp > 1.
double MicroBatchMs(std::span<const std::int64_t> lengths, const PipelineModel& pipeline);

// The forward + backward time (ms) of each micro-batch on one stage of `pipeline`, the
// documents' times added to c in their order (every estimate sums them this way, so the
// planner's, the simulator's and the plan's times agree bit for bit); for cp > 1 the time
// of the micro-batch laid out by LayOutMicroBatch (LaidOutStageMs).
std::vector<double> MicroBatchStageMs(std::span<const std::int64_t> lengths,
                                      const PipelineModel& pipeline,
                                      const MicroBatches& micro_batches);

// The shard layout of each micro-batch of `pipeline` (empty layouts when cp = 1).
std::vector<CpLayout> MicroBatchLayouts(std::span<const std::int64_t> lengths,
                                           const PipelineModel& pipeline,
                                           const MicroBatches& micro_batches);

// Exact 1F1B time (ms) of `pipeline` running `micro_batches` (no communication terms).
double PipelineMs(const AssignProblem& problem, const PipelineModel& pipeline,
                  const MicroBatches& micro_batches);

// Recomputes pipeline_ms and step_ms of `assignment` from the cost model.
void Evaluate(const AssignProblem& problem, Assignment& assignment);

}  // namespace hydraulis
