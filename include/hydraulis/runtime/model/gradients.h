// The model's gradient tensors between steps: zeroing them so every rank holds one, and the
// mixed-precision rule that accumulates each backward pass's compute-dtype gradients into
// the fp32 main gradients (docs/runtime.md, "Device and precision").
#pragma once

#include "hydraulis/runtime/model/transformer.h"

namespace hydraulis {

// Sets every parameter's gradient (and fp32 main gradient under mixed precision) to a
// defined tensor of zeros, allocating it the first time, so every rank of a later
// all-reduce holds a gradient even when it ran no micro-batch. Used instead of
// Optimizer::zero_grad, which by default sets gradients to undefined.
void ZeroGradients(const Transformer& model);

// Under mixed precision: adds every parameter's gradient (in the compute dtype, from the
// backward pass just run) to its fp32 main_grad and zeroes it, so the sum over a step's
// micro-batches is accumulated in fp32. A no-op for fp32 parameters. Called after every
// backward pass.
void AccumulateMainGradients(const Transformer& model);

}  // namespace hydraulis
