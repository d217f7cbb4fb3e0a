// The rank layout: the group helpers agree with ComputePlacement on heterogeneous
// strategies (every GPU of a pipeline once, tp and cp groups inside one stage, in tp-rank and
// cp-rank order).
#include "hydraulis/spec/placement.h"

#include <gtest/gtest.h>

#include <set>

namespace hydraulis {
namespace {

Scheme S(int tp, int pp, int cp = 1) {
  Scheme s;
  s.tp = tp;
  s.pp = pp;
  s.cp = cp;
  return s;
}

TEST(PlacementTest, GroupsAgreeWithComputePlacement) {
  Strategy strategy;
  strategy.pipelines = {S(4, 2), S(2, 3, 2), S(1, 1), S(2, 1)};
  const int gpus = strategy.Gpus() + 3;  // three idle GPUs at the end
  const std::vector<ComputeRole> roles = ComputePlacement(strategy, gpus);
  std::set<int> seen;
  for (int p = 0; p < static_cast<int>(strategy.pipelines.size()); ++p) {
    const Scheme& s = strategy.pipelines[static_cast<std::size_t>(p)];
    const std::vector<int> pipeline = PipelineGpus(strategy, p);
    ASSERT_EQ(static_cast<int>(pipeline.size()), s.Gpus());
    for (int g : pipeline) {
      EXPECT_TRUE(seen.insert(g).second) << "GPU " << g << " in two pipelines";
      EXPECT_EQ(roles[static_cast<std::size_t>(g)].pipeline, p);
    }
    for (int stage = 0; stage < s.pp; ++stage) {
      for (int c = 0; c < s.cp; ++c) {
        const std::vector<int> tp = TensorParallelGpus(strategy, p, stage, c);
        ASSERT_EQ(static_cast<int>(tp.size()), s.tp);
        for (int r = 0; r < s.tp; ++r) {
          const ParameterBlock& b =
              roles[static_cast<std::size_t>(tp[static_cast<std::size_t>(r)])].block;
          EXPECT_EQ(b.stage, stage);
          EXPECT_EQ(b.tp_rank, r);
          EXPECT_EQ(pipeline[static_cast<std::size_t>(PipelineGroupRank(s, stage, r, c))],
                    tp[static_cast<std::size_t>(r)]);
        }
      }
      for (int r = 0; r < s.tp; ++r) {
        const std::vector<int> cp = ContextParallelGpus(strategy, p, stage, r);
        ASSERT_EQ(static_cast<int>(cp.size()), s.cp);
        for (int c = 0; c < s.cp; ++c) {
          const ComputeRole& role =
              roles[static_cast<std::size_t>(cp[static_cast<std::size_t>(c)])];
          EXPECT_EQ(role.block.stage, stage);
          EXPECT_EQ(role.block.tp_rank, r);
          EXPECT_EQ(role.cp_rank, c);
          EXPECT_EQ(cp[static_cast<std::size_t>(c)],
                    TensorParallelGpus(strategy, p, stage, c)[static_cast<std::size_t>(r)]);
        }
      }
    }
  }
  for (int g = strategy.Gpus(); g < gpus; ++g)
    EXPECT_EQ(roles[static_cast<std::size_t>(g)].pipeline, -1);
}

}  // namespace
}  // namespace hydraulis
