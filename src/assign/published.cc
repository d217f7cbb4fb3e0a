// The published Hydraulis planner (method.md 2.3), kept as published for comparison with
// ours: a randomised greedy dispatch, then per pipeline a min-max MILP solved by CBC for
// each micro-batch count.
#include <coin/CbcHeuristic.hpp>
#include <coin/CbcHeuristicFPump.hpp>
#include <coin/CbcHeuristicLocal.hpp>
#include <coin/CbcModel.hpp>
#include <coin/CglClique.hpp>
#include <coin/CglFlowCover.hpp>
#include <coin/CglGomory.hpp>
#include <coin/CglKnapsackCover.hpp>
#include <coin/CglMixedIntegerRounding2.hpp>
#include <coin/CglProbing.hpp>
#include <coin/CoinPackedMatrix.hpp>
#include <coin/OsiClpSolverInterface.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "hydraulis/assign/pack.h"
#include "hydraulis/assign/published.h"
#include "hydraulis/base/error.h"
#include "hydraulis/base/rng.h"
#include "hydraulis/base/tolerance.h"

namespace hydraulis {
namespace {

void Validate(const AssignProblem& problem, const PublishedOptions& options) {
  if (options.shuffles < 1) {
    throw InvalidInput("published planner: shuffles must be >= 1, got " +
                       std::to_string(options.shuffles));
  }
  if (options.micro_batch_counts < 1) {
    throw InvalidInput("published planner: micro_batch_counts must be >= 1, got " +
                       std::to_string(options.micro_batch_counts));
  }
  if (!(options.milp_time_limit_s > 0) || !std::isfinite(options.milp_time_limit_s)) {
    throw InvalidInput("published planner: milp_time_limit_s must be a positive number, got " +
                       std::to_string(options.milp_time_limit_s));
  }
  if (problem.pipelines.empty()) throw InvalidInput("published planner: strategy has no pipelines");
  for (const auto& p : problem.pipelines) {
    if (p.capacity_tokens < 1 || p.scheme.pp < 1) {
      throw InvalidInput("published planner: pipeline " + SchemeName(p.scheme) +
                         " needs capacity_tokens >= 1 and pp >= 1");
    }
  }
  for (std::size_t d = 0; d < problem.lengths.size(); ++d) {
    if (problem.lengths[d] < 1) {
      throw InvalidInput("published planner: document " + std::to_string(d) + " has length " +
                         std::to_string(problem.lengths[d]) + " (< 1)");
    }
  }
}

std::int64_t Len(const AssignProblem& problem, int d) {
  return problem.lengths[static_cast<std::size_t>(d)];
}

// Rng seeds through SplitMix64, so seeds that differ by its increment give shifted copies
// of one stream; hashing (seed, shuffle) keeps the shuffles' streams unrelated.
std::uint64_t ShuffleSeed(std::uint64_t seed, int shuffle) {
  std::uint64_t z = seed ^ (0xd1b54a32d192ed03ULL * (static_cast<std::uint64_t>(shuffle) + 1));
  z = (z ^ (z >> 33)) * 0xff51afd7ed558ccdULL;
  z = (z ^ (z >> 33)) * 0xc4ceb9fe1a85ec53ULL;
  return z ^ (z >> 33);
}

// Stage 1's per-pipeline state and its published estimate:
// sum of document costs + (pp - 1) * largest document cost.
struct Load {
  double work_ms = 0;
  double max_work_ms = 0;
};

double DispatchEstimateMs(const PipelineModel& pipe, const Load& load) {
  return load.work_ms + (pipe.scheme.pp - 1) * load.max_work_ms;
}

struct Dispatch {
  std::vector<std::vector<int>> docs;  // per pipeline, in dispatch order
  double max_estimate_ms = 0;
};

// Greedy in `order`: each document to the eligible pipeline minimising the resulting
// maximum estimate; ties to the pipeline whose own estimate ends lower (so idle pipelines
// share the work instead of the lowest index taking everything up to the maximum), then
// to the lower index.
Dispatch GreedyDispatch(const AssignProblem& problem, std::span<const int> order) {
  const std::size_t num_pipes = problem.pipelines.size();
  Dispatch out;
  out.docs.assign(num_pipes, {});
  std::vector<Load> load(num_pipes);
  std::vector<double> est(num_pipes, 0.0);
  for (int d : order) {
    // The largest estimate and the runner-up give every pipeline's "max over the others".
    std::size_t top = 0;
    double second = 0;
    for (std::size_t p = 1; p < num_pipes; ++p) {
      if (est[p] > est[top]) {
        second = est[top];
        top = p;
      } else {
        second = std::max(second, est[p]);
      }
    }
    std::size_t best = num_pipes;
    double best_max = kInf, best_own = kInf;
    Load best_load;
    for (std::size_t p = 0; p < num_pipes; ++p) {
      const PipelineModel& pipe = problem.pipelines[p];
      if (Len(problem, d) > pipe.capacity_tokens) continue;
      const double w = pipe.time.DocumentMs(Len(problem, d));
      const Load after{load[p].work_ms + w, std::max(load[p].max_work_ms, w)};
      const double own = DispatchEstimateMs(pipe, after);
      const double others = num_pipes == 1 ? 0.0 : (p == top ? second : est[top]);
      const double resulting = std::max(own, others);
      if (resulting < best_max || (resulting == best_max && own < best_own)) {
        best = p;
        best_max = resulting;
        best_own = own;
        best_load = after;
      }
    }
    if (best == num_pipes) {
      throw Infeasible("published planner: document " + std::to_string(d) + " of " +
                       std::to_string(Len(problem, d)) + " tokens fits no pipeline");
    }
    out.docs[best].push_back(d);
    load[best] = best_load;
    est[best] = best_own;
  }
  out.max_estimate_ms = *std::max_element(est.begin(), est.end());
  return out;
}

// Stage 1 over `shuffles` seeded shuffles; keeps the least maximum (ties: earlier).
std::vector<std::vector<int>> DispatchAll(const AssignProblem& problem, int shuffles,
                                          std::uint64_t seed) {
  std::int64_t narrowest = std::numeric_limits<std::int64_t>::max();
  for (const auto& p : problem.pipelines) narrowest = std::min(narrowest, p.capacity_tokens);
  std::vector<int> restricted, rest;
  for (int d = 0; d < static_cast<int>(problem.lengths.size()); ++d) {
    (Len(problem, d) > narrowest ? restricted : rest).push_back(d);
  }
  std::stable_sort(restricted.begin(), restricted.end(),
                   [&](int x, int y) { return Len(problem, x) > Len(problem, y); });
  std::vector<int> order(restricted);
  order.insert(order.end(), rest.begin(), rest.end());
  const std::span<int> shuffled = std::span<int>(order).subspan(restricted.size());
  Dispatch best;
  for (int s = 0; s < shuffles; ++s) {
    // Every shuffle starts from the same base order, so shuffle s depends on (seed, s) only.
    std::copy(rest.begin(), rest.end(), shuffled.begin());
    Rng rng(ShuffleSeed(seed, s));
    rng.Shuffle(shuffled);
    Dispatch candidate = GreedyDispatch(problem, order);
    if (s == 0 || candidate.max_estimate_ms < best.max_estimate_ms) best = std::move(candidate);
  }
  return std::move(best.docs);
}

// One pipeline's packing and its published objective (max_j work_j + c) * (pp - 1 + v).
struct Packed {
  MicroBatches micro_batches;
  double objective_ms = 0;
  int time_limited_solves = 0;  // MILPs CBC left unproven at its time limit
};

double PublishedObjectiveMs(const AssignProblem& problem, const PipelineModel& pipe,
                            const MicroBatches& micro_batches) {
  if (micro_batches.empty()) return 0.0;
  double max_work = 0;
  for (const auto& mb : micro_batches) {
    double work = 0;
    for (int d : mb) work += pipe.time.DocumentMs(Len(problem, d));
    max_work = std::max(max_work, work);
  }
  const double slots = pipe.scheme.pp - 1 + static_cast<double>(micro_batches.size());
  return (max_work + pipe.time.c_ms) * slots;
}

// The min-max MILP of SolveMinMax in CBC's column form, with each x column's document and
// micro-batch.
struct MinMaxMilp {
  std::vector<int> rows, cols, col_doc, col_mb;
  std::vector<double> vals, col_lb, col_ub, obj, row_lb, row_ub;
  int num_x = 0;       // the x columns; M is the column after them
  double scale = 1.0;  // costs are divided by this (the largest document's)
};

// The x_ij columns, j <= min(i, v - 1): document i counted once, its tokens on micro-batch
// j's capacity row, its scaled cost on j's cost row, and 1 on j's non-empty row.
void AddAssignmentColumns(const AssignProblem& problem, std::span<const int> docs, int v,
                          const std::vector<double>& work, MinMaxMilp& milp) {
  const int n = static_cast<int>(docs.size());
  const int cap_row = n, work_row = n + v, nonempty_row = n + 2 * v;
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j <= std::min(i, v - 1); ++j) {
      const int col = static_cast<int>(milp.col_doc.size());
      const auto add = [&](int row, double value) {
        milp.rows.push_back(row), milp.cols.push_back(col), milp.vals.push_back(value);
      };
      add(i, 1.0);
      add(cap_row + j, static_cast<double>(Len(problem, docs[static_cast<std::size_t>(i)])));
      add(work_row + j, work[static_cast<std::size_t>(i)] / milp.scale);
      add(nonempty_row + j, 1.0);
      milp.col_doc.push_back(i), milp.col_mb.push_back(j);
    }
  }
}

