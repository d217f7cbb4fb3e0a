// Context parallelism in the DistributedTrainer's step against one process, and the plans it
// refuses.
#include <gtest/gtest.h>

#include <chrono>
#include <cstddef>
#include <string>
#include <vector>

#include "hydraulis/cost/cp_layout.h"
#include "hydraulis/runtime/step/distributed_trainer.h"
#include "runtime/testing/rank_harness.h"
#include "runtime/testing/training_equivalence.h"

namespace hydraulis {
namespace {

using test_support::ExpectTrainerMatchesOneProcess;
using test_support::kSteps;
using test_support::ParseCandidates;
using test_support::PlanFor;
using test_support::RankRun;
using test_support::RunRanks;

// ---- Context parallelism in the step: the cp ranks of a stage share its micro-batches ----
// Layouts by HandPlaced (PlanFor): odd lengths sharded, a 1- and a 2-token document sharded
// (empty chunks), micro-batches in which a rank holds no token, with and without a sharded
// document. Each cp rank's gradients join the optimizer's reduction like a dp replica's;
// a wrong local token, position, target, gather or gradient sum moves the parameters away
// from one process's.

TEST(ContextParallelTrainerTest, TwoCpRanksTrainLikeOneProcess) {
  ExpectTrainerMatchesOneProcess("t1p1c2", "0,0,0");
}

TEST(ContextParallelTrainerTest, ThreeCpRanksTrainLikeOneProcess) {
  ExpectTrainerMatchesOneProcess("t1p1c3", "0,0,0");
}

// <2,1,1> beside two <1,1,1> pipelines on 4 ranks: in step 2 (one micro-batch) the cp
// pipeline runs none and its ranks only join the reduction.
TEST(ContextParallelTrainerTest, CpPipelineBesideDataParallelOnesTrainsLikeOneProcess) {
  ExpectTrainerMatchesOneProcess("t1p1c2,t1p1,t1p1", "0,0,0");
}

// A cp strategy and cp = 1 ones in turn: the same ranks are cp peers in one step and
// separate pipelines or tp peers in the next; the optimizer state never moves.
TEST(ContextParallelTrainerTest, SwitchingBetweenCpAndNoCpTrainsLikeOneProcess) {
  ExpectTrainerMatchesOneProcess("t1p1c2,t1p1,t1p1|t2p1,t1p1,t1p1|t1p1c2,t1p1c2", "0,1,2");
  ExpectTrainerMatchesOneProcess("t1p1c2|t1p1,t1p1", "1,0,1");
}

// cp inside a tp group: each (cp rank, tp rank) holds its heads of its local tokens.
TEST(ContextParallelTrainerTest, CpTimesTpTrainsLikeOneProcess) {
  ExpectTrainerMatchesOneProcess("t2p1c2", "0,0,0");
}

// cp in a pipeline: each cp rank sends its local rows to the same cp rank of the next stage
// (step 0 sends a rank's empty share of a micro-batch).
TEST(ContextParallelTrainerTest, CpTimesPpTrainsLikeOneProcess) {
  ExpectTrainerMatchesOneProcess("t1p2c2", "0,0,0");
}

// The planner's layout rule (LayOutMicroBatch) instead of hand-made layouts.
TEST(ContextParallelTrainerTest, PlannerRuleLayoutsTrainLikeOneProcess) {
  int sharded = 0, placed = 0;
  for (int step = 0; step < kSteps; ++step) {
    const Plan plan = PlanFor(step, 0, ParseCandidates("t1p1c2"), "rule");
    for (const CpLayout& layout : plan.pipelines[0].cp_layouts) {
      for (std::size_t d = 0; d < layout.size(); ++d) (layout.Width(d) > 1 ? sharded : placed)++;
    }
  }
  // The rule must both shard and place documents, or this test checks only one of them.
  EXPECT_GT(sharded, 0);
  EXPECT_GT(placed, 0);
  ExpectTrainerMatchesOneProcess("t1p1c2", "0,0,0", "rule");
}

// Documents over any subset of the cp ranks (SubsetPlaced): on cp = 4 a micro-batch with
// widths 1, 2, 3 and 4 at once, non-contiguous rank sets, 1- and 2-token documents over
// 2 ranks, and every step a different layout.
TEST(ContextParallelTrainerTest, SubsetsOfFourCpRanksTrainLikeOneProcess) {
  const Plan plan = PlanFor(2, 0, ParseCandidates("t1p1c4"), "subsets");
  const CpLayout& layout = plan.pipelines[0].cp_layouts.at(0);
  std::vector<int> widths;
  for (std::size_t d = 0; d < layout.size(); ++d) widths.push_back(layout.Width(d));
  EXPECT_EQ(widths, (std::vector<int>{1, 1, 2, 1, 4, 2, 3}));
  ExpectTrainerMatchesOneProcess("t1p1c4", "0,0,0", "subsets");
}

// cp = 3 with subsets of two ranks ({0, 2} and {1, 2}) beside whole and full ones.
TEST(ContextParallelTrainerTest, SubsetsOfThreeCpRanksTrainLikeOneProcess) {
  ExpectTrainerMatchesOneProcess("t1p1c3", "0,0,0", "subsets");
}

// Subsets inside tp groups: tp = 2 x cp = 4 on 8 ranks.
TEST(ContextParallelTrainerTest, SubsetsTimesTpTrainLikeOneProcess) {
  ExpectTrainerMatchesOneProcess("t2p1c4", "0,0,0", "subsets");
}

// A subset-sharded cp = 3 pipeline beside a cp = 1 one, switching with a cp = 1 strategy.
TEST(ContextParallelTrainerTest, SubsetsInAHeterogeneousStrategyTrainLikeOneProcess) {
  ExpectTrainerMatchesOneProcess("t1p1c3,t1p1|t2p1,t1p1,t1p1", "0,1,0", "subsets");
}

// cp ranks that disagree on a layout would gather mismatched keys: the plan-hash check
// stops the step first.
TEST(ContextParallelTrainerTest, RanksWithDifferentCpLayoutsFailWithAClearError) {
  std::vector<RankRun> runs = RunRanks(2, "--trainer-worker", "t1p1c2/0,0,0/0.0001/corrupt-layout",
                                       std::chrono::seconds(60));
  for (const RankRun& run : runs) {
    EXPECT_EQ(run.status, 0);
    EXPECT_NE(run.outcome.error.find("the ranks hold different step plans"), std::string::npos)
        << run.outcome.error;
    EXPECT_EQ(run.outcome.losses.size(), 1u);  // step 0 ran
  }
}

TEST(ContextParallelTrainerTest, PlanWithoutCpLayoutsIsRejected) {
  std::vector<RankRun> runs =
      RunRanks(2, "--trainer-worker", "t1p1c2/0,0,0/0.0001/no-layouts", std::chrono::seconds(60));
  for (const RankRun& run : runs) {
    EXPECT_EQ(run.status, 0);
    EXPECT_NE(run.outcome.error.find("needs the plan's cp_layouts"), std::string::npos)
        << run.outcome.error;
    EXPECT_TRUE(run.outcome.losses.empty());
  }
}

}  // namespace
}  // namespace hydraulis
