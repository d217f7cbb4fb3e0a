#include "runtime/testing/reference_trainer.h"

#include <ATen/core/grad_mode.h>
#include <torch/nn/utils/clip_grad.h>
#include <torch/optim/adamw.h>

#include <memory>

#include <string>
#include <tuple>
#include <vector>

#include "hydraulis/base/error.h"

namespace hydraulis {

double ForwardBackward(const Transformer& model, const std::vector<PackedBatch>& micro_batches,
                       std::int64_t global_targets) {
  if (global_targets <= 0) {
    throw InvalidInput("training step: the global batch has no target token (global_targets = " +
                       std::to_string(global_targets) + ")");
  }
  double loss_sum = 0.0;
  for (const PackedBatch& mb : micro_batches) {
    if (mb.num_targets() == 0) continue;  // Nothing to learn; skip the wasted forward.
    TokenLoss loss = SummedTokenLoss(model.Forward(mb), mb);
    // Dividing by the global count here (not by the micro-batch's) is what makes the
    // accumulated gradient that of the mean over the whole global batch.
    (loss.sum / static_cast<double>(global_targets)).backward();
    AccumulateMainGradients(model);
    loss_sum += loss.sum.item<double>();
  }
  return loss_sum;
}

struct ReferenceTrainer::Impl {
  Transformer& model;
  torch::optim::AdamW optimizer;
  GradientSync* sync;  // nullptr: single process
  double clip_grad;
};

namespace {

torch::optim::AdamWOptions ToTorch(const AdamWOptions& o, double weight_decay) {
  ValidateAdamWOptions(o);
  return torch::optim::AdamWOptions(o.lr)
      .betas(std::make_tuple(o.beta1, o.beta2))
      .eps(o.eps)
      .weight_decay(weight_decay);
}

// Two groups as Megatron-LM and the Hugging Face Trainer form them: matrices decay,
// one-dimensional parameters (norm weights, biases) do not.
torch::optim::AdamW MakeOptimizer(const Transformer& model, const AdamWOptions& o) {
  std::vector<at::Tensor> decay, no_decay;
  for (const at::Tensor& p : model.parameters()) (p.dim() == 1 ? no_decay : decay).push_back(p);
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(decay,
                      std::make_unique<torch::optim::AdamWOptions>(ToTorch(o, o.weight_decay)));
  if (!no_decay.empty()) {
    groups.emplace_back(no_decay, std::make_unique<torch::optim::AdamWOptions>(ToTorch(o, 0.0)));
  }
  return torch::optim::AdamW(groups, ToTorch(o, o.weight_decay));
}

}  // namespace

namespace {

// torch::optim::AdamW updates the parameters themselves, so they must be the fp32 master
// copy; mixed precision trains through ShardedAdamW (sharded_optimizer.h).
Transformer& RequireFp32(Transformer& model) {
  if (model.compute().precision != Precision::kFp32) {
    throw InvalidInput("Trainer: the single-process reference trainer needs fp32 parameters, got " +
                       ToString(model.compute().precision) + " (use DistributedTrainer)");
  }
  return model;
}

}  // namespace

ReferenceTrainer::ReferenceTrainer(Transformer& model, const AdamWOptions& options,
                                   GradientSync* sync)
    : impl_(new Impl{RequireFp32(model), MakeOptimizer(model, options), sync, options.clip_grad}) {
  if (options.clip_grad > 0 && sync == nullptr && model.tp_size() > 1) {
    throw InvalidInput("reference trainer: clipping needs the whole gradient (tp 1 or a sync)");
  }
}

void ReferenceTrainer::SetLearningRate(double lr) {
  for (torch::optim::OptimizerParamGroup& group : impl_->optimizer.param_groups()) {
    static_cast<torch::optim::AdamWOptions&>(group.options()).lr(lr);
  }
}

ReferenceTrainer::~ReferenceTrainer() = default;

ReferenceStepResult ReferenceTrainer::Step(const std::vector<PackedBatch>& micro_batches) {
  ReferenceStepResult result;
  for (const PackedBatch& mb : micro_batches) result.targets += mb.num_targets();
  GradientSync* sync = impl_->sync;
  if (sync != nullptr) {
    // Token counts are far below 2^53, so the double sum is exact.
    result.targets = static_cast<std::int64_t>(
        sync->SumAcrossRanks({static_cast<double>(result.targets)}).at(0));
  }
  // Zeroed, not undefined: a rank without micro-batches contributes zeros to the reduction.
  ZeroGradients(impl_->model);
  double loss_sum = ForwardBackward(impl_->model, micro_batches, result.targets);
  if (sync != nullptr) {
    // Each rank's gradient is already divided by the global count, so the sum over the ranks
    // is the gradient of the global mean loss.
    sync->ReduceGradients(impl_->model.parameters());
    loss_sum = sync->SumAcrossRanks({loss_sum}).at(0);
  }
  if (impl_->clip_grad > 0) {
    // Every rank holds the whole summed gradient here: its norm is the global one.
    torch::nn::utils::clip_grad_norm_(impl_->model.parameters(), impl_->clip_grad);
  }
  impl_->optimizer.step();
  result.loss = loss_sum / static_cast<double>(result.targets);
  return result;
}

}  // namespace hydraulis