// Rows: n "one micro-batch" (= 1), then per micro-batch v capacity rows (<= capacity), v
// cost rows (sum - M <= 0), v non-empty rows (>= 1).
void SetRowBounds(int n, int v, std::int64_t capacity_tokens, MinMaxMilp& milp) {
  const int cap_row = n, work_row = n + v, nonempty_row = n + 2 * v;
  const int num_rows = n + 3 * v;
  milp.row_lb.resize(static_cast<std::size_t>(num_rows));
  milp.row_ub.resize(static_cast<std::size_t>(num_rows));
  for (int r = 0; r < num_rows; ++r) {
    const auto k = static_cast<std::size_t>(r);
    if (r < cap_row) {
      milp.row_lb[k] = milp.row_ub[k] = 1.0;
    } else if (r < work_row) {
      milp.row_lb[k] = -COIN_DBL_MAX, milp.row_ub[k] = static_cast<double>(capacity_tokens);
    } else if (r < nonempty_row) {
      milp.row_lb[k] = -COIN_DBL_MAX, milp.row_ub[k] = 0.0;
    } else {
      milp.row_lb[k] = 1.0, milp.row_ub[k] = COIN_DBL_MAX;
    }
  }
}

MinMaxMilp FormulateMinMax(const AssignProblem& problem, const PipelineModel& pipe,
                           std::span<const int> docs, int v) {
  const int n = static_cast<int>(docs.size());
  std::vector<double> work(docs.size());
  double total = 0, largest = 0;
  for (std::size_t i = 0; i < docs.size(); ++i) {
    work[i] = pipe.time.DocumentMs(Len(problem, docs[i]));
    total += work[i];
    largest = std::max(largest, work[i]);
  }
  MinMaxMilp milp;
  milp.scale = largest > 0 ? largest : 1.0;
  AddAssignmentColumns(problem, docs, v, work, milp);
  milp.num_x = static_cast<int>(milp.col_doc.size());
  const int m_col = milp.num_x, work_row = n + v;
  for (int j = 0; j < v; ++j) {
    milp.rows.push_back(work_row + j), milp.cols.push_back(m_col), milp.vals.push_back(-1);
  }
  const auto columns = static_cast<std::size_t>(milp.num_x) + 1;
  milp.col_lb.assign(columns, 0.0);
  milp.col_ub.assign(columns, 1.0);
  milp.obj.assign(columns, 0.0);
  // M is at least the largest cost and the average: a valid bound that tightens the LP.
  milp.col_lb[static_cast<std::size_t>(m_col)] = std::max(largest, total / v) / milp.scale;
  milp.col_ub[static_cast<std::size_t>(m_col)] = COIN_DBL_MAX;
  milp.obj[static_cast<std::size_t>(m_col)] = 1.0;
  SetRowBounds(n, v, pipe.capacity_tokens, milp);
  return milp;
}

