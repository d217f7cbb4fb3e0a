#include "hydraulis/sim/pipeline_schedule.h"

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <string>

#include "hydraulis/base/error.h"

namespace hydraulis {

// Mirrors OneFOneBMs (src/cost/pipeline_time.cc) operation for operation, adding the send
// delay to each cross-stage dependency; keeping the same arithmetic is what makes the
// zero-communication makespan equal the planner's estimate exactly, not just closely.
PipelineSchedule SimulateOneFOneB(std::span<const double> stage_ms, std::span<const double> send_ms,
                                  int pp, const ScheduleOptions& options) {
  if (pp < 1) throw InvalidInput("pipeline degree pp must be >= 1, got " + std::to_string(pp));
  const int v = static_cast<int>(stage_ms.size());
  const std::size_t sends = static_cast<std::size_t>(pp - 1) * stage_ms.size();
  if (!send_ms.empty() && send_ms.size() != sends) {
    throw InvalidInput("send delays: expected (pp - 1) * micro-batches = " + std::to_string(sends) +
                       " entries, got " + std::to_string(send_ms.size()));
  }
  PipelineSchedule out;
  out.stage_busy_ms.assign(static_cast<std::size_t>(pp), 0.0);
  if (v == 0) return out;
  const double fwd_share = 1.0 / (1.0 + options.backward_to_forward);
  if (pp == 1) {
    // OneFOneBMs sums the stage times; accumulate the same way and split inside.
    double t = 0;
    for (int j = 0; j < v; ++j) {
      const double f = stage_ms[static_cast<std::size_t>(j)] * fwd_share;
      const double end = t + stage_ms[static_cast<std::size_t>(j)];
      out.ops.push_back({0, j, PassKind::kForward, t, t + f});
      out.ops.push_back({0, j, PassKind::kBackward, t + f, end});
      out.stage_busy_ms[0] += stage_ms[static_cast<std::size_t>(j)];
      t = end;
    }
    out.makespan_ms = t;
    return out;
  }
  auto delay = [&](int boundary, int j) {
    return send_ms.empty() ? 0.0 : send_ms[static_cast<std::size_t>(boundary) * v + j];
  };
  // Per stage, the fixed order of operations: +(j+1) forward of micro-batch j, -(j+1) its
  // backward.
  std::vector<std::vector<int>> order(static_cast<std::size_t>(pp));
  for (int s = 0; s < pp; ++s) {
    auto& o = order[static_cast<std::size_t>(s)];
    const int warmup = std::min(pp - 1 - s, v);
    int next_f = 0, next_b = 0;
    for (; next_f < warmup; ++next_f) o.push_back(next_f + 1);
    while (next_f < v) {
      o.push_back(++next_f);
      o.push_back(-(++next_b));
    }
    while (next_b < v) o.push_back(-(++next_b));
  }
  const double kUnset = -std::numeric_limits<double>::infinity();
  std::vector<double> f_end(static_cast<std::size_t>(pp) * v, kUnset), b_end(f_end);
  auto at = [v](int s, int j) { return static_cast<std::size_t>(s) * v + j; };
  std::vector<std::size_t> pos(static_cast<std::size_t>(pp), 0);
  std::vector<double> free_at(static_cast<std::size_t>(pp), 0.0);
  std::vector<std::vector<ScheduledOp>> per_stage(static_cast<std::size_t>(pp));
  std::size_t done = 0;
  const std::size_t total_ops = static_cast<std::size_t>(2) * pp * v;
  while (done < total_ops) {
    bool progressed = false;
    for (int s = 0; s < pp; ++s) {
      const auto su = static_cast<std::size_t>(s);
      while (pos[su] < order[su].size()) {
        const int op = order[su][pos[su]];
        const int j = std::abs(op) - 1;
        double ready;
        if (op > 0) {
          ready = s == 0 ? 0.0 : f_end[at(s - 1, j)];
          if (s > 0 && ready != kUnset) ready += delay(s - 1, j);
        } else {
          ready = s == pp - 1 ? f_end[at(s, j)] : b_end[at(s + 1, j)];
          if (s < pp - 1 && ready != kUnset) ready += delay(s, j);
        }
        if (ready == kUnset) break;
        const double start = std::max(ready, free_at[su]);
        const double dur =
            stage_ms[static_cast<std::size_t>(j)] * (op > 0 ? fwd_share : 1.0 - fwd_share);
        free_at[su] = start + dur;
        (op > 0 ? f_end : b_end)[at(s, j)] = free_at[su];
        per_stage[su].push_back(
            {s, j, op > 0 ? PassKind::kForward : PassKind::kBackward, start, free_at[su]});
        out.stage_busy_ms[su] += dur;
        ++pos[su];
        ++done;
        progressed = true;
      }
    }
    if (!progressed) throw InternalError("1F1B simulation deadlocked");
  }
  out.makespan_ms = *std::max_element(free_at.begin(), free_at.end());
  for (auto& ops : per_stage) out.ops.insert(out.ops.end(), ops.begin(), ops.end());
  return out;
}

}  // namespace hydraulis
