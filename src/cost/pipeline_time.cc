#include "hydraulis/cost/pipeline_time.h"

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <vector>

#include "hydraulis/base/error.h"

namespace hydraulis {

namespace {

// Operation k of stage s's fixed 1F1B order over v micro-batches: +j+1 is the forward of
// micro-batch j, -(j+1) its backward (RunOneFOneB's order, computed instead of stored).
int OpAt(int s, int k, int pp, int v) {
  const int warmup = std::min(pp - 1 - s, v);
  if (k < warmup) return k + 1;
  const int steady = 2 * (v - warmup);
  if (k < warmup + steady) {
    const int q = k - warmup;
    return q % 2 == 0 ? warmup + q / 2 + 1 : -(q / 2 + 1);
  }
  return -(v - warmup + (k - warmup - steady) + 1);
}

// RunOneFOneB without delays or an observer, the packers' hot path: the same operations
// in the same order (so the same makespan, bit for bit), with reused per-thread storage
// instead of per-call vectors.
double OneFOneBMakespan(std::span<const double> stage_ms, int pp, double fwd_share) {
  const int v = static_cast<int>(stage_ms.size());
  thread_local std::vector<double> f_end, b_end, free_at;
  thread_local std::vector<int> pos;
  const double kUnset = -std::numeric_limits<double>::infinity();
  const std::size_t cells = static_cast<std::size_t>(pp) * v;
  f_end.assign(cells, kUnset);
  b_end.assign(cells, kUnset);
  free_at.assign(static_cast<std::size_t>(pp), 0.0);
  pos.assign(static_cast<std::size_t>(pp), 0);
  auto at = [v](int s, int j) { return static_cast<std::size_t>(s) * v + j; };
  const int per_stage = 2 * v;
  std::size_t done = 0;
  const std::size_t total_ops = static_cast<std::size_t>(2) * pp * v;
  while (done < total_ops) {
    bool progressed = false;
    for (int s = 0; s < pp; ++s) {
      while (pos[s] < per_stage) {
        const int op = OpAt(s, pos[s], pp, v);
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

}  // namespace

double OneFOneBMs(std::span<const double> stage_ms, int pp, const ScheduleOptions& options) {
  if (pp > 1 && !stage_ms.empty()) {
    return OneFOneBMakespan(stage_ms, pp, 1.0 / (1.0 + options.backward_to_forward));
  }
  return RunOneFOneB(stage_ms, {}, pp, options);
}

double RunOneFOneB(std::span<const double> stage_ms, std::span<const double> send_ms, int pp,
                   const ScheduleOptions& options,
                   const std::function<void(const OneFOneBOp&)>& on_op) {
  if (pp < 1) throw InvalidInput("pipeline degree pp must be >= 1, got " + std::to_string(pp));
  const int v = static_cast<int>(stage_ms.size());
  const std::size_t sends = static_cast<std::size_t>(pp - 1) * stage_ms.size();
  if (!send_ms.empty() && send_ms.size() != sends) {
    throw InvalidInput("send delays: expected (pp - 1) * micro-batches = " + std::to_string(sends) +
                       " entries, got " + std::to_string(send_ms.size()));
  }
  if (v == 0) return 0.0;
  const double fwd_share = 1.0 / (1.0 + options.backward_to_forward);
  if (pp == 1) {
    // A plain sum (the hot path of packing); operations only when someone watches.
    double t = 0;
    for (int j = 0; j < v; ++j) {
      const double end = t + stage_ms[static_cast<std::size_t>(j)];
      if (on_op) {
        const double f = t + stage_ms[static_cast<std::size_t>(j)] * fwd_share;
        on_op({0, j, true, t, f});
        on_op({0, j, false, f, end});
      }
      t = end;
    }
    return t;
  }
  auto delay = [&](int boundary, int j) {
    return send_ms.empty() ? 0.0 : send_ms[static_cast<std::size_t>(boundary) * v + j];
  };
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
          if (s > 0 && ready != kUnset) ready += delay(s - 1, j);
        } else {
          ready = s == pp - 1 ? f_end[at(s, j)] : b_end[at(s + 1, j)];
          if (s < pp - 1 && ready != kUnset) ready += delay(s, j);
        }
        if (ready == kUnset) break;
        const double start = std::max(ready, free_at[s]);
        const double dur = stage_ms[j] * (op > 0 ? fwd_share : 1.0 - fwd_share);
        free_at[s] = start + dur;
        (op > 0 ? f_end : b_end)[at(s, j)] = free_at[s];
        if (on_op) on_op({s, j, op > 0, start, free_at[s]});
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
