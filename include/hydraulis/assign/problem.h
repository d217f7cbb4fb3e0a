// The data-assignment problem of one global batch on one strategy (method.md 2.3).
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "hydraulis/cost/cp_layout.h"
#include "hydraulis/cost/pipeline_time.h"
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

  // The least time a document of `tokens` tokens adds to the slowest rank of the stage
  // running its micro-batch: time.DocumentMs for cp = 1; for cp > 1 the least over placing
  // it whole on one rank and sharding it over any width the layouts allow (with its
  // exchange; ShardCost::FloorDocumentMs). Bounds on a document's critical path use this;
  // sums of work use `time`.
  double DocumentFloorMs(std::int64_t tokens) const {
    if (scheme.cp == 1) return time.DocumentMs(tokens);
    return shard.FloorDocumentMs(tokens);
  }

  // A document's least share of its stage's work, averaged over the cp ranks:
  // time.DocumentMs, plus for cp > 1 the least exchange of a document no rank can hold
  // whole (it must be sharded, over at least ShardCost::MinWidth ranks). The ranks' mean
  // load, hence the slowest rank's, is at least the sum of these plus c, so bounds may sum
  // them.
  double DocumentWorkMs(std::int64_t tokens) const {
    const double work = time.DocumentMs(tokens);
    if (scheme.cp == 1 || static_cast<double>(tokens) <= shard.rank_capacity_tokens) return work;
    return work + shard.LeastExchangeWorkMs(tokens, shard.MinWidth(tokens)) / scheme.cp;
  }

  bool SameAs(const PipelineModel& o) const {
    return scheme == o.scheme && capacity_tokens == o.capacity_tokens &&
           time.a_ms_per_token2 == o.time.a_ms_per_token2 &&
           time.b_ms_per_token == o.time.b_ms_per_token && time.c_ms == o.time.c_ms &&
           shard.kv_ms_per_token == o.shard.kv_ms_per_token &&
           shard.kv_unit_intra_ms_per_token == o.shard.kv_unit_intra_ms_per_token &&
           shard.kv_unit_inter_ms_per_token == o.shard.kv_unit_inter_ms_per_token &&
           shard.ranks_per_node == o.shard.ranks_per_node && shard.space == o.shard.space &&
           shard.kv_memory_ratio == o.shard.kv_memory_ratio;
  }
};

// Identical pipelines of a strategy (PipelineModel::SameAs) as one class with a count: a
// strategy of 4,096 TP4 pipelines is one group, so work that is the same for every member
// (bounds, thresholds) is done once per group rather than once per pipeline.
struct PipelineGroup {
  PipelineModel model;
  int count = 0;
};

// The groups of `pipelines`, in order of first appearance.
std::vector<PipelineGroup> GroupPipelines(std::span<const PipelineModel> pipelines);

// The same groups as the indices of their members (ascending), for code that works on the
// pipelines themselves.
std::vector<std::vector<int>> GroupMembers(std::span<const PipelineModel> pipelines);

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

// What no packing on `pipeline` of documents whose DocumentWorkMs sum to at most
// `work_ms`, with `tokens` tokens in all, can run faster than: the work plus c for each
// micro-batch the tokens need (a cp rank runs at least its balanced share, and every 1F1B
// stage runs every micro-batch).
double PackingFloorMs(const PipelineModel& pipeline, double work_ms, std::int64_t tokens);

// The lengths of a micro-batch's documents (indices into `lengths`), in its order.
std::vector<std::int64_t> MicroBatchLengths(std::span<const std::int64_t> lengths,
                                            const std::vector<int>& micro_batch);

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
