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
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "hydraulis/runtime/model/compute.h"
#include "hydraulis/runtime/model/context_parallel_attention.h"
#include "hydraulis/runtime/model/local_tokens.h"
#include "hydraulis/runtime/model/packed_batch.h"
#include "hydraulis/spec/model_config.h"

namespace hydraulis {

class CommGroup;

// InvalidInput unless heads, kv_heads and ffn of `config` are divisible by tp_size >= 1.
void ValidateTensorParallel(const ModelConfig& config, int tp_size);

// How a parameter is split over the tp ranks: not at all, along its rows (dim 0, column-
// parallel) or along its columns (dim 1, row-parallel).
enum class TensorSplit { kReplicated, kRows, kColumns };

// A parameter of the single-process model: its name and shape, in the model's fixed order
// (embed, layers.{i}.{attn_norm,wq,wk,wv,wo,mlp_norm,w_gate,w_up,w_down}, final_norm, head
// unless tied), and how tensor parallelism splits it.
struct FullParameter {
  std::string name;
  std::vector<std::int64_t> shape;
  TensorSplit split = TensorSplit::kReplicated;
};
std::vector<FullParameter> FullParameters(const ModelConfig& config);

// The part of the model one pipeline stage holds: layers [first_layer, end_layer), the
// token embedding on the first stage, the final norm and output head on the last.
struct ModelPart {
  int first_layer = 0;
  int end_layer = -1;  // -1: through the last layer
  bool has_embedding = true;
  bool has_head = true;

  // Stage `stage` of `pp` (layers split as evenly as possible, earlier stages taking the
  // remainder's extra layer). InvalidInput unless 1 <= pp <= layers and 0 <= stage < pp.
  static ModelPart Stage(const ModelConfig& config, int stage, int pp);
  bool IsWhole(const ModelConfig& config) const;
};

// Where a model's initial weights come from instead of the seeded draw: the full fp32 value
// (on the CPU) of each full parameter, asked for in FullParameters' order, one at a time
// (hf_weights.h reads them from a Hugging Face checkpoint).
using InitialWeights = std::function<at::Tensor(const FullParameter&)>;

// The seeded draw as a source: the values Transformer(config, seed) has, each drawn when
// asked (parameters skipped are drawn and dropped, so each value does not depend on which
// were asked). InternalError when asked out of FullParameters' order.
InitialWeights SeededWeights(const ModelConfig& config, std::uint64_t seed);

// Uninitialised tensors of the right shapes, for models whose parameters are overwritten
// before use (the trainer's compute models, materialised from the optimizer every step):
// nothing is drawn or read.
InitialWeights UninitializedWeights();

struct NamedParameter {
  std::string name;  // e.g. "layers.3.wq"
  at::Tensor value;  // fp32, requires_grad
  // The single-process parameter this is (a tp shard of): the name itself, except for the
  // output head of a last stage without the embedding when embeddings are tied, which is a
  // copy of "embed" (the two copies' gradients add up in the optimizer's parameter).
  std::string full_name;
  TensorSplit split = TensorSplit::kReplicated;
  // Under mixed precision (a value not in fp32), the fp32 gradient the micro-batches'
  // gradients are accumulated into (AccumulateMainGradients); undefined in fp32, where the
  // value's own gradient accumulates. Empty until ZeroGradients (gradients.h) first sizes and
  // zeroes it. GradientOf picks the right one.
  at::Tensor main_grad;
};

// The gradient of `p` accumulated over the step's micro-batches, in fp32 under mixed
// precision (main_grad) and the value's own .grad() in fp32.
const at::Tensor& GradientOf(const NamedParameter& p);

class Transformer {
 public:
  // Builds the model on the CPU with parameters drawn from `seed` alone (a private
  // generator: the global torch seed is neither read nor changed): matrices N(0, 0.02^2),
  // norm weights 1. Two models built from the same config and seed are identical.
  // With `tp_group` (which must outlive the model) this rank holds only its tensor-parallel
  // shards: each full weight is drawn exactly as without it and then sliced, so the shards
  // of all tp ranks together are the single-process model built from the same seed.
  // InvalidInput when the config does not split (ValidateTensorParallel).
  // With `part` (a pipeline stage, ModelPart::Stage) it holds only that part's parameters,
  // drawn as in the whole model.
  // With `compute` the parameters live on its device in its precision (drawn on the CPU
  // in fp32 first, so every device and precision starts from the same values).
  // With `initial` the weights are its values instead of the draw (InvalidInput when a value
  // has another shape than the parameter); only the parameters this rank holds are asked.
  Transformer(const ModelConfig& config, std::uint64_t seed, CommGroup* tp_group = nullptr,
              const ModelPart& part = {}, const ComputeOptions& compute = {},
              const InitialWeights& initial = {});

