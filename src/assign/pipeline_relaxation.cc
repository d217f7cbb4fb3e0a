#include "hydraulis/assign/pipeline_relaxation.h"

#include <coin/ClpSimplex.hpp>
#include <coin/CoinPackedMatrix.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "hydraulis/base/error.h"

namespace hydraulis {

RelaxedSchedule RelaxPipeline(int pp, int v, double c, double W, const ScheduleOptions& schedule) {
  if (pp < 1 || v < 1 || c < 0 || W < 0) {
    throw InvalidInput("RelaxPipeline: needs pp >= 1, v >= 1, c >= 0, W >= 0");
  }
  const double f = 1.0 / (1.0 + schedule.backward_to_forward), b = 1.0 - f;
  // Columns: x_j (v), end of forward (pp*v), end of backward (pp*v), makespan z.
  const int nx = v, nops = pp * v;
  auto X = [](int j) { return j; };
  auto F = [&](int s, int j) { return nx + s * v + j; };
  auto B = [&](int s, int j) { return nx + nops + s * v + j; };
  const int Z = nx + 2 * nops, ncols = Z + 1;
  std::vector<int> rows, cols;
  std::vector<double> vals, row_lb, row_ub;
  int row = 0;
  // end(op) - end(prev) - share * x_j >= share * c
  auto after = [&](int op_col, int prev_col, int j, double share) {
    rows.push_back(row), cols.push_back(op_col), vals.push_back(1.0);
    if (prev_col >= 0) rows.push_back(row), cols.push_back(prev_col), vals.push_back(-1.0);
    rows.push_back(row), cols.push_back(X(j)), vals.push_back(-share);
    row_lb.push_back(share * c), row_ub.push_back(COIN_DBL_MAX);
    ++row;
  };
  for (int s = 0; s < pp; ++s) {
    // The stage's fixed 1F1B order, as in OneFOneBMs.
    const int warmup = std::min(pp - 1 - s, v);
    std::vector<int> order;
    int nf = 0, nb = 0;
    for (; nf < warmup; ++nf) order.push_back(nf + 1);
    while (nf < v) order.push_back(++nf), order.push_back(-(++nb));
    while (nb < v) order.push_back(-(++nb));
    int prev = -1;
    for (int op : order) {
      const int j = std::abs(op) - 1;
      const int col = op > 0 ? F(s, j) : B(s, j);
      const double share = op > 0 ? f : b;
      after(col, prev, j, share);
      if (op > 0 && s > 0) after(col, F(s - 1, j), j, share);
      if (op < 0) after(col, s == pp - 1 ? F(s, j) : B(s + 1, j), j, share);
      prev = col;
    }
    // z >= end of the stage's last operation.
    rows.push_back(row), cols.push_back(Z), vals.push_back(1.0);
    rows.push_back(row), cols.push_back(prev), vals.push_back(-1.0);
    row_lb.push_back(0.0), row_ub.push_back(COIN_DBL_MAX);
    ++row;
  }
  for (int j = 0; j < v; ++j) rows.push_back(row), cols.push_back(X(j)), vals.push_back(1.0);
  row_lb.push_back(W), row_ub.push_back(W);
  ++row;
  std::vector<double> col_lb(ncols, 0.0), col_ub(ncols, COIN_DBL_MAX), obj(ncols, 0.0);
  obj[Z] = 1.0;
  CoinPackedMatrix matrix(true, rows.data(), cols.data(), vals.data(),
                          static_cast<CoinBigIndex>(vals.size()));
  ClpSimplex lp;
  lp.setLogLevel(0);
  lp.loadProblem(matrix, col_lb.data(), col_ub.data(), obj.data(), row_lb.data(), row_ub.data());
  lp.initialSolve();
  if (!lp.isProvenOptimal()) throw InternalError("1F1B relaxation LP not solved to optimality");
  RelaxedSchedule out;
  const double* sol = lp.primalColumnSolution();
  out.work_ms.assign(sol, sol + v);
  out.makespan_ms = lp.objectiveValue();
  out.work_price = lp.getRowPrice()[row - 1];
  return out;
}

}  // namespace hydraulis

