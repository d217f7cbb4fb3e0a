// Training steps: gradient accumulation over packed micro-batches of any shapes, normalised
// by the global batch's target-token count, then one AdamW step on fp32 parameters. Alone
// the trainer is single-process; with a GradientSync (gradient_sync.h) every rank of a
// data-parallel group runs its own micro-batches on a full replica and the sync makes the
// step that of one process over the union of all ranks' micro-batches.
// A tensor-parallel model (model.h) needs no sync: every tp rank runs the same
// micro-batches, the model's own collectives keep the replicated activations identical,
// and each rank's AdamW updates its own shards (AdamW is element-wise, so sharding it is
// exact).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "hydraulis/runtime/gradient_sync.h"
#include "hydraulis/runtime/model.h"
#include "hydraulis/runtime/packed_batch.h"

namespace hydraulis {

// AdamW hyper-parameters (decoupled weight decay, as torch::optim::AdamW).
struct AdamWOptions {
  double lr = 1e-3;           // learning rate, >= 0 (0 changes no parameter)
  double beta1 = 0.9;         // first-moment decay, in [0, 1)
  double beta2 = 0.95;        // second-moment decay, in [0, 1)
  double eps = 1e-8;          // added to the RMS of the gradient, > 0
  double weight_decay = 0.0;  // decoupled decay per step (multiplied by lr), >= 0
};

// InvalidInput naming the field when an option is out of the ranges above.
void ValidateAdamWOptions(const AdamWOptions& options);

// Sets every parameter's gradient (and fp32 main gradient under mixed precision) to a
// defined tensor of zeros, allocating it the first time, so every rank of a later
// all-reduce holds a gradient even when it ran no micro-batch. Used instead of
// Optimizer::zero_grad, whose default differs between libtorch 1.13 (zero in place) and
// 2.x (set to undefined).
void ZeroGradients(const Transformer& model);

// Runs forward and backward of every micro-batch, adding d(loss_sum / global_targets)/dw to
// the parameters' gradients (which the caller zeroes). Returns the summed token loss of
// these micro-batches (not divided). global_targets > 0 counts the targets of the whole
// global batch, which may include micro-batches run elsewhere.
// Under mixed precision: adds every parameter's gradient (in the compute dtype, from the
// backward pass just run) to its fp32 main_grad and zeroes it, so the sum over a step's
// micro-batches is accumulated in fp32. A no-op for fp32 parameters. Called after every
// backward pass.
void AccumulateMainGradients(const Transformer& model);

double ForwardBackward(const Transformer& model, const std::vector<PackedBatch>& micro_batches,
                       std::int64_t global_targets);

struct StepResult {
  double loss = 0.0;         // mean cross-entropy over the step's target tokens
  std::int64_t targets = 0;  // target tokens in the step
};

class Trainer {
 public:
  // `model` (and `sync`, when given) must outlive the trainer. Without a sync the trainer
  // is single-process. InvalidInput on out-of-range options.
  Trainer(Transformer& model, const AdamWOptions& options, GradientSync* sync = nullptr);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // One optimizer step. `micro_batches` are this rank's (any number, including zero, any
  // shapes); without a sync they are the whole global batch. The result is that of the
  // global batch (every rank returns the same). InvalidInput when the global batch has no
  // target token (then on every rank alike, so no rank is left waiting in a collective).
  StepResult Step(const std::vector<PackedBatch>& micro_batches);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace hydraulis
