// One pipeline stage's part of a step: Megatron's non-interleaved 1F1B schedule over the
// pipeline's micro-batches (any number, including none and fewer than pp, each of its own
// shape), with activations sent forward and their gradients sent back between
// neighbouring stages. Every rank of the pipeline derives the same micro-batches from the
// plan; each transfer is preceded by its shape, which the receiver checks against the plan,
// so ranks that disagree on the plan fail with an error instead of computing garbage.
#pragma once

#include <cstdint>
#include <vector>

#include "hydraulis/runtime/model/context_parallel_attention.h"
#include "hydraulis/runtime/model/local_tokens.h"
#include "hydraulis/runtime/model/packed_batch.h"
#include "hydraulis/runtime/model/transformer.h"

namespace hydraulis {

class CommGroup;

// A forward (kForward) or backward pass of one micro-batch.
struct StageOp {
  bool forward = true;
  int micro_batch = 0;
};

// Stage `stage` of `pp` running `micro_batches` micro-batches in 1F1B order: min(pp - 1 -
// stage, micro_batches) warm-up forwards, then one forward and one backward alternately,
// then the remaining backwards. InvalidInput on out-of-range arguments.
std::vector<StageOp> OneFOneBOrder(int stage, int pp, int micro_batches);

// How this rank reaches its neighbours: `pipeline` holds the pipeline's ranks (nullptr
// when pp == 1); prev / next are the group ranks of the peers with this rank's tp rank (and
// cp rank) in the previous / next stage (-1 at the ends).
struct StageLinks {
  CommGroup* pipeline = nullptr;
  int stage = 0;
  int pp = 1;
  int prev = -1;
  int next = -1;
  // Time each micro-batch on the device (StageResult::micro_batch_ms). On the CPU the host
  // clock times it for free; on a GPU it records CUDA events and waits for them at the
  // end, so it is off unless someone reads the times (the calibration).
  bool time_on_device = false;
  // Forward only, without autograd (evaluation): every stage runs its micro-batches'
  // forwards in order, sending each one's activations on; nothing is kept for a backward
  // and no gradient is computed.
  bool forward_only = false;
};

struct StageResult {
  double loss_sum = 0;       // summed token loss (last stage only, else 0)
  std::int64_t targets = 0;  // targets the loss covers (last stage only)
  std::int64_t tokens = 0;   // tokens of the micro-batches run (a cp rank: its real tokens)
  double wait_ms = 0;        // time blocked in receives (pipeline bubbles + transfer)
  // Host time in forward (the model and the loss; sends and receives not included) and in
  // backward (autograd, with what runs inside it: the optimizer's gradient hooks, a tp
  // group's all-reduces). On a GPU the time to queue the work, not to run it.
  double forward_ms = 0;
  double backward_ms = 0;
  // Per micro-batch, its forward and backward together (MicroBatchClock: the host clock on
  // the CPU, CUDA events on a GPU with StageLinks::time_on_device, else 0), for the
  // calibration of the cost model (assign/step_calibration.h).
  std::vector<double> micro_batch_ms;
};

// Runs forward and backward of `micro_batches` on `model` (this rank's stage), adding
// d(loss_sum / global_targets)/dw to its gradients (which the caller zeroes). Collective
// over the pipeline (and the tp group inside the model). Error when a peer fails or sends
// a shape the plan does not give.
StageResult RunPipelineStage(const Transformer& model,
                             const std::vector<PackedBatch>& micro_batches, const StageLinks& links,
                             std::int64_t global_targets);

// One cp rank's share of a micro-batch of a context-parallel pipeline: its local tokens and
// the attention rows of the same layout, on the model's device (what
// Transformer::ForwardStageContextParallel reads).
struct ContextParallelMicroBatch {
  LocalTokens tokens;
  ContextParallelRows rows;
};

// The same schedule on a cp rank of a context-parallel pipeline: each micro-batch runs on
// this rank's local tokens, attention gathering keys and values over `cp_group` (this
// stage's cp ranks, which all run the same micro-batches in the same order), and the
// activations sent between stages are this rank's storage rows, exchanged with the peers of
// its own cp rank (links.prev / links.next). The loss covers this rank's targets only, so
// the pipelines' and cp ranks' sums add up to the batch's.
StageResult RunPipelineStage(const Transformer& model,
                             const std::vector<ContextParallelMicroBatch>& micro_batches,
                             CommGroup& cp_group, const StageLinks& links,
                             std::int64_t global_targets);

}  // namespace hydraulis
