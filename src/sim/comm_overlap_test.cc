// The bucketed, overlapped collectives on schedules worked out by hand, and their bounds on
// random schedules.
#include "hydraulis/sim/comm_overlap.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "hydraulis/base/error.h"
#include "hydraulis/base/rng.h"

namespace hydraulis {
namespace {

// One pipeline of 2 stages, 2 micro-batches of 3 ms a stage (forward 1, backward 2), no
// sends. Stage 0: F0 [0,1], F1 [1,2], B0 [4,6], B1 [7,9]; stage 1: F0 [1,2], B0 [2,4],
// F1 [4,5], B1 [5,7]. Makespan 9.
PipelineSchedule TwoStagesTwoMicroBatches() {
  const std::vector<double> stage_ms{3, 3};
  return SimulateOneFOneB(stage_ms, {}, 2);
}

TEST(CommOverlap, StageWindowsAreTheFirstForwardAndTheLastBackward) {
  const PipelineSchedule schedule = TwoStagesTwoMicroBatches();
  ASSERT_DOUBLE_EQ(schedule.makespan_ms, 9);
  const PipelineWindows w = StageWindowsOf(schedule, 2);
  ASSERT_EQ(w.size(), 2u);
  EXPECT_DOUBLE_EQ(w[0].first_forward_start_ms, 0);
  EXPECT_DOUBLE_EQ(w[0].first_forward_end_ms, 1);
  EXPECT_DOUBLE_EQ(w[0].last_backward_start_ms, 7);
  EXPECT_DOUBLE_EQ(w[0].last_backward_end_ms, 9);
  EXPECT_DOUBLE_EQ(w[1].first_forward_start_ms, 1);
  EXPECT_DOUBLE_EQ(w[1].first_forward_end_ms, 2);
  EXPECT_DOUBLE_EQ(w[1].last_backward_start_ms, 5);
  EXPECT_DOUBLE_EQ(w[1].last_backward_end_ms, 7);
  EXPECT_TRUE(StageWindowsOf(SimulateOneFOneB({}, {}, 2), 2).empty());
}

TEST(CommOverlap, BucketsCutTheModelInFlatOrderTheLastOneShorter) {
  EXPECT_EQ(BucketBounds(100, 40), (std::vector<double>{0, 0.4, 0.8, 1}));
  EXPECT_EQ(BucketBounds(100, 25), (std::vector<double>{0, 0.25, 0.5, 0.75, 1}));
  EXPECT_EQ(BucketBounds(100, 100), (std::vector<double>{0, 1}));
  EXPECT_EQ(BucketBounds(100, 1000), (std::vector<double>{0, 1}));
  // 32B in Megatron's 40M buckets: 813 of them.
  EXPECT_EQ(BucketBounds(32'510'200'320.0, 40'000'000).size(), 814u);
  EXPECT_THROW(BucketBounds(32'510'200'320.0, 1000), InvalidInput);
}

// Four equal buckets: stage 0 holds buckets 0 and 1, stage 1 buckets 2 and 3. No latency;
// a bucket's all-gather takes 1 ms, its reduce-scatter 2 ms.
//
// All-gathers end at 1, 2, 3, 4. Forward first reaches bucket k's first parameter at 0
// (stage 0's F0 at its start), 0.5 (halfway through it), 1 (stage 1's F0 starts), 1.5:
// compute must wait max(1 - 0, 2 - 0.5, 3 - 1, 4 - 1.5) = 2.5 ms.
//
// Backward has passed bucket k's first parameter at 9, 8 (halfway through stage 0's B1
// [7,9], top down), 7, 6 (halfway through stage 1's B1 [5,7]), i.e. at 11.5, 10.5, 9.5, 8.5
// in step time. Reduce-scatters, bucket 3 first: [8.5,10.5], [10.5,12.5], [12.5,14.5],
// [14.5,16.5]; compute ends at 2.5 + 9 = 11.5, so 5 ms are exposed (against 8 serially).
TEST(CommOverlap, OnePipelineTwoStagesByHand) {
  const std::vector<PipelineWindows> windows{StageWindowsOf(TwoStagesTwoMicroBatches(), 2)};
  const std::vector<double> bounds{0, 0.25, 0.5, 0.75, 1};
  BucketedCollectives c;
  c.bounds = bounds;
  c.all_gather_transfer_ms = 4;
  c.reduce_scatter_transfer_ms = 8;
  OverlappedSync o = OverlapSync(windows, 9, c);
  EXPECT_DOUBLE_EQ(o.exposed_all_gather_ms, 2.5);
  EXPECT_DOUBLE_EQ(o.all_gather_total_ms, 4);
  EXPECT_DOUBLE_EQ(o.reduce_scatter_start_ms, 8.5);
  EXPECT_DOUBLE_EQ(o.reduce_scatter_total_ms, 8);
  EXPECT_DOUBLE_EQ(o.exposed_reduce_scatter_ms, 5);

  // Faster reduce-scatters (0.5 ms a bucket) keep pace with backward: [8.5,9], [9.5,10],
  // [10.5,11], [11.5,12]; only the last bucket's runs past compute.
  c.reduce_scatter_transfer_ms = 2;
  o = OverlapSync(windows, 9, c);
  EXPECT_DOUBLE_EQ(o.exposed_reduce_scatter_ms, 0.5);

  // A latency of 0.25 ms per collective: all-gathers end at 1.25, 2.5, 3.75, 5, so compute
  // waits max(1.25, 2, 2.75, 3.5) = 3.5; reduce-scatters of 0.75 ms start as their buckets
  // are ready, at 3.5 + 6, 7, 8, 9; compute ends at 12.5, the last one at 13.25.
  c.latency_ms = 0.25;
  o = OverlapSync(windows, 9, c);
  EXPECT_DOUBLE_EQ(o.exposed_all_gather_ms, 3.5);
  EXPECT_DOUBLE_EQ(o.all_gather_total_ms, 5);
  EXPECT_DOUBLE_EQ(o.reduce_scatter_start_ms, 9.5);
  EXPECT_DOUBLE_EQ(o.reduce_scatter_total_ms, 3);
  EXPECT_DOUBLE_EQ(o.exposed_reduce_scatter_ms, 0.75);
}

// Two single-stage pipelines: A runs F [0,1] first and B [4,6] last, B runs F [0,2] first
// and B [6,10] last; compute lasts 10. Two buckets, all-gathers and reduce-scatters of 1 ms
// each; the all-gathers end at 1 and 2.
// A reaches bucket 1 at 0.5 and must start 1.5 late; B reaches it at 1 and starts 1 late.
// Compute ends at max(1.5 + 6, 1 + 10) = 11: A's wait is hidden, 1 ms is exposed.
// Bucket 1 is ready when B has passed it, at 1 + 10 - 0.5 * 4 = 9 (A at 1.5 + 5 = 6.5):
// reduce-scatters [9,10] and [11,12], 1 ms past compute.
// Synchronised (dynamic-cp's barrier), both start 1.5 late: compute ends at 11.5, bucket 1
// is ready at 9.5, bucket 0 at 11.5: [9.5,10.5] and [11.5,12.5].
TEST(CommOverlap, EachPipelineWaitsForItsOwnBuckets) {
  const PipelineWindows a{{0, 1, 4, 6}}, b{{0, 2, 6, 10}};
  const std::vector<double> bounds{0, 0.5, 1};
  BucketedCollectives c;
  c.bounds = bounds;
  c.all_gather_transfer_ms = 2;
  c.reduce_scatter_transfer_ms = 2;
  const std::vector<PipelineWindows> windows{a, b};
  OverlappedSync o = OverlapSync(windows, 10, c);
  EXPECT_DOUBLE_EQ(o.exposed_all_gather_ms, 1);
  EXPECT_DOUBLE_EQ(o.reduce_scatter_start_ms, 9);
  EXPECT_DOUBLE_EQ(o.exposed_reduce_scatter_ms, 1);
  o = OverlapSync(windows, 10, c, /*synchronised=*/true);
  EXPECT_DOUBLE_EQ(o.exposed_all_gather_ms, 1.5);
  EXPECT_DOUBLE_EQ(o.reduce_scatter_start_ms, 9.5);
  EXPECT_DOUBLE_EQ(o.exposed_reduce_scatter_ms, 1);
  // A pipeline without micro-batches changes nothing.
  const std::vector<PipelineWindows> with_idle{a, {}, b};
  o = OverlapSync(with_idle, 10, c);
  EXPECT_DOUBLE_EQ(o.exposed_all_gather_ms, 1);
  EXPECT_DOUBLE_EQ(o.exposed_reduce_scatter_ms, 1);
  // Without any, the optimizer step still waits for the all-gathers.
  const std::vector<PipelineWindows> idle{{}};
  o = OverlapSync(idle, 0, c);
  EXPECT_DOUBLE_EQ(o.exposed_all_gather_ms, 2);
  EXPECT_DOUBLE_EQ(o.exposed_reduce_scatter_ms, 2);
}

// With one bucket nothing overlaps: the all-gather ends before forward starts and the
// reduce-scatter starts when the last backward ends, i.e. the serial model.
TEST(CommOverlap, OneBucketIsTheSerialModel) {
  const std::vector<PipelineWindows> windows{StageWindowsOf(TwoStagesTwoMicroBatches(), 2)};
  const std::vector<double> bounds{0, 1};
  BucketedCollectives c;
  c.bounds = bounds;
  c.latency_ms = 0.1;
  c.all_gather_transfer_ms = 3;
  c.reduce_scatter_transfer_ms = 5;
  const OverlappedSync o = OverlapSync(windows, 9, c);
  EXPECT_DOUBLE_EQ(o.exposed_all_gather_ms, 3.1);
  EXPECT_DOUBLE_EQ(o.reduce_scatter_start_ms, 3.1 + 9);
  EXPECT_DOUBLE_EQ(o.exposed_reduce_scatter_ms, 5.1);
}

// On random pipelines: what a step waits for is never more than the collectives' own time
// (so, without latency, never more than the serial model), never less than the first
// all-gather and the last reduce-scatter, and a reduce-scatter never starts before the
// backward that makes its bucket's gradients has ended.
TEST(CommOverlap, RandomSchedulesStayWithinTheirBounds) {
  Rng rng(7);
  for (int trial = 0; trial < 300; ++trial) {
    std::vector<PipelineWindows> windows;
    double compute_ms = 0;
    const int pipelines = 1 + static_cast<int>(rng.Below(4));
    for (int p = 0; p < pipelines; ++p) {
      const int pp = 1 + static_cast<int>(rng.Below(4));
      const std::size_t v = rng.Below(6);
      std::vector<double> stage_ms(v), send_ms(static_cast<std::size_t>(pp - 1) * v);
      for (double& t : stage_ms) t = 1 + 10 * rng.Uniform();
      for (double& t : send_ms) t = rng.Uniform();
      const PipelineSchedule s = SimulateOneFOneB(stage_ms, send_ms, pp);
      compute_ms = std::max(compute_ms, s.makespan_ms);
      windows.push_back(StageWindowsOf(s, pp));
    }
    const std::vector<double> bounds =
        BucketBounds(1000, 1 + static_cast<std::int64_t>(rng.Below(1200)));
    BucketedCollectives c;
    c.bounds = bounds;
    c.latency_ms = trial % 2 == 0 ? 0.0 : 0.05 * rng.Uniform();
    c.all_gather_transfer_ms = 20 * rng.Uniform();
    c.reduce_scatter_transfer_ms = 20 * rng.Uniform();
    const OverlappedSync o = OverlapSync(windows, compute_ms, c);
    const double eps = 1e-9;
    const double buckets = static_cast<double>(bounds.size() - 1);
    EXPECT_NEAR(o.all_gather_total_ms, buckets * c.latency_ms + c.all_gather_transfer_ms, eps);
    EXPECT_NEAR(o.reduce_scatter_total_ms, buckets * c.latency_ms + c.reduce_scatter_transfer_ms,
                eps);
    EXPECT_LE(o.exposed_all_gather_ms, o.all_gather_total_ms + eps);
    EXPECT_LE(o.exposed_reduce_scatter_ms, o.reduce_scatter_total_ms + eps);
    EXPECT_GE(o.exposed_all_gather_ms, c.latency_ms + bounds[1] * c.all_gather_transfer_ms - eps);
    EXPECT_GE(o.exposed_reduce_scatter_ms,
              c.latency_ms + bounds[1] * c.reduce_scatter_transfer_ms - eps);
    // The top bucket's reduce-scatter waits for every pipeline's last backward over it and
    // the all-gathers, and with one bucket for the end of compute.
    double top_ready = 0;
    for (const PipelineWindows& w : windows) {
      if (w.empty()) continue;
      top_ready = std::max(top_ready, w.back().last_backward_start_ms);
    }
    EXPECT_GE(o.reduce_scatter_start_ms, std::max(top_ready, o.all_gather_total_ms) - eps);
    if (bounds.size() == 2) {
      EXPECT_NEAR(o.reduce_scatter_start_ms, o.exposed_all_gather_ms + compute_ms, eps);
    }
    // One common delay is never shorter than each pipeline's own, and shifts every
    // pipeline's last backward by itself.
    const OverlappedSync common = OverlapSync(windows, compute_ms, c, /*synchronised=*/true);
    EXPECT_GE(common.exposed_all_gather_ms, o.exposed_all_gather_ms - eps);
    EXPECT_LE(common.exposed_all_gather_ms, common.all_gather_total_ms + eps);
    EXPECT_GE(common.reduce_scatter_start_ms, common.exposed_all_gather_ms + top_ready - eps);
  }
}

}  // namespace
}  // namespace hydraulis
