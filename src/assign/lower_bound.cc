#include "lower_bound.h"

#include <coin/ClpSimplex.hpp>
#include <coin/CoinPackedMatrix.hpp>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <numeric>

#include "exact_split.h"
#include "hydraulis/base/error.h"
#include "hydraulis/base/tolerance.h"

namespace hydraulis {
namespace {

constexpr int kBisectionSteps = 24;
constexpr double kRelaxationMinGpuShare = 0.25;
// Runs of lengths CoarseLoadMs merges a batch into.
constexpr double kCoarseRuns = 64;

// Identical pipelines form one group: the LP is symmetric in them.
struct Group {
  PipelineModel model;
  int count = 0;
  double kappa = 1.0;  // set per theta for pp > 1
  // pp = 1: weight of the integrality cut (IntegralityCut) in this group's row, and the
  // per-theta quantities it implies: the micro-batch constant charged per token, and the
  // factor that brings the row's right-hand side back to count * theta.
  double lambda = 0.0;
  double c_per_token = 0.0;  // 0: c / capacity
  double scale = 1.0;
  // pp > 1: charge each token its share of the micro-batch constant instead of kappa (a
  // pipeline runs >= tokens / capacity micro-batches, each paying c on the last stage);
  // what binds when batches hold many more micro-batches than the relaxation's best count.
  bool charge_c = false;
};

// At step time theta a pp = 1 pipeline with v micro-batches holds tau <= v * capacity
// tokens and work W >= b * tau with W + v c <= theta, so tau <= tau_max(theta). Over
// [0, tau_max] the convex hull of c * ceil(tau / capacity) (empty pipelines included) is
// max(c tau / capacity, K c + c (tau - K capacity) / D) with K = floor(tau_max / capacity),
// D = tau_max - K capacity; summing over the group's m pipelines (Jensen) gives the valid
// row  sum_i (w_i + c s_i / D) <= m (theta - K c + K capacity c / D), which charges the
// last, partly filled micro-batch. The LP row becomes (1 - lambda) times the usual row
// plus lambda times this one.
void IntegralityCut(Group& g, double theta) {
  const PipelineModel& m = g.model;
  g.c_per_token = 0.0;
  g.scale = 1.0;
  if (m.scheme.pp != 1 || g.lambda <= 0 || m.time.b_ms_per_token <= 0 || m.time.c_ms <= 0) return;
  const double cap = static_cast<double>(m.capacity_tokens), c = m.time.c_ms;
  const double b = m.time.b_ms_per_token;
  double tau_max = 0;
  const double v_cross = theta / (b * cap + c);
  for (double v : {std::floor(v_cross), std::floor(v_cross) + 1}) {
    if (v < 1 || theta - v * c <= 0) continue;
    tau_max = std::max(tau_max, std::min(v * cap, (theta - v * c) / b));
  }
  const double k = std::floor(tau_max / cap);
  const double d = tau_max - k * cap;
  if (d <= 0 || tau_max <= 0) return;
  const double theta_cut = theta - k * c + k * cap * c / d;
  g.c_per_token = (1 - g.lambda) / cap + g.lambda / d;
  g.scale = theta / ((1 - g.lambda) * theta + g.lambda * theta_cut);
}

// Whether a document of length s may run on `p` at all in a plan with step time <= theta.
bool Eligible(const PipelineModel& p, std::int64_t s, double theta) {
  return s <= p.capacity_tokens && p.scheme.pp * (p.DocumentFloorMs(s) + p.time.c_ms) <= theta;
}

// The step time below which a document of length s must be sharded on `p` (cp > 1), so
// its key/value exchange is part of its work: a micro-batch holding it whole on one rank
// takes that rank at least its whole time plus c, through the pp stages. +infinity when no
// rank can hold it whole (memory); 0 when cp = 1 (nothing is sharded).
double WholeThresholdMs(const PipelineModel& p, std::int64_t s) {
  if (p.scheme.cp == 1) return 0;
  if (static_cast<double>(s) > p.shard.rank_capacity_tokens) return kInf;
  return p.scheme.pp * (p.shard.whole.DocumentMs(s) + p.time.c_ms);
}

// The step time from which a document of length s may run over k ranks of `p` (cp > 1):
// its fastest time there (on the cheapest link k ranks can use) plus c, through the pp
// stages. WorkMs charges the narrowest width whose threshold theta reaches, and the
// search's thresholds include these, so the two must be one sum.
double WidthThresholdMs(const PipelineModel& p, std::int64_t s, int k) {
  return p.scheme.pp * (p.shard.DocumentMs(s, k, k <= p.shard.ranks_per_node) + p.time.c_ms);
}

// Whether a document of s tokens over k ranks can run within step time theta (with slack:
// a width that fits theta only up to rounding counts, since counting a width that cannot
// run only lowers the bound).
bool WidthFits(const PipelineModel& p, std::int64_t s, int k, double theta) {
  return WidthThresholdMs(p, s, k) <= theta * (1 + 1e-9);
}

// The narrowest width at least `fewest` (the fewest ranks whose memory holds the document,
// at least 2) over which a document of s tokens can run at step time theta; cp where none
// can.
int NarrowestWidth(const PipelineModel& p, std::int64_t s, int fewest, double theta) {
  const ShardCost& cost = p.shard;
  int k = std::min(fewest, std::max(cost.cp, 2));
  if (cost.space == CpLayoutSpace::kAnySubset) {
    while (k < cost.cp && !WidthFits(p, s, k, theta)) ++k;
  }
  return k;
}

// The most a cp rank that holds no part of a document of s tokens sharded over k ranks can
// do in the document's micro-batch, counting compute and the exchange the bound charges
// (docs/design.md, "Lower bound", 2): at most R tokens of its own, R the rank's memory in
// tokens. A token of a document of length l over j ranks costs a l + b, plus its share of
// the exchange charged to that document, at most u (j - 1), and none where a rank could
// hold it whole. Documents confined to the cp - k free ranks are at most (cp - k) R long;
// documents that also use the k ranks fit in what those ranks have left, `left` tokens
// each beside the document, so they are at most cp * left long and bring at most k * left
// tokens. No step time enters, so the bound's units still never rise with it.
double FreeRankMs(const ShardCost& cost, std::int64_t s, int k) {
  const int f = cost.cp - k;
  const double r = cost.rank_capacity_tokens;
  const double a = cost.whole.a_ms_per_token2;
  const double b = cost.whole.b_ms_per_token;
  const double u = std::max(cost.kv_unit_intra_ms_per_token, cost.kv_unit_inter_ms_per_token);
  const double confined = a * f * r + b + u * (f - 1);
  const double left = std::max(0.0, r - cost.MemoryTokens(s, k));
  const double longest = cost.cp * left;
  const double touching = a * longest + b + (longest > r ? u * (cost.cp - 1) : 0.0);
  return r * confined + std::min(r, k * left) * std::max(0.0, touching - confined);
}

// Summed over the cp ranks, the least a document of s tokens that must be sharded (over at
// least `fewest` ranks, its memory says) adds to its stage beyond its balanced work at step
// time theta, over the widths k >= k0 that theta allows (k0 the narrowest, NarrowestWidth):
// its exchange over k ranks, and where it takes more than half
// of its micro-batch's memory (so no other such document shares that micro-batch), the
// time the cp - k ranks without it spend short of its own ranks' time: their memory holds
// too little work (FreeRankMs) to last as long (docs/design.md, "Lower bound", 2).
double ShardedExtraMs(const PipelineModel& p, std::int64_t s, int fewest, int k0, double theta) {
  const ShardCost& cost = p.shard;
  const double least = cost.LeastExchangeWorkMs(s, k0);
  if (cost.space != CpLayoutSpace::kAnySubset) return least;
  const int m = std::min(fewest, cost.cp);
  if (static_cast<double>(s) * (1 + cost.kv_memory_ratio * (m - 1)) <=
      cost.cp * cost.rank_capacity_tokens / 2) {
    return least;
  }
  double best = kInf;
  for (int k = k0; k <= cost.cp; ++k) {
    if (k > k0 && !WidthFits(p, s, k, theta)) continue;
    const double own = cost.DocumentMs(s, k, k <= cost.ranks_per_node);
    const double idle = (cost.cp - k) * std::max(0.0, own - FreeRankMs(cost, s, k));
    best = std::min(best, cost.LeastExchangeWorkMs(s, k) + idle);
  }
  return best;
}

// A document's least share of its stage's work at step time theta: its balanced share,
// plus what it must add where it must be sharded at theta (ShardedExtraMs;
// PipelineModel::DocumentWorkMs charges only the exchange, only where memory forces it).
double WorkMs(const PipelineModel& p, std::int64_t s, double theta) {
  const double work = p.time.DocumentMs(s);
  if (WholeThresholdMs(p, s) <= theta) return work;
  // Sharded over k ranks it adds u (k - 1) s of exchange over the k ranks (on the cheapest
  // link k ranks can use), and sometimes idle ranks beside it; a width whose own time
  // through the pp stages exceeds theta cannot run it.
  const int fewest = std::max(2, p.shard.MinWidth(s));
  return work +
         ShardedExtraMs(p, s, fewest, NarrowestWidth(p, s, fewest, theta), theta) / p.scheme.cp;
}

// Per document of length s, its work on a pipeline of the group when it also pays its
// token share of the per-micro-batch constant (v >= tokens / capacity).
// A document whose own critical path pp*(w + c) on a pipeline exceeds theta cannot run
// there in any plan with step time <= theta.
double Unit(const Group& g, std::int64_t s, double theta) {
  const PipelineModel& p = g.model;
  if (!Eligible(p, s, theta)) return kInf;
  // pp > 1: the pipeline's time is at least kappa times its document work (see
  // RelaxationTable); the micro-batch constant is inside that bound.
  if (p.scheme.pp > 1) {
    return g.charge_c ? WorkMs(p, s, theta) + p.time.c_ms * static_cast<double>(s) /
                                                  static_cast<double>(p.capacity_tokens)
                      : g.kappa * WorkMs(p, s, theta);
  }
  const double per_token =
      g.c_per_token > 0 ? g.c_per_token : 1.0 / static_cast<double>(p.capacity_tokens);
  return g.scale * (WorkMs(p, s, theta) + p.time.c_ms * static_cast<double>(s) * per_token);
}

// LP duality: for any weights mu_g >= 0, T >= sum_i min_g mu_g u_ig / sum_g m_g mu_g,
// because T >= load of every pipeline. Evaluated exactly, so it is valid for any mu.
double DualValue(const std::vector<std::pair<std::int64_t, double>>& docs,
                 const std::vector<Group>& groups, const std::vector<double>& mu, double theta) {
  double denom = 0;
  for (std::size_t g = 0; g < groups.size(); ++g) denom += groups[g].count * mu[g];
  if (denom <= 0) return 0;
  double total = 0;
  for (const auto& [s, n] : docs) {
    double best = kInf;
    for (std::size_t g = 0; g < groups.size(); ++g) {
      const double u = Unit(groups[g], s, theta);
      if (u < kInf) best = std::min(best, mu[g] * u);
    }
    total += n * best;
  }
  return total / denom;
}

// Exact maximum of the dual for two groups: a concave piecewise-linear function of
// t = m_1 mu_1 in [0, 1] whose breakpoints are one per distinct length.
double TwoGroupBound(const std::vector<std::pair<std::int64_t, double>>& docs,
                     const std::vector<Group>& groups, double theta) {
  struct Piece {
    double t;  // term is t*A below the breakpoint and (1-t)*B above it
    double a, b;
  };
  std::vector<Piece> pieces;
  for (const auto& [s, n] : docs) {
    const double a = Unit(groups[0], s, theta) / groups[0].count;
    const double b = Unit(groups[1], s, theta) / groups[1].count;
    if (a == kInf) {
      pieces.push_back({0.0, 0.0, n * b});
    } else if (b == kInf) {
      pieces.push_back({1.0, n * a, 0.0});
    } else {
      pieces.push_back({b / (a + b), n * a, n * b});
    }
  }
  std::sort(pieces.begin(), pieces.end(), [](const Piece& x, const Piece& y) { return x.t < y.t; });
  double sum_a = 0, sum_b = 0;  // sum_a over pieces with breakpoint > t; sum_b the rest
  for (const auto& p : pieces) sum_a += p.a;
  double best = 0;
  for (std::size_t i = 0; i < pieces.size();) {
    const double t = pieces[i].t;
    // Pieces whose breakpoint is exactly t: use whichever form is finite there.
    double at_t = 0;
    std::size_t k = i;
    for (; k < pieces.size() && pieces[k].t == t; ++k) {
      sum_a -= pieces[k].a;
      at_t += t == 0.0 ? pieces[k].b : (t == 1.0 ? pieces[k].a : t * pieces[k].a);
    }
    best = std::max(best, t * sum_a + (1 - t) * sum_b + at_t);
    for (; i < k; ++i) sum_b += pieces[i].b;
  }
  return best;
}

// Documents that, at step time theta, can run only on group g and are longer than half its
// capacity need a micro-batch each there. If the j costliest of them (stage time >= t_j
// each) spread over the group's m pipelines, one pipeline runs ceil(j/m) micro-batches of
// stage time >= t_j, and a pp-stage pipeline running q such micro-batches takes at least
// (q + pp - 1) * t_j: the first one's forward through pp-1 stages, all q forwards and
// backwards on the last stage, the last one's backward through pp-1 stages.
//
// With one pipeline in the group all k of them share it, and a sharper path applies: the
// first of them forward through pp-1 stages, every micro-batch from it to the last of them
// on the last stage, the last one backward through pp-1 stages:
// sum_i t_i + (pp-1)(f t_x + b t_y) over the cheapest distinct pair x, y (f, b the forward
// and backward shares).
// The least, over every grouping of `docs` (length, work) into micro-batches within the
// capacity and every order of those micro-batches, of the longest path through them: for
// micro-batches a before b (stage times T_a, T_b), a's forward through pp-1 stages, every
// micro-batch from a to b on the last stage, b's backward through pp-1 stages; pp T_a when
// a = b. Other micro-batches only lengthen these paths, so this bounds any pipeline that
// runs all of `docs`. Exhaustive, so callers pass at most kAtomicDocs documents.
constexpr std::size_t kAtomicDocs = 4;

double AtomicPathBound(const std::vector<std::pair<std::int64_t, double>>& docs,
                       const PipelineModel& m, double f, double b) {
  const std::size_t n = docs.size();
  const int pp = m.scheme.pp;
  double best = kInf;
  // Groupings as restricted growth strings: block[0] = 0, block[i] <= 1 + max before it.
  std::vector<int> block(n, 0);
  auto next_grouping = [&] {
    for (std::size_t i = n; i-- > 1;) {
      const int prefix_max =
          *std::max_element(block.begin(), block.begin() + static_cast<std::ptrdiff_t>(i));
      if (block[i] <= prefix_max) {
        ++block[i];
        std::fill(block.begin() + static_cast<std::ptrdiff_t>(i) + 1, block.end(), 0);
        return true;
      }
    }
    return false;
  };
  std::vector<double> times;
  std::vector<std::int64_t> tokens;
  if (n == 0) return 0.0;
  do {
    const int blocks = *std::max_element(block.begin(), block.end()) + 1;
    times.assign(static_cast<std::size_t>(blocks), m.time.c_ms);
    tokens.assign(static_cast<std::size_t>(blocks), 0);
    for (std::size_t i = 0; i < n; ++i) {
      times[static_cast<std::size_t>(block[i])] += docs[i].second;
      tokens[static_cast<std::size_t>(block[i])] += docs[i].first;
    }
    if (std::any_of(tokens.begin(), tokens.end(),
                    [&](std::int64_t t) { return t > m.capacity_tokens; })) {
      continue;
    }
    std::sort(times.begin(), times.end());
    do {
      double longest = 0;
      for (std::size_t a = 0; a < times.size(); ++a) {
        double between = 0;
        for (std::size_t z = a; z < times.size(); ++z) {
          between += times[z];
          const double path =
              z == a ? pp * times[a] : (pp - 1) * (f * times[a] + b * times[z]) + between;
          longest = std::max(longest, path);
        }
      }
      best = std::min(best, longest);
    } while (std::next_permutation(times.begin(), times.end()));
  } while (next_grouping());
  return best == kInf ? 0.0 : best;
}

double ForcedDocumentsBound(const std::vector<std::pair<std::int64_t, double>>& docs,
                            const std::vector<Group>& groups, double theta,
                            const ScheduleOptions& schedule) {
  const double f = 1.0 / (1.0 + schedule.backward_to_forward), b = 1.0 - f;
  double bound = 0;
  std::vector<std::pair<double, double>> forced;  // (stage time, count), per group
  for (std::size_t g = 0; g < groups.size(); ++g) {
    const PipelineModel& m = groups[g].model;
    forced.clear();
    for (const auto& [s, n] : docs) {
      if (2 * s <= m.capacity_tokens || !Eligible(m, s, theta)) continue;
      bool elsewhere = false;
      for (std::size_t h = 0; h < groups.size() && !elsewhere; ++h) {
        elsewhere = h != g && Eligible(groups[h].model, s, theta);
      }
      if (!elsewhere) forced.push_back({m.DocumentFloorMs(s) + m.time.c_ms, n});
    }
    std::sort(forced.begin(), forced.end(), std::greater<>());
    double j = 0, sum = 0;
    for (const auto& [t, n] : forced) {
      j += n;
      sum += n * t;
      const double per_pipeline = std::ceil(j / groups[g].count);
      bound = std::max(bound, (per_pipeline + m.scheme.pp - 1) * t);
    }
    if (groups[g].count == 1) {
      // Every forced document, long or not, runs on this one pipeline: the costliest few
      // give the exhaustive path bound.
      std::vector<std::pair<std::int64_t, double>> atomic;
      for (auto it = docs.rbegin(); it != docs.rend() && atomic.size() < kAtomicDocs; ++it) {
        const std::int64_t len = it->first;
        if (!Eligible(m, len, theta)) continue;
        bool elsewhere = false;
        for (std::size_t h = 0; h < groups.size() && !elsewhere; ++h) {
          elsewhere = h != g && Eligible(groups[h].model, len, theta);
        }
        for (double k = 0; !elsewhere && k < it->second && atomic.size() < kAtomicDocs; ++k) {
          atomic.push_back({len, m.DocumentWorkMs(len)});
        }
      }
      bound = std::max(bound, AtomicPathBound(atomic, m, f, b));
    }
    if (groups[g].count == 1 && j >= 2) {
      const double smallest = forced.back().first;
      const double second = forced.back().second >= 2 ? smallest : forced[forced.size() - 2].first;
      const double ends = std::min(f * second + b * smallest, f * smallest + b * second);
      bound = std::max(bound, sum + (m.scheme.pp - 1) * ends);
    }
  }
  return bound;
}

// The longest documents of a batch, longest first, run only on the union S of the groups
// eligible for them at theta. Calls visit(in, m, prefix) for each S they grow through, while
// S holds at most max_pipelines pipelines: in[g] whether group g is in S, m its pipelines,
// prefix the documents (indices into docs, longest first) whose eligible groups all lie in
// S, at most max_copies of them counted with multiplicity. A document no group holds at
// theta is skipped: the fractional bound is infinite there anyway.
template <typename Visit>
void ForEachLongestDocumentSet(const std::vector<std::pair<std::int64_t, double>>& docs,
                               const std::vector<Group>& groups, double theta, int max_pipelines,
                               double max_copies, const Visit& visit) {
  std::vector<char> in(groups.size(), 0);
  int m = 0;
  double copies = 0;
  std::vector<std::size_t> prefix;
  for (std::size_t i = docs.size(); i-- > 0;) {
    const std::int64_t s = docs[i].first;
    bool grows = false;
    for (std::size_t g = 0; g < groups.size() && !grows; ++g) {
      grows = !in[g] && Eligible(groups[g].model, s, theta);
    }
    if (grows) {
      if (m > 0) visit(in, m, prefix);
      for (std::size_t g = 0; g < groups.size(); ++g) {
        if (in[g] || !Eligible(groups[g].model, s, theta)) continue;
        in[g] = 1;
        m += groups[g].count;
      }
      if (m > max_pipelines) return;
    }
    if (m == 0) continue;
    prefix.push_back(i);
    copies += docs[i].second;
    if (copies >= max_copies) break;
  }
  if (m > 0) visit(in, m, prefix);
}

// Pigeonhole over the pipelines that alone may run the longest documents (S of
// ForEachLongestDocumentSet, up to 64 pipelines). A pipeline takes at least c plus the work
// of its documents (WorkMs at theta), and a document's work is at least w, its least over
// S. Among any k m + 1 of them some pipeline holds k + 1, so T >= min c + the k + 1 least w
// among the k m + 1 largest. It binds where a strategy has fewer wide pipelines than the
// batch has documents only they can hold (at 128K, eight 105-131K documents for seven
// (CP8,TP16) pipelines), which FewPipelinesBound cannot take exactly.
double PigeonholeBound(const std::vector<std::pair<std::int64_t, double>>& docs,
                       const std::vector<Group>& groups, double theta) {
  constexpr std::size_t kMaxCopies = 1024;
  double bound = 0;
  std::vector<double> works;
  ForEachLongestDocumentSet(
      docs, groups, theta, 64, static_cast<double>(kMaxCopies),
      [&](const std::vector<char>& in, int m, const std::vector<std::size_t>& prefix) {
        double c_min = kInf;
        for (std::size_t g = 0; g < groups.size(); ++g) {
          if (in[g]) c_min = std::min(c_min, groups[g].model.time.c_ms);
        }
        works.clear();
        for (const std::size_t i : prefix) {
          double w = kInf;
          for (std::size_t g = 0; g < groups.size(); ++g) {
            if (in[g] && Eligible(groups[g].model, docs[i].first, theta)) {
              w = std::min(w, WorkMs(groups[g].model, docs[i].first, theta));
            }
          }
          works.insert(works.end(), std::min(static_cast<std::size_t>(docs[i].second), kMaxCopies),
                       w);
        }
        std::sort(works.begin(), works.end(), std::greater<>());
        const auto pipelines = static_cast<std::size_t>(m);
        for (std::size_t k = 1; k * pipelines + 1 <= works.size(); ++k) {
          const std::size_t last = k * pipelines;  // the (k m + 1)-th largest
          double sum = c_min;
          for (std::size_t t = last - k; t <= last; ++t) sum += works[t];
          bound = std::max(bound, sum);
        }
      });
  return bound;
}

// Three or more groups, the dual's prices by Kelley's cutting planes: the dual value at
// prices mu (normalised so sum_g m_g mu_g = 1) is phi(mu) = sum_i n_i min_g mu_g u_ig,
// concave and piecewise linear, and for any assignment a of documents to eligible groups
// phi(mu) <= sum_g mu_g C_g(a), C_g(a) = sum_{i: a_i = g} n_i u_ig. A master LP over the
// G prices and those planes (at most kMaxPlanes rows) gives an upper bound and its
// maximiser; each maximiser's own best assignment is the next plane, until the two meet.
// Over every distinct length, not price buckets, and G + 1 columns: much cheaper than the
// primal LP when G is small. The planes carry over between step times, their sums
// recomputed for the new units. A caller that only asks whether the value is at most
// `settle_at` gets prices as soon as the two bounds settle it: the lower one above it or
// the upper one at or below it (a search over step times asks that at most points).
class CuttingPlanes {
 public:
  CuttingPlanes(const std::vector<std::pair<std::int64_t, double>>& docs,
                const std::vector<Group>& groups)
      : docs_(docs), groups_(groups) {}

