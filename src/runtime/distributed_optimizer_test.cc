// The sharded optimizer: clipping, weight decay and the schedule against one process, and the
// AdamW update against torch's and the fused kernel's.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "hydraulis/runtime/model/packed_batch.h"
#include "hydraulis/runtime/model/transformer.h"
#include "hydraulis/runtime/step/adamw.h"
#include "runtime/testing/reference_trainer.h"
#include "runtime/testing/training_equivalence.h"

namespace hydraulis {
namespace {

using test_support::Adam;
using test_support::ExpectTrainerMatchesOneProcess;
using test_support::MicroBatches;
using test_support::Outcome;
using test_support::Reference;
using test_support::Tiny;

// Clipping by the global norm over tp, pp, cp, dp and the ZeRO-1 shards, weight decay on
// matrices only and a per-step learning rate: equal to one process running torch's
// clip_grad_norm_ and torch::optim::AdamW with two parameter groups (parameters 1e-5, as
// every equivalence here; the clip coefficients differ by the float32 rounding of torch's
// norm).
TEST(OptimizationTest, ClippingDecayAndScheduleTrainLikeOneProcess) {
  // Clipping changes the result: the reference with it is not the one without.
  const Outcome clipped = Reference(1e-4, true);
  const Outcome plain = Reference(1e-4, false);
  double moved = 0;
  for (std::size_t i = 0; i < plain.parameters.size(); ++i) {
    moved =
        std::max(moved, static_cast<double>(std::abs(clipped.parameters[i] - plain.parameters[i])));
  }
  EXPECT_GT(moved, 1e-4);
  ExpectTrainerMatchesOneProcess("t2p1,t2p1", "0,0,0", "clip");
  ExpectTrainerMatchesOneProcess("t1p2,t1p2", "0,0,0", "clip");
  ExpectTrainerMatchesOneProcess("t2p1,t1p1,t1p1|t1p2,t1p1,t1p1", "0,1,0", "clip");
  ExpectTrainerMatchesOneProcess("t1p1c2,t1p1,t1p1", "0,0,0", "clip");
}

// The sharded AdamW is torch::optim::AdamW element by element (weight decay on matrices).
TEST(DistributedTrainerTest, AdamWUpdateMatchesTorch) {
  Transformer model(Tiny(), 11);
  ReferenceTrainer trainer(model, Adam(1e-8));
  const std::vector<PackedBatch> batch = MicroBatches(Tiny(), 0, "", -1, 1);
  std::vector<at::Tensor> before, exp_avg, exp_avg_sq;
  for (const at::Tensor& p : model.parameters()) {
    before.push_back(p.detach().clone());
    exp_avg.push_back(at::zeros_like(p));
    exp_avg_sq.push_back(at::zeros_like(p));
  }
  for (std::int64_t step = 1; step <= 2; ++step) {
    trainer.Step(batch);
    for (std::size_t i = 0; i < before.size(); ++i) {
      const at::Tensor grad = model.parameters()[i].grad();
      AdamWOptions options = Adam(1e-8);
      if (before[i].dim() == 1) options.weight_decay = 0;  // norms do not decay
      AdamWUpdate(before[i], grad, exp_avg[i], exp_avg_sq[i], step, options);
      EXPECT_TRUE(at::equal(before[i], model.parameters()[i].detach())) << "parameter " << i;
      before[i] = model.parameters()[i].detach().clone();
    }
  }
}

// The fused kernel a GPU uses (aten::_fused_adamw_, run here by its CPU kernel) tracks the
// reference update over ten steps of gradients from 1e-2 to 1e2: within 4 ulps of the
// parameters' scale (its own operation order rounds differently), with and without weight
// decay, on a shard whose length is no multiple of a vector width.
TEST(DistributedTrainerTest, FusedAdamWTracksTheReference) {
  for (const double decay : {0.0, 0.1}) {
    AdamWOptions o = Adam(1e-8);
    o.weight_decay = decay;
    at::manual_seed(3);
    const at::Tensor start = at::randn({100003});
    std::vector<at::Tensor> ref = {start.clone(), at::zeros_like(start), at::zeros_like(start)};
    std::vector<at::Tensor> fused = {start.clone(), at::zeros_like(start), at::zeros_like(start)};
    for (std::int64_t step = 1; step <= 10; ++step) {
      const at::Tensor grad =
          at::randn({100003}) * std::pow(10.0, static_cast<double>(step % 5 - 2));
      AdamWUpdate(ref[0], grad, ref[1], ref[2], step, o, AdamWKernel::kReference);
      AdamWUpdate(fused[0], grad, fused[1], fused[2], step, o, AdamWKernel::kFused);
      const double worst = (ref[0] - fused[0]).abs().max().item<double>();
      EXPECT_LE(worst, 4 * 1.2e-7 * ref[0].abs().max().item<double>()) << "step " << step;
    }
    EXPECT_GT((fused[0] - start).abs().max().item<double>(), 1e-3);  // the update ran
    for (const int moment : {1, 2}) {  // the moments too, to a few ulps of their scale
      EXPECT_LE((ref[moment] - fused[moment]).abs().max().item<double>(),
                4 * 1.2e-7 * ref[moment].abs().max().item<double>())
          << "moment " << moment;
    }
  }
  EXPECT_EQ(DefaultAdamWKernel(at::Device(at::kCPU)), AdamWKernel::kReference);
  EXPECT_EQ(DefaultAdamWKernel(at::Device(at::kCUDA, 0)), AdamWKernel::kFused);
}

}  // namespace
}  // namespace hydraulis
