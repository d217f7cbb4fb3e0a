#include "hydraulis/runtime/step/pipeline_stage.h"

#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "hydraulis/base/elapsed.h"
#include "hydraulis/base/error.h"
#include "hydraulis/runtime/communication/comm_group.h"
#include "hydraulis/runtime/model/micro_batch_clock.h"

namespace hydraulis {

std::vector<StageOp> OneFOneBOrder(int stage, int pp, int micro_batches) {
  if (pp < 1 || stage < 0 || stage >= pp || micro_batches < 0) {
    throw InvalidInput("1F1B order: stage " + std::to_string(stage) + " of pp " +
                       std::to_string(pp) + " with " + std::to_string(micro_batches) +
                       " micro-batches is out of range");
  }
  const int warmup = std::min(pp - 1 - stage, micro_batches);
  std::vector<StageOp> ops;
  for (int j = 0; j < warmup; ++j) ops.push_back({true, j});
  for (int j = warmup; j < micro_batches; ++j) {
    ops.push_back({true, j});
    ops.push_back({false, j - warmup});
  }
  for (int j = micro_batches - warmup; j < micro_batches; ++j) ops.push_back({false, j});
  return ops;
}

namespace {

// Tags of the four messages of micro-batch j between two neighbouring stages.
int Tag(int micro_batch, int kind) { return micro_batch * 4 + kind; }
constexpr int kForwardShape = 0, kForwardData = 1, kBackwardShape = 2, kBackwardData = 3;

// The transfers of one stage: sends in the background, receives posted ahead of use.
class StageIo {
 public:
  StageIo(const StageLinks& links, std::int64_t hidden, at::TensorOptions options, int v)
      : links_(links),
        hidden_(hidden),
        options_(options),
        posted_(2 * static_cast<std::size_t>(v)) {}

  void Send(const at::Tensor& t, int peer, int micro_batch, bool forward) {
    const at::Tensor shape = at::tensor({t.size(0), t.size(1)}, at::kLong);
    links_.pipeline->Send(shape, peer, Tag(micro_batch, forward ? kForwardShape : kBackwardShape));
    links_.pipeline->Send(t.detach().contiguous(), peer,
                          Tag(micro_batch, forward ? kForwardData : kBackwardData));
  }

  // Posts the receive of micro-batch `micro_batch`'s activations (forward) or their
  // gradients, of `tokens` rows as the plan gives.
  void Post(int peer, int micro_batch, bool forward, std::int64_t tokens) {
    Posted& p = posted_[Slot(micro_batch, forward)];
    p.shape = at::empty({2}, at::kLong);
    p.data = at::empty({tokens, hidden_}, options_);
    p.shape_work = links_.pipeline->RecvAsync(
        p.shape, peer, Tag(micro_batch, forward ? kForwardShape : kBackwardShape));
    p.data_work = links_.pipeline->RecvAsync(
        p.data, peer, Tag(micro_batch, forward ? kForwardData : kBackwardData));
  }

  // Waits for a posted receive and checks its shape against the plan's.
  at::Tensor Take(int micro_batch, bool forward) {
    Posted& p = posted_[Slot(micro_batch, forward)];
    if (!p.data_work) {
      throw InternalError("pipeline stage " + std::to_string(links_.stage) + ": micro-batch " +
                          std::to_string(micro_batch) + "'s receive was never posted");
    }
    const auto start = std::chrono::steady_clock::now();
    p.shape_work->Wait();
    p.data_work->Wait();
    wait_ms_ +=
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    // The data arrived into a buffer of the plan's size; a sender whose plan differs is
    // caught before the step by the plan-hash check, and here by the shape it sent.
    const std::int64_t got_tokens = p.shape[0].item<std::int64_t>();
    const std::int64_t got_hidden = p.shape[1].item<std::int64_t>();
    const std::int64_t tokens = p.data.size(0);
    if (got_tokens != tokens || got_hidden != hidden_) {
      throw Error("pipeline stage " + std::to_string(links_.stage) + ": micro-batch " +
                  std::to_string(micro_batch) + ": received " +
                  (forward ? "activations" : "gradients") + " of shape [" +
                  std::to_string(got_tokens) + ", " + std::to_string(got_hidden) +
                  "], the plan gives [" + std::to_string(tokens) + ", " + std::to_string(hidden_) +
                  "]: the ranks of this pipeline disagree on the plan");
    }
    at::Tensor data = std::move(p.data);
    p = Posted{};
    return data;
  }

