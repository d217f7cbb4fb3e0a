// The dynamic programme of the data-distribution-aware strategy proposal (method.md 2.4;
// recurrences, cost function and complexity in docs/propose.md).
//
// t[n][j] is the least makespan for the documents of the first j non-empty histogram bins
// on at most n GPUs, where the bins are split into contiguous intervals and each interval
// goes to d replicas of one scheme that can hold its longest document:
//
//   t[n][0] = 0,  t[0][j] = +inf (j >= 1),
//   t[n][j] = min( t[n - G][j],
//                  min over scheme k holding bin j, l in 1..j, d >= 1 with d g_k <= n of
//                      max( t[n - d g_k][j - l], GroupMs(k, bins j-l+1..j, d) ) )
//
// with G the gcd of the schemes' GPU counts (t only changes at multiples of G); on large
// clusters a level stands for a multiple U of G (DpOptions::max_levels, max_table_work).
#pragma once

#include <cstdint>
#include <vector>

#include "hydraulis/cost/cp_layout.h"
#include "hydraulis/cost/time_model.h"
#include "hydraulis/propose/histogram.h"
#include "hydraulis/spec/scheme.h"

namespace hydraulis {

// One scheme the proposal may use, with its capacity under the run's optimizer layout.
struct DpScheme {
  Scheme scheme;
  TimeModel time;  // additive; for cp > 1 the balanced share (ShardCost::Balanced)
  std::int64_t capacity_tokens = 0;  // >= 1
  ShardCost shard;                   // cp > 1: how a long document is sharded
};

// The documents of an interval of bins; counts are fractional once the histogram is
// scaled to one global batch (DpOptions::document_scale).
struct IntervalLoad {
  double documents = 0;
  double tokens = 0;
  double squared_tokens = 0;
  std::int64_t longest = 0;  // the interval's longest document (tokens)
};

// Estimated time (ms) of each of `replicas` (>= 1) pipelines of `scheme` that share the
// documents of `load` evenly:
//   max(work / d, T(longest)) + c * ceil(tokens / (d * capacity)) + (pp - 1) (T(longest) + c)
// with work = a * squared_tokens + b * tokens and T(s) = a s^2 + b s: the stage work of
// its share (but never less than its longest document, which cannot be split), one c per
// micro-batch of at most `capacity` tokens, and the 1F1B warm-up and cool-down that the
// longest micro-batch crosses on the other pp - 1 stages. Non-increasing in `replicas` and
// non-decreasing as the interval grows, which the DP's searches rely on.
double GroupMs(const DpScheme& scheme, const IntervalLoad& load, int replicas);

// The fewest replicas from which GroupMs(scheme, load, d) no longer falls with d (the
// share is the longest document and one micro-batch each), up to rounding: callers that
// rely on it compare GroupMs there with a larger d. INT_MAX when it never stops falling.
int FlatGroupReplicas(const DpScheme& scheme, const IntervalLoad& load);

struct DpOptions {
  // Multiplies every bin's documents, tokens and squares (> 0): 1 plans for the whole
  // dataset at once; tokens_per_batch / dataset tokens plans for one global batch.
  double document_scale = 1.0;
  // SolveForLongest: the bin that holds the longest document gets at least one whole
  // document (a batch whose longest document lies in bin j does contain one), or the
  // number asked for, keeping the bin's mean length. Matters only when document_scale
  // makes the bin's count smaller than that.
  bool longest_present = true;
  // SolveForLongest: GPUs the optimum leaves idle (when extra GPUs cannot lower the
  // makespan, e.g. it is one long document's time) go one replica at a time to the slowest
  // group that one more replica makes faster, or, when none does, to the group of the
  // shortest documents that fits. Never raises the makespan (GroupMs is non-increasing in
  // replicas); afterwards fewer GPUs are idle than any group's scheme needs.
  bool fill_idle_gpus = true;
  // Most GPU levels the table keeps (>= 1). When the cluster has more multiples of G than
  // the cap, a level stands for U = G * ceil(gpus / G / cap) GPUs and d
  // replicas of a g-GPU scheme are charged ceil(d g / U) levels (the GPUs this rounds up
  // return when idle GPUs are filled), so the table's size and time stop growing with the
  // cluster; below that U = G and the table is exact.
  int max_levels = 1024;
  // The table's work grows as levels * bins^2 (every bin tries every interval ending at
  // it): the level cap is lowered to max(1, max_table_work / bins^2) where that is below
  // max_levels (>= 1). The default keeps 1,024 levels for 256 bins (32K context at
  // 128-token resolution) and about 150 for the 670 bins of 128K.
  std::int64_t max_table_work = std::int64_t{1} << 26;
  // Threads that fill the table (>= 0; 0: one per hardware thread). The table, hence the
  // proposal, is the same for every count.
  int threads = 0;
};

// `replicas` pipelines of schemes[scheme] sharing the documents of bins
// first_bin..last_bin (indices into LengthHistogram::bins, inclusive).
struct DpGroup {
  int scheme = 0;
  int replicas = 0;
  int first_bin = 0;
  int last_bin = 0;
  double ms = 0;  // GroupMs of the group (after filling idle GPUs)
};

struct DpSolution {
  // The DP objective: least makespan for the bins up to the requested one (before idle
  // GPUs are filled, which never raises it). +inf when no scheme holds that bin.
  double makespan_ms = 0;
  std::vector<DpGroup> groups;  // ascending bins, covering bins 0..the requested one
  int gpus = 0;                 // GPUs the groups use, <= the cluster's
};

// Solves the table once (O(L * M^2 * K * log(N/G)) time in the worst case, O(L * M)
// memory; L <= N/G + 1 levels, M bins, K schemes, N GPUs) and answers per-bin questions
// from it.
class ProposalDp {
 public:
  // Preconditions (InvalidInput otherwise): gpus >= 1; at least one scheme, each with
  // 1 <= Gpus() <= gpus and capacity >= 1; document_scale > 0. The histogram may be empty.
  ProposalDp(std::vector<DpScheme> schemes, const LengthHistogram& histogram, int gpus,
             const DpOptions& options = {});

