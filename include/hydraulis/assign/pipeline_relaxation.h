// The continuous relaxation of one pipeline's 1F1B schedule: with v micro-batches whose
// document work may be split at will (total W, each micro-batch also paying c), the least
// possible makespan and the micro-batch sizes that reach it. It is a lower bound on every
// real packing with v micro-batches, and its sizes (small at both ends, a flat middle)
// are the targets our packer aims for when pp > 1.
#pragma once

#include <map>
#include <mutex>
#include <tuple>
#include <utility>
#include <vector>

#include "hydraulis/cost/pipeline_time.h"

namespace hydraulis {

struct RelaxedSchedule {
  double makespan_ms = 0;
  std::vector<double> work_ms;  // per micro-batch, in execution order, summing to W
  // The LP's dual price of total work: a subgradient of the makespan in W (it is convex
  // in W), so makespan(W') >= makespan_ms + work_price * (W' - W) for every W' >= 0.
  double work_price = 0;
};

// Solves the linear programme over micro-batch sizes and operation end times (the 1F1B
// order of pipeline_time.h is fixed). pp >= 1, v >= 1, c_ms >= 0, total_work_ms >= 0.
RelaxedSchedule RelaxPipeline(int pp, int v, double c_ms, double total_work_ms,
                              const ScheduleOptions& schedule = {});

// Memoised relaxations. The bound uses, per micro-batch count v, one supporting line of
// phi_v (the least makespan with v micro-batches, c = 1, as a function of r = W / c: it is
// convex in r, and close to affine), taken from one LP at a fixed r0(v); so a bound costs
// at most one LP per v ever, then line evaluations, and depends only on (pp, v, r), never
// on the order of queries: plans stay deterministic.
class RelaxationTable {
 public:
  // Counts above this are bounded without an LP by phi_v(r) >= r + v + pp - 1, which
  // caps each LP's size (its cost grows about as v^2); the bound loses a little where the
  // best count would be larger (r / c in the tens of thousands).
  static constexpr int kMaxExactMicroBatches = 128;
  // Grid of the packing targets (Shape, BestShape): shapes need no precision, so the
  // local search's many re-packs with slightly different work reuse a few LPs.
  static constexpr double kShapeGridRatio = 1.25;

  // Where the bound on phi_v comes from: phi_v(r) >= at_r0 + price * (r - r0), r >= 0.
  struct SupportingLine {
    double r0 = 0, at_r0 = 0, price = 0;
  };
  // The line of (pp, v) from its LP, at r0 = 2 v^2 / max(1, pp - 1) (where v is about the
  // best count, so the line is tightest where it decides the minimum).
  static SupportingLine SolveLine(int pp, int v, const ScheduleOptions& schedule);
  // The lines of the default schedule (backward_to_forward 2) for 2 <= pp <= this and
  // every v up to kMaxExactMicroBatches are precomputed (SolveLine's results, written by
  // gen/make_relaxation_lines into src/assign/relaxation_lines.inc), so a fresh planner
  // solves no LP for a bound; other schedules and depths solve them on first use.
  static constexpr int kPrecomputedMaxPp = 16;
  // The stored line of (pp, v) under `schedule`, or nullptr where none is stored.
  static const SupportingLine* PrecomputedLine(int pp, int v, const ScheduleOptions& schedule);

  explicit RelaxationTable(const ScheduleOptions& schedule = {}) : schedule_(schedule) {}

  // A lower bound on the 1F1B makespan of any packing of total document work W into any
  // number of micro-batches on a pp-stage pipeline with per-micro-batch cost c.
  double MinMakespanLowerBound(int pp, double c_ms, double W);

  // A lower bound on the 1F1B makespan of any packing of total document work W into
  // exactly v micro-batches (the same bounds MinMakespanLowerBound takes the least of).
  double CountLowerBound(int pp, int v, double c_ms, double W);

  // The micro-batch count minimising the relaxed makespan at the grid point nearest W/c,
  // and that relaxation's sizes as fractions of W (execution order).
  std::pair<int, std::vector<double>> BestShape(int pp, double c_ms, double W);

  // The relaxation's sizes (fractions of W) for exactly v micro-batches.
  const std::vector<double>& Shape(int pp, int v, double c_ms, double W);

 private:
  using Line = SupportingLine;
  // min over v of the lower bounds on phi_v(r) (c = 1), and the v attaining it.
  std::pair<double, int> RelaxedMin(int pp, double r);
  const Line& LineOf(int pp, int v);
  int ShapeGridIndex(double c_ms, double W) const;

  ScheduleOptions schedule_;
  // Guards the two caches: a planner's threads share one table. Entries are never changed
  // or removed once made, so references to them stay valid after the lock is released.
  std::mutex mutex_;
  std::map<std::pair<int, int>, Line> lines_;
  std::map<std::tuple<int, int, int>, std::vector<double>> shapes_;
};

}  // namespace hydraulis