  double wait_ms() const { return wait_ms_; }

 private:
  struct Posted {
    at::Tensor shape, data;
    std::unique_ptr<CommWork> shape_work, data_work;
  };
  static std::size_t Slot(int micro_batch, bool forward) {
    return 2 * static_cast<std::size_t>(micro_batch) + (forward ? 0 : 1);
  }

  const StageLinks& links_;
  std::int64_t hidden_;
  at::TensorOptions options_;  // of the activations: compute device and dtype
  std::vector<Posted> posted_;
  double wait_ms_ = 0;
};

// What the schedule does with micro-batch j, whatever its form (packed, or a cp rank's
// share): the rows of the activations passed between stages, the real tokens it counts,
// its forward on the previous stage's output, and its loss on the last stage's.
struct StageWork {
  int micro_batches = 0;
  std::function<std::int64_t(int)> rows;
  std::function<std::int64_t(int)> tokens;
  std::function<at::Tensor(int, const at::Tensor&)> forward;
  std::function<TokenLoss(int, const at::Tensor&)> loss;
};

// When receives are posted. Under NCCL two neighbouring stages must issue their transfers
// to each other in one order (comm_group.h). Take the order in which the upstream stage
// (warm-up w = min(pp - 1 - its stage, v)) meets them in its 1F1B order: it sends a_j at
// the end of forward j and needs g_i at the start of backward i, which follows forward
// i + w, so its sequence is a_0 .. a_w, g_0, a_{w+1}, g_1, ..., then the remaining g's.
//   - The downstream stage posts a_0 .. a_w before anything else and a_{i+w+1} right
//     after sending g_i. That is this very sequence, and every a_j is posted before its
//     forward needs it (downstream's own warm-up is w - 1, or v when w = v), one forward
//     ahead: the transfer of the next activations overlaps the current backward.
//   - The upstream stage posts g_i right after sending a_{i+w} (g_0 .. g_{v-1} as far as
//     there are no further sends, after the last one), its own position in the sequence,
//     so in the drain phase every remaining gradient is on its way while it computes.
// The two sides of every boundary therefore issue identical sequences, which neither
// deadlocks under NCCL's in-order matching nor depends on Gloo's tags; the fake
// communicator checks it on every pipeline test.
// Forward only: each stage takes micro-batch j's activations, runs its forward without
// autograd and sends it on, j = 0 .. v-1. Both sides of a boundary post and send in that one
// order (all receives posted first, as the activations are all a stage waits for).
StageResult RunForwards(const StageWork& work, const StageLinks& links, StageIo& io) {
  const bool first = links.stage == 0;
  const bool last = links.stage == links.pp - 1;
  const int v = work.micro_batches;
  at::NoGradGuard no_grad;
  if (!first) {
    for (int j = 0; j < v; ++j) io.Post(links.prev, j, true, work.rows(j));
  }
  StageResult result;
  at::Tensor loss_total;
  for (int j = 0; j < v; ++j) {
    const at::Tensor input = first ? at::Tensor() : io.Take(j, true);
    const auto start = std::chrono::steady_clock::now();
    const at::Tensor out = work.forward(j, input);
    result.tokens += work.tokens(j);
    if (last) {
      const TokenLoss loss = work.loss(j, out);
      const at::Tensor sum = loss.sum.to(at::kDouble);
      loss_total = loss_total.defined() ? loss_total + sum : sum;
      result.targets += loss.tokens;
      result.forward_ms += MsSince(start);
    } else {
      result.forward_ms += MsSince(start);
      io.Send(out, links.next, j, true);
    }
  }
  if (links.pipeline != nullptr) links.pipeline->WaitSends();
  if (loss_total.defined()) result.loss_sum = loss_total.item<double>();
  result.micro_batch_ms.assign(static_cast<std::size_t>(v), 0.0);
  result.wait_ms = io.wait_ms();
  return result;
}

void CheckLinks(const StageLinks& links, std::int64_t global_targets) {
  const bool first = links.stage == 0;
  const bool last = links.stage == links.pp - 1;
  if (links.pp > 1 &&
      (links.pipeline == nullptr || (!first && links.prev < 0) || (!last && links.next < 0))) {
    throw InternalError("RunPipelineStage: missing pipeline links");
  }
  if (global_targets <= 0) {
    throw InvalidInput("training step: the global batch has no target token");
  }
}

// The receives of the 1F1B schedule, posted in the order above: each call posts a_j (or
// g_i) and every earlier one not yet posted.
class ReceivePosts {
 public:
  ReceivePosts(const StageWork& work, const StageLinks& links, StageIo& io)
      : work_(work), links_(links), io_(io) {}

