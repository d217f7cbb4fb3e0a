// The AdamW rule every optimizer path of the runtime applies: its hyper-parameters, their
// validation, and one update with the arithmetic of torch::optim::AdamW, so the sharded
// optimizer (sharded_optimizer.h) is bit-identical to the single-process reference.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>

namespace hydraulis {

// AdamW hyper-parameters (decoupled weight decay, as torch::optim::AdamW).
struct AdamWOptions {
  double lr = 1e-3;     // learning rate, >= 0 (0 changes no parameter)
  double beta1 = 0.9;   // first-moment decay, in [0, 1)
  double beta2 = 0.95;  // second-moment decay, in [0, 1)
  double eps = 1e-8;    // added to the RMS of the gradient, > 0
  // Decoupled decay per step (multiplied by lr), >= 0. ShardedAdamW and the reference
  // trainer apply it to matrices only: not to norm weights and biases (one-dimensional
  // parameters), as Megatron-LM and the Hugging Face Trainer do.
  double weight_decay = 0.0;
  // Clips the gradient by its global L2 norm before the update: scaled by
  // clip_grad / (norm + 1e-6) when that is below 1 (Megatron-LM's --clip-grad); 0: never.
  double clip_grad = 0.0;
};

// InvalidInput naming the field when an option is out of the ranges above.
void ValidateAdamWOptions(const AdamWOptions& options);

// How an update is computed. kReference: the statement order and scalar arithmetic of
// torch::optim::AdamW, bit-identical to it, about nine kernels (and temporaries) per call.
// kFused: PyTorch's fused AdamW (aten::_fused_adamw_, what torch.optim.AdamW(fused=True)
// calls; CPU and CUDA kernels), one pass over the tensor with no temporary; its own order
// of operations puts it within an ulp or two of the reference per step.
enum class AdamWKernel { kReference, kFused };
// kFused on a GPU, where the reference's launches add up (about 11,000 per step at 1B
// parameters in 1M-element pieces); kReference on the CPU, where the equivalence tests hold
// the reference bit for bit.
AdamWKernel DefaultAdamWKernel(const at::Device& device);

// One AdamW update of `param` (fp32, contiguous) in place, with the arithmetic of
// torch::optim::AdamW (decoupled weight decay, no amsgrad), element-wise, so any flat shard
// of the parameters updates exactly as the whole would. `step` is the step count after
// this one.
void AdamWUpdate(const at::Tensor& param, const at::Tensor& grad, const at::Tensor& exp_avg,
                 const at::Tensor& exp_avg_sq, std::int64_t step, const AdamWOptions& options,
                 AdamWKernel kernel = AdamWKernel::kReference);

}  // namespace hydraulis