  // Logits of every token of `batch` ([num_tokens, vocab] in the compute dtype);
  // differentiable. Under
  // tensor parallelism a collective: every tp rank must call it with the same batch, and
  // every one gets the full (replicated) logits.
  // InvalidInput when the batch is not valid (ValidatePackedBatch); ids must be < vocab
  // (PackDocuments checks that; libtorch throws otherwise).
  // InvalidInput unless this is the whole model (use ForwardStage for a stage).
  at::Tensor Forward(const PackedBatch& batch) const;

  // One pipeline stage: on the first stage `hidden` is ignored (undefined is fine) and the
  // tokens are embedded; on later stages `hidden` is the previous stage's output [tokens,
  // hidden]. Returns the hidden states [tokens, hidden] after this stage's layers, or the
  // logits [tokens, vocab] on the last stage. Differentiable with respect to `hidden`.
  at::Tensor ForwardStage(const PackedBatch& batch, const at::Tensor& hidden) const;

  // The same stage on this rank's share of a context-parallel micro-batch: `tokens` are its
  // local tokens (LocalTokensOf), `rows` the attention's rows of the same layout on this
  // model's device (MakeContextParallelRows), attention is ContextParallelAttention over
  // `cp_group`. Works over the rank's storage rows (padding rows included; their outputs
  // mean nothing and reach no loss): `hidden` and the result are [storage rows, ...]. A
  // collective over cp_group when the micro-batch has a sharded document; every cp rank must
  // call it, and run its backward, in the same order.
  at::Tensor ForwardStageContextParallel(const LocalTokens& tokens, const ContextParallelRows& rows,
                                         CommGroup& cp_group, const at::Tensor& hidden) const;

  const ModelConfig& config() const { return config_; }
  const ComputeOptions& compute() const { return compute_; }
  // Options for tensors that meet the activations: the compute device and dtype.
  at::TensorOptions activation_options() const;
  const ModelPart& part() const { return part_; }
  // Called by ForwardStage before it first reads parameters: fetch(n) asks that
  // named_parameters()[0, n) hold their values now (the order of named_parameters is the
  // order forward reads them). The optimizer uses it to let the previous step's parameter
  // all-gathers arrive while earlier layers compute (ShardedAdamW::BeginMaterialise).
  // Empty (the default): the parameters are always current.
  using ParameterFetch = std::function<void(std::size_t)>;
  void set_parameter_fetch(ParameterFetch fetch) { fetch_ = std::move(fetch); }
  // This rank's parameters in the order of FullParameters (those of its part only).
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
    at::Tensor bq, bk, bv;      // Qwen2's projection biases (undefined elsewhere)
    at::Tensor q_norm, k_norm;  // Qwen3's per-head norms (undefined elsewhere)
  };

  // The stage over `rows` token rows: `tokens` (int64 ids, read on the first stage) or
  // `hidden`, rotary by `positions`, attention by `attend(q, k, v)`.
  using Attention =
      std::function<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&)>;
  at::Tensor RunStage(const at::Tensor& tokens, const at::Tensor& positions, std::int64_t rows,
                      const Attention& attend, const at::Tensor& hidden) const;

  // Keeps this rank's part of the full `value` (all of it when replicated or without tp).
  at::Tensor Add(const std::string& name, const std::string& full_name, const at::Tensor& value,
                 TensorSplit split);

  CommGroup* tp_group_;  // nullptr: not tensor-parallel
  ModelPart part_;

  ModelConfig config_;
  ComputeOptions compute_;
  std::vector<NamedParameter> parameters_;
  at::Tensor embed_;
  std::vector<Layer> layers_;
  at::Tensor final_norm_;
  at::Tensor head_;                      // Same tensor as embed_ when tied and both are held.
  std::vector<std::size_t> layer_ends_;  // per held layer: its last parameter's index + 1
  ParameterFetch fetch_;
};

// The summed cross-entropy of the next-token targets of one micro-batch and how many
// targets it covers. The step's loss is the sum over all micro-batches (of all pipelines)
// divided by the global batch's target count, so the caller divides, not this function.
struct TokenLoss {
  at::Tensor sum;           // fp32 scalar, differentiable
  std::int64_t tokens = 0;  // targets summed (num_targets of the batch)
};
TokenLoss SummedTokenLoss(const at::Tensor& logits, const PackedBatch& batch);
// The same for explicit targets (a cp rank's LocalTokens::targets): `logits` rows indexed
// by targets.inputs.
TokenLoss SummedTokenLoss(const at::Tensor& logits, const NextTokenTargets& targets);

}  // namespace hydraulis