  std::vector<double> Prices(double theta, double settle_at) {
    if (!SetUnits(theta)) return Start();  // infeasible at theta: DualValue is +infinity anyway
    const std::size_t G = groups_.size(), D = docs_.size();
    ClpSimplex master;
    LoadMaster(master);
    std::vector<double> mu = mu_.empty() ? Start() : mu_;
    std::vector<double> best_mu = mu;
    double best = -1;
    // Planes kept from earlier step times, re-summed with this theta's units (an
    // assignment that uses a group no longer eligible is dropped).
    for (const std::vector<int>& a : planes_) {
      bool ok = true;
      for (std::size_t i = 0; i < D && ok; ++i) {
        ok = units_[i * G + static_cast<std::size_t>(a[i])] < kInf;
      }
      if (ok) AddPlane(master, a);
    }
    std::vector<std::vector<int>> kept;
    for (int round = 0; round < kMaxPlanes; ++round) {
      std::vector<int> assignment(D, 0);
      const double value = BestAssignment(mu, assignment);
      double denom = 0;
      for (std::size_t g = 0; g < G; ++g) denom += groups_[g].count * mu[g];
      if (denom > 0 && value / denom > best) best = value / denom, best_mu = mu;
      AddPlane(master, assignment);
      kept.push_back(std::move(assignment));
      // A new plane cuts off the last maximiser: the dual simplex restarts from its basis.
      master.dual();
      if (master.status() != 0) break;
      const double* x = master.primalColumnSolution();
      const double upper = x[G];
      mu.assign(x, x + G);
      if (upper - best <= 1e-6 * std::max(1.0, std::abs(upper))) break;
      if (settle_at < kInf && (best > settle_at || upper <= settle_at)) break;
    }
    planes_ = std::move(kept);
    mu_ = best_mu;
    return best_mu;
  }