  // t[gpus][bins]: the least makespan (ms) for the first `bins` non-empty bins on at most
  // `gpus` GPUs (0 <= gpus <= the cluster's, 0 <= bins <= bin_count()); +inf if infeasible.
  double Makespan(int gpus, int bins) const;

  // The best groups on all GPUs when the longest document lies in bin `bin`
  // (0 <= bin < bin_count()): the documents of bins 0..bin, with DpOptions applied and,
  // under DpOptions::longest_present, at least `present` (>= 1) whole documents in bin
  // `bin` (2: a batch whose two longest documents both lie there).
  DpSolution SolveForLongest(int bin, int present = 1) const;

  // The (scaled) documents of bins first..last, inclusive, from the prefix sums.
  IntervalLoad Load(int first_bin, int last_bin) const;

  const std::vector<DpScheme>& schemes() const { return schemes_; }
  int bin_count() const { return bins_; }
  int gpus() const { return gpus_; }
  // U: GPUs per table level (G, the gcd of the schemes' GPU counts, unless
  // DpOptions::max_levels coarsens it).
  int gpu_step() const { return step_; }
  // Group-time evaluations the table took (work done, for benchmarks).
  std::int64_t evaluations() const { return evaluations_; }

 private:
  struct Choice {
    int scheme = -1;  // -1: the value comes from t[n - G][j] (fewer GPUs)
    int length = 0;   // l, in bins
    int replicas = 0;
  };
  struct Extra {  // added to an interval's load (the top bin's missing document)
    double documents = 0, tokens = 0, squared_tokens = 0;
  };
  struct Best {
    double value;
    Choice choice;
  };

  // Levels that d replicas of scheme k are charged: ceil(d * its GPUs / U).
  int Units(int k, int d) const {
    const std::int64_t g = std::int64_t{d} * gpus_per_replica_[static_cast<std::size_t>(k)];
    return static_cast<int>((g + step_ - 1) / step_);
  }
  double& T(int level, int bins) { return table_[static_cast<std::size_t>(level) * row_ + bins]; }
  double T(int level, int bins) const {
    return table_[static_cast<std::size_t>(level) * row_ + bins];
  }
  // GroupMs of scheme k over bins [lo, hi) with d replicas, plus `extra`.
  double Group(int k, int lo, int hi, int d, const Extra& extra) const;
  // Best option for bins [0, j) at `level` that ends in a group of bins [j - l, j),
  // replacing *best only when it wins (ties as in docs/propose.md); counts group-time
  // evaluations into *evaluations.
  void BestOption(int level, int j, const Extra& extra, Best* best,
                  std::int64_t* evaluations) const;
  // Fills the table, level by level (DpOptions::threads).
  void FillTable();
  // Tables with fewer cells are filled by one thread.
  static constexpr std::int64_t kParallelCells = 1 << 14;
  // The (scaled) documents of bins [lo, hi) plus `extra`, from the prefix sums.
  IntervalLoad LoadOf(int lo, int hi, const Extra& extra) const;
  // FlatGroupReplicas of scheme k over bins [lo, hi) plus `extra`.
  int FlatReplicas(int k, int lo, int hi, const Extra& extra) const;
  // What DpOptions::longest_present adds to an interval whose top bin is `bin` so that it
  // holds `documents` whole documents.
  Extra TopExtra(int bin, int documents) const;
  // DpOptions::fill_idle_gpus on a traced solution; groups.back() is the top group, whose
  // load carries `top_extra`.
  void Fill(std::vector<DpGroup>& groups, int& gpus, const Extra& top_extra) const;

  std::vector<DpScheme> schemes_;
  DpOptions options_;
  int gpus_ = 0;
  int step_ = 1;
  int levels_ = 1;  // levels 0..levels_-1 stand for 0, G, 2G, ... GPUs
  int bins_ = 0;
  std::size_t row_ = 1;
  std::vector<int> gpus_per_replica_;  // per scheme
  std::vector<int> held_bins_;         // per scheme: how many leading bins it can hold
  std::vector<double> prefix_documents_, prefix_tokens_, prefix_squares_;  // scaled
  std::vector<std::int64_t> longest_;                                      // per bin
  std::vector<double> table_;
  std::vector<Choice> choices_;
  std::int64_t evaluations_ = 0;
};

}  // namespace hydraulis
