// Strategy proposal tests: the histogram, the group-time model, the DP against an
// exhaustive evaluation of the same objective on tiny histograms, invariants and an
// end-to-end plan on the real Wikipedia lengths, and the errors of bad input.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "../base/test_support.h"
#include "hydraulis/assign/planner.h"
#include "hydraulis/base/error.h"
#include "hydraulis/base/rng.h"
#include "hydraulis/cost/capacity.h"
#include "hydraulis/data/batch_sampler.h"
#include "hydraulis/data/lengths.h"
#include "hydraulis/propose/histogram.h"
#include "hydraulis/propose/long_document_count.h"
#include "hydraulis/propose/proposal_dp.h"
#include "hydraulis/propose/propose.h"
#include "hydraulis/spec/spec_io.h"

namespace hydraulis {
namespace {

using test_support::InvalidInputMessage;

const std::string kRoot = HYDRAULIS_SOURCE_DIR;
constexpr double kInf = std::numeric_limits<double>::infinity();

const Profile& Profile32b() {
  static const Profile profile = LoadProfile(kRoot + "/configs/profiles/llama-32b-a800.json");
  return profile;
}

// The shared 1M Wikipedia lengths when present, else the bundled 20K sample.
const std::vector<std::int64_t>& RealLengths() {
  static const std::vector<std::int64_t> lengths = [] {
    std::string path = kRoot + "/../shared/data/wikipedia-doc-lengths.txt";
    if (!std::filesystem::exists(path)) path = kRoot + "/data/wikipedia-sample-lengths.txt";
    return ReadLengths(path);
  }();
  return lengths;
}

bool Near(double a, double b) {
  if (a == b) return true;  // also both infinite
  return std::abs(a - b) <= 1e-9 * std::max(std::abs(a), std::abs(b));
}

// ---------------------------------------------------------------------------------------
// Histogram.

TEST(HistogramTest, BinsAreHalfOpenAtTheResolutionAndTruncateToMaxLen) {
  const std::vector<std::int64_t> lengths = {1, 128, 129, 256, 300, 1000, 5000};
  const LengthHistogram h = BuildLengthHistogram(lengths, 1000, 128);
  EXPECT_EQ(h.resolution_tokens, 128);
  EXPECT_EQ(h.max_len, 1000);
  EXPECT_EQ(h.documents, 7);
  EXPECT_EQ(h.truncated_documents, 1);
  EXPECT_EQ(h.tokens, 1 + 128 + 129 + 256 + 300 + 1000 + 1000);
  ASSERT_EQ(h.bins.size(), 4u);
  // (0,128]: 1, 128.
  EXPECT_EQ(h.bins[0].index, 1);
  EXPECT_EQ(h.bins[0].upper_tokens, 128);
  EXPECT_EQ(h.bins[0].documents, 2);
  EXPECT_EQ(h.bins[0].tokens, 129);
  EXPECT_EQ(h.bins[0].longest, 128);
  EXPECT_DOUBLE_EQ(h.bins[0].squared_tokens, 1.0 + 128.0 * 128.0);
  // (128,256]: 129, 256.
  EXPECT_EQ(h.bins[1].index, 2);
  EXPECT_EQ(h.bins[1].documents, 2);
  EXPECT_EQ(h.bins[1].longest, 256);
  // (256,384]: 300.
  EXPECT_EQ(h.bins[2].index, 3);
  EXPECT_EQ(h.bins[2].documents, 1);
  // The last bin (896, 1000] is cut at max_len and holds the two truncated lengths.
  EXPECT_EQ(h.bins[3].index, 8);
  EXPECT_EQ(h.bins[3].upper_tokens, 1000);
  EXPECT_EQ(h.bins[3].documents, 2);
  EXPECT_EQ(h.bins[3].longest, 1000);
}

TEST(HistogramTest, RejectsBadInput) {
  const std::vector<std::int64_t> ok = {5};
  EXPECT_NE(InvalidInputMessage([] { BuildLengthHistogram({}, 10, 1); }).find("no documents"),
            std::string::npos);
  const std::vector<std::int64_t> zero = {3, 0};
  EXPECT_NE(InvalidInputMessage([&] { BuildLengthHistogram(zero, 10, 1); }).find("lengths[1]"),
            std::string::npos);
  EXPECT_NE(InvalidInputMessage([&] { BuildLengthHistogram(ok, 0, 1); }).find("max-len"),
            std::string::npos);
  EXPECT_NE(InvalidInputMessage([&] { BuildLengthHistogram(ok, 10, 0); }).find("resolution"),
            std::string::npos);
  EXPECT_NE(InvalidInputMessage([&] {
              BuildLengthHistogram(ok, std::int64_t{1} << 40, 1);
            }).find("resolution"),
            std::string::npos);
}

// ---------------------------------------------------------------------------------------
// Group time.

DpScheme MakeScheme(int tp, int pp, double a, double b, double c, std::int64_t capacity) {
  return DpScheme{Scheme{1, tp, pp}, TimeModel{a, b, c}, capacity, {}};
}

TEST(GroupMsTest, MatchesTheDocumentedFormula) {
  const DpScheme s = MakeScheme(2, 3, 1e-3, 0.5, 10, 100);
  IntervalLoad load{4, 250, 4 * 62.5 * 62.5, 90};  // longest 90, 250 tokens
  const double longest = 1e-3 * 90 * 90 + 0.5 * 90;
  const double work = 1e-3 * load.squared_tokens + 0.5 * 250;
  // d = 1: 3 micro-batches of <= 100 tokens; 2 warm-up/cool-down stages.
  EXPECT_DOUBLE_EQ(GroupMs(s, load, 1), std::max(work, longest) + 10 * 3 + 2 * (longest + 10));
  // d = 2: 125 tokens each -> 2 micro-batches.
  EXPECT_DOUBLE_EQ(GroupMs(s, load, 2), std::max(work / 2, longest) + 10 * 2 + 2 * (longest + 10));
  // Many replicas: the longest document bounds the share.
  EXPECT_DOUBLE_EQ(GroupMs(s, load, 50), longest + 10 + 2 * (longest + 10));
  for (int d = 1; d < 60; ++d) EXPECT_LE(GroupMs(s, load, d + 1), GroupMs(s, load, d));
}

// ---------------------------------------------------------------------------------------
// The DP against an exhaustive evaluation of its objective.

// Every split of bins [0, j) into contiguous intervals, each given to d >= 1 replicas of a
// scheme that holds the interval's longest document, within `gpus` GPUs; `top_extra` is
// added to the interval holding bin j-1. Returns the least maximum GroupMs (+inf if none).
double BruteForce(const std::vector<DpScheme>& schemes, const LengthHistogram& h, double scale,
                  int gpus, int j, const IntervalLoad& top_extra) {
  auto load = [&](int lo, int hi) {  // bins [lo, hi), summed directly
    IntervalLoad l;
    for (int b = lo; b < hi; ++b) {
      l.documents += scale * static_cast<double>(h.bins[b].documents);
      l.tokens += scale * static_cast<double>(h.bins[b].tokens);
      l.squared_tokens += scale * h.bins[b].squared_tokens;
    }
    l.longest = h.bins[hi - 1].longest;
    if (hi == j) {
      l.documents += top_extra.documents;
      l.tokens += top_extra.tokens;
      l.squared_tokens += top_extra.squared_tokens;
    }
    return l;
  };
  double best = kInf;
  // rec(lo, left, worst): bins [lo, j) still to cover with `left` GPUs.
  std::function<void(int, int, double)> rec = [&](int lo, int left, double worst) {
    if (worst >= best) return;
    if (lo == j) {
      best = worst;
      return;
    }
    for (int hi = lo + 1; hi <= j; ++hi) {
      const IntervalLoad l = load(lo, hi);
      for (const DpScheme& s : schemes) {
        if (s.capacity_tokens < l.longest) continue;
        for (int d = 1; d * s.scheme.Gpus() <= left; ++d) {
          rec(hi, left - d * s.scheme.Gpus(), std::max(worst, GroupMs(s, l, d)));
        }
      }
    }
  };
  rec(0, gpus, 0.0);
  return j == 0 ? 0.0 : best;
}

// A random tiny histogram (1..5 non-empty bins of resolution 100) and 1..3 schemes.
struct TinyCase {
  LengthHistogram histogram;
  std::vector<DpScheme> schemes;
  int gpus = 0;
  double scale = 1;
};

TinyCase RandomTinyCase(Rng& rng) {
  TinyCase t;
  std::vector<std::int64_t> lengths;
  const int bins = 1 + static_cast<int>(rng.Below(5));
  std::int64_t k = 0;
  for (int b = 0; b < bins; ++b) {
    k += 1 + static_cast<std::int64_t>(rng.Below(3));  // gaps make empty bins
    const int docs = 1 + static_cast<int>(rng.Below(6));
    for (int i = 0; i < docs; ++i) {
      lengths.push_back((k - 1) * 100 + 1 + static_cast<std::int64_t>(rng.Below(100)));
    }
  }
  t.histogram = BuildLengthHistogram(lengths, 10'000, 100);
  const std::int64_t longest = t.histogram.bins.back().longest;
  const int gpu_choices[] = {1, 2, 3, 4, 6};
  const int schemes = 1 + static_cast<int>(rng.Below(3));
  for (int i = 0; i < schemes; ++i) {
    const int g = gpu_choices[rng.Below(5)];
    const int pp = 1 + static_cast<int>(rng.Below(2));
    const int tp = g % pp == 0 ? g / pp : g;
    const int real_pp = g % pp == 0 ? pp : 1;
    // The first scheme holds everything, the others a random prefix of lengths.
    const std::int64_t capacity =
        i == 0 ? longest + static_cast<std::int64_t>(rng.Below(200))
               : 50 + static_cast<std::int64_t>(rng.Below(static_cast<std::uint64_t>(longest)));
    t.schemes.push_back(MakeScheme(tp, real_pp, rng.Uniform() * 1e-3 / g,
                                   (0.05 + rng.Uniform()) / g, rng.Uniform() * 30, capacity));
  }
  t.gpus = 1 + static_cast<int>(rng.Below(12));
  t.scale = rng.Below(3) == 0 ? 0.05 + rng.Uniform() * 0.3 : 1.0;
  return t;
}

// Checks that `s`'s groups tile bins 0..bin in order, each held by its scheme, and use
// s.gpus <= the cluster's GPUs; returns the slowest group's time.
double ExpectGroupsTileBins(const TinyCase& t, const DpSolution& s, int bin) {
  int next = 0, gpus = 0;
  double worst = 0;
  for (const DpGroup& g : s.groups) {
    EXPECT_EQ(g.first_bin, next);
    EXPECT_LE(g.first_bin, g.last_bin);
    next = g.last_bin + 1;
    const DpScheme& scheme = t.schemes[static_cast<std::size_t>(g.scheme)];
    gpus += g.replicas * scheme.scheme.Gpus();
    EXPECT_GE(scheme.capacity_tokens,
              t.histogram.bins[static_cast<std::size_t>(g.last_bin)].longest);
    worst = std::max(worst, g.ms);
  }
  EXPECT_EQ(next, bin + 1);
  EXPECT_EQ(gpus, s.gpus);
  EXPECT_LE(gpus, t.gpus);
  return worst;
}

TEST(ProposalDpTest, TableEqualsExhaustiveSearchOnTinyHistograms) {
  Rng rng(7);
  int feasible = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    TinyCase t = RandomTinyCase(rng);
    // Schemes wider than the cluster are not the DP's input.
    std::erase_if(t.schemes, [&](const DpScheme& s) { return s.scheme.Gpus() > t.gpus; });
    if (t.schemes.empty()) continue;
    DpOptions options;
    options.document_scale = t.scale;
    const ProposalDp dp(t.schemes, t.histogram, t.gpus, options);
    const int bins = dp.bin_count();
    for (int n = 0; n <= t.gpus; ++n) {
      for (int j = 0; j <= bins; ++j) {
        const double expected = BruteForce(t.schemes, t.histogram, t.scale, n, j, {});
        ASSERT_TRUE(Near(dp.Makespan(n, j), expected))
            << "trial " << trial << " n " << n << " j " << j << ": dp " << dp.Makespan(n, j)
            << " exhaustive " << expected;
        if (expected < kInf) ++feasible;
      }
    }
  }
  EXPECT_GT(feasible, 1000);
}

TEST(ProposalDpTest, SolveForLongestIsOptimalConsistentAndFillsIdleGpus) {
  Rng rng(11);
  for (int trial = 0; trial < 2000; ++trial) {
    TinyCase t = RandomTinyCase(rng);
    std::erase_if(t.schemes, [&](const DpScheme& s) { return s.scheme.Gpus() > t.gpus; });
    if (t.schemes.empty()) continue;
    for (bool fill : {false, true}) {
      DpOptions options;
      options.document_scale = t.scale;
      options.fill_idle_gpus = fill;
      const ProposalDp dp(t.schemes, t.histogram, t.gpus, options);
      for (int bin = 0; bin < dp.bin_count(); ++bin) {
        for (int wanted : {1, 2}) {
          // The top bin holds at least `wanted` documents of its mean shape.
          const HistogramBin& top = t.histogram.bins[static_cast<std::size_t>(bin)];
          const double present = t.scale * static_cast<double>(top.documents);
          IntervalLoad extra;
          if (present < wanted) {
            const double f = wanted / present - 1;
            extra = {wanted - present, f * t.scale * static_cast<double>(top.tokens),
                     f * t.scale * top.squared_tokens, 0};
          }
          const double expected =
              BruteForce(t.schemes, t.histogram, t.scale, t.gpus, bin + 1, extra);
          const DpSolution s = dp.SolveForLongest(bin, wanted);
          ASSERT_TRUE(Near(s.makespan_ms, expected))
              << "trial " << trial << " bin " << bin << " documents " << wanted << ": dp "
              << s.makespan_ms << " exhaustive " << expected;
          // A second document in the top bin never makes the batch faster.
          if (wanted == 2) {
            EXPECT_GE(s.makespan_ms, dp.SolveForLongest(bin).makespan_ms);
          }
          if (!(expected < kInf)) {
            EXPECT_TRUE(s.groups.empty());
            continue;
          }
          // The groups tile bins 0..bin in order, fit the cluster, hold their documents and
          // reach the makespan (exactly without filling, at most with it).
          ASSERT_FALSE(s.groups.empty());
          const int gpus = s.gpus;
          const double worst = ExpectGroupsTileBins(t, s, bin);
          if (fill) {
            EXPECT_LE(worst, s.makespan_ms * (1 + 1e-12));
            for (const DpGroup& g : s.groups) {
              EXPECT_GT(t.schemes[static_cast<std::size_t>(g.scheme)].scheme.Gpus(), t.gpus - gpus);
            }
          } else {
            EXPECT_TRUE(Near(worst, s.makespan_ms));
          }
        }
      }
    }
  }
}

TEST(ProposalDpTest, OneLongDocumentDoesNotPullWideSchemesIntoTheBulk) {
  // One 32K-like document only the wide scheme holds, and a bulk of short documents that
  // the narrow scheme runs twice as efficiently. The makespan is the long document's
  // time whatever the bulk runs on; ties must go to the narrow scheme.
  std::vector<std::int64_t> lengths(400, 500);
  lengths.push_back(8000);
  const LengthHistogram h = BuildLengthHistogram(lengths, 8000, 500);
  const std::vector<DpScheme> schemes = {MakeScheme(8, 1, 0, 1.0 / 8, 10, 10'000),
                                         MakeScheme(2, 1, 0, 1.0 / 4, 10, 1'000)};
  DpOptions options;
  options.fill_idle_gpus = false;
  const ProposalDp dp(schemes, h, 64, options);
  const DpSolution s = dp.SolveForLongest(dp.bin_count() - 1);
  ASSERT_EQ(s.groups.size(), 2u);
  EXPECT_EQ(s.groups[1].scheme, 0);
  EXPECT_EQ(s.groups[1].replicas, 1);
  EXPECT_EQ(s.groups[0].scheme, 1);
}

TEST(GroupMsTest, FlatReplicasIsWhereGroupTimeStopsFalling) {
  Rng rng(17);
  for (int trial = 0; trial < 500; ++trial) {
    const DpScheme s =
        MakeScheme(1 + static_cast<int>(rng.Below(4)), 1 + static_cast<int>(rng.Below(3)),
                   rng.Uniform() * 1e-3, 0.05 + rng.Uniform(), rng.Uniform() * 30,
                   100 + static_cast<std::int64_t>(rng.Below(2'000)));
    IntervalLoad load;
    load.longest =
        1 + static_cast<std::int64_t>(rng.Below(static_cast<std::uint64_t>(s.capacity_tokens)));
    load.documents = 1 + static_cast<double>(rng.Below(500));
    load.tokens = load.documents *
                  (1 + static_cast<double>(rng.Below(static_cast<std::uint64_t>(load.longest))));
    load.squared_tokens = load.tokens * static_cast<double>(load.longest) * rng.Uniform();
    const int flat = FlatGroupReplicas(s, load);
    ASSERT_GE(flat, 1);
    ASSERT_LT(flat, 1'000'000);
    const double at_flat = GroupMs(s, load, flat);
    for (int d : {flat + 1, flat + 7, 2 * flat + 100}) {
      EXPECT_TRUE(Near(GroupMs(s, load, d), at_flat)) << "trial " << trial << " d " << d;
    }
    if (flat > 1) {
      EXPECT_GE(GroupMs(s, load, flat - 1), at_flat);
    }
  }
}

TEST(ProposalDpTest, CoarseLevelsGiveValidSolutionsNoBetterThanTheExactTable) {
  // max_levels below the cluster's GPU multiples makes a level stand for several of them
  // and charges groups whole levels: every solution still tiles its bins within the
  // cluster, and its makespan is never below the exact table's (it is one of the exact
  // table's options). At or above the multiples the table is the exact one.
  Rng rng(23);
  int coarse = 0;
  for (int trial = 0; trial < 1000; ++trial) {
    TinyCase t = RandomTinyCase(rng);
    std::erase_if(t.schemes, [&](const DpScheme& s) { return s.scheme.Gpus() > t.gpus; });
    if (t.schemes.empty()) continue;
    DpOptions exact_options;
    exact_options.document_scale = t.scale;
    const ProposalDp exact(t.schemes, t.histogram, t.gpus, exact_options);
    const int multiples = t.gpus / exact.gpu_step();
    for (int max_levels : {1, 2, 3, multiples}) {
      DpOptions options = exact_options;
      options.max_levels = max_levels;
      const ProposalDp dp(t.schemes, t.histogram, t.gpus, options);
      EXPECT_EQ(dp.gpu_step(), exact.gpu_step() * ((multiples + max_levels - 1) / max_levels));
      if (dp.gpu_step() != exact.gpu_step()) ++coarse;
      for (int bin = 0; bin < dp.bin_count(); ++bin) {
        const DpSolution e = exact.SolveForLongest(bin);
        const DpSolution s = dp.SolveForLongest(bin);
        if (max_levels >= multiples) {
          EXPECT_EQ(s.makespan_ms, e.makespan_ms);
          ASSERT_EQ(s.groups.size(), e.groups.size());
          continue;
        }
        EXPECT_GE(s.makespan_ms, e.makespan_ms * (1 - 1e-12)) << "trial " << trial;
        if (s.groups.empty()) continue;
        EXPECT_LE(ExpectGroupsTileBins(t, s, bin), s.makespan_ms * (1 + 1e-12));
      }
    }
  }
  EXPECT_GT(coarse, 500);
}

TEST(ProposalDpTest, TheTableDoesNotDependOnTheThreadCount) {
  // 512 GPUs on the real lengths: 128 levels of 256 bins, enough cells to fill in parallel.
  const Profile& profile = Profile32b();
  const int gpus = 512;
  const std::vector<DpScheme> schemes =
      UsableSchemes(profile, gpus, DefaultOptimizerLayout(profile, gpus));
  const LengthHistogram h = BuildLengthHistogram(RealLengths(), 32'768, 128);
  DpOptions options;
  options.document_scale = 512.0 * 1'600 / static_cast<double>(h.tokens);
  options.threads = 1;
  const ProposalDp one(schemes, h, gpus, options);
  for (int threads : {2, 3}) {
    options.threads = threads;
    const ProposalDp many(schemes, h, gpus, options);
    EXPECT_EQ(many.evaluations(), one.evaluations());
    for (int n = 0; n <= gpus; n += one.gpu_step()) {
      for (int j = 0; j <= one.bin_count(); ++j) {
        ASSERT_EQ(many.Makespan(n, j), one.Makespan(n, j)) << threads << " threads, n " << n;
      }
    }
    for (int bin = 0; bin < one.bin_count(); bin += 17) {
      const DpSolution a = one.SolveForLongest(bin), b = many.SolveForLongest(bin);
      ASSERT_EQ(a.groups.size(), b.groups.size());
      for (std::size_t g = 0; g < a.groups.size(); ++g) {
        EXPECT_EQ(a.groups[g].scheme, b.groups[g].scheme);
        EXPECT_EQ(a.groups[g].replicas, b.groups[g].replicas);
        EXPECT_EQ(a.groups[g].last_bin, b.groups[g].last_bin);
      }
    }
  }
}

TEST(ProposalDpTest, RejectsBadPreconditions) {
  const LengthHistogram h = BuildLengthHistogram(std::vector<std::int64_t>{10}, 100, 10);
  const DpScheme s = MakeScheme(4, 1, 0, 1, 1, 100);
  EXPECT_NE(InvalidInputMessage([&] { ProposalDp({s}, h, 0); }).find("gpus"), std::string::npos);
  EXPECT_NE(InvalidInputMessage([&] { ProposalDp({}, h, 4); }).find("no scheme"),
            std::string::npos);
  EXPECT_NE(InvalidInputMessage([&] { ProposalDp({s}, h, 2); }).find("needs 4 GPUs"),
            std::string::npos);
  DpOptions bad;
  bad.document_scale = 0;
  EXPECT_NE(InvalidInputMessage([&] { ProposalDp({s}, h, 4, bad); }).find("scale"),
            std::string::npos);
  DpOptions no_levels;
  no_levels.max_levels = 0;
  EXPECT_NE(InvalidInputMessage([&] { ProposalDp({s}, h, 4, no_levels); }).find("max_levels"),
            std::string::npos);
  DpOptions bad_threads;
  bad_threads.threads = -1;
  EXPECT_NE(InvalidInputMessage([&] { ProposalDp({s}, h, 4, bad_threads); }).find("threads"),
            std::string::npos);
}

// ---------------------------------------------------------------------------------------
// Real data: 32B on 64 and 1,024 GPUs over the Wikipedia lengths truncated to 32K.

void ExpectValidProposal(const Proposal& p, const Profile& profile, int gpus) {
  ASSERT_FALSE(p.strategies.empty());
  ASSERT_EQ(p.strategies.size(), p.candidates.strategies.size());
  const OptimizerLayout& layout = p.candidates.optimizer_layout;
  EXPECT_EQ(std::int64_t{layout.dp} * layout.tp * layout.pp, gpus);
  // The fallback first: the homogeneous optimizer layout.
  EXPECT_TRUE(p.strategies.front().fallback);
  EXPECT_EQ(
      p.strategies.front().strategy.pipelines,
      std::vector<Scheme>(static_cast<std::size_t>(layout.dp), Scheme{1, layout.tp, layout.pp}));
  std::set<std::vector<Scheme>> seen;
  std::set<std::string> names;
  std::set<std::int64_t> served;
  for (const ProposedStrategy& s : p.strategies) {
    EXPECT_TRUE(seen.insert(s.strategy.pipelines).second)
        << "duplicate " << StrategyDescription(s.strategy);
    EXPECT_TRUE(names.insert(s.strategy.name).second);
    EXPECT_LE(s.strategy.Gpus(), gpus);
    std::int64_t widest = 0;
    for (const Scheme& scheme : s.strategy.pipelines) {
      EXPECT_NE(profile.Find(scheme), nullptr) << SchemeName(scheme);
      EXPECT_EQ(gpus % (scheme.tp * scheme.cp), 0) << SchemeName(scheme);
      widest = std::max(widest, CapacityTokens(profile, scheme, layout));
    }
    for (std::int64_t longest : s.longest_tokens) {
      EXPECT_GE(widest, longest) << s.strategy.name;
      EXPECT_TRUE(served.insert(longest).second) << "bin served twice: " << longest;
    }
    for (std::int64_t longest : s.shared_top_tokens) EXPECT_GE(widest, longest) << s.strategy.name;
    if (s.cp_pool) {
      // Megatron's shape: every GPU in pipelines of one cp scheme that holds every bin.
      EXPECT_TRUE(s.longest_tokens.empty() && s.shared_top_tokens.empty()) << s.strategy.name;
      EXPECT_EQ(s.strategy.Gpus(), gpus) << s.strategy.name;
      const Scheme& first = s.strategy.pipelines.front();
      EXPECT_GT(first.cp, 1) << s.strategy.name;
      for (const Scheme& scheme : s.strategy.pipelines) EXPECT_EQ(scheme, first);
      EXPECT_TRUE(s.strategy.name.starts_with("pool-cp" + std::to_string(first.cp) + "-tp" +
                                              std::to_string(first.tp)))
          << s.strategy.name;
    } else if (!s.fallback && !s.longest_tokens.empty()) {
      EXPECT_EQ(s.strategy.name, "up-to-" + std::to_string(s.longest_tokens.back()));
    } else if (!s.fallback) {
      // Only answers for k >= 2 documents in a bin (ProposeOptions::top_documents), named
      // after the first of them.
      ASSERT_FALSE(s.shared_top_tokens.empty()) << s.strategy.name;
      const std::string suffix = "-x" + std::to_string(s.top_documents);
      ASSERT_TRUE(s.strategy.name.starts_with("up-to-") && s.strategy.name.ends_with(suffix))
          << s.strategy.name;
      const std::int64_t named =
          std::stoll(s.strategy.name.substr(6, s.strategy.name.size() - 6 - suffix.size()));
      EXPECT_TRUE(std::binary_search(s.shared_top_tokens.begin(), s.shared_top_tokens.end(), named))
          << s.strategy.name;
    }
  }
  EXPECT_EQ(static_cast<int>(served.size()), p.bins);
  // The file round-trips through the strict reader unchanged.
  const CandidateSet parsed = ParseCandidates(CandidatesToJson(p.candidates), "proposed", profile);
  ASSERT_EQ(parsed.strategies.size(), p.candidates.strategies.size());
  for (std::size_t i = 0; i < parsed.strategies.size(); ++i) {
    EXPECT_EQ(parsed.strategies[i].name, p.candidates.strategies[i].name);
    EXPECT_EQ(parsed.strategies[i].pipelines, p.candidates.strategies[i].pipelines);
  }
}

// cp schemes take part when the histogram needs them: at 32K every document fits TP16
// (43,520 tokens on 256 GPUs), so nothing changes; at 128K the longest bins need them.
TEST(ProposeTest, CpSchemesOnlyWhenTheLongestDocumentNeedsThem) {
  const Profile profile = LoadProfile(kRoot + "/configs/profiles/llama-32b-a800.json");
  auto uses_cp = [](const Proposal& p) {
    for (const auto& s : p.candidates.strategies) {
      for (const Scheme& x : s.pipelines) {
        if (x.cp > 1) return true;
      }
    }
    return false;
  };
  ProposeOptions options;
  options.gpus = 256;
  options.tokens_per_batch = 2'097'152;
  options.max_len = 32'768;
  const Proposal short_context = ProposeStrategies(profile, RealLengths(), options);
  EXPECT_FALSE(uses_cp(short_context));
  for (const DpScheme& s : short_context.schemes) EXPECT_EQ(s.scheme.cp, 1);
  options.cp_schemes = CpSchemes::kNever;
  const Proposal never = ProposeStrategies(profile, RealLengths(), options);
  EXPECT_EQ(CandidatesToJson(never.candidates), CandidatesToJson(short_context.candidates));
  options.cp_schemes = CpSchemes::kAlways;
  EXPECT_TRUE(uses_cp(ProposeStrategies(profile, RealLengths(), options)));

  options.max_len = 131'072;
  options.cp_schemes = CpSchemes::kWhenNeeded;
  const Proposal long_context = ProposeStrategies(profile, RealLengths(), options);
  EXPECT_TRUE(uses_cp(long_context));
  // The strategy for the longest bin holds a 128K document.
  std::int64_t widest = 0;
  for (const Scheme& x : long_context.candidates.strategies.at(1).pipelines) {
    widest = std::max(widest, CapacityTokens(profile, x, long_context.candidates.optimizer_layout));
  }
  EXPECT_GE(widest, 131'072);
  // Beside the DP's answers, Megatron's shape: for every cp scheme that holds the longest
  // document, all 256 GPUs in its pipelines (once, whoever proposed it).
  int pools = 0;
  for (const DpScheme& s : long_context.schemes) {
    if (s.scheme.cp < 2 || 256 % s.scheme.Gpus() != 0 || s.capacity_tokens < 131'072) continue;
    ++pools;
    const std::vector<Scheme> pool(static_cast<std::size_t>(256 / s.scheme.Gpus()), s.scheme);
    EXPECT_EQ(std::count_if(long_context.candidates.strategies.begin(),
                            long_context.candidates.strategies.end(),
                            [&](const Strategy& x) { return x.pipelines == pool; }),
              1)
        << SchemeName(s.scheme);
  }
  EXPECT_GE(pools, 3);
  for (const ProposedStrategy& p : short_context.strategies) EXPECT_FALSE(p.cp_pool);
  options.cp_schemes = CpSchemes::kNever;
  EXPECT_THROW(ProposeStrategies(profile, RealLengths(), options), InvalidInput);
}

// A 2M-token batch at 128K draws two documents of the top bin about once in 200 batches
// (and several above 64K far more often); with top_documents = 2 the proposal adds, after
// today's strategies unchanged, one per bin for batches whose two longest lie in it, and
// the one for the top bin holds both at once.
TEST(ProposeTest, TopDocumentsTwoAddsStrategiesThatHoldTwoLongestDocuments) {
  const Profile& profile = Profile32b();
  ProposeOptions options;
  options.gpus = 256;
  options.tokens_per_batch = 2'097'152;
  options.max_len = 131'072;
  const Proposal one = ProposeStrategies(profile, RealLengths(), options);
  options.top_documents = 2;
  const Proposal two = ProposeStrategies(profile, RealLengths(), options);
  ExpectValidProposal(two, profile, 256);
  ASSERT_GT(two.strategies.size(), one.strategies.size());
  // The DP's answers for one document first and unchanged (the cp pools follow all of them).
  for (std::size_t i = 0; i < one.strategies.size() && !one.strategies[i].cp_pool; ++i) {
    EXPECT_EQ(two.candidates.strategies[i].name, one.candidates.strategies[i].name);
    EXPECT_EQ(two.candidates.strategies[i].pipelines, one.candidates.strategies[i].pipelines);
  }
  const std::int64_t top = two.strategies.at(1).longest_tokens.back();
  const auto pair = std::find_if(two.strategies.begin(), two.strategies.end(), [&](const auto& s) {
    return std::find(s.shared_top_tokens.begin(), s.shared_top_tokens.end(), top) !=
           s.shared_top_tokens.end();
  });
  ASSERT_NE(pair, two.strategies.end());
  auto holding = [&](const ProposedStrategy& s) {
    int n = 0;
    for (const Scheme& x : s.strategy.pipelines) {
      n += CapacityTokens(profile, x, two.candidates.optimizer_layout) >= top ? 1 : 0;
    }
    return n;
  };
  EXPECT_EQ(holding(two.strategies[1]), 1);
  EXPECT_GE(holding(*pair), 2) << StrategyDescription(pair->strategy);
  options.top_documents = 0;
  EXPECT_NE(InvalidInputMessage([&] {
              ProposeStrategies(profile, RealLengths(), options);
            }).find("top-documents"),
            std::string::npos);
}

// Every --top-documents from 1 to 64 on every real distribution: names stay unique (they
// once collided), the file is accepted by the strict reader and the planner plans a batch.
TEST(ProposeTest, AnyTopDocumentsGivesUniqueNamesOnEveryRealDistribution) {
  const Profile& profile = Profile32b();
  std::vector<std::string> paths;
  for (const char* name : {"wikipedia-doc-lengths.txt", "code-file-lengths-cl100k.txt",
                           "code-dir-lengths-cl100k.txt"}) {
    const std::string path = kRoot + "/../shared/data/" + name;
    if (std::filesystem::exists(path)) paths.push_back(path);
  }
  if (paths.empty()) paths.push_back(kRoot + "/data/wikipedia-sample-lengths.txt");
  for (const std::string& path : paths) {
    const std::vector<std::int64_t> lengths = ReadLengths(path);
    ProposeOptions options;
    options.gpus = 256;
    options.tokens_per_batch = 2'097'152;
    options.max_len = 131'072;
    options.resolution_tokens = 4096;
    // Each K's DP strategies are the first ones of K + 1's (the k loop only appends; the cp
    // pools follow them), so K = 64 holds every smaller K's names; a few K are planned.
    std::vector<Strategy> previous;
    for (int k : {1, 2, 5, 64}) {
      SCOPED_TRACE(path + " --top-documents " + std::to_string(k));
      options.top_documents = k;
      const Proposal p = ProposeStrategies(profile, lengths, options);
      ASSERT_GE(p.candidates.strategies.size(), previous.size());
      for (std::size_t i = 0; i < previous.size(); ++i) {
        EXPECT_EQ(p.candidates.strategies[i].name, previous[i].name);
        EXPECT_EQ(p.candidates.strategies[i].pipelines, previous[i].pipelines);
      }
      previous.clear();
      for (std::size_t i = 0; i < p.strategies.size(); ++i) {
        if (!p.strategies[i].cp_pool) previous.push_back(p.candidates.strategies[i]);
      }
      ExpectValidProposal(p, profile, 256);
      EXPECT_LE(p.top_documents, k);
      const CandidateSet candidates =
          ParseCandidates(CandidatesToJson(p.candidates), "proposed", profile);
      const Planner planner(profile, candidates, PlannerOptions{});
      BatchSampler sampler(lengths, {options.tokens_per_batch, options.max_len, 7});
      const Plan plan = planner.PlanBatch(sampler.Next().lengths);
      EXPECT_GE(plan.estimated_step_ms, plan.lower_bound_ms * (1 - 1e-9));
      EXPECT_TRUE(plan.truncated.empty());
    }
  }
}

// --top-documents beyond the documents of one batch adds nothing: it is capped there.
TEST(ProposeTest, TopDocumentsIsCappedAtTheDocumentsOfOneBatch) {
  const Profile& profile = Profile32b();
  std::vector<std::int64_t> lengths(100, 20'000);  // 10 documents in a 200K batch
  lengths.push_back(30'000);
  ProposeOptions options;
  options.gpus = 64;
  options.max_len = 32'768;
  options.tokens_per_batch = 200'000;
  options.top_documents = ProposeOptions::kMaxTopDocuments;
  const Proposal p = ProposeStrategies(profile, lengths, options);
  // n = 200,000 * 101 / 2,030,000 = 9.95 documents: ceil is 10.
  EXPECT_EQ(p.top_documents, 10);
  options.top_documents = 10;
  EXPECT_EQ(CandidatesToJson(ProposeStrategies(profile, lengths, options).candidates),
            CandidatesToJson(p.candidates));
  options.top_documents = 4;
  EXPECT_EQ(ProposeStrategies(profile, lengths, options).top_documents, 4);
  options.tokens_per_batch = 0;  // the whole data set: one document's worth
  options.top_documents = 64;
  EXPECT_EQ(ProposeStrategies(profile, lengths, options).top_documents, 1);
  options.top_documents = ProposeOptions::kMaxTopDocuments + 1;
  EXPECT_NE(InvalidInputMessage([&] {
              ProposeStrategies(profile, lengths, options);
            }).find("top-documents: must be from 1 to 10000"),
            std::string::npos);
}

// Shares are probabilities for any k, even where C(n, k) is past a double's range (a batch
// of thousands of documents): each k's shares sum to 1, none negative or NaN.
TEST(ProposeTest, KthLongestSharesStayProbabilitiesForLargeBatches) {
  const Profile& profile = Profile32b();
  ProposeOptions options;
  options.gpus = 64;
  options.max_len = 32'768;
  options.tokens_per_batch = 4'000'000;  // ~7,000 Wikipedia documents
  options.top_documents = 1'000;         // C(7000, 1000) is about 10^1200
  const Proposal p = ProposeStrategies(profile, RealLengths(), options);
  ASSERT_EQ(p.top_documents, 1'000);
  double total = 0;
  for (const ProposedStrategy& s : p.strategies) {
    EXPECT_TRUE(std::isfinite(s.batch_share)) << s.strategy.name;
    EXPECT_GE(s.batch_share, -1e-6) << s.strategy.name;  // differences of sums near 1
    total += s.batch_share;
  }
  // Every k of 1..1000 puts a total share of 1 over the bins.
  EXPECT_NEAR(total, 1'000.0, 1e-6 * 1'000);
}

TEST(ProposeTest, DefaultOptimizerLayoutIsTheWidestCapacityHomogeneousLayout) {
  EXPECT_EQ(DefaultOptimizerLayout(Profile32b(), 64).dp, 4);
  EXPECT_EQ(DefaultOptimizerLayout(Profile32b(), 64).tp, 16);
  EXPECT_EQ(DefaultOptimizerLayout(Profile32b(), 64).pp, 1);
  const OptimizerLayout big = DefaultOptimizerLayout(Profile32b(), 1024);
  EXPECT_EQ(big.dp, 64);
  EXPECT_EQ(big.tp, 16);
  EXPECT_EQ(big.pp, 1);
}

TEST(ProposeTest, LlamaThirtyTwoBOnSixtyFourGpusPlansARealBatch) {
  const Profile& profile = Profile32b();
  ProposeOptions options;
  options.gpus = 64;
  options.max_len = 32'768;
  options.resolution_tokens = 128;
  const Proposal p = ProposeStrategies(profile, RealLengths(), options);
  ExpectValidProposal(p, profile, 64);
  EXPECT_EQ(p.candidates.optimizer_layout.tp, 16);
  EXPECT_GE(p.strategies.size(), 3u);
  // The strategy for the longest bin holds a 32K document: a TP16 pipeline.
  const ProposedStrategy& longest = p.strategies[1];
  EXPECT_EQ(longest.longest_tokens.back(), 32'768);
  EXPECT_EQ(longest.strategy.pipelines.front(), (Scheme{1, 16, 1}));

  // Written, read back by the strict reader, and planned by the planner.
  const CandidateSet candidates =
      ParseCandidates(CandidatesToJson(p.candidates), "proposed", profile);
  const Planner planner(profile, candidates, PlannerOptions{});
  BatchSampler sampler(RealLengths(), {200'000, 32'768, 3});
  for (int step = 0; step < 2; ++step) {
    const Plan plan = planner.PlanBatch(sampler.Next().lengths);
    EXPECT_GT(plan.estimated_step_ms, 0);
    EXPECT_GE(plan.estimated_step_ms, plan.lower_bound_ms * (1 - 1e-9));
    ASSERT_GE(plan.strategy_index, 0);
    ASSERT_LT(plan.strategy_index, static_cast<int>(candidates.strategies.size()));
    EXPECT_TRUE(plan.truncated.empty());
  }
}

TEST(ProposeTest, LlamaThirtyTwoBOnOneThousandGpusAndDeterminism) {
  const Profile& profile = Profile32b();
  ProposeOptions options;
  options.gpus = 1024;
  options.max_len = 32'768;
  options.resolution_tokens = 512;
  options.tokens_per_batch = 1'600'000;
  options.optimizer_layout = OptimizerLayout{64, 16, 1};
  const Proposal p = ProposeStrategies(profile, RealLengths(), options);
  ExpectValidProposal(p, profile, 1024);
  EXPECT_EQ(CandidatesToJson(p.candidates),
            CandidatesToJson(ProposeStrategies(profile, RealLengths(), options).candidates));
}

TEST(ProposeTest, WholeDatasetModeAndMaxStrategies) {
  const Profile& profile = Profile32b();
  ProposeOptions options;
  options.gpus = 64;
  options.max_len = 32'768;
  options.resolution_tokens = 512;
  options.tokens_per_batch = 0;
  ExpectValidProposal(ProposeStrategies(profile, RealLengths(), options), profile, 64);

  options.tokens_per_batch = 200'000;
  const Proposal all = ProposeStrategies(profile, RealLengths(), options);
  options.max_strategies = 3;
  const Proposal few = ProposeStrategies(profile, RealLengths(), options);
  ASSERT_GT(all.strategies.size(), 4u);
  ASSERT_EQ(few.strategies.size(), 4u);  // the fallback and three others
  EXPECT_TRUE(few.strategies[0].fallback);
  // The longest bin's strategy is kept, the rest by decreasing share, in length order.
  EXPECT_EQ(few.strategies[1].strategy.pipelines, all.strategies[1].strategy.pipelines);
  EXPECT_GT(few.strategies[1].longest_tokens.back(), few.strategies[2].longest_tokens.back());
  EXPECT_GT(few.strategies[2].longest_tokens.back(), few.strategies[3].longest_tokens.back());
  std::vector<double> shares;
  for (std::size_t i = 2; i < all.strategies.size(); ++i) {
    shares.push_back(all.strategies[i].batch_share);
  }
  std::sort(shares.rbegin(), shares.rend());
  EXPECT_GE(std::min(few.strategies[2].batch_share, few.strategies[3].batch_share), shares[1]);
}

// ---------------------------------------------------------------------------------------
// Errors name the value.

TEST(ProposeTest, ErrorsNameTheBadValue) {
  const Profile& profile = Profile32b();
  const std::vector<std::int64_t> lengths = {100, 2000, 40'000};
  ProposeOptions o;
  o.gpus = 64;
  o.max_len = 32'768;
  auto message = [&](const ProposeOptions& opts, std::span<const std::int64_t> l) {
    return InvalidInputMessage([&] { ProposeStrategies(profile, l, opts); });
  };
  ProposeOptions bad = o;
  bad.gpus = 0;
  EXPECT_NE(message(bad, lengths).find("gpus"), std::string::npos);
  bad = o;
  bad.gpus = 3;  // no homogeneous layout tiles 3 GPUs
  EXPECT_NE(message(bad, lengths).find("gpus 3"), std::string::npos);
  bad = o;
  bad.max_len = 50'000;  // TP16's capacity under (4,16,1) is 43,520
  EXPECT_NE(message(bad, lengths).find("max-len 50000"), std::string::npos);
  bad = o;
  bad.resolution_tokens = 60'000;
  bad.max_len = 60'000;
  EXPECT_NE(message(bad, lengths).find("resolution 60000"), std::string::npos);
  bad = o;
  bad.optimizer_layout = OptimizerLayout{2, 16, 1};
  EXPECT_NE(message(bad, lengths).find("optimizer-layout 2,16,1"), std::string::npos);
  bad = o;
  bad.optimizer_layout = OptimizerLayout{64, 1, 1};  // (TP1) is not profiled
  EXPECT_NE(message(bad, lengths).find("optimizer-layout 64,1,1"), std::string::npos);
  bad = o;
  bad.tokens_per_batch = -1;
  EXPECT_NE(message(bad, lengths).find("tokens-per-batch"), std::string::npos);
  bad = o;
  bad.max_strategies = -2;
  EXPECT_NE(message(bad, lengths).find("max-strategies"), std::string::npos);
  EXPECT_NE(message(o, {}).find("no documents"), std::string::npos);

  // A cluster that no profiled scheme tiles: only TP4 and TP8 on 6 GPUs.
  Profile narrow = profile;
  std::erase_if(narrow.schemes, [](const SchemeProfile& s) {
    return !(s.scheme.pp == 1 && (s.scheme.tp == 4 || s.scheme.tp == 8));
  });
  EXPECT_NE(InvalidInputMessage([&] {
              UsableSchemes(narrow, 6, {3, 2, 1});
            }).find("gpus 6"),
            std::string::npos);
  // A model that fits nowhere.
  Profile tiny_gpu = profile;
  tiny_gpu.cluster.gpu_memory_bytes = std::int64_t{1} << 30;
  EXPECT_NE(InvalidInputMessage([&] {
              UsableSchemes(tiny_gpu, 64, {4, 16, 1});
            }).find("fits the model"),
            std::string::npos);
}

}  // namespace
}  // namespace hydraulis

namespace hydraulis {
namespace {

// The count of long documents a batch draws: Poisson quantiles of a case with mean 1
// (P(X > 1) = 0.264, P(X > 2) = 0.080, P(X > 3) = 0.019), the cut at max_len, and the 9-in-10
// quantile against batches the real sampler draws.
TEST(LongDocumentCountTest, QuantilesOfThePoissonCountAndTheSamplersBatches) {
  std::vector<std::int64_t> lengths(99, 100);
  lengths.push_back(10'000);  // mean 199 tokens: 100 documents per 19,900-token batch
  EXPECT_EQ(LongDocumentsPerBatch(lengths, 1 << 20, 19'900, 5'000, 0.5), 1);
  EXPECT_EQ(LongDocumentsPerBatch(lengths, 1 << 20, 19'900, 5'000, 0.9), 2);
  EXPECT_EQ(LongDocumentsPerBatch(lengths, 1 << 20, 19'900, 5'000, 0.95), 3);
  EXPECT_EQ(LongDocumentsPerBatch(lengths, 1 << 20, 19'900, 10'000, 0.9), 0);  // none longer
  EXPECT_EQ(LongDocumentsPerBatch(lengths, 6'000, 19'900, 6'000, 0.9), 0);     // cut to 6,000
  EXPECT_THROW(LongDocumentsPerBatch({}, 10, 10, 5, 0.9), InvalidInput);
  EXPECT_THROW(LongDocumentsPerBatch(lengths, 10, 10, 5, 1.0), InvalidInput);

  const std::vector<std::int64_t> wiki = ReadLengths(kRoot + "/data/wikipedia-sample-lengths.txt");
  const std::int64_t threshold = 4'000, budget = 400'000, max_len = 32'768;
  BatchSampler sampler(wiki, {budget, max_len, 7});
  std::vector<int> counts;
  for (int b = 0; b < 400; ++b) {
    int n = 0;
    for (const std::int64_t s : sampler.Next().lengths) n += s > threshold ? 1 : 0;
    counts.push_back(n);
  }
  std::sort(counts.begin(), counts.end());
  const int drawn = counts[counts.size() * 9 / 10];
  const int rule = LongDocumentsPerBatch(wiki, max_len, budget, threshold, 0.9);
  double mean = 0;
  for (const int n : counts) mean += n / static_cast<double>(counts.size());
  std::printf("long documents per batch: sampled mean %.2f, 9-in-10 %d; rule %d\n", mean, drawn,
              rule);
  EXPECT_GT(drawn, 2);  // the case has long documents to count
  // An epoch draws without replacement, which spreads the count a little less than
  // independent draws: the rule may only err high, by little.
  EXPECT_GE(rule, drawn);
  EXPECT_LE(rule, drawn + 2);
}

}  // namespace
}  // namespace hydraulis