 private:
  // Each document's unit on each group at theta (+infinity where not eligible); false where
  // some document has no eligible group.
  bool SetUnits(double theta) {
    const std::size_t G = groups_.size(), D = docs_.size();
    units_.assign(D * G, kInf);
    for (std::size_t i = 0; i < D; ++i) {
      bool any = false;
      for (std::size_t g = 0; g < G; ++g) {
        units_[i * G + g] = Unit(groups_[g], docs_[i].first, theta);
        any = any || units_[i * G + g] < kInf;
      }
      if (!any) return false;
    }
    return true;
  }

  // The master LP without planes: columns mu_0..mu_{G-1} >= 0 and z (free), the prices
  // normalised by sum_g m_g mu_g = 1; maximise z.
  void LoadMaster(ClpSimplex& master) const {
    const std::size_t G = groups_.size();
    master.setLogLevel(0);
    master.scaling(0);  // G + 1 columns: scaling costs more than it saves
    std::vector<double> col_lb(G + 1, 0.0), col_ub(G + 1, COIN_DBL_MAX), obj(G + 1, 0.0);
    col_lb[G] = -COIN_DBL_MAX;
    obj[G] = -1.0;
    std::vector<int> rows, cols;
    std::vector<double> vals;
    for (std::size_t g = 0; g < G; ++g) {
      rows.push_back(0), cols.push_back(static_cast<int>(g)), vals.push_back(groups_[g].count);
    }
    const double one = 1.0;
    CoinPackedMatrix matrix(false, rows.data(), cols.data(), vals.data(),
                            static_cast<CoinBigIndex>(vals.size()));
    matrix.setDimensions(1, static_cast<int>(G + 1));
    master.loadProblem(matrix, col_lb.data(), col_ub.data(), obj.data(), &one, &one);
  }

