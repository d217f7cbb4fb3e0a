// The data-assignment problem of one global batch on one strategy (method.md 2.3).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "hydraulis/cost/pipeline_time.h"
#include "hydraulis/cost/time_model.h"
#include "hydraulis/spec/scheme.h"

namespace hydraulis {

// One pipeline of a strategy as the assigner sees it.
struct PipelineModel {
  Scheme scheme;
  TimeModel time;
  std::int64_t capacity_tokens = 0;  // most tokens one micro-batch may hold

  bool SameAs(const PipelineModel& o) const {
    return scheme == o.scheme && capacity_tokens == o.capacity_tokens &&
           time.a_ms_per_token2 == o.time.a_ms_per_token2 &&
           time.b_ms_per_token == o.time.b_ms_per_token && time.c_ms == o.time.c_ms;
  }
};

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

// The forward + backward time (ms) of each micro-batch on one stage of `pipeline`, the
// documents' times added to c in their order (every estimate sums them this way, so the
// planner's, the simulator's and the plan's times agree bit for bit).
std::vector<double> MicroBatchStageMs(std::span<const std::int64_t> lengths,
                                      const PipelineModel& pipeline,
                                      const MicroBatches& micro_batches);

// Exact 1F1B time (ms) of `pipeline` running `micro_batches` (no communication terms).
double PipelineMs(const AssignProblem& problem, const PipelineModel& pipeline,
                  const MicroBatches& micro_batches);

// Recomputes pipeline_ms and step_ms of `assignment` from the cost model.
void Evaluate(const AssignProblem& problem, Assignment& assignment);

}  // namespace hydraulis
