// End-to-end simulation on the 32B / 64-GPU case study: agreement with the planner,
// communication accounting, determinism, the trace, and the ordering of the systems.
#include "hydraulis/sim/simulator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>

#include "../base/test_support.h"
#include "hydraulis/base/error.h"
#include "hydraulis/base/rng.h"
#include "hydraulis/cost/kv_exchange.h"
#include "hydraulis/data/batch_sampler.h"
#include "hydraulis/data/lengths.h"
#include "hydraulis/sim/dynamic_cp.h"
#include "hydraulis/sim/report.h"
#include "hydraulis/sim/sync_cost.h"
#include "hydraulis/sim/trace.h"
#include "hydraulis/spec/model.h"
#include "hydraulis/spec/placement.h"
#include "hydraulis/spec/spec_io.h"
#include "step_planner.h"

namespace hydraulis {
namespace {

struct CaseStudy {
  Profile profile;
  CandidateSet candidates;
  std::vector<std::int64_t> dataset;
};

// Loaded once: the full Wikipedia lengths when shared/ is beside the checkout, else the
// 20,000-document sample shipped in data/.
const CaseStudy& Case() {
  static const CaseStudy* c = [] {
    auto* out = new CaseStudy;
    out->profile = LoadProfile(HYDRAULIS_SOURCE_DIR "/configs/profiles/llama-32b-a800.json");
    out->candidates = LoadCandidates(
        HYDRAULIS_SOURCE_DIR "/configs/candidates/llama-32b-64gpu.json", out->profile);
    out->dataset = ReadLengths(test_support::RealLengthsPath());
    return out;
  }();
  return *c;
}

SimOptions Options(System system, int steps) {
  SimOptions o;
  o.system = system;
  o.steps = steps;
  o.sampler = {200'000, 32'768, 11};
  return o;
}

SimResult RunCase(const SimOptions& o) {
  return Simulate(Case().profile, Case().candidates, Case().dataset, o);
}

constexpr System kFastSystems[] = {System::kPadding, System::kStaticFixed, System::kStaticBalanced,
                                   System::kOurs};

TEST(Simulator, WithoutCommunicationTheComputePhaseIsThePlannersEstimate) {
  for (System system : kFastSystems) {
    SimOptions o = Options(system, 3);
    o.comm.enabled = false;
    const SimResult r = RunCase(o);
    for (const StepResult& step : r.steps) {
      EXPECT_EQ(step.compute_ms, step.planned_ms) << SystemName(system);
      EXPECT_EQ(step.materialize_ms, 0.0);
      EXPECT_EQ(step.reduce_scatter_ms, 0.0);
      for (const auto& p : step.pipelines) EXPECT_EQ(p.pipeline_ms, p.planned_ms);
      EXPECT_DOUBLE_EQ(step.step_ms, step.compute_ms + step.optimizer_ms);
    }
  }
}

TEST(Simulator, PlannedTimeIsThePlansEstimatedStepTime) {
  PlannerOptions po;
  po.context_tokens = 32'768;
  const Planner planner(Case().profile, Case().candidates, po);
  const StepPlanner step_planner(Case().profile, Case().candidates, System::kOurs, po);
  BatchSampler sampler(Case().dataset, {200'000, 32'768, 5});
  for (int i = 0; i < 2; ++i) {
    const SampledBatch batch = sampler.Next();
    const Plan plan = planner.PlanBatch(batch.lengths);
    const Plan step_plan = step_planner.Plan(batch.lengths);
    EXPECT_EQ(PlanToJson(step_plan, false, false), PlanToJson(plan, false, false));
    EXPECT_EQ(step_planner.padded_tokens(), 0);
    SimOptions o = Options(System::kOurs, 1);
    o.comm.enabled = false;
    const StepResult r = StepTimer(Case().profile, Case().candidates, o).Time(step_plan);
    EXPECT_EQ(r.planned_ms, plan.estimated_step_ms);
    EXPECT_EQ(r.compute_ms, plan.estimated_step_ms);
    for (std::size_t p = 0; p < plan.pipelines.size(); ++p) {
      EXPECT_EQ(r.pipelines[p].pipeline_ms, plan.pipelines[p].estimated_ms);
    }
  }
}

TEST(Simulator, WithoutOverlapCommunicationAddsTheModelledAmounts) {
  SimOptions o = Options(System::kOurs, 2);
  o.comm.overlap = false;
  const StepTimer timer(Case().profile, Case().candidates, o);
  // Every sync phase is the candidate's precomputed cost; the step is the sum of phases.
  const SimResult r = RunCase(o);
  for (const StepResult& step : r.steps) {
    const SyncCost& sync = timer.Sync(step.strategy_index);
    EXPECT_EQ(step.materialize_ms, sync.materialize_ms);
    EXPECT_EQ(step.reduce_scatter_ms, sync.reduce_scatter_ms);
    EXPECT_EQ(step.materialize_total_ms, sync.materialize_ms);
    EXPECT_EQ(step.reduce_scatter_total_ms, sync.reduce_scatter_ms);
    EXPECT_EQ(step.reduce_scatter_start_ms, step.materialize_ms + step.compute_ms);
    EXPECT_EQ(step.step_ms,
              step.materialize_ms + step.compute_ms + step.reduce_scatter_ms + step.optimizer_ms);
    EXPECT_GE(step.compute_ms, step.planned_ms);
  }
  // S0 is the optimizer layout: ZeRO-1 traffic, 3/8 of the bf16 model leaves each node
  // (100 GB/s), each GPU exchanges its 1/16 over NVLink (400 GB/s), two 50 us latencies.
  const double params = 32'510'200'320.0;
  const double expected_ms =
      0.1 + 3.0 / 8 * params * 2 / 100e9 * 1e3 + 1.0 / 16 * params * 2 / 400e9 * 1e3;
  EXPECT_NEAR(timer.Sync(0).materialize_ms, expected_ms, 1e-6);
  // Optimizer: params / 64 GPUs x 30 bytes at 1,600 GB/s.
  EXPECT_NEAR(timer.Sync(0).optimizer_ms, params / 64 * 30 / 1600e9 * 1e3, 1e-9);
  // Point-to-point: S1's (TP8,PP3) stages are whole nodes, so a micro-batch of 32,768
  // tokens sends 32768 x 6656 x 2 / 8 bytes per GPU at 100 GB/s / 8 GPUs, plus 10 us.
  EXPECT_NEAR(timer.SendMs(1, 1, 0, 32'768), 0.01 + 32768.0 * 6656 * 2 / 8 / 12.5e9 * 1e3, 1e-12);
}

// The same batches and plans with and without overlap: compute is the same; the step waits
// for at least the first all-gather and the last reduce-scatter, and for no more than the
// serial model plus the latency of the extra collectives (none when latency is 0).
TEST(Simulator, OverlapHidesPartOfTheCollectivesAndNeverAddsMore) {
  // The step-by-step comparison needs both runs to choose the same strategies, which they
  // do on the shared lengths' batches but not on every batch of the bundled sample.
  if (!test_support::HaveSharedLengths()) {
    GTEST_SKIP() << "needs ../shared/data/wikipedia-doc-lengths.txt";
  }
  for (System system : {System::kStaticFixed, System::kOurs}) {
    for (double latency_us : {0.0, 50.0}) {
      SimOptions o = Options(system, 3);
      o.comm.collective_latency_us = latency_us;
      const StepTimer timer(Case().profile, Case().candidates, o);
      const SimResult overlapped = RunCase(o);
      o.comm.overlap = false;
      const SimResult serial = RunCase(o);
      const double buckets = static_cast<double>(timer.BucketBoundaries().size() - 1);
      ASSERT_EQ(buckets, 813);
      for (std::size_t i = 0; i < serial.steps.size(); ++i) {
        const StepResult &a = overlapped.steps[i], &b = serial.steps[i];
        const SyncCost& sync = timer.Sync(a.strategy_index);
        ASSERT_EQ(a.strategy_index, b.strategy_index);
        EXPECT_EQ(a.compute_ms, b.compute_ms);
        EXPECT_EQ(a.optimizer_ms, b.optimizer_ms);
        const double extra_ms = (buckets - 1) * sync.collective_latency_ms;
        EXPECT_NEAR(a.materialize_total_ms, sync.materialize_ms + extra_ms, 1e-6);
        EXPECT_NEAR(a.reduce_scatter_total_ms, sync.reduce_scatter_ms + extra_ms, 1e-6);
        EXPECT_LE(a.materialize_ms, b.materialize_ms + extra_ms + 1e-9);
        EXPECT_LE(a.reduce_scatter_ms, b.reduce_scatter_ms + extra_ms + 1e-9);
        EXPECT_GE(a.materialize_ms, sync.materialize_transfer_ms / buckets);
        EXPECT_GE(a.reduce_scatter_ms, sync.reduce_scatter_transfer_ms / buckets);
        EXPECT_GE(a.reduce_scatter_start_ms, a.materialize_total_ms);
        EXPECT_LE(a.step_ms, b.step_ms + 2 * extra_ms + 1e-9);
        EXPECT_GT(a.step_ms, a.compute_ms + a.optimizer_ms);
        // These batches leave backward long enough to hide most of it.
        EXPECT_LT(a.step_ms, b.step_ms) << SystemName(system) << " step " << i;
        EXPECT_DOUBLE_EQ(a.step_ms,
                         a.materialize_ms + a.compute_ms + a.reduce_scatter_ms + a.optimizer_ms);
      }
    }
  }
}

// With one bucket nothing can overlap: the overlapped model is the serial one.
TEST(Simulator, OneBucketIsTheSerialModel) {
  SimOptions o = Options(System::kOurs, 2);
  o.comm.bucket_elements = 100'000'000'000;
  const SimResult one = RunCase(o);
  o.comm.overlap = false;
  const SimResult serial = RunCase(o);
  for (std::size_t i = 0; i < serial.steps.size(); ++i) {
    const StepResult &a = one.steps[i], &b = serial.steps[i];
    EXPECT_NEAR(a.materialize_ms, b.materialize_ms, 1e-9);
    EXPECT_NEAR(a.reduce_scatter_ms, b.reduce_scatter_ms, 1e-9);
    EXPECT_NEAR(a.reduce_scatter_start_ms, b.reduce_scatter_start_ms, 1e-9);
    EXPECT_NEAR(a.step_ms, b.step_ms, 1e-9);
  }
  o.comm.bucket_elements = 1000;
  EXPECT_NE(test_support::InvalidInputMessage([&] { RunCase(o); }).find("bucket_elements"),
            std::string::npos);
}

TEST(Simulator, OnAHandBuiltStepTheTimelineAddsSendsOnTheCriticalPath) {
  // One (TP4,PP2) pipeline inside node 0 (NVLink) with two micro-batches of 3 ms each
  // (forward 1, backward 2); a send of 1,024 tokens takes 10 us + 1024 x 6656 x 2 / 4
  // bytes at 400 GB/s.
  CandidateSet set = Case().candidates;
  set.strategies = {Strategy{"X", {{1, 4, 2}}}};
  SimOptions o = Options(System::kOurs, 1);
  o.optimizer.fixed_ms = 0;
  const StepTimer timer(Case().profile, set, o);
  Plan plan;
  plan.strategy = set.strategies[0];
  plan.lengths = {1000, 1000};
  PipelinePlan pp;
  pp.scheme = {1, 4, 2};
  pp.micro_batches = {{0}, {1}};
  plan.pipelines = {pp};
  // Each micro-batch costs t on a stage (f forward, b backward, f + b = t) and sends its
  // 1,000 tokens padded to 1,024.
  const SchemeProfile* sp = Case().profile.Find({1, 4, 2});
  ASSERT_NE(sp, nullptr);
  const TimeModel time = TimeModel::From(*sp);
  const double t = time.c_ms + time.DocumentMs(1000);
  const double d = 0.01 + 1024.0 * 6656 * 2 / 4 / 400e9 * 1e3;
  EXPECT_NEAR(timer.SendMs(0, 0, 0, 1024), d, 1e-12);
  const StepResult r = timer.Time(plan);
  // Hand schedule with send delay d. Stage 0: F0 [0,f], F1 [f,2f]. Stage 1: F0 [f+d,2f+d],
  // B0 [2f+d,2f+b+d], F1 [2f+b+d,3f+b+d] (arrived at 2f+d), B1 [3f+b+d,3f+2b+d]. Stage 0:
  // B0 [2f+b+2d,2f+2b+2d], B1 [3f+2b+2d,3f+3b+2d]. Two sends lie on the critical path.
  EXPECT_NEAR(r.compute_ms, 3 * t + 2 * d, 1e-9);
  EXPECT_NEAR(r.step_ms, r.materialize_ms + 3 * t + 2 * d + r.reduce_scatter_ms, 1e-9);
  EXPECT_NEAR(r.pipelines[0].busy_ms, 2 * t, 1e-9);
  EXPECT_EQ(r.pipelines[0].micro_batch_tokens, (std::vector<std::int64_t>{1000, 1000}));
  // Padded to 2,048 tokens, each micro-batch costs and sends more.
  const double t2 = time.c_ms + time.DocumentMs(2048);
  const double d2 = 0.01 + 2048.0 * 6656 * 2 / 4 / 400e9 * 1e3;
  EXPECT_NEAR(timer.Time(plan, 2048).compute_ms, 3 * t2 + 2 * d2, 1e-9);

  // The collectives in two buckets, [0, h) and [h, 1) with h = (P/2 + 1M) / P just above
  // one half: bucket 0 is stage 0's and a sliver of stage 1's, bucket 1 starts w = 2h - 1
  // into stage 1's layers.
  const double params = ParameterCount(Case().profile.model);
  o.comm.bucket_elements = static_cast<std::int64_t>(std::ceil(params / 2)) + 1'000'000;
  const StepTimer two(Case().profile, set, o);
  const SyncCost& sync = two.Sync(0);
  const double h = two.BucketBoundaries()[1], w = 2 * h - 1;
  ASSERT_GT(w, 0);
  ASSERT_LT(w, 1e-3);
  const double f = t / 3, b = 2 * t / 3, L = sync.collective_latency_ms;
  ASSERT_GT(L, 0);
  // All-gathers: bucket 0 by 0 (stage 0's F0 starts), bucket 1 by stage 1's F0 start f + d
  // plus w of its forward.
  const double g0 = L + h * sync.materialize_transfer_ms;
  const double g1 = L + (1 - h) * sync.materialize_transfer_ms;
  const double delay = std::max(g0, g0 + g1 - (f + d + w * f));
  // Reduce-scatters: bucket 1 when stage 1's B1 [3f+b+d, 3f+2b+d] has passed w of it,
  // bucket 0 when stage 0's B1 ends the compute phase at 3t + 2d.
  const double r1 = L + (1 - h) * sync.reduce_scatter_transfer_ms;
  const double r0 = L + h * sync.reduce_scatter_transfer_ms;
  const double start1 = std::max(delay + 3 * f + 2 * b + d - w * b, g0 + g1);
  const double end0 = std::max(delay + 3 * t + 2 * d, start1 + r1) + r0;
  const StepResult overlapped = two.Time(plan);
  EXPECT_NEAR(overlapped.compute_ms, 3 * t + 2 * d, 1e-9);
  EXPECT_NEAR(overlapped.materialize_ms, delay, 1e-9);
  EXPECT_NEAR(overlapped.reduce_scatter_start_ms, start1, 1e-9);
  EXPECT_NEAR(overlapped.reduce_scatter_ms, end0 - (delay + 3 * t + 2 * d), 1e-9);
  // Bucket 1's reduce-scatter overlaps stage 0's last backward.
  EXPECT_LT(overlapped.step_ms, overlapped.compute_ms + sync.materialize_ms +
                                    sync.reduce_scatter_ms + sync.optimizer_ms);
}

TEST(Simulator, EveryDocumentOfEveryStepIsPlannedExactlyOnce) {
  PlannerOptions po;
  po.context_tokens = 32'768;
  std::vector<System> systems(std::begin(kFastSystems), std::end(kFastSystems));
  systems.push_back(System::kPublished);
  for (System system : systems) {
    const StepPlanner planner(Case().profile, Case().candidates, system, po);
    // The published planner is slow on full batches; small ones cover its output shape.
    const std::int64_t budget = system == System::kPublished ? 12'000 : 200'000;
    BatchSampler sampler(Case().dataset, {budget, 32'768, 3});
    for (int step = 0; step < 3; ++step) {
      const SampledBatch batch = sampler.Next();
      const Plan plan = planner.Plan(batch.lengths);
      std::vector<int> seen(batch.lengths.size(), 0);
      ASSERT_EQ(plan.pipelines.size(), plan.strategy.pipelines.size());
      ASSERT_EQ(plan.lengths.size(), batch.lengths.size());
      for (const PipelinePlan& pp : plan.pipelines) {
        std::int64_t pipeline_tokens = 0;
        for (const std::vector<int>& mb : pp.micro_batches) {
          ASSERT_FALSE(mb.empty());
          for (int d : mb) {
            ASSERT_GE(d, 0);
            ASSERT_LT(d, static_cast<int>(seen.size()));
            ++seen[static_cast<std::size_t>(d)];
            pipeline_tokens += plan.lengths[static_cast<std::size_t>(d)];
          }
        }
        EXPECT_EQ(pp.tokens, pipeline_tokens);
      }
      for (std::size_t d = 0; d < seen.size(); ++d) {
        EXPECT_EQ(seen[d], 1) << SystemName(system) << " step " << step << " document " << d;
      }
    }
  }
}

TEST(Simulator, PaddingPadsEveryDocumentToTheContextLength) {
  const SimResult r = RunCase(Options(System::kPadding, 1));
  const StepResult& s = r.steps[0];
  EXPECT_EQ(s.strategy, "S0");
  int micro_batches = 0;
  for (const auto& p : s.pipelines) micro_batches += p.micro_batches;
  EXPECT_EQ(micro_batches, s.documents);
  // Round-robin: counts differ by at most one.
  EXPECT_LE(s.pipelines.front().micro_batches - s.pipelines.back().micro_batches, 1);
  const SchemeProfile* tp16 = Case().profile.Find({1, 16, 1});
  ASSERT_NE(tp16, nullptr);
  const double padded_ms =
      tp16->c_ms + tp16->a_ms_per_token2 * 32768.0 * 32768.0 + tp16->b_ms_per_token * 32768.0;
  EXPECT_NEAR(s.pipelines.front().busy_ms, padded_ms * s.pipelines.front().micro_batches, 1e-6);
}

// static-cp is static-fixed's bins with Megatron-LM's rule of sharding every document:
// the same micro-batches, never faster than our layout of them, slower where short
// documents pay the exchange.
TEST(Simulator, StaticCpShardsEveryDocumentOfTheSameBins) {
  const CandidateSet candidates = ParseCandidates(R"({
    "format": "hydraulis.candidates/1", "gpus": 256,
    "optimizer_layout": {"dp": 16, "tp": 16, "pp": 1},
    "strategies": [{"name": "cp4", "pipelines": [{"count": 4, "cp": 4, "tp": 16}]}]})",
                                                  "static-cp.json", Case().profile);
  SimOptions o = Options(System::kStaticCp, 3);
  o.sampler = {2'097'152, 131'072, 11};
  const SimResult megatron = Simulate(Case().profile, candidates, Case().dataset, o);
  o.system = System::kStaticFixed;
  const SimResult ours = Simulate(Case().profile, candidates, Case().dataset, o);
  ASSERT_EQ(megatron.steps.size(), 3u);
  bool slower = false;
  for (std::size_t i = 0; i < megatron.steps.size(); ++i) {
    const StepResult &m = megatron.steps[i], &f = ours.steps[i];
    EXPECT_EQ(m.truncated_documents, 0);
    for (std::size_t p = 0; p < m.pipelines.size(); ++p) {
      EXPECT_EQ(m.pipelines[p].micro_batch_tokens, f.pipelines[p].micro_batch_tokens);
    }
    EXPECT_GE(m.compute_ms, f.compute_ms * (1 - 1e-12));
    slower = slower || m.compute_ms > f.compute_ms * 1.01;
  }
  EXPECT_TRUE(slower);
}

// dynamic-cp: every document in exactly one group, on a power-of-two number of that group's
// ranks no smaller than the peer's cp size, and no rank idle in a group (the peer's fill
// step); python/tests/test_dynamic_cp.py checks the schedules against the peer itself.
TEST(DynamicCp, SchedulesCoverEveryDocumentOnEnoughRanks) {
  Rng rng(3);
  for (int trial = 0; trial < 20; ++trial) {
    const int ranks = 1 << (1 + rng.Below(5));
    const std::int64_t per_rank = 1024 << rng.Below(4);
    std::vector<std::int64_t> lengths;
    const std::size_t start = rng.Below(Case().dataset.size() - 500);
    for (std::size_t i = 0; i < 50 + rng.Below(400); ++i) {
      lengths.push_back(std::min(Case().dataset[start + i], ranks * per_rank));
    }
    const DynamicCpSchedule schedule = ScheduleDynamicCp(lengths, ranks, per_rank);
    std::vector<int> group_of(lengths.size(), -1);
    for (std::size_t g = 0; g < schedule.groups.size(); ++g) {
      ASSERT_EQ(schedule.groups[g].size(), static_cast<std::size_t>(ranks));
      std::vector<int> copies(lengths.size(), 0);
      for (const auto& rank : schedule.groups[g]) {
        EXPECT_FALSE(rank.empty());
        for (int d : rank) ++copies[static_cast<std::size_t>(d)];
      }
      for (std::size_t d = 0; d < lengths.size(); ++d) {
        if (copies[d] == 0) continue;
        EXPECT_EQ(group_of[d], -1) << "document " << d << " in two groups";
        group_of[d] = static_cast<int>(g);
        EXPECT_EQ(copies[d] & (copies[d] - 1), 0) << copies[d];
        EXPECT_GE(copies[d], DynamicCpSize(lengths[d], per_rank));
      }
    }
    for (int g : group_of) EXPECT_GE(g, 0);
  }
  EXPECT_EQ(DynamicCpSize(4096, 4096), 1);
  EXPECT_EQ(DynamicCpSize(4097, 4096), 2);
  EXPECT_EQ(DynamicCpSize(3 * 4096, 4096), 4);
  EXPECT_THROW(ScheduleDynamicCp(std::vector<std::int64_t>{9000}, 2, 4096), InvalidInput);
}

TEST(DynamicCp, GroupsRunOneAfterAnotherAsLongAsTheirSlowestRank) {
  const SchemeProfile& tp8 = *Case().profile.Find({1, 8, 1});
  const std::vector<std::int64_t> lengths = {30'000, 5'000, 7'000};
  DynamicCpSchedule schedule;
  schedule.groups = {{{0}, {0}}, {{1}, {2}}};
  const TimeModel whole = TimeModel::From(tp8);
  const double kv2 = KvExchangeMsPerToken(Case().profile.model, {2, 8, 1}, 8, {});
  const double first = tp8.c_ms + whole.DocumentMs(30'000) / 2 + kv2 * 30'000;
  const double second = tp8.c_ms + whole.DocumentMs(7'000);
  const auto rank_ms = DynamicCpRankMs(Case().profile, tp8, lengths, schedule);
  EXPECT_DOUBLE_EQ(rank_ms[0][1], first);
  EXPECT_DOUBLE_EQ(DynamicCpComputeMs(rank_ms), first + second);
  // The system runs on the static candidate's <1, tp, 1> ranks only.
  SimOptions o = Options(System::kDynamicCp, 1);
  const CandidateSet cp_candidates = ParseCandidates(R"({
    "format": "hydraulis.candidates/1", "gpus": 64,
    "optimizer_layout": {"dp": 4, "tp": 16, "pp": 1},
    "strategies": [{"name": "cp", "pipelines": [{"count": 2, "cp": 2, "tp": 16}]}]})",
                                                     "cp.json", Case().profile);
  const std::string message = test_support::InvalidInputMessage(
      [&] { Simulate(Case().profile, cp_candidates, Case().dataset, o); });
  EXPECT_NE(message.find("must be <1, tp, 1> pipelines"), std::string::npos) << message;
}

// dynamic-cp's groups are separated by a barrier: a rank that waits for parameters holds
// every rank back, and the step is still never longer than serially (less the extra
// buckets' latency) nor shorter than compute.
TEST(DynamicCp, OverlapKeepsComputeAndStaysWithinTheSerialStep) {
  const CandidateSet candidates = LoadCandidates(
      HYDRAULIS_SOURCE_DIR "/configs/candidates/llama-32b-256gpu-128k-dynamic-cp-tp8.json",
      Case().profile);
  SimOptions o = Options(System::kDynamicCp, 2);
  o.sampler = {2'097'152, 131'072, 11};
  const SimResult overlapped = Simulate(Case().profile, candidates, Case().dataset, o);
  o.comm.overlap = false;
  const SimResult serial = Simulate(Case().profile, candidates, Case().dataset, o);
  const SyncCost sync =
      ComputeSyncCost(Case().profile, candidates.strategies.front(), candidates.optimizer_layout,
                      candidates.gpus, o.comm, o.optimizer);
  const double extra_ms = 812 * sync.collective_latency_ms;
  for (std::size_t i = 0; i < serial.steps.size(); ++i) {
    const StepResult &a = overlapped.steps[i], &b = serial.steps[i];
    EXPECT_EQ(a.compute_ms, b.compute_ms);
    EXPECT_GE(a.materialize_ms, sync.materialize_transfer_ms / 813);
    EXPECT_GE(a.reduce_scatter_ms, sync.reduce_scatter_transfer_ms / 813);
    EXPECT_LT(a.step_ms, b.step_ms);
    EXPECT_LE(a.step_ms, b.step_ms + 2 * extra_ms);
  }
}

TEST(Simulator, SameSeedSameOutputOtherSeedOtherBatches) {
  const SimOptions o = Options(System::kOurs, 3);
  const std::string a = SimSummaryJson(RunCase(o));
  EXPECT_EQ(a, SimSummaryJson(RunCase(o)));
  const SimResult first = RunCase(o);
  EXPECT_EQ(ChromeTraceJson(first, std::vector<int>{0, 2}),
            ChromeTraceJson(RunCase(o), std::vector<int>{0, 2}));
  SimOptions other = o;
  other.sampler.seed = 12;
  EXPECT_NE(a, SimSummaryJson(RunCase(other)));
}

TEST(Simulator, SummaryJsonHasTheContractFields) {
  const SimResult r = RunCase(Options(System::kStaticFixed, 2));
  const auto j = nlohmann::json::parse(SimSummaryJson(r));
  EXPECT_EQ(j["steps"], 2);
  EXPECT_EQ(j["system"], "static-fixed");
  EXPECT_DOUBLE_EQ(j["total_time_ms"].get<double>(), r.total_time_ms);
  EXPECT_NEAR(j["tokens_per_second"].get<double>(),
              static_cast<double>(r.total_tokens) / (r.total_time_ms / 1e3), 1e-6);
  ASSERT_EQ(j["per_step"].size(), 2u);
  EXPECT_EQ(j["per_step"][1]["strategy"], "S0");
  EXPECT_GT(j["per_step"][1]["step_ms"].get<double>(), 0);
  EXPECT_DOUBLE_EQ(
      j["per_step"][0]["step_ms"].get<double>() + j["per_step"][1]["step_ms"].get<double>(),
      r.total_time_ms);
  EXPECT_EQ(j["per_step"][0]["pipelines"].size(), 4u);
  EXPECT_NE(SimTable(r).find("static-fixed: 2 steps"), std::string::npos);
}

TEST(Simulator, TraceHasOneCompleteEventPerMicroBatchPass) {
  const SimResult r = RunCase(Options(System::kOurs, 2));
  const std::vector<int> traced{0, 1};
  const auto j = nlohmann::json::parse(ChromeTraceJson(r, traced));
  ASSERT_TRUE(j.contains("traceEvents"));
  std::size_t expected_ops = 0, expected_tracks = 0;
  for (int s : traced) {
    for (const auto& p : r.steps[static_cast<std::size_t>(s)].pipelines) {
      expected_ops += static_cast<std::size_t>(2 * p.micro_batches * p.scheme.pp);
      expected_tracks += static_cast<std::size_t>(p.scheme.pp);
    }
  }
  std::size_t ops = 0, sync = 0, steps = 0, collectives = 0;
  std::map<std::pair<int, int>, std::vector<std::pair<std::int64_t, std::int64_t>>> tracks;
  for (const auto& e : j["traceEvents"]) {
    ASSERT_TRUE(e.contains("ph"));
    if (e["ph"] != "X") continue;
    ASSERT_TRUE(e["ts"].is_number_integer());
    ASSERT_GE(e["dur"].get<std::int64_t>(), 0);
    const std::string cat = e["cat"];
    if (cat == "forward" || cat == "backward") ++ops;
    if (cat == "sync") ++sync;
    if (cat == "step") ++steps;
    if (cat == "collective") ++collectives;
    tracks[{e["pid"].get<int>(), e["tid"].get<int>()}].emplace_back(
        e["ts"].get<std::int64_t>(), e["ts"].get<std::int64_t>() + e["dur"].get<std::int64_t>());
  }
  EXPECT_EQ(ops, expected_ops);
  EXPECT_EQ(sync, 3 * expected_tracks);  // materialise, reduce-scatter, optimizer per track
  EXPECT_EQ(steps, traced.size());
  EXPECT_EQ(collectives, 2 * traced.size());  // the all-gathers and the reduce-scatters
  // Slices of one track never overlap (viewers reject partial overlaps).
  for (auto& [track, slices] : tracks) {
    std::sort(slices.begin(), slices.end());
    for (std::size_t i = 1; i < slices.size(); ++i) {
      EXPECT_LE(slices[i - 1].second, slices[i].first);
    }
  }
  EXPECT_THROW(ChromeTraceJson(r, std::vector<int>{2}), InvalidInput);
}

TEST(Simulator, SystemsCompareAsThePublishedAblation) {
  double mean_ms[4];
  for (int i = 0; i < 4; ++i) mean_ms[i] = RunCase(Options(kFastSystems[i], 3)).mean_step_ms;
  const double padding = mean_ms[0], fixed = mean_ms[1], balanced = mean_ms[2], ours = mean_ms[3];
  EXPECT_LE(ours, balanced);
  EXPECT_LE(balanced, fixed);
  EXPECT_LE(fixed, padding);
}

TEST(Simulator, BadInputIsNamed) {
  EXPECT_NE(test_support::InvalidInputMessage([] { ParseSystem("megatron"); }).find("megatron"),
            std::string::npos);
  SimOptions o = Options(System::kOurs, 1);
  o.comm.nvlink_gbytes_per_s = -1;
  EXPECT_NE(test_support::InvalidInputMessage([&] { RunCase(o); }).find("nvlink_gbytes_per_s"),
            std::string::npos);
  o = Options(System::kOurs, 0);
  EXPECT_NE(test_support::InvalidInputMessage([&] { RunCase(o); }).find("steps"),
            std::string::npos);
  // Static systems need a homogeneous candidate.
  CandidateSet heterogeneous = Case().candidates;
  heterogeneous.strategies.erase(heterogeneous.strategies.begin());
  heterogeneous.strategies.pop_back();  // S6 = 8 x (TP4,PP2) is homogeneous too
  const std::string msg = test_support::InvalidInputMessage([&] {
    Simulate(Case().profile, heterogeneous, Case().dataset, Options(System::kPadding, 1));
  });
  EXPECT_NE(msg.find("homogeneous"), std::string::npos) << msg;
  EXPECT_THROW(Simulate(Case().profile, Case().candidates, {}, Options(System::kOurs, 1)),
               InvalidInput);
  // A context longer than every usable capacity, and a batch smaller than one document.
  o = Options(System::kOurs, 1);
  o.sampler.max_len = 65'536;
  o.sampler.tokens_per_batch = 200'000;
  EXPECT_NE(test_support::InvalidInputMessage([&] { RunCase(o); }).find("max-len 65536"),
            std::string::npos);
  o = Options(System::kOurs, 1);
  o.sampler.tokens_per_batch = o.sampler.max_len - 1;
  EXPECT_NE(test_support::InvalidInputMessage([&] { RunCase(o); }).find("tokens-per-batch"),
            std::string::npos);
}

}  // namespace
}  // namespace hydraulis
