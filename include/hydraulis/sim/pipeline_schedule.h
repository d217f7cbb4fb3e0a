// One pipeline's 1F1B schedule as a timeline of forward and backward operations, with a
// point-to-point send delay on every dependency between stages.
#pragma once

#include <span>
#include <vector>

#include "hydraulis/cost/pipeline_time.h"

namespace hydraulis {

enum class PassKind { kForward, kBackward };

struct ScheduledOp {
  int stage = 0;
  int micro_batch = 0;
  PassKind pass = PassKind::kForward;
  double start_ms = 0;
  double end_ms = 0;
};

struct PipelineSchedule {
  std::vector<ScheduledOp> ops;       // stage by stage, each in execution order
  double makespan_ms = 0;             // when the last operation ends (0 without work)
  std::vector<double> stage_busy_ms;  // compute time of each stage
};

// Megatron's non-interleaved 1F1B, the order of OneFOneBMs (pipeline_time.h): stage s runs
// min(pp-1-s, v) warm-up forwards, then alternates forward and backward, then drains.
// stage_ms[j] is the forward+backward time of micro-batch j on one stage, split by
// options.backward_to_forward. send_ms is empty (no delays) or holds (pp-1) * v delays:
// send_ms[b * v + j] delays forward j from stage b to b+1 and backward j from stage b+1 to b.
// A send occupies neither stage (asynchronous). With zero delays the makespan equals
// OneFOneBMs exactly (same arithmetic). InvalidInput when pp < 1 or sizes differ.
PipelineSchedule SimulateOneFOneB(std::span<const double> stage_ms, std::span<const double> send_ms,
                                  int pp, const ScheduleOptions& options = {});

}  // namespace hydraulis