  // The plane of `assignment`: z - sum_g C_g mu_g <= 0.
  void AddPlane(ClpSimplex& master, const std::vector<int>& assignment) const {
    const std::size_t G = groups_.size(), D = docs_.size();
    std::vector<int> plane_cols(G + 1);
    for (std::size_t g = 0; g <= G; ++g) plane_cols[g] = static_cast<int>(g);
    std::vector<double> plane(G + 1, 0.0);
    for (std::size_t i = 0; i < D; ++i) {
      const auto g = static_cast<std::size_t>(assignment[i]);
      plane[g] -= docs_[i].second * units_[i * G + g];
    }
    plane[G] = 1.0;
    master.addRow(static_cast<int>(G + 1), plane_cols.data(), plane.data(), -COIN_DBL_MAX, 0.0);
  }

  // The best assignment at prices mu into `assignment`, and its value.
  double BestAssignment(const std::vector<double>& mu, std::vector<int>& assignment) const {
    const std::size_t G = groups_.size(), D = docs_.size();
    double value = 0;
    for (std::size_t i = 0; i < D; ++i) {
      double least = kInf;
      for (std::size_t g = 0; g < G; ++g) {
        const double u = units_[i * G + g];
        if (u == kInf) continue;
        const double cost = mu[g] * u;
        if (cost < least) least = cost, assignment[i] = static_cast<int>(g);
      }
      value += docs_[i].second * least;
    }
    return value;
  }

