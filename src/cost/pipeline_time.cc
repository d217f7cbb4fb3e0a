#include "hydraulis/cost/pipeline_time.h"

#include <algorithm>
#include <limits>
#include <vector>

#include "hydraulis/base/error.h"

namespace hydraulis {

double OneFOneBMs(std::span<const double> stage_ms, int pp, const ScheduleOptions& options) {
  const int v = static_cast<int>(stage_ms.size());
  if (v == 0) return 0.0;
  if (pp < 1) throw InvalidInput("pipeline degree pp must be >= 1, got " + std::to_string(pp));
  if (pp == 1) {
    double total = 0;
    for (double t : stage_ms) total += t;
    return total;
  }
  const double fwd_share = 1.0 / (1.0 + options.backward_to_forward);
  // Per stage, the fixed order of operations: +j+1 is forward of micro-batch j, -(j+1) its
  // backward.
  std::vector<std::vector<int>> order(pp);
  for (int s = 0; s < pp; ++s) {
    const int warmup = std::min(pp - 1 - s, v);
    int next_f = 0, next_b = 0;
    for (; next_f < warmup; ++next_f) order[s].push_back(next_f + 1);
    while (next_f < v) {
      order[s].push_back(next_f + 1);
      ++next_f;
      order[s].push_back(-(next_b + 1));
      ++next_b;
    }
    while (next_b < v) order[s].push_back(-(++next_b));
  }
  // Unset end times are -infinity, so any finite stage time (even negative) is valid.
  const double kUnset = -std::numeric_limits<double>::infinity();
  std::vector<double> f_end(static_cast<std::size_t>(pp) * v, kUnset), b_end(f_end);
  auto at = [v](int s, int j) { return static_cast<std::size_t>(s) * v + j; };
  std::vector<std::size_t> pos(pp, 0);
  std::vector<double> free_at(pp, 0.0);
  std::size_t done = 0, total_ops = static_cast<std::size_t>(2) * pp * v;
  while (done < total_ops) {
    bool progressed = false;
    for (int s = 0; s < pp; ++s) {
      while (pos[s] < order[s].size()) {
        const int op = order[s][pos[s]];
        const int j = std::abs(op) - 1;
        double ready;
        if (op > 0) {
          ready = s == 0 ? 0.0 : f_end[at(s - 1, j)];
        } else {
          ready = s == pp - 1 ? f_end[at(s, j)] : b_end[at(s + 1, j)];
        }
        if (ready == kUnset) break;
        const double start = std::max(ready, free_at[s]);
        const double dur = stage_ms[j] * (op > 0 ? fwd_share : 1.0 - fwd_share);
        free_at[s] = start + dur;
        (op > 0 ? f_end : b_end)[at(s, j)] = free_at[s];
        ++pos[s];
        ++done;
        progressed = true;
      }
    }
    if (!progressed) throw InternalError("1F1B simulation deadlocked");
  }
  return *std::max_element(free_at.begin(), free_at.end());
}

double OneFOneBUpperBoundMs(std::span<const double> stage_ms, int pp) {
  if (stage_ms.empty()) return 0.0;
  const double mx = *std::max_element(stage_ms.begin(), stage_ms.end());
  return mx * (pp - 1 + static_cast<double>(stage_ms.size()));
}

}  // namespace hydraulis
