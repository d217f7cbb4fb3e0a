// Single-process training: gradient accumulation over packed micro-batches of any shapes,
// normalised by the global batch's target-token count, then one AdamW step on fp32
// parameters. The distributed runtime (not built yet) will reuse ForwardBackward with the
// global count from an all-reduce.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "hydraulis/runtime/model.h"
#include "hydraulis/runtime/packed_batch.h"

namespace hydraulis {

// AdamW hyper-parameters (decoupled weight decay, as torch::optim::AdamW).
struct AdamWOptions {
  double lr = 1e-3;           // learning rate, > 0
  double beta1 = 0.9;         // first-moment decay, in [0, 1)
  double beta2 = 0.95;        // second-moment decay, in [0, 1)
  double eps = 1e-8;          // added to the RMS of the gradient, > 0
  double weight_decay = 0.0;  // decoupled decay per step (multiplied by lr), >= 0
};

// Sets every parameter's gradient to a defined tensor of zeros (allocating it the first
// time), so every rank of a later all-reduce holds a gradient even when it ran no
// micro-batch. Used instead of Optimizer::zero_grad, whose default differs between
// libtorch 1.13 (zero in place) and 2.x (set to undefined).
void ZeroGradients(const Transformer& model);

// Runs forward and backward of every micro-batch, adding d(loss_sum / global_targets)/dw to
// the parameters' gradients (which the caller zeroes). Returns the summed token loss of
// these micro-batches (not divided). global_targets > 0 counts the targets of the whole
// global batch, which may include micro-batches run elsewhere.
double ForwardBackward(const Transformer& model, const std::vector<PackedBatch>& micro_batches,
                       std::int64_t global_targets);

struct StepResult {
  double loss = 0.0;         // mean cross-entropy over the step's target tokens
  std::int64_t targets = 0;  // target tokens in the step
};

class Trainer {
 public:
  // `model` must outlive the trainer. InvalidInput on out-of-range options.
  Trainer(Transformer& model, const AdamWOptions& options);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // One optimizer step on the global batch `micro_batches` (any number, any shapes, at
  // least one target token in all). InvalidInput when there is no target token.
  StepResult Step(const std::vector<PackedBatch>& micro_batches);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace hydraulis