  // Each group's price the reciprocal of its cost per token at the batch's token-weighted
  // mean length: a token then costs about the same everywhere.
  std::vector<double> Start() const {
    double tokens = 0, squares = 0;
    for (const auto& [s, n] : docs_) {
      tokens += n * static_cast<double>(s);
      squares += n * static_cast<double>(s) * static_cast<double>(s);
    }
    const auto s_ref =
        std::max<std::int64_t>(1, static_cast<std::int64_t>(tokens > 0 ? squares / tokens : 1));
    std::vector<double> mu(groups_.size(), 0.0);
    double denom = 0;
    for (std::size_t g = 0; g < groups_.size(); ++g) {
      const PipelineModel& m = groups_[g].model;
      const std::int64_t s = std::min(s_ref, m.capacity_tokens);
      const double per_token = m.DocumentWorkMs(s) / static_cast<double>(s) +
                               m.time.c_ms / static_cast<double>(m.capacity_tokens);
      mu[g] = per_token > 0 ? 1.0 / per_token : 0.0;
      denom += groups_[g].count * mu[g];
    }
    if (denom > 0) {
      for (double& x : mu) x /= denom;
    }
    return mu;
  }

  static constexpr int kMaxPlanes = 200;

  const std::vector<std::pair<std::int64_t, double>>& docs_;
  const std::vector<Group>& groups_;
  std::vector<double> units_;
  std::vector<double> mu_;                // the best prices of the last step time
  std::vector<std::vector<int>> planes_;  // the last step time's planes, as assignments
};

// ComputeLowerBound's phases, over the batch's distinct lengths and its groups of identical
// pipelines: the exact search over the thresholds where the plain LP changes, then raising
// the bound by bisection with tighter units (the relaxed 1F1B schedule, the micro-batch
// constant charged per token, the integrality cuts). Not movable: the cutting planes
// refer to the groups and lengths it holds.
class LowerBoundSearch {
 public:
  LowerBoundSearch(std::span<const PipelineGroup> groups,
                   std::span<const std::pair<std::int64_t, double>> length_counts,
                   const ScheduleOptions& schedule, RelaxationTable* relaxations)
      : pipeline_groups_(groups),
        schedule_(schedule),
        relaxations_(relaxations),
        docs_(length_counts.begin(), length_counts.end()) {
    for (const PipelineGroup& g : groups) groups_.push_back({g.model, g.count});
  }
  LowerBoundSearch(const LowerBoundSearch&) = delete;
  LowerBoundSearch& operator=(const LowerBoundSearch&) = delete;

