// A decoder-only LLaMA-style Transformer on ATen tensors: token embedding, per layer
// RMSNorm -> grouped-query attention with rotary positions -> residual, RMSNorm -> SwiGLU
// MLP -> residual; final RMSNorm and an output head (tied to the embedding or not).
// Parameters are plain fp32 tensors that require grad, held by name, so a parallel runtime
// can shard or split them without a module framework.
//
// Tensor parallelism (Megatron-style) over a CommGroup of tp ranks: wq/wk/wv and
// w_gate/w_up are column-parallel (each rank holds a contiguous block of the output rows:
// its heads, its kv heads, its ffn units), wo and w_down row-parallel (the matching input
// columns); the partial outputs of a row-parallel product are all-reduced in forward, the
// input gradients of a column-parallel product in backward (the f/g conjugate operators).
// Embedding, norms and output head are replicated on every tp rank: their gradients come
// out identical on all tp ranks because the activations they see are identical, so no
// collective is needed for them.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "hydraulis/runtime/model_config.h"
#include "hydraulis/runtime/packed_batch.h"

namespace hydraulis {

class CommGroup;

// InvalidInput unless heads, kv_heads and ffn of `config` are divisible by tp_size >= 1.
void ValidateTensorParallel(const ModelConfig& config, int tp_size);

struct NamedParameter {
  std::string name;  // e.g. "layers.3.wq"
  at::Tensor value;  // fp32, requires_grad
};

class Transformer {
 public:
  // Builds the model on the CPU with parameters drawn from `seed` alone (a private
  // generator: the global torch seed is neither read nor changed): matrices N(0, 0.02^2),
  // norm weights 1. Two models built from the same config and seed are identical.
  // With `tp_group` (which must outlive the model) this rank holds only its tensor-parallel
  // shards: each full weight is drawn exactly as without it and then sliced, so the shards
  // of all tp ranks together are the single-process model built from the same seed.
  // InvalidInput when the config does not split (ValidateTensorParallel).
  Transformer(const ModelConfig& config, std::uint64_t seed, CommGroup* tp_group = nullptr);

  // Logits of every token of `batch` (fp32 [num_tokens, vocab]); differentiable. Under
  // tensor parallelism a collective: every tp rank must call it with the same batch, and
  // every one gets the full (replicated) logits.
  // InvalidInput when the batch is not valid (ValidatePackedBatch); ids must be < vocab
  // (PackDocuments checks that; libtorch throws otherwise).
  at::Tensor Forward(const PackedBatch& batch) const;

  const ModelConfig& config() const { return config_; }
  // In a fixed order: embed, layers.{i}.{attn_norm,wq,wk,wv,wo,mlp_norm,w_gate,w_up,w_down},
  // final_norm, head (absent when tied).
  const std::vector<NamedParameter>& named_parameters() const { return parameters_; }
  std::vector<at::Tensor> parameters() const;

  // 1 and 0 without a tp group.
  int tp_size() const;
  int tp_rank() const;
  // The full, unsharded parameters (detached copies, in named_parameters' order and with
  // the single-process shapes), assembled from the shards of all tp ranks: a collective
  // under tensor parallelism, a copy without it.
  std::vector<NamedParameter> GatherFullParameters() const;

 private:
  struct Layer {
    at::Tensor attn_norm, wq, wk, wv, wo, mlp_norm, w_gate, w_up, w_down;
  };

  // How a parameter is split over the tp ranks: not at all, along its rows (dim 0, column-
  // parallel) or along its columns (dim 1, row-parallel).
  enum class Split { kReplicated, kRows, kColumns };

  // Keeps this rank's part of the full `value` (all of it when replicated or without tp).
  at::Tensor Add(const std::string& name, const at::Tensor& value, Split split);

  CommGroup* tp_group_;        // nullptr: not tensor-parallel
  std::vector<Split> splits_;  // per parameter, parallel to parameters_

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
