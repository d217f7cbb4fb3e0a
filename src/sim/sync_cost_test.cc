// Placement and the synchronisation model on hand-computed cases.
#include "hydraulis/sim/sync_cost.h"

#include <gtest/gtest.h>

#include "hydraulis/spec/placement.h"

namespace hydraulis {
namespace {

Strategy Pipelines(std::vector<Scheme> schemes) { return Strategy{"s", std::move(schemes)}; }

TEST(Placement, PipelinesTakeConsecutiveGpusStageMajor) {
  // S4 of the case study: (TP8,PP3) + 10 x TP4 on 64 GPUs.
  std::vector<Scheme> schemes{{1, 8, 3}};
  for (int i = 0; i < 10; ++i) schemes.push_back({1, 4, 1});
  const Strategy s4 = Pipelines(schemes);
  const std::vector<ComputeRole> roles = ComputePlacement(s4, 64);
  ASSERT_EQ(roles.size(), 64u);
  EXPECT_EQ(roles[8].pipeline, 0);
  EXPECT_EQ(roles[8].block.stage, 1);
  EXPECT_EQ(roles[8].block.tp_rank, 0);
  EXPECT_EQ(roles[23].block.stage, 2);
  EXPECT_EQ(roles[23].block.tp_rank, 7);
  EXPECT_EQ(roles[24].pipeline, 1);
  EXPECT_EQ(roles[63].pipeline, 10);
  EXPECT_EQ(roles[63].block.tp_rank, 3);
  EXPECT_EQ(PipelineFirstGpus(s4)[2], 28);
  // A strategy smaller than the cluster leaves GPUs idle.
  EXPECT_EQ(ComputePlacement(Pipelines({{1, 4, 1}}), 8)[4].pipeline, -1);
}

TEST(Placement, StageBoundariesCrossNodesWhereTheGpusDo) {
  EXPECT_FALSE(StageBoundaryIntraNode({1, 8, 3}, 0, 0, 8));  // a stage is a whole node
  EXPECT_TRUE(StageBoundaryIntraNode({1, 4, 2}, 0, 0, 8));   // both stages on node 0
  EXPECT_FALSE(StageBoundaryIntraNode({1, 4, 2}, 4, 0, 8));  // GPUs 4-7 -> 8-11
  EXPECT_TRUE(StageBoundaryIntraNode({2, 2, 2}, 0, 0, 8));   // cp x tp = 4 per stage
}

TEST(Placement, OptimizerLayoutIsTpFastestThenDpThenPp) {
  const std::vector<ParameterBlock> b = OptimizerPlacement({2, 2, 2});
  ASSERT_EQ(b.size(), 8u);
  EXPECT_EQ(b[1].tp_rank, 1);
  EXPECT_EQ(b[2].tp_rank, 0);  // dp rank 1
  EXPECT_EQ(b[2].stage, 0);
  EXPECT_EQ(b[4].stage, 1);
}

TEST(SyncCost, ParameterCountOfALlamaShape) {
  // Per layer 2*16 (q, o) + 2*16*(1/2) (k, v with half the heads) + 3*4*8 (SwiGLU) + 2*4
  // (norms) = 152; 2 layers; embedding and head 2*10*4; final norm 4.
  ModelSpec m{"tiny", 2, 4, 8, 2, 1, 10};
  EXPECT_DOUBLE_EQ(ParameterCount(m), 2 * 152 + 80 + 4);
  // The 32B case study: 60 x (4 H^2 + 3 H ffn + 2 H) + 2 V H + H.
  ModelSpec m32{"llama-32b", 60, 6656, 17920, 64, 64, 30592};
  EXPECT_NEAR(ParameterCount(m32), 32.5102e9, 0.0001e9);
}

TEST(SyncCost, HandComputedTrafficOnTwoNodesOfTwoGpus) {
  const OptimizerLayout layout{2, 2, 1};  // GPU g owns half of tensor slice g % 2
  // 2 x TP2, one per node: each node holds the whole model, owns half of it, sends the
  // other half and receives one partial sum of its own half.
  SyncTraffic t = ComputeSyncTraffic(Pipelines({{1, 2, 1}, {1, 2, 1}}), layout, 4, 2);
  EXPECT_DOUBLE_EQ(t.inter_node_share, 0.5);
  EXPECT_DOUBLE_EQ(t.intra_node_share, 0.5);
  // 4 x TP1: the two copies on a node are summed over NVLink first, so the same traffic.
  t = ComputeSyncTraffic(Pipelines({{1, 1, 1}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}}), layout, 4, 2);
  EXPECT_DOUBLE_EQ(t.inter_node_share, 0.5);
  EXPECT_DOUBLE_EQ(t.intra_node_share, 1.0);
  // 1 x TP4: node 0 holds slices [0, 1/2) and owns half of all of it: sends 1/4, receives 1/4.
  t = ComputeSyncTraffic(Pipelines({{1, 4, 1}}), layout, 4, 2);
  EXPECT_DOUBLE_EQ(t.inter_node_share, 0.25);
  EXPECT_DOUBLE_EQ(t.intra_node_share, 0.25);
  // A single node exchanges nothing over the network.
  t = ComputeSyncTraffic(Pipelines({{1, 2, 1}, {1, 2, 1}}), layout, 4, 4);
  EXPECT_DOUBLE_EQ(t.inter_node_share, 0.0);
}

TEST(SyncCost, HomogeneousOptimizerLayoutIsZeroOneTraffic) {
  // S0 = 4 x TP16 = the optimizer layout (4, 16, 1): a node holds half a replica
  // (1/2 of the model) and owns a quarter of it; ZeRO's (dp-1)/dp of 1/2 = 3/8 leaves.
  const OptimizerLayout layout{4, 16, 1};
  const Strategy s0 = Pipelines({{1, 16, 1}, {1, 16, 1}, {1, 16, 1}, {1, 16, 1}});
  EXPECT_DOUBLE_EQ(ComputeSyncTraffic(s0, layout, 64, 8).inter_node_share, 3.0 / 8);
  // S3 = TP16 + 12 x TP4: a node of two TP4 replicas holds the whole model, owns 1/8.
  std::vector<Scheme> s3{{1, 16, 1}};
  for (int i = 0; i < 12; ++i) s3.push_back({1, 4, 1});
  EXPECT_DOUBLE_EQ(ComputeSyncTraffic(Pipelines(s3), layout, 64, 8).inter_node_share, 7.0 / 8);
}

TEST(SyncCost, TimesFollowBandwidthsAndLatencies) {
  Profile profile;
  profile.model = {"tiny", 2, 4, 8, 2, 1, 10};  // 388 parameters
  profile.cluster.gpus_per_node = 2;
  CommOptions comm;
  // 776 bytes/s both ways: the whole model in bf16 takes exactly one second.
  comm.nvlink_gbytes_per_s = 776e-9;
  comm.network_gbits_per_s_per_node = 776 * 8e-9;
  comm.collective_latency_us = 50;
  comm.grad_bytes_per_param = 4;
  OptimizerStepOptions opt;
  opt.bytes_per_param = 30;
  opt.hbm_gbytes_per_s = 97 * 30e-9;  // a GPU's 97 parameters in one second
  const Strategy s = Pipelines({{1, 2, 1}, {1, 2, 1}});
  SyncCost c = ComputeSyncCost(profile, s, {2, 2, 1}, 4, comm, opt);
  // Half the model over NVLink and half over the network, plus two latencies.
  EXPECT_NEAR(c.materialize_ms, 500 + 500 + 2 * 0.05, 1e-9);
  EXPECT_NEAR(c.reduce_scatter_ms, 2 * (500 + 500) + 2 * 0.05, 1e-9);
  EXPECT_NEAR(c.optimizer_ms, 1000, 1e-9);
  opt.fixed_ms = 3;
  comm.enabled = false;
  c = ComputeSyncCost(profile, s, {2, 2, 1}, 4, comm, opt);
  EXPECT_EQ(c.materialize_ms, 0);
  EXPECT_EQ(c.reduce_scatter_ms, 0);
  EXPECT_EQ(c.optimizer_ms, 3);
}

}  // namespace
}  // namespace hydraulis
