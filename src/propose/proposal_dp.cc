#include "hydraulis/propose/proposal_dp.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>

#include "hydraulis/base/error.h"
#include "hydraulis/base/parallel_for.h"
#include "hydraulis/base/tolerance.h"

namespace hydraulis {
namespace {

// The time of the interval's longest document on one replica: taken whole; a cp replica
// places it on one rank or shards it over some of them, whichever is fastest.
double LongestDocumentMs(const DpScheme& s, const IntervalLoad& load) {
  return s.scheme.cp > 1 ? s.shard.FloorDocumentMs(load.longest) : s.time.DocumentMs(load.longest);
}

// The interval's summed document work.
double WorkMs(const DpScheme& s, const IntervalLoad& load) {
  return s.time.a_ms_per_token2 * load.squared_tokens + s.time.b_ms_per_token * load.tokens;
}

// The smallest d in [lo, hi) with pred(d), or hi if there is none, for a pred that is
// false up to some d and true from there; each call of pred counts as an evaluation.
template <class Pred>
int BisectToFirst(int lo, int hi, Pred pred, std::int64_t* evaluations) {
  while (lo < hi) {
    const int mid = lo + (hi - lo) / 2;
    ++*evaluations;
    if (pred(mid)) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  return lo;
}

// The same, galloping from lo first: the answer is usually near it.
template <class Pred>
int GallopToFirst(int lo, int hi, Pred pred, std::int64_t* evaluations) {
  for (int stride = 1; lo < hi; stride *= 2) {
    const int probe = std::min(hi - 1, lo + stride - 1);
    ++*evaluations;
    if (pred(probe)) {
      hi = probe;
      break;
    }
    lo = probe + 1;
  }
  return BisectToFirst(lo, hi, pred, evaluations);
}

}  // namespace

double GroupMs(const DpScheme& s, const IntervalLoad& load, int replicas) {
  const TimeModel& t = s.time;
  const double d = replicas;
  const double longest_ms = LongestDocumentMs(s, load);
  const double work_ms = WorkMs(s, load);
  // A replica's share: an even split of the work, but at least the longest document,
  // which one replica must take whole.
  const double share_ms = std::max(work_ms / d, longest_ms);
  const double micro_batches =
      load.tokens > 0 ? std::ceil(load.tokens / (d * static_cast<double>(s.capacity_tokens))) : 0;
  return share_ms + t.c_ms * micro_batches + (s.scheme.pp - 1) * (longest_ms + t.c_ms);
}

int FlatGroupReplicas(const DpScheme& s, const IntervalLoad& load) {
  const double longest_ms = LongestDocumentMs(s, load);
  const double work_ms = WorkMs(s, load);
  // The share reaches the longest document at work / longest replicas, the micro-batches
  // one at tokens / capacity.
  const double d = std::max(longest_ms > 0 ? work_ms / longest_ms : kInf,
                            load.tokens / static_cast<double>(s.capacity_tokens));
  if (!(d < static_cast<double>(std::numeric_limits<int>::max() - 1))) {
    return std::numeric_limits<int>::max();
  }
  return std::max(1, static_cast<int>(std::ceil(d)));
}

ProposalDp::ProposalDp(std::vector<DpScheme> schemes, const LengthHistogram& histogram, int gpus,
                       const DpOptions& options)
    : schemes_(std::move(schemes)), options_(options), gpus_(gpus) {
  if (gpus_ < 1) throw InvalidInput("gpus: must be >= 1, got " + std::to_string(gpus_));
  if (schemes_.empty()) throw InvalidInput("proposal: no scheme to choose from");
  if (!(options_.document_scale > 0) || !std::isfinite(options_.document_scale)) {
    throw InvalidInput("proposal: document scale must be > 0");
  }
  step_ = 0;
  for (const DpScheme& s : schemes_) {
    if (s.scheme.Gpus() < 1 || s.scheme.Gpus() > gpus_) {
      throw InvalidInput("proposal: scheme " + SchemeName(s.scheme) + " needs " +
                         std::to_string(s.scheme.Gpus()) + " GPUs, the cluster has " +
                         std::to_string(gpus_));
    }
    if (s.capacity_tokens < 1) {
      throw InvalidInput("proposal: scheme " + SchemeName(s.scheme) + " has no capacity");
    }
    step_ = std::gcd(step_, s.scheme.Gpus());
  }
  if (options_.max_table_work < 1) {
    throw InvalidInput("proposal: max_table_work must be >= 1, got " +
                       std::to_string(options_.max_table_work));
  }
  if (options_.threads < 0) {
    throw InvalidInput("proposal: threads must be >= 0, got " + std::to_string(options_.threads));
  }
  if (options_.max_levels < 1) {
    throw InvalidInput("proposal: max_levels must be >= 1, got " +
                       std::to_string(options_.max_levels));
  }
  // Every strategy uses a multiple of G GPUs, so t[n] = t[G floor(n / G)]: the table keeps
  // only multiples of G. Past the level cap a level stands for several multiples
  // (DpOptions::max_levels, max_table_work), so the table stops growing with the cluster.
  const std::int64_t bins =
      std::max<std::int64_t>(1, static_cast<std::int64_t>(histogram.bins.size()));
  const int cap = static_cast<int>(
      std::clamp<std::int64_t>(options_.max_table_work / (bins * bins), 1, options_.max_levels));
  step_ *= (gpus_ / step_ + cap - 1) / cap;
  levels_ = gpus_ / step_ + 1;
  for (const DpScheme& s : schemes_) gpus_per_replica_.push_back(s.scheme.Gpus());

  bins_ = static_cast<int>(histogram.bins.size());
  row_ = static_cast<std::size_t>(bins_) + 1;
  const double scale = options_.document_scale;
  prefix_documents_.assign(row_, 0.0);
  prefix_tokens_.assign(row_, 0.0);
  prefix_squares_.assign(row_, 0.0);
  for (int j = 0; j < bins_; ++j) {
    const HistogramBin& b = histogram.bins[static_cast<std::size_t>(j)];
    if (j > 0 && b.longest < longest_.back()) {
      throw InvalidInput("proposal: histogram bins are not in ascending length order");
    }
    longest_.push_back(b.longest);
    // Running sums of non-negative terms never decrease in floating point either, so an
    // interval's load from prefix differences is monotone in the interval exactly; the
    // binary searches below depend on that.
    prefix_documents_[j + 1] = prefix_documents_[j] + scale * static_cast<double>(b.documents);
    prefix_tokens_[j + 1] = prefix_tokens_[j] + scale * static_cast<double>(b.tokens);
    prefix_squares_[j + 1] = prefix_squares_[j] + scale * b.squared_tokens;
  }
  for (const DpScheme& s : schemes_) {
    // Bins are ascending in length, so the bins a scheme holds are a prefix.
    held_bins_.push_back(static_cast<int>(
        std::upper_bound(longest_.begin(), longest_.end(), s.capacity_tokens) - longest_.begin()));
  }

  table_.assign(static_cast<std::size_t>(levels_) * row_, kInf);
  choices_.assign(table_.size(), Choice{});
  for (int level = 0; level < levels_; ++level) T(level, 0) = 0;
  FillTable();
}

void ProposalDp::FillTable() {
  // A level's cells read only lower levels, so its bins are filled in parallel: worker w
  // takes bins w, w + W, ... (the cost grows with the bin, so interleaving evens it out)
  // and the level ends when all are done (ParallelFor). Every cell is computed as it would be
  // alone, so the table does not depend on the worker count.
  // Small tables finish before threads would start.
  const int workers = static_cast<std::int64_t>(levels_) * bins_ < kParallelCells
                          ? 1
                          : std::clamp(ResolveThreads(options_.threads), 1, std::max(1, bins_));
  std::vector<std::int64_t> evaluations(static_cast<std::size_t>(workers), 0);
  const Extra none;
  for (int level = 1; level < levels_; ++level) {
    ParallelFor(workers, workers, [&](int w) {
      for (int j = 1 + w; j <= bins_; j += workers) {
        Best best{T(level - 1, j), Choice{}};
        BestOption(level, j, none, &best, &evaluations[static_cast<std::size_t>(w)]);
        T(level, j) = best.value;
        choices_[static_cast<std::size_t>(level) * row_ + j] = best.choice;
      }
    });
  }
  evaluations_ = std::accumulate(evaluations.begin(), evaluations.end(), std::int64_t{0});
}

double ProposalDp::Group(int k, int lo, int hi, int d, const Extra& extra) const {
  return GroupMs(schemes_[k], LoadOf(lo, hi, extra), d);
}

IntervalLoad ProposalDp::LoadOf(int lo, int hi, const Extra& extra) const {
  IntervalLoad load;
  load.documents = prefix_documents_[hi] - prefix_documents_[lo] + extra.documents;
  load.tokens = prefix_tokens_[hi] - prefix_tokens_[lo] + extra.tokens;
  load.squared_tokens = prefix_squares_[hi] - prefix_squares_[lo] + extra.squared_tokens;
  load.longest = longest_[hi - 1];
  return load;
}

int ProposalDp::FlatReplicas(int k, int lo, int hi, const Extra& extra) const {
  return FlatGroupReplicas(schemes_[static_cast<std::size_t>(k)], LoadOf(lo, hi, extra));
}

void ProposalDp::BestOption(int level, int j, const Extra& extra, Best* best,
                            std::int64_t* evaluations) const {
  // Ties matter: once one long document fixes the makespan, many strategies reach it.
  // Among equal makespans prefer the option whose last group takes fewer GPUs (the skip
  // option t[n - G][j] takes none, so it wins every tie), then the one covering more bins,
  // which leaves the rest more GPUs for less work.
  auto beats = [&](double value, int units, int l) {
    if (value != best->value) return value < best->value;
    if (!(value < kInf) || best->choice.scheme < 0) return false;
    const int best_units = Units(best->choice.scheme, best->choice.replicas);
    return units < best_units || (units == best_units && l > best->choice.length);
  };
  // A bound `x` on every option of an l excludes them when x is above `best`, or equal to
  // it and unable to win a tie (infinite, or `best` is the skip option).
  auto excluded = [&](double x) {
    return x > best->value || (x == best->value && (!(x < kInf) || best->choice.scheme < 0));
  };
  for (int k = 0; k < static_cast<int>(schemes_.size()); ++k) {
    if (held_bins_[k] < j || Units(k, 1) > level) continue;
    // The most replicas `level` affords: Units(k, d) <= level.
    const int max_d = static_cast<int>(std::int64_t{level} * step_ / gpus_per_replica_[k]);
    int known_below = 1;  // every d below it has A(d) < B(d) for this and later l
    for (int l = 1; l <= j; ++l) {
      const int lo = j - l;
      // A(d) = t[level - d u][lo] never decreases with d and B(d) = Group(d) never
      // increases, so A(1) and B(max_d) bound every d from below. A(1) falls and B(max_d)
      // rises as l grows: skip while A(1) cannot beat `best`, stop once B(max_d) cannot.
      if (excluded(T(level - Units(k, 1), lo))) continue;
      ++*evaluations;
      const double b_floor = Group(k, lo, j, max_d, extra);
      if (excluded(b_floor)) break;
      // Past the replicas where B stops falling, A only rises, so no larger d does better
      // (nor ties with fewer GPUs): search d up to there when B is already at its floor.
      int d_top = max_d;
      const int d_flat = std::min(max_d, FlatReplicas(k, lo, j, extra));
      if (d_flat < max_d) {
        ++*evaluations;
        if (Group(k, lo, j, d_flat, extra) == b_floor) d_top = d_flat;
      }
      // max(A, B) is least where they cross: find the smallest d with A(d) >= B(d). As l
      // grows A falls and B rises, so the crossing never moves left: every d below the last
      // l's crossing still has A < B. Gallop from there, then bisect.
      const int d_lo = GallopToFirst(
          std::min(known_below, d_top + 1), d_top + 1,
          [&](int d) { return T(level - Units(k, d), lo) >= Group(k, lo, j, d, extra); },
          evaluations);
      known_below = d_lo;
      double value = kInf;
      int d = 0;
      if (d_lo <= d_top) {  // A >= B at d_lo: the maximum is A
        value = T(level - Units(k, d_lo), lo);
        d = d_lo;
      }
      if (d_lo > 1) {  // A < B below d_lo: the maximum is B
        ++*evaluations;
        const double b = Group(k, lo, j, d_lo - 1, extra);
        if (b <= value) {
          // B may be flat (the longest document bounds it): the fewest replicas reaching
          // b are the smallest d with B(d) <= b.
          value = b;
          d = BisectToFirst(
              1, d_lo - 1, [&](int r) { return Group(k, lo, j, r, extra) <= b; }, evaluations);
        }
      }
      if (beats(value, Units(k, d), l)) *best = {value, Choice{k, l, d}};
    }
  }
}

double ProposalDp::Makespan(int gpus, int bins) const {
  if (gpus < 0 || gpus > gpus_ || bins < 0 || bins > bins_) {
    throw InvalidInput("proposal: no table entry for " + std::to_string(gpus) + " GPUs and " +
                       std::to_string(bins) + " bins");
  }
  return T(gpus / step_, bins);
}

IntervalLoad ProposalDp::Load(int first_bin, int last_bin) const {
  if (first_bin < 0 || last_bin < first_bin || last_bin >= bins_) {
    throw InvalidInput("proposal: bad bin interval " + std::to_string(first_bin) + ".." +
                       std::to_string(last_bin));
  }
  return LoadOf(first_bin, last_bin + 1, Extra{});
}

DpSolution ProposalDp::SolveForLongest(int bin, int present) const {
  if (bin < 0 || bin >= bins_) {
    throw InvalidInput("proposal: no bin " + std::to_string(bin) + " (there are " +
                       std::to_string(bins_) + ")");
  }
  if (present < 1) {
    throw InvalidInput("proposal: documents present in the top bin must be >= 1, got " +
                       std::to_string(present));
  }
  const int j = bin + 1;
  const Extra extra = TopExtra(bin, present);
  // The top group is chosen here on all GPUs (using every GPU is never worse: t never
  // increases with n), so ties go to the solution that uses more of them.
  const int top = levels_ - 1;
  Best best{kInf, Choice{}};
  std::int64_t evaluations = 0;
  BestOption(top, j, extra, &best, &evaluations);
  DpSolution solution;
  solution.makespan_ms = best.value;
  if (best.choice.scheme < 0) return solution;

  auto add_group = [&](const Choice& c, int hi, const Extra& e) {
    DpGroup g;
    g.scheme = c.scheme;
    g.replicas = c.replicas;
    g.first_bin = hi - c.length;
    g.last_bin = hi - 1;
    g.ms = Group(c.scheme, g.first_bin, hi, c.replicas, e);
    solution.groups.push_back(g);
    solution.gpus += c.replicas * schemes_[c.scheme].scheme.Gpus();
  };
  add_group(best.choice, j, extra);
  int level = top - Units(best.choice.scheme, best.choice.replicas);
  int hi = j - best.choice.length;
  while (hi > 0) {
    const Choice& c = choices_[static_cast<std::size_t>(level) * row_ + hi];
    if (c.scheme < 0) {
      --level;
      continue;
    }
    add_group(c, hi, Extra{});
    level -= Units(c.scheme, c.replicas);
    hi -= c.length;
  }
  std::reverse(solution.groups.begin(), solution.groups.end());
  if (options_.fill_idle_gpus) Fill(solution.groups, solution.gpus, extra);
  return solution;
}

ProposalDp::Extra ProposalDp::TopExtra(int bin, int documents) const {
  Extra extra;
  const double present = prefix_documents_[bin + 1] - prefix_documents_[bin];
  const double wanted = documents;
  if (options_.longest_present && present < wanted) {
    // Scale the bin up to `documents` documents of its mean shape.
    const double factor = wanted / present - 1.0;
    extra.documents = wanted - present;
    extra.tokens = factor * (prefix_tokens_[bin + 1] - prefix_tokens_[bin]);
    extra.squared_tokens = factor * (prefix_squares_[bin + 1] - prefix_squares_[bin]);
  }
  return extra;
}

void ProposalDp::Fill(std::vector<DpGroup>& groups, int& gpus, const Extra& top_extra) const {
  const int top = static_cast<int>(groups.size()) - 1;
  auto ms_with = [&](int i, int replicas) {
    const DpGroup& g = groups[static_cast<std::size_t>(i)];
    // The top group keeps its present-document extra.
    return Group(g.scheme, g.first_bin, g.last_bin + 1, replicas, i == top ? top_extra : Extra{});
  };
  for (;;) {
    const int idle = gpus_ - gpus;
    // The slowest group that one more replica makes faster (a group bound by its longest
    // document is not); on a tie the narrower scheme. When none is, the group of the
    // shortest documents that fits: more pipelines for the bulk never hurt the planner.
    int pick = -1, fallback = -1;
    for (int i = 0; i < static_cast<int>(groups.size()); ++i) {
      const DpGroup& g = groups[static_cast<std::size_t>(i)];
      const int need = schemes_[g.scheme].scheme.Gpus();
      if (need > idle) continue;
      if (fallback < 0) fallback = i;
      if (!(ms_with(i, g.replicas + 1) < g.ms)) continue;
      const DpGroup* p = pick < 0 ? nullptr : &groups[static_cast<std::size_t>(pick)];
      if (p == nullptr || g.ms > p->ms ||
          (g.ms == p->ms && need < schemes_[p->scheme].scheme.Gpus())) {
        pick = i;
      }
    }
    if (pick < 0) pick = fallback;
    if (pick < 0) return;
    DpGroup& g = groups[static_cast<std::size_t>(pick)];
    ++g.replicas;
    gpus += schemes_[g.scheme].scheme.Gpus();
    g.ms = ms_with(pick, g.replicas);
  }
}

}  // namespace hydraulis
