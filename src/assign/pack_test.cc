// Stage 2: packing one pipeline into micro-batches (assign/pack.h), and the 1F1B relaxation
// its counts are bounded by (assign/pipeline_relaxation.h).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <numeric>
#include <thread>

#include "../base/test_support.h"
#include "assign_test_support.h"
#include "hydraulis/assign/micro_batch_layout.h"
#include "hydraulis/assign/pack.h"
#include "hydraulis/assign/pipeline_relaxation.h"
#include "hydraulis/assign/plan_checker.h"
#include "hydraulis/assign/plan_json.h"
#include "hydraulis/assign/plan_lines.h"
#include "hydraulis/assign/planner.h"
#include "hydraulis/assign/published.h"
#include "hydraulis/assign/two_stage.h"
#include "hydraulis/base/error.h"
#include "hydraulis/base/rng.h"
#include "hydraulis/base/tolerance.h"
#include "hydraulis/data/batch_sampler.h"
#include "hydraulis/data/lengths.h"
#include "hydraulis/spec/spec_io.h"
#include "lower_bound.h"

namespace hydraulis {
namespace {

// Every document of `lengths`, by index: the list a test packs.
std::vector<int> EveryDocument(const std::vector<std::int64_t>& lengths) {
  std::vector<int> docs(lengths.size());
  std::iota(docs.begin(), docs.end(), 0);
  return docs;
}

// Longest first, ties by index: the same order from documents in stage 1's ascending
// (length, index) order (the linear path) and from any other order (the sort).
TEST(PackTest, LongestFirstIsOneOrderWhateverTheInputOrder) {
  Rng rng(17);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<std::int64_t> lengths;
    for (int i = 0; i < 200; ++i) lengths.push_back(1 + static_cast<std::int64_t>(rng.Below(20)));
    std::vector<int> docs;
    for (int d = 0; d < 200; ++d) {
      if (rng.Below(3) != 0) docs.push_back(d);
    }
    std::vector<int> expected = docs;
    std::stable_sort(expected.begin(), expected.end(),
                     [&](int x, int y) { return lengths[x] > lengths[y]; });
    std::vector<int> ascending = docs;
    std::stable_sort(ascending.begin(), ascending.end(),
                     [&](int x, int y) { return lengths[x] < lengths[y]; });
    EXPECT_EQ(LongestFirst(lengths, ascending), expected);
    std::vector<int> shuffled = docs;
    for (std::size_t i = shuffled.size(); i > 1; --i) {
      std::swap(shuffled[i - 1], shuffled[rng.Below(i)]);
    }
    EXPECT_EQ(LongestFirst(lengths, shuffled), expected);
  }
}

TEST(PackTest, MinCountPackReachesTheTokenBoundWhenFirstFitCan) {
  std::vector<std::int64_t> lengths = {5, 5, 4, 3, 3, 2, 2};
  const std::vector<int> docs = EveryDocument(lengths);
  MicroBatches mbs = MinCountPack(lengths, docs, 8);
  EXPECT_EQ(mbs.size(), 3u);  // 24 tokens, capacity 8: exactly full
  for (const auto& mb : mbs) {
    std::int64_t t = 0;
    for (int d : mb) t += lengths[static_cast<std::size_t>(d)];
    EXPECT_LE(t, 8);
  }
}

TEST(PackTest, Pp1PipelineTimeIsWorkPlusOneConstantPerMicroBatch) {
  AssignProblem p;
  p.lengths = {3000, 2500, 2000, 1500, 1000};
  p.pipelines = {{{1, 4, 1}, {1e-6, 0.1, 100}, 5000, {}}};
  std::vector<int> docs = {0, 1, 2, 3, 4};
  PackResult r = PackPipeline(p, p.pipelines[0], docs);
  double work = 0;
  for (auto s : p.lengths) work += p.pipelines[0].time.DocumentMs(s);
  EXPECT_EQ(r.micro_batches.size(), 2u);  // 10,000 tokens in two full micro-batches
  EXPECT_NEAR(r.ms, work + 2 * 100, 1e-9);
}

TEST(PackTest, DeepPipelinesSplitFinerThanTheFewestMicroBatches) {
  // pp = 4 with a small c: more, smaller micro-batches shrink the fill and drain.
  AssignProblem p;
  for (int i = 0; i < 40; ++i) p.lengths.push_back(500 + 25 * i);
  p.pipelines = {{{1, 4, 4}, {1e-6, 0.06, 10}, 60'000, {}}};
  const std::vector<int> docs = EveryDocument(p.lengths);
  RelaxationTable table;
  PackOptions with_shapes;
  with_shapes.relaxations = &table;
  PackResult plain = PackPipeline(p, p.pipelines[0], docs);
  PackResult shaped = PackPipeline(p, p.pipelines[0], docs, with_shapes);
  EXPECT_GT(plain.micro_batches.size(), 1u);
  EXPECT_LE(shaped.ms, plain.ms);
  // Never below the relaxation's bound for the same work.
  double work = 0;
  for (auto s : p.lengths) work += p.pipelines[0].time.DocumentMs(s);
  EXPECT_GE(shaped.ms, table.MinMakespanLowerBound(4, 10, work));
}

// The LLaMA-32B A800 (CP8,TP4) scheme's terms: exchange 0.084 ms per token and rank against
// 0.030 of balanced work, so a sharded document costs about four times its balanced share.
PipelineModel Cp8Tp4(double kv_memory_ratio = 0) {
  return MakePipelineModel({8, 4, 1}, {3.8695e-6, 0.238997, 120.695}, 75'648, 0.0838656,
                           kv_memory_ratio);
}

TEST(PackTest, CpRanksHoldWholeDocumentsSideBySide) {
  // 16 documents of 7,000 tokens on one (CP8,TP4) pipeline, whose ranks hold 9,456 tokens
  // each. The fewest micro-batches (10 + 6 documents) must shard two of the first (the
  // layout rule puts each over four ranks, beside six whole ones); two micro-batches of 8
  // place every document whole, one per rank: 2 (c + whole(7,000)), 20 % less.
  AssignProblem p;
  p.lengths.assign(16, 7'000);
  p.pipelines = {Cp8Tp4()};
  const std::vector<int> docs = EveryDocument(p.lengths);
  PackOptions fewest;
  fewest.rank_bins = false;
  const PackResult before = PackPipeline(p, p.pipelines[0], docs, fewest);
  const PackResult r = PackPipeline(p, p.pipelines[0], docs);
  const ShardCost& cost = p.pipelines[0].shard;
  ASSERT_EQ(r.micro_batches.size(), 2u);
  EXPECT_NEAR(r.ms, 2 * (cost.whole.c_ms + cost.whole.DocumentMs(7'000)), 1e-9);
  EXPECT_NEAR(r.ms, PipelineMs(p, p.pipelines[0], r.micro_batches), 1e-9);
  EXPECT_LT(r.ms, 0.81 * before.ms);
  for (const CpLayout& layout : MicroBatchLayouts(p.lengths, p.pipelines[0], r.micro_batches)) {
    ASSERT_EQ(layout.size(), 8u);
    std::vector<int> ranks;
    for (std::size_t d = 0; d < layout.size(); ++d) {
      ASSERT_EQ(layout.Width(d), 1);
      ranks.push_back(layout.Ranks(d)[0]);
    }
    std::sort(ranks.begin(), ranks.end());
    EXPECT_EQ(ranks, (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7}));  // one whole per rank
  }
}

// One random pipeline of cp x 4 x pp GPUs (capacity 8K-68K tokens, random time, exchange and
// key/value memory terms) and 1 to max_docs documents, mostly short, some longer than a cp
// rank holds.
AssignProblem RandomPackProblem(Rng& rng, int cp, int pp, int max_docs) {
  const std::int64_t capacity = 8'000 + static_cast<std::int64_t>(rng.Below(60'000));
  const double ratio = rng.Below(2) == 0 ? 0.0 : 0.25 * rng.Uniform();
  AssignProblem p;
  p.pipelines = {MakePipelineModel({cp, 4, pp}, {2e-6 + 4e-6 * rng.Uniform(), 0.24, 120}, capacity,
                                   0.02 + 0.08 * rng.Uniform(), ratio)};
  const int n = 1 + static_cast<int>(rng.Below(static_cast<std::uint64_t>(max_docs)));
  for (int i = 0; i < n; ++i) {
    const double u = rng.Uniform();
    p.lengths.push_back(1 + static_cast<std::int64_t>(u * u * u * static_cast<double>(capacity)));
  }
  return p;
}

// The stage-1 search refuses a move without re-packing when its destination's documents'
// work (DocumentWorkMs: a cp rank's balanced share, plus the exchange of a document no rank
// holds whole) plus c per micro-batch its tokens need is at least the step: that must floor
// every packing's exact time, for any cp, pp and mix of lengths, or the search would change.
TEST(PackTest, WorkPlusFewestMicroBatchesFloorsEveryPacking) {
  Rng rng(31);
  for (int trial = 0; trial < 300; ++trial) {
    const int cp = 1 + static_cast<int>(rng.Below(8));
    const int pp = 1 + static_cast<int>(rng.Below(4));
    const AssignProblem p = RandomPackProblem(rng, cp, pp, 80);
    const std::int64_t capacity = p.pipelines[0].capacity_tokens;
    const std::vector<int> docs = EveryDocument(p.lengths);
    const PipelineModel& pipe = p.pipelines[0];
    double work = 0;
    std::int64_t tokens = 0;
    for (std::int64_t s : p.lengths) {
      work += pipe.DocumentWorkMs(s);
      tokens += s;
    }
    const double floor_ms = PackingFloorMs(pipe, work, tokens);
    ASSERT_DOUBLE_EQ(
        floor_ms, work + static_cast<double>((tokens + capacity - 1) / capacity) * pipe.time.c_ms);
    const PackResult r = PackPipeline(p, pipe, docs);
    EXPECT_GE(r.ms, floor_ms * (1 - 1e-11)) << "trial " << trial << " cp " << cp << " pp " << pp;
    // One micro-batch per document: the floor holds for packings the search never makes too.
    MicroBatches singles;
    for (int d : docs) singles.push_back({d});
    EXPECT_GE(PipelineMs(p, pipe, singles), floor_ms * (1 - 1e-11)) << "trial " << trial;
  }
}

TEST(PackTest, RankBinsNeverSlowerAndAlwaysValidOnRandomCpPipelines) {
  Rng rng(29);
  int faster = 0;
  for (int trial = 0; trial < 200; ++trial) {
    const int cp = 2 + static_cast<int>(rng.Below(7));  // 2..8, powers of two or not
    const int pp = rng.Below(4) == 0 ? 2 : 1;
    const AssignProblem p = RandomPackProblem(rng, cp, pp, 60);
    const std::int64_t capacity = p.pipelines[0].capacity_tokens;
    const std::vector<int> docs = EveryDocument(p.lengths);
    PackOptions off;
    off.rank_bins = false;
    const PackResult before = PackPipeline(p, p.pipelines[0], docs, off);
    const PackResult r = PackPipeline(p, p.pipelines[0], docs);
    EXPECT_LE(r.ms, before.ms) << "trial " << trial;
    faster += DefinitelyLess(r.ms, before.ms) ? 1 : 0;
    EXPECT_NEAR(r.ms, PipelineMs(p, p.pipelines[0], r.micro_batches), 1e-9 * r.ms);
    // Every document once, every micro-batch within the capacity and its ranks' memory.
    std::vector<int> seen;
    for (const auto& mb : r.micro_batches) {
      std::int64_t tokens = 0;
      std::vector<std::int64_t> lengths;
      for (int d : mb) {
        seen.push_back(d);
        tokens += p.lengths[static_cast<std::size_t>(d)];
        lengths.push_back(p.lengths[static_cast<std::size_t>(d)]);
      }
      EXPECT_LE(tokens, capacity);
      const ShardCost& cost = p.pipelines[0].shard;
      for (double m : RankMemoryTokens(lengths, LayOutMicroBatch(lengths, cost), cost)) {
        EXPECT_TRUE(cost.FitsRank(m)) << "trial " << trial;
      }
    }
    std::sort(seen.begin(), seen.end());
    EXPECT_EQ(seen, docs);
  }
  EXPECT_GE(faster, 80);  // measured: 103 of 200
}

TEST(RelaxationTest, LpOptimumIsTheSimulatedTimeOfItsSizesAndBeatsEqualSizes) {
  for (int pp : {2, 3, 4}) {
    for (int v : {1, 3, 8}) {
      RelaxedSchedule r = RelaxPipeline(pp, v, 20.0, 3000.0);
      ASSERT_EQ(r.work_ms.size(), static_cast<std::size_t>(v));
      std::vector<double> stage;
      double total = 0;
      for (double x : r.work_ms) {
        EXPECT_GE(x, -1e-9);
        stage.push_back(20.0 + x);
        total += x;
      }
      EXPECT_NEAR(total, 3000.0, 1e-6);
      EXPECT_NEAR(OneFOneBMs(stage, pp), r.makespan_ms, 1e-6 * r.makespan_ms);
      std::vector<double> equal(v, 20.0 + 3000.0 / v);
      EXPECT_LE(r.makespan_ms, OneFOneBMs(equal, pp) + 1e-6);
    }
  }
}

TEST(RelaxationTest, TableBoundIsBelowEveryRandomPackingsExactTime) {
  RelaxationTable table;
  Rng rng(17);
  for (int trial = 0; trial < 80; ++trial) {
    const int pp = 2 + static_cast<int>(rng.Below(3));
    const int v = 1 + static_cast<int>(rng.Below(12));
    const double c = 5 + 50 * rng.Uniform();
    std::vector<double> stage(static_cast<std::size_t>(v));
    double work = 0;
    for (auto& t : stage) {
      const double w = 2000 * rng.Uniform() * rng.Uniform();
      work += w;
      t = c + w;
    }
    EXPECT_LE(table.MinMakespanLowerBound(pp, c, work), OneFOneBMs(stage, pp) * (1 + 1e-9));
  }
}

// The per-count bound PackPipeline skips micro-batch counts by: below every packing into
// exactly v micro-batches (random ones, and the relaxation's own optimum, where it is
// tightest), never below the bound over all counts.
TEST(RelaxationTest, CountBoundIsBelowEveryPackingWithThatCount) {
  for (const double backward_to_forward : {2.0, 1.0}) {
    const ScheduleOptions schedule{backward_to_forward};
    RelaxationTable table(schedule);
    Rng rng(23);
    for (int trial = 0; trial < 120; ++trial) {
      const int pp = 2 + static_cast<int>(rng.Below(3));
      const int v = trial % 10 == 0 ? 129 + static_cast<int>(rng.Below(8))
                                    : 1 + static_cast<int>(rng.Below(24));
      const double c = 5 + 50 * rng.Uniform();
      std::vector<double> stage(static_cast<std::size_t>(v));
      double work = 0;
      for (auto& t : stage) {
        // Half the trials nearly balanced, as the packer's are.
        const double w = trial % 2 == 0 ? 2000 * rng.Uniform() * rng.Uniform()
                                        : 300 * (1 + 0.05 * rng.Uniform());
        work += w;
        t = c + w;
      }
      const double bound = table.CountLowerBound(pp, v, c, work);
      SCOPED_TRACE("pp " + std::to_string(pp) + " v " + std::to_string(v));
      EXPECT_LE(bound, OneFOneBMs(stage, pp, schedule) * (1 + 1e-9));
      EXPECT_GE(bound, table.MinMakespanLowerBound(pp, c, work) * (1 - 1e-9));
      EXPECT_GE(bound, work + (v + pp - 1) * c);
      if (v <= 24) {
        const RelaxedSchedule best = RelaxPipeline(pp, v, c, work, schedule);
        EXPECT_LE(bound, best.makespan_ms * (1 + 1e-9));
      }
    }
  }
}

TEST(RelaxationTest, WorkPriceGivesALineBelowTheLpEverywhere) {
  // The table bounds phi_v(r) by one supporting line per v: it must never exceed the LP.
  for (int pp : {2, 3, 4}) {
    for (int v : {2, 7, 25}) {
      const RelaxedSchedule at = RelaxPipeline(pp, v, 1.0, 2.0 * v * v);
      for (double r : {0.5, 10.0, 300.0, 5'000.0, 60'000.0}) {
        const double line = at.makespan_ms + at.work_price * (r - 2.0 * v * v);
        EXPECT_LE(line, RelaxPipeline(pp, v, 1.0, r).makespan_ms * (1 + 1e-9) + 1e-9)
            << "pp=" << pp << " v=" << v << " r=" << r;
      }
    }
  }
}

// The precomputed lines (src/assign/relaxation_lines.inc) are what the LP gives today: a
// change to the LP that is not followed by gen/make_relaxation_lines fails here.
TEST(RelaxationTest, PrecomputedLinesMatchTheirLps) {
  for (int pp : {2, 3, 5, RelaxationTable::kPrecomputedMaxPp}) {
    for (int v : {1, 2, 9, 40, RelaxationTable::kMaxExactMicroBatches}) {
      if (pp == RelaxationTable::kPrecomputedMaxPp && v > 40) continue;  // a slow LP
      const RelaxationTable::SupportingLine lp = RelaxationTable::SolveLine(pp, v, {});
      const RelaxationTable::SupportingLine* stored = RelaxationTable::PrecomputedLine(pp, v, {});
      ASSERT_NE(stored, nullptr) << "pp=" << pp << " v=" << v;
      EXPECT_EQ(stored->r0, lp.r0);
      EXPECT_NEAR(stored->at_r0, lp.at_r0, 1e-9 * lp.at_r0) << "pp=" << pp << " v=" << v;
      EXPECT_NEAR(stored->price, lp.price, 1e-9 * lp.price) << "pp=" << pp << " v=" << v;
    }
  }
  // Only the default schedule and the covered depths and counts are stored.
  EXPECT_EQ(RelaxationTable::PrecomputedLine(1, 5, {}), nullptr);
  EXPECT_EQ(RelaxationTable::PrecomputedLine(RelaxationTable::kPrecomputedMaxPp + 1, 5, {}),
            nullptr);
  EXPECT_EQ(RelaxationTable::PrecomputedLine(3, RelaxationTable::kMaxExactMicroBatches + 1, {}),
            nullptr);
  EXPECT_EQ(RelaxationTable::PrecomputedLine(3, 5, ScheduleOptions{1.5}), nullptr);
}

TEST(RelaxationTest, BoundDependsOnlyOnItsArgumentsNotOnQueryOrder) {
  const std::vector<double> works = {50, 4'000, 300, 9'000, 1'200, 20};
  RelaxationTable forward, backward;
  std::vector<double> a, b(works.size());
  for (double w : works) a.push_back(forward.MinMakespanLowerBound(3, 2.0, w));
  for (std::size_t i = works.size(); i-- > 0;) {
    b[i] = backward.MinMakespanLowerBound(3, 2.0, works[i]);
  }
  EXPECT_EQ(a, b);
  // And it is below the LP's optimum over every count (checked where counts stay small).
  for (double w : {50.0, 300.0}) {
    double best = 1e300;
    for (int v = 1; v <= 40; ++v) best = std::min(best, RelaxPipeline(3, v, 2.0, w).makespan_ms);
    EXPECT_LE(forward.MinMakespanLowerBound(3, 2.0, w), best * (1 + 1e-9));
    EXPECT_GE(forward.MinMakespanLowerBound(3, 2.0, w), best * (1 - 1e-3));
  }
}

TEST(PackTest, LargeBatchesPackInNearLinearTimeAndStayValid) {
  // 60,000 documents on one deep pipeline: before the packers were O(n log n) this took
  // minutes. Every document lands once, within capacity, in one of >= fewest bins.
  AssignProblem p;
  Rng rng(5);
  for (int i = 0; i < 60'000; ++i)
    p.lengths.push_back(1 + static_cast<std::int64_t>(rng.Below(4'000)));
  p.pipelines = {{{1, 2, 2}, {1e-7, 0.01, 5}, 32'768, {}}};
  const std::vector<int> docs = EveryDocument(p.lengths);
  const MicroBatches fewest = MinCountPack(p.lengths, docs, 32'768);
  std::int64_t total = 0;
  for (auto s : p.lengths) total += s;
  EXPECT_LE(static_cast<std::int64_t>(fewest.size()), total / 32'768 + 2);
  const PackResult r = PackPipeline(p, p.pipelines[0], docs);
  std::vector<int> seen(p.lengths.size(), 0);
  for (const auto& mb : r.micro_batches) {
    std::int64_t tokens = 0;
    for (int d : mb)
      tokens += p.lengths[static_cast<std::size_t>(d)], ++seen[static_cast<std::size_t>(d)];
    EXPECT_LE(tokens, 32'768);
  }
  EXPECT_TRUE(std::all_of(seen.begin(), seen.end(), [](int k) { return k == 1; }));
  EXPECT_GE(r.micro_batches.size(), fewest.size());
  EXPECT_NEAR(r.ms, PipelineMs(p, p.pipelines[0], r.micro_batches), 1e-6 * r.ms);
}

// The LLaMA-32B A800 (CP8,TP16) scheme: a 128K document needs three of its eight ranks'
// memory, and over three it takes about twice as long per rank as over all eight.
TEST(PackTest, ALongDocumentAmongShortOnesIsShardedOverEveryRankWhereThatIsFaster) {
  AssignProblem p;
  // One 128K document, a few of 8K-31K and 280 short ones: 518K tokens, two micro-batches.
  p.lengths = {131'072, 30'613, 29'295, 21'630, 14'555, 13'356, 12'249, 11'181, 9'193, 8'144};
  for (int i = 0; i < 280; ++i) p.lengths.push_back(256 + (37 * i) % 1'300);
  p.pipelines = {MakePipelineModel({8, 16, 1}, {1.37779723e-6, 0.102435387, 145.75}, 375'808,
                                   0.0209664, 0.0013)};
  const std::vector<int> docs = EveryDocument(p.lengths);
  PackOptions fewest_ranks;
  fewest_ranks.rank_bins_over_every_rank = false;
  const PackResult before = PackPipeline(p, p.pipelines[0], docs, fewest_ranks);
  const PackResult r = PackPipeline(p, p.pipelines[0], docs);
  EXPECT_NEAR(r.ms, PipelineMs(p, p.pipelines[0], r.micro_batches), 1e-9 * r.ms);
  EXPECT_LT(r.ms, 0.9 * before.ms) << before.ms;  // measured: 14,022 against 16,422 ms
  const auto layouts = MicroBatchLayouts(p.lengths, p.pipelines[0], r.micro_batches);
  for (std::size_t m = 0; m < r.micro_batches.size(); ++m) {
    for (std::size_t i = 0; i < r.micro_batches[m].size(); ++i) {
      if (r.micro_batches[m][i] == 0) {
        EXPECT_EQ(layouts[m].Width(i), 8);
      }
    }
  }
}

}  // namespace
}  // namespace hydraulis
