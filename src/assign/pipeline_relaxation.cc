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
  lp.dual();
  if (!lp.isProvenOptimal()) throw InternalError("1F1B relaxation LP not solved to optimality");
  RelaxedSchedule out;
  const double* sol = lp.primalColumnSolution();
  out.work_ms.assign(sol, sol + v);
  out.makespan_ms = lp.objectiveValue();
  return out;
}

}  // namespace hydraulis

namespace hydraulis {
namespace {
constexpr double kSolverSlack = 1e-6;  // relative: keeps bounds valid despite LP tolerances
}  // namespace

double RelaxationTable::GridR(int k) const { return std::pow(kGridRatio, k); }

int RelaxationTable::GridIndexAbove(double r) const {
  int k = static_cast<int>(std::ceil(std::log(r) / std::log(kGridRatio)));
  while (GridR(k) < r) ++k;
  while (GridR(k - 1) >= r) --k;
  return k;
}

const RelaxationTable::Point& RelaxationTable::At(int pp, int k) {
  auto it = points_.find({pp, k});
  if (it != points_.end()) return it->second;
  const double r = GridR(k);
  Point best{std::numeric_limits<double>::infinity(), 1};
  // phi_v(r) >= r + v + pp - 1 (every micro-batch pays c = 1 on the last stage, plus
  // fill and drain) and >= pp * (r / v + 1) (the largest micro-batch's critical path), so
  // only the v where both bounds are below the best so far need an LP.
  const int guess = std::max(1, static_cast<int>(std::lround(std::sqrt((pp - 1) * r))));
  auto consider = [&](int v) {
    if (r + v + pp - 1 >= best.min_makespan || pp * (r / v + 1) >= best.min_makespan) return;
    const double m = RelaxPipeline(pp, v, 1.0, r, schedule_).makespan_ms;
    if (m < best.min_makespan) best = {m, v};
  };
  consider(guess);
  for (int v = 1; r + v + pp - 1 < best.min_makespan; ++v) {
    if (v != guess) consider(v);
  }
  return points_.emplace(std::make_pair(pp, k), best).first->second;
}

double RelaxationTable::MinMakespanLowerBound(int pp, double c, double W) {
  if (W <= 0) return 0.0;
  const double trivial = W + pp * c;
  if (pp == 1 || c <= 0) return trivial;
  const double r = W / c;
  const int k = GridIndexAbove(r);
  const double scaled = c * At(pp, k).min_makespan * (r / GridR(k)) * (1.0 - kSolverSlack);
  return std::max(trivial, scaled);
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
  auto it = shapes_.find(key);
  if (it != shapes_.end()) return it->second;
  const double rk = std::pow(kShapeGridRatio, k);
  std::vector<double> frac = RelaxPipeline(pp, v, 1.0, rk, schedule_).work_ms;
  for (double& x : frac) x = std::max(0.0, x) / rk;
  return shapes_.emplace(key, std::move(frac)).first->second;
}

std::pair<int, std::vector<double>> RelaxationTable::BestShape(int pp, double c, double W) {
  const double rk = std::pow(kShapeGridRatio, ShapeGridIndex(c, W));
  const int v = At(pp, GridIndexAbove(rk)).best_v;
  return {v, Shape(pp, v, c, W)};
}

}  // namespace hydraulis