  LowerBound Run() {
    std::vector<std::int64_t> distinct(docs_.size());
    for (std::size_t i = 0; i < docs_.size(); ++i) distinct[i] = docs_[i].first;
    lb_.longest_doc_ms = LongestDocumentBoundMs(distinct, pipeline_groups_);
    if (lb_.longest_doc_ms == kInf) {
      lb_.ms = lb_.fractional_ms = kInf;
      return lb_;
    }
    const bool deep = UsesRelaxation();
    SearchThresholds();
    if (deep) Raise([&](double theta, double x) { return FractionalAtMost(theta, true, x); });
    RaiseChargingMicroBatchConstant();
    RaiseWithIntegralityCuts(deep);
    lb_.ms = std::max(lb_.fractional_ms, lb_.longest_doc_ms);
    return lb_;
  }

 private:
  // The relaxation costs LPs per grid point; use it where pp > 1 pipelines hold enough of
  // the strategy's GPUs to matter for the bound.
  bool UsesRelaxation() const {
    int gpus = 0, deep_gpus = 0;
    for (const auto& g : groups_) {
      gpus += g.count * g.model.scheme.Gpus();
      if (g.model.scheme.pp > 1) deep_gpus += g.count * g.model.scheme.Gpus();
    }
    return relaxations_ != nullptr && deep_gpus > 0 && deep_gpus >= kRelaxationMinGpuShare * gpus;
  }

  // The fractional bound at step time theta, with the relaxed 1F1B units when `relaxed`.
  // With a finite `settle_at` the caller asks only whether the bound is at most it: the
  // value returned may be short of the bound but is on the same side of settle_at.
  double Fractional(double theta, bool relaxed, double settle_at = kInf) {
    for (auto& g : groups_) {
      IntegralityCut(g, theta);
      if (g.model.scheme.pp == 1) continue;
      g.kappa = relaxed ? relaxations_->MinMakespanLowerBound(g.model.scheme.pp, g.model.time.c_ms,
                                                              theta) /
                              theta
                        : 1.0;
    }
    const double forced =
        std::max({ForcedDocumentsBound(docs_, groups_, theta, schedule_), FewPipelinesBound(theta),
                  PigeonholeBound(docs_, groups_, theta)});
    if (forced > settle_at) return forced;
    return std::max(forced, Lp(theta, settle_at));
  }
  // Whether the fractional bound at theta is at most `at`.
  bool FractionalAtMost(double theta, bool relaxed, double at) {
    return Fractional(theta, relaxed, at) <= at;
  }

 public:
  // The LP relaxation's value alone at step time theta (plain units, no forced-document
  // terms); settle_at as for Fractional.
  double Lp(double theta, double settle_at = kInf) {
    if (groups_.size() == 1) return DualValue(docs_, groups_, {1.0}, theta);
    if (groups_.size() == 2) return TwoGroupBound(docs_, groups_, theta);
    if (!planes_) planes_ = std::make_unique<CuttingPlanes>(docs_, groups_);
    return DualValue(docs_, groups_, planes_->Prices(theta, settle_at), theta);
  }

