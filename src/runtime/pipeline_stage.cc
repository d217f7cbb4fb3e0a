#include "hydraulis/runtime/pipeline_stage.h"

#include <chrono>
#include <string>

#include "hydraulis/base/error.h"
#include "hydraulis/runtime/distributed.h"

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

class StageIo {
 public:
  StageIo(const StageLinks& links, std::int64_t hidden, at::TensorOptions options)
      : links_(links), hidden_(hidden), options_(options) {}

  void Send(const at::Tensor& t, int peer, int micro_batch, bool forward) {
    const at::Tensor shape = at::tensor({t.size(0), t.size(1)}, at::kLong);
    links_.pipeline->Send(shape, peer, Tag(micro_batch, forward ? kForwardShape : kBackwardShape));
    links_.pipeline->Send(t.detach().contiguous(), peer,
                          Tag(micro_batch, forward ? kForwardData : kBackwardData));
  }

  at::Tensor Recv(int peer, int micro_batch, bool forward, std::int64_t tokens) {
    const auto start = std::chrono::steady_clock::now();
    at::Tensor shape = at::empty({2}, at::kLong);
    links_.pipeline->Recv(shape, peer, Tag(micro_batch, forward ? kForwardShape : kBackwardShape));
    const std::int64_t got_tokens = shape[0].item<std::int64_t>();
    const std::int64_t got_hidden = shape[1].item<std::int64_t>();
    if (got_tokens != tokens || got_hidden != hidden_) {
      throw Error("pipeline stage " + std::to_string(links_.stage) + ": micro-batch " +
                  std::to_string(micro_batch) + ": received " +
                  (forward ? "activations" : "gradients") + " of shape [" +
                  std::to_string(got_tokens) + ", " + std::to_string(got_hidden) +
                  "], the plan gives [" + std::to_string(tokens) + ", " + std::to_string(hidden_) +
                  "]: the ranks of this pipeline disagree on the plan");
    }
    at::Tensor data = at::empty({tokens, hidden_}, options_);
    links_.pipeline->Recv(data, peer, Tag(micro_batch, forward ? kForwardData : kBackwardData));
    wait_ms_ +=
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    return data;
  }

  double wait_ms() const { return wait_ms_; }

 private:
  const StageLinks& links_;
  std::int64_t hidden_;
  at::TensorOptions options_;  // of the activations: compute device and dtype
  double wait_ms_ = 0;
};

}  // namespace

StageResult RunPipelineStage(const Transformer& model,
                             const std::vector<PackedBatch>& micro_batches, const StageLinks& links,
                             std::int64_t global_targets) {
  const bool first = links.stage == 0;
  const bool last = links.stage == links.pp - 1;
  if (links.pp > 1 &&
      (links.pipeline == nullptr || (!first && links.prev < 0) || (!last && links.next < 0))) {
    throw InternalError("RunPipelineStage: missing pipeline links");
  }
  if (global_targets <= 0) {
    throw InvalidInput("training step: the global batch has no target token");
  }
  StageIo io(links, model.config().shape.hidden, model.activation_options());
  struct InFlight {
    at::Tensor input;   // received activations (requires grad), undefined on the first stage
    at::Tensor output;  // hidden states sent on, or the scaled loss on the last stage
  };
  std::vector<InFlight> in_flight(micro_batches.size());
  StageResult result;
  const int v = static_cast<int>(micro_batches.size());
  for (const StageOp& op : OneFOneBOrder(links.stage, links.pp, v)) {
    const PackedBatch& mb = micro_batches[static_cast<std::size_t>(op.micro_batch)];
    InFlight& f = in_flight[static_cast<std::size_t>(op.micro_batch)];
    if (op.forward) {
      if (!first) {
        f.input = io.Recv(links.prev, op.micro_batch, true, mb.num_tokens());
        f.input.requires_grad_(true);
      }
      at::Tensor out = model.ForwardStage(mb, f.input);
      result.tokens += mb.num_tokens();
      if (last) {
        TokenLoss loss = SummedTokenLoss(out, mb);
        // Divided by the global count, so the gradients add up to those of the global mean.
        f.output = loss.sum / static_cast<double>(global_targets);
        result.loss_sum += loss.sum.item<double>();
        result.targets += loss.tokens;
      } else {
        io.Send(out, links.next, op.micro_batch, true);
        f.output = out;
      }
      continue;
    }
    if (last) {
      f.output.backward();
    } else {
      const at::Tensor grad = io.Recv(links.next, op.micro_batch, false, mb.num_tokens());
      f.output.backward(grad);
    }
    // No AccumulateMainGradients here: the distributed trainer's optimizer collects every
    // backward pass's gradients itself, in fp32 (ShardedAdamW::BeginStep).
    if (!first) io.Send(f.input.grad(), links.prev, op.micro_batch, false);
    f = InFlight{};  // frees the activations of this micro-batch
  }
  if (links.pipeline != nullptr) links.pipeline->WaitSends();
  result.wait_ms = io.wait_ms();
  return result;
}

}  // namespace hydraulis
