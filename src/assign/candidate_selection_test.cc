// Keeping candidates by planning sample batches: the greedy cover on hand-made tables, and
// on real batches that its values are the planner's (the chosen plan's time, bounds below
// each candidate's own plan) and that it does not depend on the thread count.
#include "hydraulis/assign/candidate_selection.h"

#include <gtest/gtest.h>

#include <limits>
#include <string>
#include <vector>

#include "../base/test_support.h"
#include "hydraulis/base/error.h"
#include "hydraulis/data/batch_sampler.h"
#include "hydraulis/data/lengths.h"
#include "hydraulis/spec/spec_io.h"

namespace hydraulis {
namespace {

using test_support::InvalidInputMessage;

const std::string kRoot = HYDRAULIS_SOURCE_DIR;
constexpr double kInf = std::numeric_limits<double>::infinity();

TEST(GreedyCoverSelectionTest, AddsWhatLowersTheSummedBestMostAndStopsWhenNothingDoes) {
  const std::vector<std::vector<double>> ms = {
      {10, 10, 10}, {5, kInf, 9}, {9, 9, 1}, {kInf, kInf, kInf}, {10, 10, 10}};
  const std::vector<int> always = {0};
  // Round 1: candidate 2 gives 9 + 9 + 1 = 19 against 24 for candidate 1; round 2:
  // candidate 1 gives 5 + 9 + 1 = 15; then neither 3 nor 4 lowers anything.
  EXPECT_EQ(GreedyCoverSelection(ms, always, 4), (std::vector<int>{2, 1}));
  EXPECT_EQ(GreedyCoverSelection(ms, always, 1), (std::vector<int>{2}));
  EXPECT_TRUE(GreedyCoverSelection(ms, always, 0).empty());
}

TEST(GreedyCoverSelectionTest, HoldingEveryBatchComesFirstAndTiesGoToTheLowerIndex) {
  // Candidate 0 is cheaper on the first batch but cannot hold the second.
  EXPECT_EQ(GreedyCoverSelection({{1, kInf}, {100, 100}}, {}, 1), (std::vector<int>{1}));
  EXPECT_EQ(GreedyCoverSelection({{5}, {5}}, {}, 1), (std::vector<int>{0}));
  EXPECT_NE(InvalidInputMessage([] {
              GreedyCoverSelection({{1}}, std::vector<int>{1}, 1);
            }).find("no candidate 1"),
            std::string::npos);
  EXPECT_NE(InvalidInputMessage([] {
              GreedyCoverSelection({{1}, {1, 2}}, {}, 1);
            }).find("one value per batch"),
            std::string::npos);
}

TEST(SelectCandidatesByPlansTest, ValuesAreThePlannersAndTheSelectionIsDeterministic) {
  const Profile profile = LoadProfile(kRoot + "/configs/profiles/llama-32b-a800.json");
  const CandidateSet candidates =
      LoadCandidates(kRoot + "/configs/candidates/llama-32b-64gpu-proposed.json", profile);
  const std::vector<std::int64_t> dataset = ReadLengths(test_support::RealLengthsPath());
  BatchSampler sampler(dataset, {200'000, 32'768, 5});
  std::vector<std::vector<std::int64_t>> batches;
  for (int i = 0; i < 6; ++i) batches.push_back(sampler.Next().lengths);
  const int count = static_cast<int>(candidates.strategies.size());
  ASSERT_GT(count, 4);
  const std::vector<int> always = {0, 1};

  PlannerOptions options;
  options.context_tokens = 32'768;
  const CandidateSelection few =
      SelectCandidatesByPlans(profile, candidates, batches, always, 2, options);
  ASSERT_LE(few.kept.size(), 4u);
  EXPECT_EQ(few.kept[0], 0);
  EXPECT_EQ(few.kept[1], 1);
  const Planner planner(profile, candidates, options);
  for (std::size_t b = 0; b < batches.size(); ++b) {
    // The best value over every candidate is the plan the planner chooses.
    EXPECT_EQ(few.all_ms[b], planner.PlanBatch(batches[b]).estimated_step_ms) << "batch " << b;
    EXPECT_GE(few.kept_ms[b], few.all_ms[b]);
    // A kept candidate's value is its own plan's time or a bound below it.
    double best_own = kInf;
    for (int k : few.kept) {
      PlannerOptions only = options;
      only.only_strategy = k;
      best_own = std::min(
          best_own, Planner(profile, candidates, only).PlanBatch(batches[b]).estimated_step_ms);
    }
    EXPECT_LE(few.kept_ms[b], best_own * (1 + 1e-12)) << "batch " << b;
  }
  // Keeping every candidate loses nothing; threads change nothing.
  const CandidateSelection all =
      SelectCandidatesByPlans(profile, candidates, batches, always, count, options);
  EXPECT_EQ(all.kept_ms, all.all_ms);
  // Batches are planned on several threads at once: the same values, bit for bit.
  options.threads = 3;
  const CandidateSelection threaded =
      SelectCandidatesByPlans(profile, candidates, batches, always, 2, options);
  EXPECT_EQ(threaded.kept, few.kept);
  EXPECT_EQ(threaded.all_ms, few.all_ms);
  EXPECT_EQ(threaded.kept_ms, few.kept_ms);
  options.only_strategy = 2;
  EXPECT_THROW(SelectCandidatesByPlans(profile, candidates, batches, always, 2, options),
               InvalidInput);
}

}  // namespace
}  // namespace hydraulis