 private:
  // T* >= LP(T*): in an optimal plan every document sits where its critical path
  // pp*(w + c) is <= T*, and every pipeline's work is <= T*, so kappa(T*) applies. LP(theta)
  // never rises with theta, so T* >= the least theta with LP(theta) <= theta. Without the
  // relaxation (kappa = 1) LP changes only at the thresholds pp*(w + c): search over those
  // exactly.
  void SearchThresholds() {
    for (const auto& [s, n] : docs_) {
      for (const auto& g : groups_) {
        if (s > g.model.capacity_tokens) continue;
        const double t = g.model.scheme.pp * (g.model.DocumentFloorMs(s) + g.model.time.c_ms);
        if (t > lb_.longest_doc_ms) thresholds_.push_back(t);
        // cp > 1: where the document may start to run whole (its unit drops the exchange).
        const double whole = WholeThresholdMs(g.model, s);
        if (whole > lb_.longest_doc_ms && whole < kInf) thresholds_.push_back(whole);
        // Over rank subsets, where it may run on k ranks (WorkMs charges the narrowest).
        const ShardCost& cost = g.model.shard;
        if (g.model.scheme.cp > 1 && cost.space == CpLayoutSpace::kAnySubset) {
          for (int k = 2; k < cost.cp; ++k) {
            const double at = WidthThresholdMs(g.model, s, k);
            if (at > lb_.longest_doc_ms && at < whole) thresholds_.push_back(at);
          }
        }
      }
    }
    std::sort(thresholds_.begin(), thresholds_.end());
    thresholds_.erase(std::unique(thresholds_.begin(), thresholds_.end()), thresholds_.end());
    lb_.fractional_ms = LeastFixedPointFrom(lb_.longest_doc_ms);
  }

  // The least theta >= from with Fractional(theta) <= theta (no relaxation), where the
  // units change with theta only at thresholds_ (eligibility, forced exchange; no
  // integrality cut): the first interval [t_k, t_k+1) of from and the thresholds above it
  // whose constant value is <= t_k+1, by binary search, each step asking only which side
  // of t_k+1 the value is on.
  double LeastFixedPointFrom(double from) {
    std::vector<double> t = {from};
    t.insert(t.end(), std::upper_bound(thresholds_.begin(), thresholds_.end(), from),
             thresholds_.end());
    std::size_t lo = 0, hi = t.size() - 1;
    while (lo < hi) {
      const std::size_t mid = (lo + hi) / 2;
      if (FractionalAtMost(t[mid], false, t[mid + 1])) {
        hi = mid;
      } else {
        lo = mid + 1;
      }
    }
    return std::max(t[lo], Fractional(t[lo], false));
  }

  // Raises lb_.fractional_ms to the least theta with eval(theta) <= theta when eval (LP
  // with a tighter unit, never lower than the plain one) exceeds it there: eval varies
  // continuously, so bisect, keeping `lo` where eval(lo) > lo (so T* > lo). at_most(theta,
  // x) says whether eval(theta) <= x.
  template <typename AtMost>
  void Raise(const AtMost& at_most) {
    double lo = lb_.fractional_ms;
    if (at_most(lo, lo)) return;
    double hi = lo;
    do {
      lo = hi;
      hi *= 1.25;
    } while (!at_most(hi, hi));
    for (int i = 0; i < kBisectionSteps && hi - lo > 1e-7 * hi; ++i) {
      const double mid = 0.5 * (lo + hi);
      (at_most(mid, mid) ? hi : lo) = mid;
    }
    lb_.fractional_ms = lo;
  }

  // Pipelines with pp > 1 charged each token its share of the micro-batch constant. Those
  // units do not move with theta, so the exact search over the thresholds applies, from
  // the bound so far (T* is not below it).
  void RaiseChargingMicroBatchConstant() {
    bool any_deep = false;
    for (const auto& g : groups_) any_deep = any_deep || g.model.scheme.pp > 1;
    if (!any_deep) return;
    for (auto& g : groups_) g.charge_c = g.model.scheme.pp > 1;
    lb_.fractional_ms = LeastFixedPointFrom(lb_.fractional_ms);
    for (auto& g : groups_) g.charge_c = false;
  }

  // The integrality cut, for each nonempty choice of pp = 1 groups to apply it to (only
  // where the LP is the closed-form sweep: Clp per choice would cost too much). The cut's
  // right-hand side moves with theta, so bisect from the bound so far, as above.
  void RaiseWithIntegralityCuts(bool deep) {
    std::vector<std::size_t> flat;
    for (std::size_t g = 0; g < groups_.size(); ++g) {
      if (groups_[g].model.scheme.pp == 1) flat.push_back(g);
    }
    if (groups_.size() > 2) return;
    for (unsigned mask = 1; mask < (1u << flat.size()); ++mask) {
      for (std::size_t k = 0; k < flat.size(); ++k) {
        groups_[flat[k]].lambda = (mask >> k) & 1u ? 1.0 : 0.0;
      }
      Raise([&](double theta, double x) { return FractionalAtMost(theta, deep, x); });
    }
    for (auto& g : groups_) g.lambda = 0.0;
  }

  // Exact over the few pipelines that alone may run a batch's longest documents at step time
  // theta, where the fractional bound splits documents between them. The k longest
  // documents run only on the union S of the groups eligible for them; while S holds at
  // most kFewPipelines pipelines, a plan's makespan is at least the least makespan of those
  // documents (up to kFewDocuments of them, the longest) on S's pipelines, each pipeline
  // taking c plus the WorkMs of its documents (its stages' time is at least the sum of its
  // micro-batches' stage times, each at least c plus its documents' balanced share and the
  // exchange of those that must be sharded at theta). Taken for each S the longest
  // documents grow through. The value changes only where eligibility or a forced exchange
  // does, at the search's thresholds: cached by the costs it was computed from.
  double FewPipelinesBound(double theta) {
    constexpr std::size_t kFewDocuments = 12;
    constexpr long kMaxNodes = 200000;
    double bound = 0;
    ForEachLongestDocumentSet(
        docs_, groups_, theta, 3, static_cast<double>(kFewDocuments),
        [&](const std::vector<char>& in, int, const std::vector<std::size_t>& docs) {
          std::vector<std::int64_t> prefix;  // one length per copy, longest first
          for (const std::size_t i : docs) {
            for (double k = 0; k < docs_[i].second && prefix.size() < kFewDocuments; ++k) {
              prefix.push_back(docs_[i].first);
            }
          }
          std::vector<double> c, key;
          std::vector<int> kind;
          for (std::size_t g = 0; g < groups_.size(); ++g) {
            if (!in[g]) continue;
            key.push_back(static_cast<double>(g));
            for (int j = 0; j < groups_[g].count; ++j) {
              c.push_back(groups_[g].model.time.c_ms);
              kind.push_back(static_cast<int>(g));
            }
          }
          std::vector<std::vector<double>> cost;
          for (const std::int64_t len : prefix) {
            std::vector<double>& row = cost.emplace_back();
            for (std::size_t p = 0; p < c.size(); ++p) {
              const PipelineModel& model = groups_[static_cast<std::size_t>(kind[p])].model;
              row.push_back(Eligible(model, len, theta) ? WorkMs(model, len, theta) : kInf);
            }
            key.insert(key.end(), row.begin(), row.end());
          }
          auto [it, fresh] = few_pipelines_cache_.try_emplace(std::move(key), 0.0);
          if (fresh) {
            // A pipeline's time is c plus its documents' work.
            std::vector<std::size_t> order(prefix.size());
            std::iota(order.begin(), order.end(), 0);
            const ExactSplitResult split = ExactSplit(
                prefix.size(), kind, order,
                [&](double load, std::size_t d, std::size_t q) {
                  return cost[d][q] == kInf ? kInf : (load == 0 ? c[q] : load) + cost[d][q];
                },
                kMaxNodes);
            // An unfinished search proves nothing.
            it->second = split.finished && split.makespan < kInf ? split.makespan : 0.0;
          }
          bound = std::max(bound, it->second);
        });
    return bound;
  }