namespace hydraulis {
namespace {
constexpr double kSolverSlack = 1e-6;  // relative: keeps bounds valid despite LP tolerances

// kPrecomputedLines[pp - 2][v - 1]: SolveLine(pp, v, {}) (see the header).
constexpr RelaxationTable::SupportingLine
    kPrecomputedLines[RelaxationTable::kPrecomputedMaxPp - 1]
                     [RelaxationTable::kMaxExactMicroBatches] = {
#include "relaxation_lines.inc"
};
}  // namespace

RelaxationTable::SupportingLine RelaxationTable::SolveLine(int pp, int v,
                                                           const ScheduleOptions& schedule) {
  const double r0 = 2.0 * v * v / std::max(1, pp - 1);
  const RelaxedSchedule lp = RelaxPipeline(pp, v, 1.0, r0, schedule);
  return {r0, lp.makespan_ms, lp.work_price};
}

const RelaxationTable::SupportingLine* RelaxationTable::PrecomputedLine(
    int pp, int v, const ScheduleOptions& schedule) {
  if (schedule.backward_to_forward != 2.0 || pp < 2 || pp > kPrecomputedMaxPp || v < 1 ||
      v > kMaxExactMicroBatches) {
    return nullptr;
  }
  return &kPrecomputedLines[pp - 2][v - 1];
}

const RelaxationTable::Line& RelaxationTable::LineOf(int pp, int v) {
  const std::lock_guard lock(mutex_);
  auto it = lines_.find({pp, v});
  if (it != lines_.end()) return it->second;
  const SupportingLine* stored = PrecomputedLine(pp, v, schedule_);
  return lines_.emplace(std::make_pair(pp, v), stored ? *stored : SolveLine(pp, v, schedule_))
      .first->second;
}

namespace {

// phi_v(r) >= r + v + pp - 1 (each micro-batch pays c = 1 on the last stage, plus fill and
// drain), and >= pp * (r / v + 1) (the largest micro-batch's critical path).
double CheapPhiBound(int pp, int v, double r) { return std::max(r + v + pp - 1, pp * (r / v + 1)); }

// phi_v(r) from its supporting line, shaved for the LP's tolerances.
double LinePhiBound(const RelaxationTable::SupportingLine& line, double r) {
  return (line.at_r0 + line.price * (r - line.r0)) * (1.0 - kSolverSlack);
}

}  // namespace

std::pair<double, int> RelaxationTable::RelaxedMin(int pp, double r) {
  // Every count above the cap: phi_v(r) >= r + v + pp - 1 (each micro-batch pays c = 1 on
  // the last stage, plus fill and drain).
  double best = r + kMaxExactMicroBatches + pp;
  int best_v = kMaxExactMicroBatches + 1;
  for (int v = 1; v <= kMaxExactMicroBatches; ++v) {
    // Cheap bounds first; only counts they cannot exclude need a line.
    const double cheap = CheapPhiBound(pp, v, r);
    if (cheap >= best) {
      if (r + v + pp - 1 >= best) break;  // and so for every larger v
      continue;
    }
    const double bound = std::max(cheap, LinePhiBound(LineOf(pp, v), r));
    if (bound < best) {
      best = bound;
      best_v = v;
    }
  }
  return {best, best_v};
}

double RelaxationTable::CountLowerBound(int pp, int v, double c, double W) {
  const double trivial = W + (v + pp - 1) * c;
  if (pp == 1 || c <= 0 || W <= 0) return trivial;
  const double r = W / c;
  double bound = CheapPhiBound(pp, v, r);
  if (v <= kMaxExactMicroBatches) bound = std::max(bound, LinePhiBound(LineOf(pp, v), r));
  return std::max(trivial, c * bound);
}

double RelaxationTable::MinMakespanLowerBound(int pp, double c, double W) {
  if (W <= 0) return 0.0;
  const double trivial = W + pp * c;
  if (pp == 1 || c <= 0) return trivial;
  return std::max(trivial, c * RelaxedMin(pp, W / c).first);
}

// Packing targets need no precision: shapes live on a coarser grid than the bounds, so the
// local search's many re-packs with slightly different work reuse a few LPs.
int RelaxationTable::ShapeGridIndex(double c, double W) const {
  const double r = std::max(W / std::max(c, 1e-12), 1e-9);
  return static_cast<int>(std::lround(std::log(r) / std::log(kShapeGridRatio)));
}

const std::vector<double>& RelaxationTable::Shape(int pp, int v, double c, double W) {
  const int k = ShapeGridIndex(c, W);
  auto key = std::make_tuple(pp, v, k);
  const std::lock_guard lock(mutex_);
  auto it = shapes_.find(key);
  if (it != shapes_.end()) return it->second;
  const double rk = std::pow(kShapeGridRatio, k);
  std::vector<double> frac = RelaxPipeline(pp, v, 1.0, rk, schedule_).work_ms;
  for (double& x : frac) x = std::max(0.0, x) / rk;
  return shapes_.emplace(key, std::move(frac)).first->second;
}

std::pair<int, std::vector<double>> RelaxationTable::BestShape(int pp, double c, double W) {
  const double rk = std::pow(kShapeGridRatio, ShapeGridIndex(c, W));
  const int v = RelaxedMin(pp, rk).second;
  return {v, Shape(pp, v, c, W)};
}

}  // namespace hydraulis
