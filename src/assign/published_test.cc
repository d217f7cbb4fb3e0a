#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <numeric>
#include <vector>

#include "hydraulis/assign/pack.h"
#include "hydraulis/assign/plan_checker.h"
#include "hydraulis/assign/problem.h"
#include "hydraulis/assign/published.h"
#include "hydraulis/base/error.h"
#include "hydraulis/base/rng.h"

namespace hydraulis {
namespace {

PipelineModel Pipe(int cp, int tp, int pp, double a, double b, double c, std::int64_t capacity) {
  return MakePipelineModel(Scheme{cp, tp, pp}, TimeModel{a, b, c}, capacity);
}

// Small limits keep the suite fast; the tiny MILPs here solve to optimality well within.
PublishedOptions Fast() {
  PublishedOptions o;
  o.shuffles = 5;
  o.micro_batch_counts = 8;
  o.milp_time_limit_s = 0.2;
  return o;
}

// For tests whose answer is exact: their MILPs take milliseconds, but a wall-clock limit
// of 0.2 s stopped one under a loaded sanitizer build (CI, 2026-12-02), so the limit is
// generous and a stopped solve is reported as such.
PublishedOptions Exact() {
  PublishedOptions o = Fast();
  o.milp_time_limit_s = 60;
  return o;
}

std::vector<std::int64_t> RandomLengths(std::uint64_t seed, int n, std::int64_t max_len) {
  Rng rng(seed);
  std::vector<std::int64_t> out(static_cast<std::size_t>(n));
  for (auto& s : out)
    s = 1 + static_cast<std::int64_t>(rng.Below(static_cast<std::uint64_t>(max_len)));
  return out;
}

// Micro-batches as a canonical set of sets, for comparing partitions.
MicroBatches Canonical(MicroBatches mbs) {
  for (auto& mb : mbs) std::sort(mb.begin(), mb.end());
  std::sort(mbs.begin(), mbs.end());
  return mbs;
}

double ObjectiveMs(const AssignProblem& problem, const PipelineModel& pipe,
                   const MicroBatches& mbs) {
  double max_work = 0;
  for (const auto& mb : mbs) {
    double w = 0;
    for (int d : mb) w += pipe.time.DocumentMs(problem.lengths[static_cast<std::size_t>(d)]);
    max_work = std::max(max_work, w);
  }
  return (max_work + pipe.time.c_ms) * (pipe.scheme.pp - 1 + static_cast<double>(mbs.size()));
}

// Every partition of documents 0..n-1 whose blocks fit the capacity, by restricted growth
// strings (block[i] <= 1 + max(block[0..i-1])).
template <typename Visit>
void ForEachPartition(const AssignProblem& problem, const PipelineModel& pipe, Visit visit) {
  const int n = static_cast<int>(problem.lengths.size());
  std::vector<int> block(static_cast<std::size_t>(n), 0);
  std::vector<std::int64_t> tokens;
  auto rec = [&](auto& self, int i, int used) -> void {
    if (i == n) {
      MicroBatches mbs(static_cast<std::size_t>(used));
      for (int d = 0; d < n; ++d)
        mbs[static_cast<std::size_t>(block[static_cast<std::size_t>(d)])].push_back(d);
      visit(mbs);
      return;
    }
    const std::int64_t s = problem.lengths[static_cast<std::size_t>(i)];
    for (int b = 0; b <= used; ++b) {
      if (b == used) tokens.push_back(0);
      if (tokens[static_cast<std::size_t>(b)] + s <= pipe.capacity_tokens) {
        tokens[static_cast<std::size_t>(b)] += s;
        block[static_cast<std::size_t>(i)] = b;
        self(self, i + 1, b == used ? used + 1 : used);
        tokens[static_cast<std::size_t>(b)] -= s;
      }
      if (b == used) tokens.pop_back();
    }
  };
  rec(rec, 0, 0);
}

TEST(PublishedTest, ValidOnHeterogeneousStrategy) {
  AssignProblem problem;
  problem.lengths = RandomLengths(7, 40, 6000);
  problem.pipelines = {Pipe(1, 8, 2, 2e-6, 0.01, 3, 8192), Pipe(1, 4, 1, 4e-6, 0.02, 2, 4096),
                       Pipe(1, 4, 1, 4e-6, 0.02, 2, 4096), Pipe(2, 8, 1, 1e-6, 0.005, 4, 16384)};
  double estimate = -1;
  const Assignment a = AssignPublished(problem, Fast(), 11, &estimate);
  EXPECT_EQ(CheckAssignment(problem, a), "");
  EXPECT_GT(estimate, 0);
  EXPECT_GE(estimate, a.step_ms * (1 - 1e-12));
}

TEST(PublishedTest, SinglePipelinePp1FindsMinimumMicroBatchCount) {
  // First-fit and best-fit decreasing need 3 micro-batches here; {6,4,2} {5,4,3} is 2.
  AssignProblem problem;
  problem.lengths = {6, 5, 4, 4, 3, 2};
  problem.pipelines = {Pipe(1, 1, 1, 0, 1, 1, 12)};
  std::vector<int> all(problem.lengths.size());
  std::iota(all.begin(), all.end(), 0);
  ASSERT_EQ(MinCountPack(problem.lengths, all, 12).size(), 3u);
  double estimate = 0;
  const Assignment a = AssignPublished(problem, Exact(), 1, &estimate);
  ASSERT_EQ(a.time_limited_solves, 0);
  EXPECT_EQ(CheckAssignment(problem, a), "");
  ASSERT_EQ(a.pipelines[0].size(), 2u);
  EXPECT_EQ(Canonical(a.pipelines[0]), (MicroBatches{{0, 3, 5}, {1, 2, 4}}));
  EXPECT_DOUBLE_EQ(estimate, 2 * (12.0 + 1.0));
}

TEST(PublishedTest, Pp1MinimumCountWhenTokenBoundIsNotReachable) {
  // ceil(20 / 10) = 2 micro-batches cannot hold three 6-token documents: the MILP for v = 2
  // is infeasible and v = 3 is the minimum, which a brute force confirms.
  AssignProblem problem;
  problem.lengths = {6, 6, 6, 1, 1};
  problem.pipelines = {Pipe(1, 1, 1, 0, 1, 0.5, 10)};
  std::size_t fewest = std::numeric_limits<std::size_t>::max();
  ForEachPartition(problem, problem.pipelines[0],
                   [&](const MicroBatches& mbs) { fewest = std::min(fewest, mbs.size()); });
  ASSERT_EQ(fewest, 3u);
  const Assignment a = AssignPublished(problem, Exact(), 1);
  ASSERT_EQ(a.time_limited_solves, 0);
  EXPECT_EQ(CheckAssignment(problem, a), "");
  EXPECT_EQ(a.pipelines[0].size(), fewest);
}

TEST(PublishedTest, Pp2MatchesBruteForceOverAllPartitions) {
  AssignProblem problem;
  problem.lengths = {9, 7, 5, 4, 3, 2};
  const PipelineModel pipe = Pipe(1, 1, 2, 0.01, 1, 0.5, 16);
  problem.pipelines = {pipe};
  double best = std::numeric_limits<double>::infinity();
  MicroBatches best_mbs;
  ForEachPartition(problem, pipe, [&](const MicroBatches& mbs) {
    const double ms = ObjectiveMs(problem, pipe, mbs);
    if (ms < best) best = ms, best_mbs = mbs;
  });
  int optimal = 0;
  ForEachPartition(problem, pipe, [&](const MicroBatches& mbs) {
    if (ObjectiveMs(problem, pipe, mbs) < best + 1e-6) ++optimal;
  });
  // The instance is chosen so the optimum is unique and above the fewest micro-batches
  // (ceil(30 / 16) = 2), so the v loop matters.
  ASSERT_EQ(optimal, 1);
  ASSERT_EQ(best_mbs.size(), 3u);

  double estimate = 0;
  const Assignment a = AssignPublished(problem, Exact(), 3, &estimate);
  ASSERT_EQ(a.time_limited_solves, 0);
  EXPECT_EQ(CheckAssignment(problem, a), "");
  EXPECT_EQ(Canonical(a.pipelines[0]), Canonical(best_mbs));
  EXPECT_NEAR(estimate, best, 1e-9 * best);
}

TEST(PublishedTest, Pp2MatchesBruteForceOnRandomTinyInstances) {
  for (std::uint64_t seed = 0; seed < 6; ++seed) {
    AssignProblem problem;
    problem.lengths = RandomLengths(100 + seed, 7, 12);
    const PipelineModel pipe = Pipe(1, 1, 2, 0.02, 1, 0.3 + 0.5 * static_cast<double>(seed), 16);
    problem.pipelines = {pipe};
    double best = std::numeric_limits<double>::infinity();
    ForEachPartition(problem, pipe, [&](const MicroBatches& mbs) {
      best = std::min(best, ObjectiveMs(problem, pipe, mbs));
    });
    PublishedOptions options = Exact();
    options.micro_batch_counts = 7;  // every feasible v
    double estimate = 0;
    const Assignment a = AssignPublished(problem, options, seed, &estimate);
    ASSERT_EQ(a.time_limited_solves, 0) << "seed " << seed;
    EXPECT_EQ(CheckAssignment(problem, a), "") << "seed " << seed;
    EXPECT_NEAR(estimate, best, 1e-6 * best) << "seed " << seed;
    EXPECT_NEAR(ObjectiveMs(problem, pipe, a.pipelines[0]), estimate, 1e-9 * estimate);
  }
}

TEST(PublishedTest, EstimateIsAtLeastExactStepTime) {
  for (std::uint64_t seed = 0; seed < 4; ++seed) {
    AssignProblem problem;
    problem.lengths = RandomLengths(200 + seed, 24, 3000);
    problem.pipelines = {Pipe(1, 2, 4, 3e-6, 0.02, 1.5, 4096), Pipe(1, 4, 2, 2e-6, 0.01, 1, 4096),
                         Pipe(1, 2, 3, 3e-6, 0.015, 2, 3072)};
    double estimate = 0;
    const Assignment a = AssignPublished(problem, Fast(), seed, &estimate);
    EXPECT_EQ(CheckAssignment(problem, a), "") << "seed " << seed;
    EXPECT_GE(estimate, a.step_ms * (1 - 1e-12)) << "seed " << seed;
  }
}

TEST(PublishedTest, LongDocumentsLandOnTheOnlyPipelineThatHoldsThem) {
  AssignProblem problem;
  // Documents 0 and 1 fit only pipeline 2; the rest fit all three.
  problem.lengths = {900, 700, 100, 120, 80, 60, 90, 110, 50, 70};
  problem.pipelines = {Pipe(1, 2, 1, 1e-4, 0.01, 1, 400), Pipe(1, 2, 1, 1e-4, 0.01, 1, 400),
                       Pipe(1, 8, 2, 2e-5, 0.002, 1, 1000)};
  const Assignment a = AssignPublished(problem, Fast(), 5);
  ASSERT_EQ(CheckAssignment(problem, a), "");
  std::vector<int> owner(problem.lengths.size(), -1);
  for (std::size_t p = 0; p < a.pipelines.size(); ++p) {
    for (const auto& mb : a.pipelines[p]) {
      for (int d : mb) owner[static_cast<std::size_t>(d)] = static_cast<int>(p);
    }
  }
  EXPECT_EQ(owner[0], 2);
  EXPECT_EQ(owner[1], 2);
}

TEST(PublishedTest, IdenticalPipelinesShareIdenticalDocumentsEvenly) {
  AssignProblem problem;
  problem.lengths.assign(12, 100);
  problem.pipelines = {Pipe(1, 1, 1, 0, 1, 1, 1000), Pipe(1, 1, 1, 0, 1, 1, 1000),
                       Pipe(1, 1, 1, 0, 1, 1, 1000)};
  const Assignment a = AssignPublished(problem, Fast(), 2);
  ASSERT_EQ(CheckAssignment(problem, a), "");
  for (const auto& mbs : a.pipelines) {
    std::size_t docs = 0;
    for (const auto& mb : mbs) docs += mb.size();
    EXPECT_EQ(docs, 4u);
  }
}

TEST(PublishedTest, PipelinesWithoutDocumentsGetNoMicroBatches) {
  AssignProblem problem;
  problem.lengths = {300};
  problem.pipelines = {Pipe(1, 1, 2, 0, 1, 1, 1000), Pipe(1, 1, 2, 0, 1, 1, 1000)};
  double estimate = 0;
  const Assignment a = AssignPublished(problem, Fast(), 9, &estimate);
  ASSERT_EQ(CheckAssignment(problem, a), "");
  EXPECT_EQ(a.pipelines[0].size() + a.pipelines[1].size(), 1u);
  EXPECT_DOUBLE_EQ(estimate, (300.0 + 1.0) * 2);

  problem.lengths.clear();
  const Assignment none = AssignPublished(problem, Fast(), 9, &estimate);
  EXPECT_EQ(CheckAssignment(problem, none), "");
  EXPECT_EQ(none.step_ms, 0);
  EXPECT_EQ(estimate, 0);
}

// CBC proves the tiny MILPs optimal within its limit; on a large pipeline a limit too short
// for any search stops it, and the result says so (and is still a valid plan).
TEST(PublishedTest, CountsTheMilpsStoppedAtTheTimeLimit) {
  AssignProblem tiny;
  tiny.lengths = {9, 7, 5, 4, 3, 2};
  tiny.pipelines = {Pipe(1, 1, 2, 0.01, 1, 0.5, 16)};
  EXPECT_EQ(AssignPublished(tiny, Fast(), 1).time_limited_solves, 0);

  AssignProblem large;
  large.lengths = RandomLengths(5, 300, 4000);
  large.pipelines = {Pipe(1, 1, 4, 1e-5, 0.1, 2, 16'000), Pipe(1, 1, 2, 2e-5, 0.2, 1, 8'000)};
  PublishedOptions rushed = Fast();
  rushed.micro_batch_counts = 2;
  rushed.milp_time_limit_s = 1e-6;
  const Assignment a = AssignPublished(large, rushed, 1);
  EXPECT_EQ(CheckAssignment(large, a), "");
  EXPECT_GT(a.time_limited_solves, 0);
  EXPECT_LE(a.time_limited_solves, 4);  // two pipelines, two micro-batch counts each
}

TEST(PublishedTest, SameSeedSamePlan) {
  // Small enough that every MILP is solved to optimality well inside its time limit; a
  // MILP stopped by the limit would make the plan depend on the machine's speed.
  AssignProblem problem;
  problem.lengths = RandomLengths(31, 12, 2000);
  problem.pipelines = {Pipe(1, 2, 2, 3e-6, 0.02, 1, 4096), Pipe(1, 2, 1, 3e-6, 0.02, 1, 2048)};
  const Assignment a = AssignPublished(problem, Exact(), 4);
  const Assignment b = AssignPublished(problem, Exact(), 4);
  ASSERT_EQ(a.time_limited_solves + b.time_limited_solves, 0);
  EXPECT_EQ(a.pipelines, b.pipelines);
}

TEST(PublishedTest, RejectsInvalidOptionsAndUnplaceableDocuments) {
  AssignProblem problem;
  problem.lengths = {10, 20};
  problem.pipelines = {Pipe(1, 1, 1, 0, 1, 1, 100)};
  PublishedOptions bad = Fast();
  bad.shuffles = 0;
  EXPECT_THROW(AssignPublished(problem, bad, 0), InvalidInput);
  bad = Fast();
  bad.micro_batch_counts = 0;
  EXPECT_THROW(AssignPublished(problem, bad, 0), InvalidInput);
  bad = Fast();
  bad.milp_time_limit_s = 0;
  EXPECT_THROW(AssignPublished(problem, bad, 0), InvalidInput);
  AssignProblem no_pipes;
  no_pipes.lengths = {10};
  EXPECT_THROW(AssignPublished(no_pipes, Fast(), 0), InvalidInput);
  problem.lengths.push_back(101);
  EXPECT_THROW(AssignPublished(problem, Fast(), 0), Infeasible);
}

}  // namespace
}  // namespace hydraulis
