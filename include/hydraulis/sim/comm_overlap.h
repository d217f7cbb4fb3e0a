// The step's parameter all-gather and gradient reduce-scatter cut into buckets and
// overlapped with compute, as the runtime runs them (docs/runtime.md, "Communication
// overlapped with computation"; the model and its formulas: docs/simulator.md, "The step
// timeline").
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "hydraulis/sim/pipeline_schedule.h"

namespace hydraulis {

// When one pipeline stage first runs forward and last runs backward, ms from the start of
// the compute phase. Forward crosses the stage's layers bottom up and backward top down,
// each at an even pace.
struct StageWindow {
  double first_forward_start_ms = 0;
  double first_forward_end_ms = 0;
  double last_backward_start_ms = 0;
  double last_backward_end_ms = 0;
};

// One window per stage, stage s holding layers [s/pp, (s+1)/pp) of the model; empty for a
// pipeline without micro-batches (it needs no parameters and makes no gradients).
using PipelineWindows = std::vector<StageWindow>;

// The windows of `schedule`'s stages (ops in execution order per stage); empty when it has
// no operations.
PipelineWindows StageWindowsOf(const PipelineSchedule& schedule, int pp);

// Where the buckets cut the model, as fractions of its parameters in the optimizer's flat
// order (embedding first, head last; parameters spread evenly over the layers, as
// sync_cost.h assumes): bucket k is [bounds[k], bounds[k+1]), all of bucket_elements
// parameters but the last. Returns ceil(parameters / bucket_elements) + 1 bounds from 0 to 1.
// InvalidInput naming bucket_elements when that is more than 65,536 buckets (the runtime's
// limit); precondition: parameters > 0, bucket_elements >= 1.
std::vector<double> BucketBounds(double parameters, std::int64_t bucket_elements);

// The two collectives of a step, per bucket: latency_ms + share * transfer_ms, where share
// is the bucket's fraction of the model.
struct BucketedCollectives {
  std::span<const double> bounds;  // BucketBounds (not owned)
  double latency_ms = 0;
  double all_gather_transfer_ms = 0;
  double reduce_scatter_transfer_ms = 0;
};

struct OverlappedSync {
  // How much later compute ends because of the all-gathers: each pipeline starts late
  // enough that every bucket has arrived when its forward first reaches it, and compute
  // ends when the last pipeline does (>= the first bucket's all-gather).
  double exposed_all_gather_ms = 0;
  // How far the reduce-scatters run past that end (>= the last bucket's).
  double exposed_reduce_scatter_ms = 0;
  double all_gather_total_ms = 0;      // the all-gathers' own time, back to back from 0
  double reduce_scatter_total_ms = 0;  // the reduce-scatters' own time
  double reduce_scatter_start_ms = 0;  // when the first reduce-scatter starts
  // All times from the start of the step.
};

// Times the bucketed collectives of a step whose pipelines run `pipelines` windows (times
// relative to their own start) and whose compute phase, without waiting for parameters,
// lasts compute_ms (>= every pipeline's makespan, its stage 0's last backward end).
// All-gathers are issued together when the step starts, in ascending bucket order, and run
// one after another; a pipeline starts as late as the latest (gather end - when its forward
// first reaches the bucket's first parameter) over the buckets, a shift of its whole
// schedule; `synchronised` pipelines (dynamic-cp's groups, with a barrier between them) all
// take the largest shift. Reduce-scatters run one after another in descending bucket order
// after the last all-gather; bucket k starts when every pipeline's last backward has passed
// its first parameter (every pipeline holds the whole model) and the bucket above is done.
// Pipelines without windows neither need parameters nor make gradients.
OverlappedSync OverlapSync(std::span<const PipelineWindows> pipelines, double compute_ms,
                           const BucketedCollectives& collectives, bool synchronised = false);

}  // namespace hydraulis