// The cuts and heuristics the cbc command line (what the published code calls) runs by
// default; a bare CbcModel runs none and is far weaker within the time limit. They are
// held here for as long as the model searches.
class CommandLineSearch {
 public:
  explicit CommandLineSearch(CbcModel& model) {
    probing_.setUsingObjective(1);
    probing_.setMaxPass(1);
    probing_.setMaxPassRoot(5);
    probing_.setMaxProbe(10);
    probing_.setMaxProbeRoot(1000);
    probing_.setMaxLook(50);
    probing_.setMaxLookRoot(500);
    probing_.setMaxElements(200);
    probing_.setRowCuts(3);
    gomory_.setLimit(300);
    clique_.setStarCliqueReport(false);
    clique_.setRowCliqueReport(false);
    model.addCutGenerator(&probing_, -1, "Probing");
    model.addCutGenerator(&gomory_, -1, "Gomory");
    model.addCutGenerator(&knapsack_, -1, "Knapsack");
    model.addCutGenerator(&clique_, -1, "Clique");
    model.addCutGenerator(&mir_, -1, "MixedIntegerRounding2");
    model.addCutGenerator(&flow_, -1, "FlowCover");
    rounding_.emplace(model);
    local_.emplace(model);
    pump_.emplace(model);
    model.addHeuristic(&*rounding_);
    model.addHeuristic(&*local_);
    model.addHeuristic(&*pump_);
  }

