// The floating-point work of training a model on documents: the numerator of model FLOPs
// utilisation (MFU) as the training log and the GPU benchmark report it.
#pragma once

#include <cstdint>
#include <span>

#include "hydraulis/spec/model_config.h"

namespace hydraulis {

// FLOPs of one forward and backward pass over documents of `lengths` tokens, each attending
// causally to itself only: 6 * N_matmul * T + 6 * layers * hidden * sum(s^2), where N_matmul
// counts the weights of every matrix product (the layers' projections and the output head,
// not the embedding lookup) and T the tokens; the second term is causal attention per
// document (QK^T and PV: 2 * 2 * s^2 * hidden per layer forward, halved by the causal mask,
// times 3 for forward and backward). Recomputation is not counted (as MFU does not).
double TrainingFlops(const ModelConfig& config, std::span<const std::int64_t> lengths);

}  // namespace hydraulis
