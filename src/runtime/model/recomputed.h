// Activation recomputation as an autograd node: a piece of the forward that keeps only its
// inputs and runs again, with gradients, when the backward reaches it (Megatron's
// CheckpointFunction; torch.utils.checkpoint's reentrant form).
#pragma once

#include <ATen/ATen.h>

#include <functional>
#include <vector>

namespace hydraulis {

// A deterministic piece of the forward: the same inputs give the same outputs (no dropout
// here), so running it again in the backward reproduces the activations it would have kept.
// Everything it reads besides `inputs` (parameters, tables, groups) it captures by value
// or points to something that outlives the backward.
using TensorFunction = std::function<std::vector<at::Tensor>(const std::vector<at::Tensor>&)>;

// fn(inputs), keeping only `inputs` for the backward. The backward runs fn again from them
// with gradients on, then backpropagates the outputs' gradients through it: the inputs get
// theirs, and every parameter fn read accumulates its own (hooks on them fire as usual).
// Collectives inside fn run again, in the same order on every rank, since every rank runs
// the same backward. Outside gradient mode, or when no input requires a gradient (nothing
// to backpropagate to that fn could reach only through them), it is fn(inputs) as is.
std::vector<at::Tensor> Recomputed(const TensorFunction& fn, const std::vector<at::Tensor>& inputs);

}  // namespace hydraulis