 private:
  CglProbing probing_;
  CglGomory gomory_;
  CglKnapsackCover knapsack_;
  CglClique clique_;
  CglMixedIntegerRounding2 mir_;
  CglFlowCover flow_;
  std::optional<CbcRounding> rounding_;
  std::optional<CbcHeuristicLocal> local_;
  std::optional<CbcHeuristicFPump> pump_;
};

// Reads CBC's solution `x` back as micro-batches: rounded and re-checked exactly, so CBC's
// tolerances cannot leak into the plan. False when it is not a valid packing.
bool ReadPacking(const AssignProblem& problem, const PipelineModel& pipe, std::span<const int> docs,
                 int v, const MinMaxMilp& milp, const double* x, MicroBatches& out) {
  out.assign(static_cast<std::size_t>(v), {});
  std::vector<int> placed(docs.size(), 0);
  for (int k = 0; k < milp.num_x; ++k) {
    if (x[k] <= 0.5) continue;
    const auto i = static_cast<std::size_t>(milp.col_doc[static_cast<std::size_t>(k)]);
    out[static_cast<std::size_t>(milp.col_mb[static_cast<std::size_t>(k)])].push_back(docs[i]);
    ++placed[i];
  }
  if (std::any_of(placed.begin(), placed.end(), [](int c) { return c != 1; })) return false;
  for (auto& mb : out) {
    if (mb.empty()) return false;
    std::int64_t tokens = 0;
    for (int d : mb) tokens += Len(problem, d);
    if (tokens > pipe.capacity_tokens) return false;
    std::sort(mb.begin(), mb.end());
  }
  return true;
}

// The min-max MILP for exactly `v` micro-batches of `docs` (sorted longest first):
// binary x_ij (document i in micro-batch j), continuous M; every document in one
// micro-batch, every micro-batch non-empty and within the capacity, its summed cost <= M;
// minimise M. Document i may only use micro-batches j <= i: labelling micro-batches by
// their first member keeps one of the v! equivalent labellings, and the longest documents
// are the ones pinned. Costs are divided by the largest so CBC's absolute tolerances are
// relative ones. `max_work_ms` bounds M from above (kInf: none). Fills `out` with CBC's
// best solution in the time limit, or returns false when it found none; `*time_limited`
// says whether CBC stopped at the time limit instead of finishing its search.
bool SolveMinMax(const AssignProblem& problem, const PipelineModel& pipe, std::span<const int> docs,
                 int v, double max_work_ms, double time_limit_s, MicroBatches& out,
                 bool* time_limited) {
  const MinMaxMilp milp = FormulateMinMax(problem, pipe, docs, v);
  CoinPackedMatrix matrix(true, milp.rows.data(), milp.cols.data(), milp.vals.data(),
                          static_cast<CoinBigIndex>(milp.vals.size()));
  OsiClpSolverInterface lp;
  lp.messageHandler()->setLogLevel(0);
  lp.loadProblem(matrix, milp.col_lb.data(), milp.col_ub.data(), milp.obj.data(),
                 milp.row_lb.data(), milp.row_ub.data());
  for (int k = 0; k < milp.num_x; ++k) lp.setInteger(k);

  CbcModel model(lp);
  model.setLogLevel(0);
  model.solver()->messageHandler()->setLogLevel(0);
  model.setUseElapsedTime(true);
  model.setMaximumSeconds(time_limit_s);
  if (max_work_ms < kInf) model.setCutoff(max_work_ms / milp.scale);
  const CommandLineSearch search(model);
  model.branchAndBound();
  *time_limited = model.isSecondsLimitReached();
  const double* x = model.bestSolution();
  if (x == nullptr) return false;
  return ReadPacking(problem, pipe, docs, v, milp, x, out);
}

