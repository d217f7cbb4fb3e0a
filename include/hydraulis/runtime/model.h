// A decoder-only LLaMA-style Transformer on ATen tensors: token embedding, per layer
// RMSNorm -> grouped-query attention with rotary positions -> residual, RMSNorm -> SwiGLU
// MLP -> residual; final RMSNorm and an output head (tied to the embedding or not).
// Parameters are plain fp32 tensors that require grad, held by name, so a later tensor-
// or pipeline-parallel runtime can shard or split them without a module framework.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "hydraulis/runtime/model_config.h"
#include "hydraulis/runtime/packed_batch.h"

namespace hydraulis {

struct NamedParameter {
  std::string name;  // e.g. "layers.3.wq"
  at::Tensor value;  // fp32, requires_grad
};

class Transformer {
 public:
  // Builds the model on the CPU with parameters drawn from `seed` alone (a private
  // generator: the global torch seed is neither read nor changed): matrices N(0, 0.02^2),
  // norm weights 1. Two models built from the same config and seed are identical.
  Transformer(const ModelConfig& config, std::uint64_t seed);

  // Logits of every token of `batch` (fp32 [num_tokens, vocab]); differentiable.
  // InvalidInput when the batch is not valid (ValidatePackedBatch); ids must be < vocab
  // (PackDocuments checks that; libtorch throws otherwise).
  at::Tensor Forward(const PackedBatch& batch) const;

  const ModelConfig& config() const { return config_; }
  // In a fixed order: embed, layers.{i}.{attn_norm,wq,wk,wv,wo,mlp_norm,w_gate,w_up,w_down},
  // final_norm, head (absent when tied).
  const std::vector<NamedParameter>& named_parameters() const { return parameters_; }
  std::vector<at::Tensor> parameters() const;

 private:
  struct Layer {
    at::Tensor attn_norm, wq, wk, wv, wo, mlp_norm, w_gate, w_up, w_down;
  };

  at::Tensor Add(const std::string& name, at::Tensor value);

  ModelConfig config_;
  std::vector<NamedParameter> parameters_;
  at::Tensor embed_;
  std::vector<Layer> layers_;
  at::Tensor final_norm_;
  at::Tensor head_;  // Same tensor as embed_ when tied.
};

// The summed cross-entropy of the next-token targets of one micro-batch and how many
// targets it covers. The step's loss is the sum over all micro-batches (of all pipelines)
// divided by the global batch's target count, so the caller divides, not this function.
struct TokenLoss {
  at::Tensor sum;           // fp32 scalar, differentiable
  std::int64_t tokens = 0;  // targets summed (num_targets of the batch)
};
TokenLoss SummedTokenLoss(const at::Tensor& logits, const PackedBatch& batch);

}  // namespace hydraulis
