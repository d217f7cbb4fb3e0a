#include "hydraulis/cost/pipeline_time.h"

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <vector>

#include "hydraulis/base/error.h"

namespace hydraulis {

namespace {

// Operation k of stage s's fixed 1F1B order over v micro-batches (Megatron-LM's: min(pp-1-s,
// v) warm-up forwards, then one forward and one backward in turn, then the remaining
// backwards): +j+1 is the forward of micro-batch j, -(j+1) its backward.
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

// The event simulation's storage: per-call for RunOneFOneB (its observer may simulate
// again), per thread for OneFOneBMs, the packers' hot path.
struct OneFOneBScratch {
  std::vector<double> f_end, b_end, free_at;
  std::vector<int> pos;
};

// The event simulation of RunOneFOneB (arguments checked there, pp >= 1, v >= 1).
double Simulate(std::span<const double> stage_ms, std::span<const double> send_ms, int pp,
                double fwd_share, const std::function<void(const OneFOneBOp&)>& on_op,
                OneFOneBScratch& scratch) {
  const int v = static_cast<int>(stage_ms.size());
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
  // Unset end times are -infinity, so any finite stage time (even negative) is valid.
  const double kUnset = -std::numeric_limits<double>::infinity();
  auto& [f_end, b_end, free_at, pos] = scratch;
  f_end.assign(static_cast<std::size_t>(pp) * v, kUnset);
  b_end.assign(static_cast<std::size_t>(pp) * v, kUnset);
  free_at.assign(static_cast<std::size_t>(pp), 0.0);
  pos.assign(static_cast<std::size_t>(pp), 0);
  auto at = [v](int s, int j) { return static_cast<std::size_t>(s) * v + j; };
  std::size_t done = 0;
  const std::size_t total_ops = static_cast<std::size_t>(2) * pp * v;
  while (done < total_ops) {
    bool progressed = false;
    for (int s = 0; s < pp; ++s) {
      while (pos[s] < 2 * v) {
        const int op = OpAt(s, pos[s], pp, v);
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

}  // namespace

double OneFOneBMs(std::span<const double> stage_ms, int pp, const ScheduleOptions& options) {
  if (pp < 1) throw InvalidInput("pipeline degree pp must be >= 1, got " + std::to_string(pp));
  if (stage_ms.empty()) return 0.0;
  thread_local OneFOneBScratch scratch;
  return Simulate(stage_ms, {}, pp, 1.0 / (1.0 + options.backward_to_forward), {}, scratch);
}

double RunOneFOneB(std::span<const double> stage_ms, std::span<const double> send_ms, int pp,
                   const ScheduleOptions& options,
                   const std::function<void(const OneFOneBOp&)>& on_op) {
  if (pp < 1) throw InvalidInput("pipeline degree pp must be >= 1, got " + std::to_string(pp));
  const std::size_t sends = static_cast<std::size_t>(pp - 1) * stage_ms.size();
  if (!send_ms.empty() && send_ms.size() != sends) {
    throw InvalidInput("send delays: expected (pp - 1) * micro-batches = " + std::to_string(sends) +
                       " entries, got " + std::to_string(send_ms.size()));
  }
  if (stage_ms.empty()) return 0.0;
  OneFOneBScratch scratch;
  return Simulate(stage_ms, send_ms, pp, 1.0 / (1.0 + options.backward_to_forward), on_op, scratch);
}

double OneFOneBUpperBoundMs(std::span<const double> stage_ms, int pp) {
  if (stage_ms.empty()) return 0.0;
  const double mx = *std::max_element(stage_ms.begin(), stage_ms.end());
  return mx * (pp - 1 + static_cast<double>(stage_ms.size()));
}

}  // namespace hydraulis
