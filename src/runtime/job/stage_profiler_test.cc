// Tests of the stage profiler: which part is timed, which micro-batches, that the timings
// feed a sensible fit, tp ranks agreeing on their samples, and the analytic memory model.
#include "hydraulis/runtime/job/stage_profiler.h"

#include <gtest/gtest.h>

#include <ATen/Parallel.h>
#include <malloc.h>

#include <algorithm>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "hydraulis/base/error.h"
#include "hydraulis/cost/capacity.h"
#include "hydraulis/runtime/communication/comm_group.h"
#include "hydraulis/runtime/model/packed_batch.h"
#include "hydraulis/runtime/model/transformer.h"
#include "runtime/testing/rank_harness.h"

namespace hydraulis {
namespace {

ModelConfig Tiny() {
  return LoadModelConfig(std::string(HYDRAULIS_SOURCE_DIR) + "/configs/models/tiny.json");
}

std::int64_t Sum(const std::vector<std::int64_t>& v) {
  return std::accumulate(v.begin(), v.end(), std::int64_t{0});
}

TEST(StageProfilerTest, TimedPartIsTheWholeModelOrTheHeaviestStage) {
  ModelConfig c = Tiny();
  c.shape.layers = 5;
  EXPECT_TRUE(ProfiledStagePart(c, 1).IsWhole(c));
  const ModelPart p = ProfiledStagePart(c, 2);
  EXPECT_EQ(p.first_layer, 0);
  EXPECT_EQ(p.end_layer, 3);  // stage 0 takes the odd layer
  EXPECT_TRUE(p.has_embedding);
  EXPECT_TRUE(p.has_head);
  EXPECT_THROW(ProfiledStagePart(c, 6), InvalidInput);
}

TEST(StageProfilerTest, MicroBatchesCoverTheLengthsAndTheBudgets) {
  const std::vector<std::int64_t> pool = {5, 300, 4000, 17, 800, 1};
  ProfileBatchOptions o;
  o.min_len = 32;
  o.max_len = 1000;
  o.packed = 8;
  const auto batches = ProfileMicroBatches(pool, o);
  const std::vector<std::vector<std::int64_t>> singles = {{32},  {48},  {64},  {96},  {128}, {192},
                                                          {256}, {384}, {512}, {768}, {1000}};
  ASSERT_EQ(batches.size(), singles.size() + 8);
  EXPECT_TRUE(std::equal(singles.begin(), singles.end(), batches.begin()));
  for (int j = 0; j < 8; ++j) {
    const auto& b = batches[singles.size() + static_cast<std::size_t>(j)];
    EXPECT_EQ(Sum(b), 1000 * (j % 4 + 1) / 4) << j;
    for (std::int64_t s : b) {
      EXPECT_GE(s, 1);
      EXPECT_LE(s, 1000);
    }
  }
  EXPECT_EQ(ProfileMicroBatches(pool, o), batches);  // deterministic in the seed
  o.seed = 2;
  EXPECT_NE(ProfileMicroBatches(pool, o), batches);
  o.packed = 0;
  EXPECT_EQ(ProfileMicroBatches({}, o).size(), singles.size());
}

TEST(StageProfilerTest, MicroBatchOptionsAreValidated) {
  const std::vector<std::int64_t> pool = {10};
  ProfileBatchOptions o;
  o.min_len = 0;
  EXPECT_THROW(ProfileMicroBatches(pool, o), InvalidInput);
  o = {};
  o.max_len = 16;
  EXPECT_THROW(ProfileMicroBatches(pool, o), InvalidInput);
  o = {};
  EXPECT_THROW(ProfileMicroBatches({}, o), InvalidInput);
  const std::vector<std::int64_t> bad = {10, 0};
  EXPECT_THROW(ProfileMicroBatches(bad, o), InvalidInput);
}

TEST(StageProfilerTest, TimesEveryMicroBatchAndFitsThem) {
  at::set_num_threads(1);
  ProfileBatchOptions b;
  b.min_len = 16;
  b.max_len = 512;
  b.packed = 4;
  const std::vector<std::int64_t> pool = {30, 200, 7, 90};
  const auto batches = ProfileMicroBatches(pool, b);
  StageProfileOptions o;
  o.repeats = 3;
  const std::vector<TimeSample> samples = ProfileStage(Tiny(), 1, nullptr, batches, o);
  ASSERT_EQ(samples.size(), batches.size());
  for (std::size_t j = 0; j < samples.size(); ++j) {
    EXPECT_EQ(samples[j].lengths, batches[j]);
    EXPECT_GT(samples[j].ms, 0);
  }
  // 512 tokens cost far more than 16 (about 9 ms against well under 1 ms here).
  EXPECT_GT(samples[samples.size() - 5].ms, 3 * samples[0].ms);
  // Only coarse checks of the times: ctest runs other tests on the same cores meanwhile.
  const TimeFit fit = FitTimeModel(samples);
  const std::int64_t longest = 512, shortest = 16;
  EXPECT_GT(fit.model.MicroBatchMs({&longest, 1}), fit.model.MicroBatchMs({&shortest, 1}));
}

TEST(StageProfilerTest, RejectsBadOptionsAndBatches) {
  const std::vector<std::vector<std::int64_t>> one = {{8}};
  StageProfileOptions o;
  o.repeats = 0;
  EXPECT_THROW(ProfileStage(Tiny(), 1, nullptr, one, o), InvalidInput);
  o = {};
  o.warmup = -1;
  EXPECT_THROW(ProfileStage(Tiny(), 1, nullptr, one, o), InvalidInput);
  EXPECT_THROW(ProfileStage(Tiny(), 1, nullptr, {}, {}), InvalidInput);
  EXPECT_THROW(ProfileStage(Tiny(), 1, nullptr, {{}}, {}), InvalidInput);
  EXPECT_THROW(ProfileStage(Tiny(), 1, nullptr, {{8, 0}}, {}), InvalidInput);
  EXPECT_THROW(ProfileStage(Tiny(), 3, nullptr, one, {}), InvalidInput);  // pp > layers
}

// tp = 2 as two ranks in two threads of this process (Gloo over loopback): both ranks get
// the same samples, one per micro-batch.
TEST(StageProfilerTest, TensorParallelRanksReturnTheSameSamples) {
  at::set_num_threads(1);
  const std::vector<std::vector<std::int64_t>> batches = {{16}, {64}, {256}, {100, 30, 2}};
  std::vector<std::vector<TimeSample>> out(2);
  std::vector<std::string> errors(2);
  DistributedOptions base;
  base.world_size = 2;
  base.master_port = test_support::FreePort();
  auto rank = [&](int r) {
    try {
      DistributedOptions d = base;
      d.rank = r;
      Rendezvous rendezvous(d);
      std::unique_ptr<CommGroup> tp_ptr = MakeCommGroup(rendezvous, "tp", {0, 1});
      CommGroup& tp = *tp_ptr;
      StageProfileOptions o;
      o.warmup = 1;
      o.repeats = 2;
      out[static_cast<std::size_t>(r)] = ProfileStage(Tiny(), 1, &tp, batches, o);
      tp.Barrier();
    } catch (const std::exception& e) {
      errors[static_cast<std::size_t>(r)] = e.what();
    }
  };
  std::thread other(rank, 1);
  rank(0);
  other.join();
  ASSERT_EQ(errors[0], "");
  ASSERT_EQ(errors[1], "");
  ASSERT_EQ(out[0].size(), batches.size());
  for (std::size_t j = 0; j < batches.size(); ++j) {
    EXPECT_EQ(out[0][j].lengths, batches[j]);
    EXPECT_EQ(out[0][j].ms, out[1][j].ms);
    EXPECT_GT(out[0][j].ms, 0);
  }
}

TEST(StageProfilerTest, AnalyticActivationBytes) {
  const ModelConfig c = Tiny();  // hidden 64, 4 heads of 16, 2 kv heads, ffn 172
  // Per token per layer: replicated 4*64 + 2 + 4*16 = 322 elements; sharded (2*64 + 2*32 +
  // 4*172) / tp = 880 / tp elements; 4 bytes each, per hidden unit held (64 / tp).
  EXPECT_DOUBLE_EQ(ActivationBytesPerTokenHiddenLayer(c, 1), 4.0 * (322 + 880) / 64);
  EXPECT_DOUBLE_EQ(ActivationBytesPerTokenHiddenLayer(c, 2), 4.0 * (322 + 440) / 32);
  EXPECT_THROW(ActivationBytesPerTokenHiddenLayer(c, 4), InvalidInput);  // kv_heads 2

  const std::vector<int> tps = {1, 2};
  const MemoryModel m = EngineMemoryModel(c, tps);
  ASSERT_EQ(m.activation_bytes_by_tp.size(), 2U);
  // Parameters per layer: 2*64*64 + 2*32*64 + 3*172*64 + 2*64 = 45,440; 20 bytes each.
  EXPECT_DOUBLE_EQ(m.state_bytes_per_h2_layer, 20.0 * 45440 / (64 * 64));
  EXPECT_DOUBLE_EQ(m.optimizer_share, 0.6);
}

// Under recomputation: selective drops the SwiGLU's silu (172 / tp per token and layer) and
// one layer's comes back while it runs backward; full keeps each layer's 64-wide input and
// one layer's whole set. Off the flash path the attention core keeps 64 + 4 more (its
// per-document outputs and log-sum-exps), which selective drops too.
TEST(StageProfilerTest, AnalyticActivationBytesUnderRecomputation) {
  const ModelConfig c = Tiny();  // 2 layers
  const double kept = 322 + 880, layers = 2;
  EXPECT_DOUBLE_EQ(ActivationBytesPerTokenHiddenLayer(c, 1, Recompute::kSelective),
                   4.0 * (kept - 172 + 172 / layers) / 64);
  EXPECT_DOUBLE_EQ(ActivationBytesPerTokenHiddenLayer(c, 1, Recompute::kFull),
                   4.0 * (64 + kept / layers) / 64);
  EXPECT_DOUBLE_EQ(ActivationBytesPerTokenHiddenLayer(c, 2, Recompute::kFull),
                   4.0 * (64 + (322 + 440) / layers) / 32);
  const double cpu = kept + 68;
  EXPECT_DOUBLE_EQ(ActivationBytesPerTokenHiddenLayer(c, 1, Recompute::kNone, false),
                   4.0 * cpu / 64);
  EXPECT_DOUBLE_EQ(ActivationBytesPerTokenHiddenLayer(c, 1, Recompute::kSelective, false),
                   4.0 * (cpu - 240 + 240 / layers) / 64);
  for (const bool flash : {true, false}) {
    EXPECT_LT(ActivationBytesPerTokenHiddenLayer(c, 1, Recompute::kFull, flash),
              ActivationBytesPerTokenHiddenLayer(c, 1, Recompute::kSelective, flash));
    EXPECT_LT(ActivationBytesPerTokenHiddenLayer(c, 1, Recompute::kSelective, flash),
              ActivationBytesPerTokenHiddenLayer(c, 1, Recompute::kNone, flash));
  }
}

// The analytic count against what autograd really keeps: the bytes still allocated after a
// forward pass (the graph alive) grow per token by at least the analytic layers' share and
// by no more than that plus the CPU attention's extras. Short documents keep the CPU's
// quadratic scores small.
TEST(StageProfilerTest, AnalyticActivationBytesMatchWhatAutogradKeeps) {
  at::set_num_threads(1);
  const ModelConfig c = Tiny();
  const Transformer model(c, 3);
  auto retained_bytes = [&](int documents) {
    std::vector<std::vector<std::int64_t>> docs(static_cast<std::size_t>(documents),
                                                std::vector<std::int64_t>(16, 7));
    const PackedBatch batch = PackDocuments(docs, c.shape.vocab);
    const struct mallinfo2 before = mallinfo2();
    at::Tensor loss = SummedTokenLoss(model.Forward(batch), batch).sum;
    const struct mallinfo2 after = mallinfo2();
    return static_cast<double>(after.uordblks + after.hblkhd) -
           static_cast<double>(before.uordblks + before.hblkhd);
  };
  retained_bytes(64);  // warm-up: one-off allocations
  const double per_token = (retained_bytes(256) - retained_bytes(128)) / (128 * 16);
  const double layers = c.shape.layers * c.shape.hidden * ActivationBytesPerTokenHiddenLayer(c, 1);
  // Outside the layers: the final norm (2 hidden + 1), logits and log-probabilities (2 vocab).
  const double outside = 4.0 * (2 * c.shape.hidden + 1 + 2 * c.shape.vocab);
  RecordProperty("retained_bytes_per_token", std::to_string(per_token));  // --gtest_output=xml
  EXPECT_GE(per_token, 0.95 * (layers + outside)) << per_token << " vs " << layers + outside;
  // An upper bound of the CPU attention's own tensors per layer (SDPA's per-row statistics
  // and per-document outputs before their concatenation; a dense path's copies, scores and
  // masks of 16-token documents would also fit).
  const double extras = c.shape.layers * 4.0 * (4 * c.shape.hidden + c.shape.heads * 16 + 4);
  EXPECT_LE(per_token, 1.05 * (layers + outside + extras)) << per_token;
}

}  // namespace
}  // namespace hydraulis
