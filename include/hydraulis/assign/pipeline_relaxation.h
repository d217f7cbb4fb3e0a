// The continuous relaxation of one pipeline's 1F1B schedule: with v micro-batches whose
// document work may be split at will (total W, each micro-batch also paying c), the least
// possible makespan and the micro-batch sizes that reach it. It is a lower bound on every
// real packing with v micro-batches, and its sizes (small at both ends, a flat middle)
// are the targets our packer aims for when pp > 1.
#pragma once

#include <map>
#include <tuple>
#include <utility>
#include <vector>

#include "hydraulis/cost/pipeline_time.h"

namespace hydraulis {

struct RelaxedSchedule {
  double makespan_ms = 0;
  std::vector<double> work_ms;  // per micro-batch, in execution order, summing to W
};

// Solves the linear programme over micro-batch sizes and operation end times (the 1F1B
// order of pipeline_time.h is fixed). pp >= 1, v >= 1, c_ms >= 0, total_work_ms >= 0.
RelaxedSchedule RelaxPipeline(int pp, int v, double c_ms, double total_work_ms,
                              const ScheduleOptions& schedule = {});

// Memoised relaxations on a geometric grid of r = W / c (ratio kGridRatio), so planning
// a step costs table look-ups once the grid points it touches are solved. Results depend
// only on the grid, never on the order of queries, so plans stay deterministic.
class RelaxationTable {
 public:
  static constexpr double kGridRatio = 1.04;
  // Coarser grid of the packing targets (Shape, BestShape).
  static constexpr double kShapeGridRatio = 1.25;

  explicit RelaxationTable(const ScheduleOptions& schedule = {}) : schedule_(schedule) {}

  // A lower bound on the 1F1B makespan of any packing of total document work W into any
  // number of micro-batches on a pp-stage pipeline with per-micro-batch cost c. Uses that
  // min_v phi_v(W)/W never rises with W (scaling the sizes by t >= 1 scales the makespan by
  // at most t), evaluated at the grid point just above W/c.
  double MinMakespanLowerBound(int pp, double c_ms, double W);

  // The micro-batch count minimising the relaxed makespan at the grid point nearest W/c,
  // and that relaxation's sizes as fractions of W (execution order).
  std::pair<int, std::vector<double>> BestShape(int pp, double c_ms, double W);

  // The relaxation's sizes (fractions of W) for exactly v micro-batches.
  const std::vector<double>& Shape(int pp, int v, double c_ms, double W);

 private:
  struct Point {
    double min_makespan = 0;  // min over v of phi_v(r) with c = 1
    int best_v = 1;
  };
  const Point& At(int pp, int k);
  double GridR(int k) const;
  int GridIndexAbove(double r) const;
  int ShapeGridIndex(double c_ms, double W) const;

  ScheduleOptions schedule_;
  std::map<std::pair<int, int>, Point> points_;
  std::map<std::tuple<int, int, int>, std::vector<double>> shapes_;
};

}  // namespace hydraulis
