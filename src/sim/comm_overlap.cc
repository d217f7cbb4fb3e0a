#include "hydraulis/sim/comm_overlap.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "hydraulis/base/error.h"
#include "hydraulis/spec/ddp_buckets.h"

namespace hydraulis {
namespace {

// Where position x (a fraction of the model) lies in a pipeline of `pp` stages: its stage
// and how far into the stage's layers, in [0, 1].
struct StagePosition {
  std::size_t stage = 0;
  double within = 0;
};

StagePosition PositionIn(double x, std::size_t pp) {
  const double scaled = x * static_cast<double>(pp);
  const auto stage = std::min(static_cast<std::size_t>(scaled), pp - 1);
  return {stage, std::min(scaled - static_cast<double>(stage), 1.0)};
}

}  // namespace

PipelineWindows StageWindowsOf(const PipelineSchedule& schedule, int pp) {
  PipelineWindows windows;
  if (schedule.ops.empty()) return windows;
  windows.resize(static_cast<std::size_t>(pp));
  std::vector<char> seen_forward(windows.size(), 0);
  for (const ScheduledOp& op : schedule.ops) {
    StageWindow& w = windows.at(static_cast<std::size_t>(op.stage));
    if (op.pass == PassKind::kForward) {
      if (seen_forward[static_cast<std::size_t>(op.stage)]) continue;
      seen_forward[static_cast<std::size_t>(op.stage)] = 1;
      w.first_forward_start_ms = op.start_ms;
      w.first_forward_end_ms = op.end_ms;
    } else {
      // Ops are in execution order, so the last backward seen is the stage's last.
      w.last_backward_start_ms = op.start_ms;
      w.last_backward_end_ms = op.end_ms;
    }
  }
  return windows;
}

std::vector<double> BucketBounds(double parameters, std::int64_t bucket_elements) {
  const double size = static_cast<double>(bucket_elements);
  const double buckets = std::ceil(parameters / size);
  if (buckets > static_cast<double>(kMaxBuckets)) {
    throw InvalidInput("bucket_elements: " + std::to_string(bucket_elements) + " cuts the " +
                       std::to_string(static_cast<std::int64_t>(parameters)) +
                       " parameters into more than " + std::to_string(kMaxBuckets) + " buckets");
  }
  const auto n = static_cast<std::size_t>(std::max(buckets, 1.0));
  std::vector<double> bounds(n + 1);
  for (std::size_t k = 0; k < n; ++k) bounds[k] = static_cast<double>(k) * size / parameters;
  bounds[n] = 1.0;
  return bounds;
}

OverlappedSync OverlapSync(std::span<const PipelineWindows> pipelines, double compute_ms,
                           const BucketedCollectives& c, bool synchronised) {
  const std::size_t n = c.bounds.size() - 1;
  auto duration_ms = [&](std::size_t k, double transfer_ms) {
    return c.latency_ms + (c.bounds[k + 1] - c.bounds[k]) * transfer_ms;
  };
  OverlappedSync out;
  // All-gathers back to back from the step's start.
  std::vector<double> gathered(n);
  double t = 0;
  for (std::size_t k = 0; k < n; ++k) {
    t += duration_ms(k, c.all_gather_transfer_ms);
    gathered[k] = t;
  }
  out.all_gather_total_ms = t;
  // Each pipeline starts late enough that every bucket has arrived when its forward first
  // reaches the bucket's first parameter (forward reaches lower positions first, so the
  // first parameter is the one); need is relative to its compute phase.
  std::vector<double> delay(pipelines.size(), 0.0);
  for (std::size_t p = 0; p < pipelines.size(); ++p) {
    const PipelineWindows& stages = pipelines[p];
    if (stages.empty()) continue;
    for (std::size_t k = 0; k < n; ++k) {
      const StagePosition at = PositionIn(c.bounds[k], stages.size());
      const StageWindow& w = stages[at.stage];
      const double need = w.first_forward_start_ms +
                          at.within * (w.first_forward_end_ms - w.first_forward_start_ms);
      delay[p] = std::max(delay[p], gathered[k] - need);
    }
  }
  // Compute ends when the last pipeline does (its makespan is its stage 0's last backward);
  // synchronised pipelines all wait for the latest bucket any of them needs.
  double compute_end = 0;
  bool any_work = false;
  double common_delay = 0;
  for (double d : delay) common_delay = std::max(common_delay, d);
  for (std::size_t p = 0; p < pipelines.size(); ++p) {
    if (pipelines[p].empty()) continue;
    any_work = true;
    if (synchronised) delay[p] = common_delay;
    compute_end = std::max(compute_end, delay[p] + pipelines[p].front().last_backward_end_ms);
  }
  if (synchronised) compute_end = std::max(compute_end, common_delay + compute_ms);
  // Without work, the optimizer step still waits for the all-gathers.
  if (!any_work) compute_end = out.all_gather_total_ms + compute_ms;
  compute_end = std::max(compute_end, compute_ms);
  out.exposed_all_gather_ms = compute_end - compute_ms;
  // Reduce-scatters, top bucket first, after the all-gathers on the same network; bucket k
  // is ready when every pipeline's last backward has passed its first parameter (backward
  // passes lower positions last).
  for (std::size_t k = n; k-- > 0;) {
    double ready = 0;
    for (std::size_t p = 0; p < pipelines.size(); ++p) {
      const PipelineWindows& stages = pipelines[p];
      if (stages.empty()) continue;
      const StagePosition at = PositionIn(c.bounds[k], stages.size());
      const StageWindow& w = stages[at.stage];
      ready = std::max(ready, delay[p] + w.last_backward_end_ms -
                                  at.within * (w.last_backward_end_ms - w.last_backward_start_ms));
    }
    const double start = std::max(ready, t);
    if (k + 1 == n) out.reduce_scatter_start_ms = start;
    const double d = duration_ms(k, c.reduce_scatter_transfer_ms);
    out.reduce_scatter_total_ms += d;
    t = start + d;
  }
  out.exposed_reduce_scatter_ms = std::max(0.0, t - compute_end);
  return out;
}

}  // namespace hydraulis
