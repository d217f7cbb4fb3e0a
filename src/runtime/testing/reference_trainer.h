// Test support: the single-process reference the runtime's equivalence tests hold every
// distributed layout to. Gradient accumulation over packed micro-batches of any shapes,
// normalised by the global batch's target-token count, then (with AdamWOptions::clip_grad)
// torch's clip_grad_norm_ and one torch::optim::AdamW step on fp32 parameters, weight decay
// on matrices only. With a GradientSync (gradient_sync.h) every rank of a data-parallel group
// runs its own micro-batches on a full replica and the sync makes the step that of one
// process over the union of all ranks' micro-batches.
// A tensor-parallel model (transformer.h) needs no sync: every tp rank runs the same
// micro-batches, the model's own collectives keep the replicated activations identical,
// and each rank's AdamW updates its own shards (AdamW is element-wise, so sharding it is
// exact). Training itself runs through DistributedTrainer (step/distributed_trainer.h).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "hydraulis/runtime/model/gradients.h"
#include "hydraulis/runtime/model/packed_batch.h"
#include "hydraulis/runtime/model/transformer.h"
#include "hydraulis/runtime/step/adamw.h"
#include "runtime/testing/gradient_sync.h"

namespace hydraulis {

// Runs forward and backward of every micro-batch, adding d(loss_sum / global_targets)/dw to
// the parameters' gradients (which the caller zeroes). Returns the summed token loss of
// these micro-batches (not divided). global_targets > 0 counts the targets of the whole
// global batch, which may include micro-batches run elsewhere.
double ForwardBackward(const Transformer& model, const std::vector<PackedBatch>& micro_batches,
                       std::int64_t global_targets);

struct ReferenceStepResult {
  double loss = 0.0;         // mean cross-entropy over the step's target tokens
  std::int64_t targets = 0;  // target tokens in the step
};

class ReferenceTrainer {
 public:
  // `model` (and `sync`, when given) must outlive the trainer. Without a sync the trainer
  // is single-process. InvalidInput on out-of-range options or non-fp32 parameters.
  ReferenceTrainer(Transformer& model, const AdamWOptions& options, GradientSync* sync = nullptr);
  ~ReferenceTrainer();
  ReferenceTrainer(const ReferenceTrainer&) = delete;
  ReferenceTrainer& operator=(const ReferenceTrainer&) = delete;

  // One optimizer step. `micro_batches` are this rank's (any number, including zero, any
  // shapes); without a sync they are the whole global batch. The result is that of the
  // global batch (every rank returns the same). InvalidInput when the global batch has no
  // target token (then on every rank alike, so no rank is left waiting in a collective).
  ReferenceStepResult Step(const std::vector<PackedBatch>& micro_batches);
  // The learning rate of the next steps, on every parameter group.
  void SetLearningRate(double lr);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace hydraulis