// Stage 2 for one pipeline: each v from ceil(tokens/capacity) over `micro_batch_counts`
// values, keeping the least published objective (ties: the smaller v).
Packed PackPublished(const AssignProblem& problem, const PipelineModel& pipe, std::vector<int> docs,
                     const PublishedOptions& options) {
  Packed best;
  if (docs.empty()) return best;
  std::stable_sort(docs.begin(), docs.end(), [&](int x, int y) {
    return Len(problem, x) > Len(problem, y) || (Len(problem, x) == Len(problem, y) && x < y);
  });
  std::int64_t tokens = 0;
  double total = 0, largest = 0;
  for (int d : docs) {
    tokens += Len(problem, d);
    const double w = pipe.time.DocumentMs(Len(problem, d));
    total += w;
    largest = std::max(largest, w);
  }
  const int n = static_cast<int>(docs.size());
  const int pp = pipe.scheme.pp;
  const double c = pipe.time.c_ms;
  const std::int64_t v_first =
      std::max<std::int64_t>(1, (tokens + pipe.capacity_tokens - 1) / pipe.capacity_tokens);
  const std::int64_t v_last = std::min<std::int64_t>(n, v_first + options.micro_batch_counts - 1);
  double best_ms = kInf;
  MicroBatches candidate;
  for (int v = static_cast<int>(v_first); v <= v_last; ++v) {
    const double slots = pp - 1 + v;
    // Skipping a v whose bound cannot beat the kept objective changes no result (ties keep
    // the smaller v) and saves its CBC time limit.
    if ((std::max(largest, total / v) + c) * slots >= best_ms) continue;
    const double max_work_ms = best_ms < kInf ? (best_ms - ToleranceMs(best_ms)) / slots - c : kInf;
    bool time_limited = false;
    const bool found = SolveMinMax(problem, pipe, docs, v, max_work_ms, options.milp_time_limit_s,
                                   candidate, &time_limited);
    best.time_limited_solves += time_limited ? 1 : 0;
    if (!found) continue;
    const double ms = PublishedObjectiveMs(problem, pipe, candidate);
    // A later v replaces the kept one only when better beyond the tolerance (ties: smaller v).
    if (DefinitelyLess(ms, best_ms)) {
      best_ms = ms;
      best.micro_batches = std::move(candidate);
    }
  }
  if (best.micro_batches.empty()) {
    // Documents are never dropped: CBC found nothing within its limits, so fall back to
    // the fewest micro-batches first/best-fit decreasing finds.
    best.micro_batches = MinCountPack(problem.lengths, docs, pipe.capacity_tokens);
    for (auto& mb : best.micro_batches) std::sort(mb.begin(), mb.end());
  }
  best.objective_ms = PublishedObjectiveMs(problem, pipe, best.micro_batches);
  return best;
}

}  // namespace

Assignment AssignPublished(const AssignProblem& problem, const PublishedOptions& options,
                           std::uint64_t seed, double* published_estimate_ms) {
  Validate(problem, options);
  std::vector<std::vector<int>> docs = DispatchAll(problem, options.shuffles, seed);
  Assignment a;
  a.pipelines.resize(problem.pipelines.size());
  double estimate_ms = 0;
  for (std::size_t p = 0; p < problem.pipelines.size(); ++p) {
    Packed packed = PackPublished(problem, problem.pipelines[p], std::move(docs[p]), options);
    estimate_ms = std::max(estimate_ms, packed.objective_ms);
    a.time_limited_solves += packed.time_limited_solves;
    a.pipelines[p] = std::move(packed.micro_batches);
  }
  Evaluate(problem, a);
  if (published_estimate_ms != nullptr) *published_estimate_ms = estimate_ms;
  return a;
}

}  // namespace hydraulis
