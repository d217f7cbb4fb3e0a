#include "hydraulis/sim/pipeline_schedule.h"

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <string>

#include "hydraulis/base/error.h"

namespace hydraulis {

// The cost layer's event simulation, recording every operation: the zero-communication
// makespan is then the planner's estimate exactly, by construction.
PipelineSchedule SimulateOneFOneB(std::span<const double> stage_ms, std::span<const double> send_ms,
                                  int pp, const ScheduleOptions& options) {
  if (pp < 1) throw InvalidInput("pipeline degree pp must be >= 1, got " + std::to_string(pp));
  PipelineSchedule out;
  out.stage_busy_ms.assign(static_cast<std::size_t>(pp), 0.0);
  std::vector<std::vector<ScheduledOp>> per_stage(static_cast<std::size_t>(pp));
  out.makespan_ms = RunOneFOneB(stage_ms, send_ms, pp, options, [&](const OneFOneBOp& op) {
    const auto s = static_cast<std::size_t>(op.stage);
    per_stage[s].push_back({op.stage, op.micro_batch,
                            op.forward ? PassKind::kForward : PassKind::kBackward, op.start_ms,
                            op.end_ms});
    out.stage_busy_ms[s] += op.end_ms - op.start_ms;
  });
  for (auto& ops : per_stage) out.ops.insert(out.ops.end(), ops.begin(), ops.end());
  return out;
}

}  // namespace hydraulis
