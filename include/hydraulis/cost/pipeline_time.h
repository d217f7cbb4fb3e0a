// Time of one pipeline running a sequence of micro-batches under the 1F1B schedule.
#pragma once

#include <functional>
#include <span>

namespace hydraulis {

// How a stage's micro-batch time splits into forward and backward.
struct ScheduleOptions {
  // Backward time / forward time (> 0); 2 is the usual 1:2 split.
  double backward_to_forward = 2.0;
};

// Exact makespan (ms) of the non-interleaved 1F1B schedule (Megatron-LM's order: stage s
// runs min(pp-1-s, v) warm-up forwards, then alternates one forward and one backward, then
// drains backwards), by event simulation. stage_ms[j] is the forward+backward time of
// micro-batch j on every stage (layers are split evenly). No communication terms.
// Returns 0 for no micro-batches. pp >= 1.
double OneFOneBMs(std::span<const double> stage_ms, int pp, const ScheduleOptions& options = {});

// One operation of a 1F1B schedule as the simulation ran it.
struct OneFOneBOp {
  int stage = 0;
  int micro_batch = 0;
  bool forward = true;
  double start_ms = 0;
  double end_ms = 0;
};

// The event simulation behind OneFOneBMs, with a delay on every cross-stage dependency:
// send_ms is empty (no delays) or holds (pp-1) * v entries, send_ms[b * v + j] delaying
// forward j from stage b to b+1 and backward j from stage b+1 to b (a send occupies
// neither stage). `on_op`, when set, sees every operation as it is scheduled. Returns the
// makespan; with no delays it is exactly OneFOneBMs. InvalidInput on a size mismatch.
double RunOneFOneB(std::span<const double> stage_ms, std::span<const double> send_ms, int pp,
                   const ScheduleOptions& options,
                   const std::function<void(const OneFOneBOp&)>& on_op = {});

// The published closed-form upper bound (max_j stage_ms[j]) * (pp - 1 + v); stage_ms
// already includes the per-micro-batch c.
double OneFOneBUpperBoundMs(std::span<const double> stage_ms, int pp);

}  // namespace hydraulis