  void ForwardsUntil(int j) {
    for (; forwards_ <= std::min(j, work_.micro_batches - 1); ++forwards_) {
      io_.Post(links_.prev, forwards_, true, work_.rows(forwards_));
    }
  }
  void GradsUntil(int i) {
    for (; grads_ <= std::min(i, work_.micro_batches - 1); ++grads_) {
      io_.Post(links_.next, grads_, false, work_.rows(grads_));
    }
  }

 private:
  const StageWork& work_;
  const StageLinks& links_;
  StageIo& io_;
  int forwards_ = 0;  // a_0 .. a_{forwards_ - 1} posted (from prev)
  int grads_ = 0;     // g_0 .. g_{grads_ - 1} posted (from next)
};

// Adds a micro-batch's loss sum to the total, in double.
void AddLoss(const at::Tensor& sum, at::Tensor& total) {
  const at::Tensor in_double = sum.detach().to(at::kDouble);
  if (total.defined()) {
    total.add_(in_double);
  } else {
    total = in_double.clone();
  }
}

// From the scaled loss on the last stage (upstream undefined), else from the hidden states
// with the gradient the next stage sent back.
void Backward(const at::Tensor& output, const at::Tensor& upstream) {
  if (upstream.defined()) {
    output.backward(upstream);
  } else {
    output.backward();
  }
}

// What goes back to the previous stage. A cp rank without tokens in this micro-batch has an
// empty input, whose gradient autograd may leave undefined; its peer still waits for the
// (empty) message.
at::Tensor InputGradient(const at::Tensor& input) {
  return input.grad().defined() ? input.grad() : at::zeros_like(input);
}

StageResult RunSchedule(const Transformer& model, const StageWork& work, const StageLinks& links,
                        std::int64_t global_targets) {
  CheckLinks(links, global_targets);
  const bool first = links.stage == 0;
  const bool last = links.stage == links.pp - 1;
  const int v = work.micro_batches;
  StageIo io(links, model.config().shape.hidden, model.activation_options(), v);
  if (links.forward_only) return RunForwards(work, links, io);
  // Warm-ups of the previous stage and of this one.
  const int warmup_prev = std::min(links.pp - links.stage, v);
  const int warmup = std::min(links.pp - 1 - links.stage, v);
  ReceivePosts post(work, links, io);
  if (!first) post.ForwardsUntil(warmup_prev);

  struct InFlight {
    at::Tensor input;   // received activations (requires grad), undefined on the first stage
    at::Tensor output;  // hidden states sent on, or the scaled loss on the last stage
  };
  std::vector<InFlight> in_flight(static_cast<std::size_t>(v));
  StageResult result;
  const DeviceKind device = model.compute().device;
  // The host clock costs nothing; CUDA events only when asked for.
  std::optional<MicroBatchClock> clock;
  if (device != DeviceKind::kCuda || links.time_on_device) clock.emplace(device, v);
  // The loss stays on the device, summed in double (as the host summed it), and is read
  // once after the schedule: a read per micro-batch would stop the host until the GPU
  // caught up, every micro-batch.
  at::Tensor loss_total;
  for (const StageOp& op : OneFOneBOrder(links.stage, links.pp, v)) {
    InFlight& f = in_flight[static_cast<std::size_t>(op.micro_batch)];
    if (op.forward) {
      if (!first) {
        f.input = io.Take(op.micro_batch, true);
        f.input.requires_grad_(true);
      }
      const auto forward_start = std::chrono::steady_clock::now();
      if (clock) clock->Start();
      at::Tensor out = work.forward(op.micro_batch, f.input);
      result.tokens += work.tokens(op.micro_batch);
      if (last) {
        TokenLoss loss = work.loss(op.micro_batch, out);
        // Divided by the global count, so the gradients add up to those of the global mean.
        f.output = loss.sum / static_cast<double>(global_targets);
        AddLoss(loss.sum, loss_total);
        result.targets += loss.tokens;
        result.forward_ms += MsSince(forward_start);
        if (clock) clock->Stop(op.micro_batch);
      } else {
        result.forward_ms += MsSince(forward_start);
        if (clock) clock->Stop(op.micro_batch);
        io.Send(out, links.next, op.micro_batch, true);
        f.output = out;
        post.GradsUntil(op.micro_batch == v - 1 ? v - 1 : op.micro_batch - warmup);
      }
      continue;
    }
    const at::Tensor upstream = last ? at::Tensor() : io.Take(op.micro_batch, false);
    const auto backward_start = std::chrono::steady_clock::now();
    if (clock) clock->Start();
    Backward(f.output, upstream);
    result.backward_ms += MsSince(backward_start);
    if (clock) clock->Stop(op.micro_batch);
    // No AccumulateMainGradients here: the distributed trainer's optimizer collects every
    // backward pass's gradients itself, in fp32 (ShardedAdamW::BeginStep).
    if (!first) {
      io.Send(InputGradient(f.input), links.prev, op.micro_batch, false);
      post.ForwardsUntil(op.micro_batch + warmup_prev + 1);
    }
    f = InFlight{};  // frees the activations of this micro-batch
  }
  if (links.pipeline != nullptr) links.pipeline->WaitSends();
  if (loss_total.defined()) result.loss_sum = loss_total.item<double>();
  result.micro_batch_ms =
      clock ? clock->Read() : std::vector<double>(static_cast<std::size_t>(v), 0.0);
  result.wait_ms = io.wait_ms();
  return result;
}

}  // namespace

StageResult RunPipelineStage(const Transformer& model,
                             const std::vector<PackedBatch>& micro_batches, const StageLinks& links,
                             std::int64_t global_targets) {
  auto batch = [&](int j) -> const PackedBatch& {
    return micro_batches[static_cast<std::size_t>(j)];
  };
  StageWork work;
  work.micro_batches = static_cast<int>(micro_batches.size());
  work.rows = [&](int j) { return batch(j).num_tokens(); };
  work.tokens = work.rows;
  work.forward = [&](int j, const at::Tensor& hidden) {
    return model.ForwardStage(batch(j), hidden);
  };
  work.loss = [&](int j, const at::Tensor& logits) { return SummedTokenLoss(logits, batch(j)); };
  return RunSchedule(model, work, links, global_targets);
}

StageResult RunPipelineStage(const Transformer& model,
                             const std::vector<ContextParallelMicroBatch>& micro_batches,
                             CommGroup& cp_group, const StageLinks& links,
                             std::int64_t global_targets) {
  auto share = [&](int j) -> const ContextParallelMicroBatch& {
    return micro_batches[static_cast<std::size_t>(j)];
  };
  StageWork work;
  work.micro_batches = static_cast<int>(micro_batches.size());
  // Storage rows travel between stages (padding included: the next stage's rows are the
  // same layout's); only real tokens count.
  work.rows = [&](int j) { return share(j).rows.local.storage_tokens(); };
  work.tokens = [&](int j) { return share(j).rows.local.real_tokens(); };
  work.forward = [&](int j, const at::Tensor& hidden) {
    return model.ForwardStageContextParallel(share(j).tokens, share(j).rows, cp_group, hidden);
  };
  work.loss = [&](int j, const at::Tensor& logits) {
    return SummedTokenLoss(logits, share(j).tokens.targets);
  };
  return RunSchedule(model, work, links, global_targets);
}

}  // namespace hydraulis