  std::span<const PipelineGroup> pipeline_groups_;
  const ScheduleOptions& schedule_;
  RelaxationTable* relaxations_;
  std::vector<Group> groups_;
  std::vector<std::pair<std::int64_t, double>> docs_;  // distinct lengths and their counts
  std::vector<double> thresholds_;  // above the longest-document bound, where the units change
  std::unique_ptr<CuttingPlanes> planes_;                      // three or more groups, made once
  std::map<std::vector<double>, double> few_pipelines_cache_;  // FewPipelinesBound's
  LowerBound lb_;
};

}  // namespace

double LongestDocumentBoundMs(std::span<const std::int64_t> distinct_lengths,
                              std::span<const PipelineGroup> groups) {
  // Whichever pipeline runs a document, that pipeline's time is at least pp times the
  // stage time of the micro-batch holding it.
  double bound = 0;
  for (auto s : distinct_lengths) {
    double best = kInf;
    for (const PipelineGroup& g : groups) {
      const PipelineModel& p = g.model;
      if (s > p.capacity_tokens) continue;
      best = std::min(best, p.scheme.pp * (p.DocumentFloorMs(s) + p.time.c_ms));
    }
    bound = std::max(bound, best);
  }
  return bound;
}

double LongestDocumentBoundMs(const AssignProblem& problem) {
  return LongestDocumentBoundMs(DistinctLengths(problem.lengths),
                                GroupPipelines(problem.pipelines));
}

std::vector<std::int64_t> DistinctLengths(std::span<const std::int64_t> lengths) {
  std::vector<std::int64_t> out(lengths.begin(), lengths.end());
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::vector<std::pair<std::int64_t, double>> LengthCounts(std::span<const std::int64_t> lengths) {
  std::vector<std::int64_t> sorted(lengths.begin(), lengths.end());
  std::sort(sorted.begin(), sorted.end());
  std::vector<std::pair<std::int64_t, double>> out;
  for (std::int64_t s : sorted) {
    if (out.empty() || out.back().first != s) {
      out.push_back({s, 1.0});
    } else {
      out.back().second += 1.0;
    }
  }
  return out;
}

LowerBound ComputeLowerBound(std::span<const PipelineGroup> groups,
                             std::span<const std::pair<std::int64_t, double>> length_counts,
                             const ScheduleOptions& schedule, RelaxationTable* relaxations) {
  if (length_counts.empty()) return LowerBound{};
  return LowerBoundSearch(groups, length_counts, schedule, relaxations).Run();
}

double CoarseLoadMs(std::span<const PipelineGroup> groups,
                    std::span<const std::pair<std::int64_t, double>> length_counts, double theta) {
  if (length_counts.empty() || groups.empty()) return 0;
  // Runs of consecutive distinct lengths with about equal tokens, each as its token-mean
  // length with the run's tokens; the longest length keeps a run of its own, so what may
  // hold it stays as it is.
  double tokens = 0;
  for (const auto& [s, n] : length_counts) tokens += n * static_cast<double>(s);
  const double per_run = tokens / kCoarseRuns;
  std::vector<std::pair<std::int64_t, double>> runs;
  double run_tokens = 0, run_count = 0;
  auto close = [&] {
    if (run_count <= 0) return;
    const auto mean = static_cast<std::int64_t>(run_tokens / run_count);
    runs.push_back({std::max<std::int64_t>(1, mean), run_count});
    run_tokens = run_count = 0;
  };
  for (std::size_t k = 0; k + 1 < length_counts.size(); ++k) {
    const auto& [s, n] = length_counts[k];
    run_tokens += n * static_cast<double>(s);
    run_count += n;
    if (run_tokens >= per_run) close();
  }
  close();
  runs.push_back(length_counts.back());
  // Runs of ascending lengths have ascending means, but neighbouring ones can coincide
  // (rounded down); the LP wants each length once.
  std::vector<std::pair<std::int64_t, double>> merged;
  for (const auto& r : runs) {
    if (!merged.empty() && merged.back().first == r.first) {
      merged.back().second += r.second;
    } else {
      merged.push_back(r);
    }
  }
  const ScheduleOptions schedule;
  return LowerBoundSearch(groups, merged, schedule, nullptr).Lp(theta);
}

LowerBound ComputeLowerBound(const AssignProblem& problem, RelaxationTable* relaxations) {
  const std::vector<PipelineGroup> groups = GroupPipelines(problem.pipelines);
  return ComputeLowerBound(groups, LengthCounts(problem.lengths), problem.schedule, relaxations);
}

}  // namespace hydraulis
