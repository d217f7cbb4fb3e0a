// The 1F1B timeline: equal to the planner's OneFOneBMs without communication, and adding
// send delays exactly where the schedule's dependencies cross stages.
#include "hydraulis/sim/pipeline_schedule.h"

#include <gtest/gtest.h>

#include <vector>

#include "hydraulis/base/error.h"
#include "hydraulis/base/rng.h"
#include "hydraulis/cost/pipeline_time.h"

namespace hydraulis {
namespace {

TEST(PipelineSchedule, WithoutDelaysEqualsOneFOneBExactly) {
  Rng rng(7);
  for (int trial = 0; trial < 300; ++trial) {
    const int pp = 1 + static_cast<int>(rng.Below(6));
    const int v = static_cast<int>(rng.Below(12));
    std::vector<double> stage_ms;
    for (int j = 0; j < v; ++j) stage_ms.push_back(0.1 + 50 * rng.Uniform());
    ScheduleOptions options;
    options.backward_to_forward = trial % 3 == 0 ? 2.0 : 0.5 + 3 * rng.Uniform();
    const PipelineSchedule s = SimulateOneFOneB(stage_ms, {}, pp, options);
    // Bit-identical, not merely close: the simulator's compute phase is the plan's estimate.
    EXPECT_EQ(s.makespan_ms, OneFOneBMs(stage_ms, pp, options)) << "pp " << pp << " v " << v;
    const std::vector<double> zeros(static_cast<std::size_t>(pp - 1) * stage_ms.size(), 0.0);
    EXPECT_EQ(SimulateOneFOneB(stage_ms, zeros, pp, options).makespan_ms, s.makespan_ms);
    EXPECT_EQ(s.ops.size(), static_cast<std::size_t>(2 * pp * v));
  }
}

TEST(PipelineSchedule, OpsRespectDependenciesAndNeverOverlapOnAStage) {
  const std::vector<double> stage_ms{3, 6, 1.5, 9};
  const int pp = 3;
  const std::vector<double> send(static_cast<std::size_t>(pp - 1) * stage_ms.size(), 0.25);
  const PipelineSchedule s = SimulateOneFOneB(stage_ms, send, pp);
  for (std::size_t i = 1; i < s.ops.size(); ++i) {
    if (s.ops[i].stage == s.ops[i - 1].stage) {
      EXPECT_GE(s.ops[i].start_ms, s.ops[i - 1].end_ms);
    }
  }
  auto end_of = [&](int stage, int mb, PassKind pass) {
    for (const auto& op : s.ops) {
      if (op.stage == stage && op.micro_batch == mb && op.pass == pass) return op.end_ms;
    }
    ADD_FAILURE() << "missing op";
    return 0.0;
  };
  for (const auto& op : s.ops) {
    EXPECT_NEAR(op.end_ms - op.start_ms,
                stage_ms[static_cast<std::size_t>(op.micro_batch)] *
                    (op.pass == PassKind::kForward ? 1.0 / 3 : 2.0 / 3),
                1e-12);
    if (op.pass == PassKind::kForward && op.stage > 0) {
      EXPECT_GE(op.start_ms, end_of(op.stage - 1, op.micro_batch, PassKind::kForward) + 0.25);
    }
    if (op.pass == PassKind::kBackward && op.stage < pp - 1) {
      EXPECT_GE(op.start_ms, end_of(op.stage + 1, op.micro_batch, PassKind::kBackward) + 0.25);
    }
  }
  for (int stage = 0; stage < pp; ++stage) {
    EXPECT_NEAR(s.stage_busy_ms[static_cast<std::size_t>(stage)], 19.5, 1e-12);
  }
}

TEST(PipelineSchedule, SendDelaysAddTheirHandComputedAmount) {
  // One micro-batch of 3 ms (forward 1, backward 2) through two stages, 0.5 ms per send:
  // F0 [0,1], send, F1 [1.5,2.5], B1 [2.5,4.5], send, B0 [5,7].
  const std::vector<double> one{3.0};
  EXPECT_DOUBLE_EQ(SimulateOneFOneB(one, std::vector<double>{0.5}, 2).makespan_ms, 7.0);
  EXPECT_DOUBLE_EQ(SimulateOneFOneB(one, {}, 2).makespan_ms, 6.0);
  // Three stages: each of the 2 boundaries is crossed twice: 9 + 4 * 0.5.
  EXPECT_DOUBLE_EQ(SimulateOneFOneB(one, std::vector<double>{0.5, 0.5}, 3).makespan_ms, 11.0);
  // Two equal micro-batches of 3 ms on two stages, delay d = 0.5. Stage 0: F0 [0,1],
  // F1 [1,2], B0 waits for B1-stage-1 of mb 0. Stage 1: F0 [1.5,2.5], B0 [2.5,4.5],
  // F1 [4.5,5.5] (F1 arrived at 2.5), B1 [5.5,7.5]. Stage 0: B0 [5,7], B1 [8,10].
  const std::vector<double> two{3.0, 3.0};
  EXPECT_DOUBLE_EQ(SimulateOneFOneB(two, std::vector<double>{0.5, 0.5}, 2).makespan_ms, 10.0);
  // Without delays: (v + pp - 1) * 3 = 9.
  EXPECT_DOUBLE_EQ(SimulateOneFOneB(two, {}, 2).makespan_ms, 9.0);
  // A single stage never sends.
  EXPECT_DOUBLE_EQ(SimulateOneFOneB(two, {}, 1).makespan_ms, 6.0);
}

TEST(PipelineSchedule, RejectsBadShapes) {
  const std::vector<double> two{3.0, 3.0};
  EXPECT_THROW(SimulateOneFOneB(two, std::vector<double>{0.5}, 2), InvalidInput);
  EXPECT_THROW(SimulateOneFOneB(two, {}, 0), InvalidInput);
  EXPECT_EQ(SimulateOneFOneB({}, {}, 3).makespan_ms, 0.0);
}

}  // namespace
}  // namespace hydraulis
