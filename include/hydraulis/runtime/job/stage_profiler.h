// Profiling this engine for the planner's cost model (method.md 2.1): the forward+backward
// time of one pipeline stage of a scheme (tp, pp) for single documents and packed
// micro-batches, as samples for FitTimeModel, and an analytic memory model of what the
// engine keeps per token, since the CPU reports no per-tensor memory (docs/runtime.md,
// "Profiler").
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "hydraulis/cost/time_fit.h"
#include "hydraulis/runtime/model/transformer.h"
#include "hydraulis/spec/model_config.h"
#include "hydraulis/spec/profile.h"

namespace hydraulis {

class CommGroup;

// The model part timed as "one stage" of a pp-stage pipeline: the layers of stage 0 (the
// most layers any stage holds: earlier stages take the remainder) plus the embedding AND the
// final norm, head and loss. The planner gives every stage of a pipeline the same time and
// 1F1B is paced by its slowest stage, so the stage is measured with every extra any stage
// can carry: for pp = 1 it is exactly the whole model, for pp > 1 it is the last stage
// plus an embedding lookup (an index_select, negligible). InvalidInput as ModelPart::Stage.
ModelPart ProfiledStagePart(const ModelConfig& config, int pp);

// Which micro-batches to time.
struct ProfileBatchOptions {
  // Single documents of lengths min_len, 1.5 min_len, 2 min_len, 3 min_len, ... (powers of
  // two and their midpoints) up to and including max_len. 1 <= min_len <= max_len.
  std::int64_t min_len = 32;
  std::int64_t max_len = 2048;
  // Packed micro-batches, >= 0. Micro-batch j holds documents drawn from the length pool
  // (each cut to max_len) until it reaches ((j % 4) + 1) / 4 of max_len tokens; the last
  // document is cut to fit.
  int packed = 8;
  std::uint64_t seed = 1;  // draws from the pool
};

// The micro-batches (document lengths) ProfileStage should time: the single documents in
// increasing length, then the packed ones. `length_pool` is a real length distribution
// (e.g. data/wikipedia-sample-lengths.txt), each >= 1; it may be empty only when
// options.packed == 0. InvalidInput naming the field otherwise. Deterministic in the seed.
std::vector<std::vector<std::int64_t>> ProfileMicroBatches(
    std::span<const std::int64_t> length_pool, const ProfileBatchOptions& options);

// How each micro-batch is timed.
struct StageProfileOptions {
  int warmup = 1;          // untimed passes over all micro-batches first, >= 0
  int repeats = 3;         // timed passes over all micro-batches, >= 1; the median is kept
  std::uint64_t seed = 1;  // model initialisation and token ids (identical on every tp rank)
  // Where the stage runs and in which precision. On a GPU the inputs are on the device
  // before the clock starts and the device is synchronised before it starts and stops, so
  // a sample is the GPU's time, not the host's time to queue the kernels.
  ComputeOptions compute;
};

// Times forward (embedding, layers, head, summed token loss) and backward of every
// micro-batch of `micro_batches` on ProfiledStagePart(config, pp), with gradients
// accumulating as in training. Passes go round-robin over the micro-batches (a slow drift of
// the machine spreads over all of them instead of biasing some), and each sample's time is
// the median over the passes. The times depend on the process's BLAS threads and memory
// allocator, which the caller sets (the profile command: docs/runtime.md, "Profiler").
// Under tensor parallelism (`tp_group` of size tp, nullptr for tp = 1) a collective: every
// tp rank must call it with the same arguments; the ranks meet at a barrier before every
// timed run, the time of a run is the maximum over the tp ranks, and every rank returns the
// same samples. InvalidInput on out-of-range options, an empty or invalid micro-batch, or a
// model that does not split over tp / pp (ValidateTensorParallel, ModelPart::Stage).
std::vector<TimeSample> ProfileStage(const ModelConfig& config, int pp, CommGroup* tp_group,
                                     const std::vector<std::vector<std::int64_t>>& micro_batches,
                                     const StageProfileOptions& options = {});

// Times forward and backward of one stage of a <cp, tp, 1> scheme (pp = 1: the whole model)
// on micro-batches whose documents are all sharded over the cp ranks of `cp_group` (each
// rank its zigzag chunks, local_tokens.h; attention is ContextParallelAttention), each cp
// rank a tensor-parallel group `tp_group` (nullptr: tp 1), as the trainer runs them and as
// ProfileStage times a placed micro-batch: same passes, medians, and a time per run that is
// the maximum over the cp * tp ranks of `block_group` (its cp and tp groups' union). A
// collective over block_group; every rank gets the same samples. InvalidInput as
// ProfileStage, or when cp_group has fewer than 2 ranks.
std::vector<TimeSample> ProfileShardedStage(
    const ModelConfig& config, CommGroup& cp_group, CommGroup* tp_group, CommGroup& block_group,
    const std::vector<std::vector<std::int64_t>>& micro_batches,
    const StageProfileOptions& options = {});

// Activation bytes this engine keeps for backward per token, per hidden unit held per rank
// (hidden / tp) and per layer: the `A_tp` of method.md 2.1, so that layers * (hidden / tp) *
// A_tp is the bytes per token of a scheme. An analytic count of the fp32 tensors autograd
// saves in one layer of model.cc (replicated RMSNorm inputs and outputs and residuals: 6
// hidden per token on every tp rank; sharded: q, k before and after rotary and the rotated
// halves, v, the attention output, the SwiGLU gate, its silu, up and their product, and the
// rotary cos/sin tables), with attention counted as a GPU build's variable-length flash
// attention keeps it (q, k, v, output: linear in tokens). The CPU's dense per-document
// attention also keeps heads x s^2 scores, which is left out: the profile describes the
// engine the planner plans for; with `flash_attention` false, the attention core of the
// other path (the CPU's) keeps each document's output and log-sum-exp besides. Under
// recomputation (`mode`) what the layers keep shrinks and one layer's share comes back
// during its backward: selective drops the SwiGLU's silu and what the attention core keeps
// beyond its inputs and output, full keeps each layer's input only (docs/design.md,
// "Activation recomputation"). InvalidInput when tp does not split the model.
double ActivationBytesPerTokenHiddenLayer(const ModelConfig& config, int tp,
                                          Recompute mode = Recompute::kNone,
                                          bool flash_attention = true);

// The profile's memory model for this engine at the given tp degrees: A_tp as above; model
// states of fp32 weights and gradients in the compute layout (8 bytes per parameter) and
// fp32 master weights and AdamW moments in the optimizer layout (12 bytes per parameter), so
// the optimizer share is 12 / 20; no CUDA context and no reserve (the budget is the
// --memory-bytes the caller models, nothing else lives in it). `mode`: the recomputation
// the activation bytes are for.
MemoryModel EngineMemoryModel(const ModelConfig& config, std::span<const int> tps,
                              Recompute mode = Recompute::kNone, bool flash_attention = true);

}  // namespace hydraulis
