#include "hydraulis/runtime/model.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/csrc/autograd/custom_function.h>

#include <string>

#include "hydraulis/base/error.h"
#include "hydraulis/runtime/attention.h"
#include "hydraulis/runtime/distributed.h"

namespace hydraulis {
namespace {

// Standard deviation of the initial weight matrices (GPT-2 / LLaMA reference init).
constexpr double kInitStd = 0.02;

at::Tensor RmsNorm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  return x * at::rsqrt(x.pow(2).mean({-1}, /*keepdim=*/true) + eps) * weight;
}

// x [tokens, in] times a weight stored [out, in], as torch.nn.Linear without bias.
at::Tensor Linear(const at::Tensor& x, const at::Tensor& weight) {
  return at::matmul(x, weight.t());
}

// The group travels through autograd's saved data as an integer: IValue has no slot for a
// raw pointer, and the model (which owns the group pointer) outlives its backward passes.
std::int64_t GroupHandle(CommGroup* group) { return reinterpret_cast<std::int64_t>(group); }
CommGroup& GroupOf(torch::autograd::AutogradContext* ctx) {
  return *reinterpret_cast<CommGroup*>(ctx->saved_data["group"].toInt());
}

// Out of place: AllReduceSum works in place on a contiguous tensor, and autograd must not
// see its input modified.
at::Tensor AllReduced(CommGroup& group, const at::Tensor& x) {
  at::Tensor out = x.detach().clone(at::MemoryFormat::Contiguous);
  group.AllReduceSum(out);
  return out;
}

// Megatron's f: identity in forward, all-reduce of the gradient in backward. Placed before
// a column-parallel product, whose input gradient on each rank covers only its shard.
struct CopyToTensorParallel : public torch::autograd::Function<CopyToTensorParallel> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                            CommGroup* group) {
    ctx->saved_data["group"] = GroupHandle(group);
    return x.view_as(x);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    return {AllReduced(GroupOf(ctx), grads[0]), at::Tensor()};
  }
};

// Megatron's g: all-reduce in forward, identity in backward. Placed after a row-parallel
// product, whose output on each rank is a partial sum over its shard of the inputs.
struct ReduceFromTensorParallel : public torch::autograd::Function<ReduceFromTensorParallel> {
  static at::Tensor forward(torch::autograd::AutogradContext*, const at::Tensor& x,
                            CommGroup* group) {
    return AllReduced(*group, x);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext*,
                                                 torch::autograd::variable_list grads) {
    return {grads[0], at::Tensor()};
  }
};

}  // namespace

void ValidateTensorParallel(const ModelConfig& config, int tp_size) {
  const ModelSpec& s = config.shape;
  if (tp_size < 1) {
    throw InvalidInput("tensor parallelism: tp must be >= 1, got " + std::to_string(tp_size));
  }
  auto check = [&](const char* field, std::int64_t value) {
    if (value % tp_size != 0) {
      throw InvalidInput("tensor parallelism: " + std::string(field) + " = " +
                         std::to_string(value) +
                         " is not divisible by tp = " + std::to_string(tp_size));
    }
  };
  check("heads", s.heads);
  check("kv_heads", s.kv_heads);
  check("ffn", s.ffn);
}

int Transformer::tp_size() const { return tp_group_ == nullptr ? 1 : tp_group_->size(); }
int Transformer::tp_rank() const { return tp_group_ == nullptr ? 0 : tp_group_->rank(); }

at::Tensor Transformer::Add(const std::string& name, const at::Tensor& value, Split split) {
  at::Tensor local = value;
  if (split != Split::kReplicated && tp_size() > 1) {
    const std::int64_t dim = split == Split::kRows ? 0 : 1;
    const std::int64_t part = value.size(dim) / tp_size();
    // A copy, not a view: the shard must not keep the full weight alive.
    local = value.slice(dim, part * tp_rank(), part * (tp_rank() + 1)).clone();
  }
  local.requires_grad_(true);
  parameters_.push_back({name, local});
  splits_.push_back(split);
  return local;
}

std::vector<NamedParameter> Transformer::GatherFullParameters() const {
  std::vector<NamedParameter> out;
  out.reserve(parameters_.size());
  for (std::size_t i = 0; i < parameters_.size(); ++i) {
    const at::Tensor local = parameters_[i].value.detach();
    if (splits_[i] == Split::kReplicated || tp_size() == 1) {
      out.push_back({parameters_[i].name, local.clone()});
      continue;
    }
    // Each rank writes its shard into zeros and a sum assembles the whole; adding zeros is
    // exact, so this is a gather without a separate all-gather wrapper.
    const std::int64_t dim = splits_[i] == Split::kRows ? 0 : 1;
    std::vector<std::int64_t> shape = local.sizes().vec();
    const std::int64_t part = shape[static_cast<std::size_t>(dim)];
    shape[static_cast<std::size_t>(dim)] = part * tp_size();
    at::Tensor full = at::zeros(shape, local.options());
    full.slice(dim, part * tp_rank(), part * (tp_rank() + 1)).copy_(local);
    tp_group_->AllReduceSum(full);
    out.push_back({parameters_[i].name, full});
  }
  return out;
}

Transformer::Transformer(const ModelConfig& config, std::uint64_t seed, CommGroup* tp_group)
    : tp_group_(tp_group), config_(config) {
  ValidateModelConfig(config_, "model config");
  ValidateTensorParallel(config_, tp_size());
  const ModelSpec& s = config_.shape;
  const std::int64_t hidden = s.hidden;
  const std::int64_t dim = config_.head_dim();
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  const at::TensorOptions fp32 = at::TensorOptions().dtype(at::kFloat);
  auto matrix = [&](std::int64_t rows, std::int64_t cols) {
    return at::normal(0.0, kInitStd, {rows, cols}, gen, fp32);
  };
  auto ones = [&]() { return at::ones({hidden}, fp32); };

  embed_ = Add("embed", matrix(s.vocab, hidden), Split::kReplicated);
  for (int i = 0; i < s.layers; ++i) {
    const std::string p = "layers." + std::to_string(i) + ".";
    Layer l;
    l.attn_norm = Add(p + "attn_norm", ones(), Split::kReplicated);
    l.wq = Add(p + "wq", matrix(s.heads * dim, hidden), Split::kRows);
    l.wk = Add(p + "wk", matrix(s.kv_heads * dim, hidden), Split::kRows);
    l.wv = Add(p + "wv", matrix(s.kv_heads * dim, hidden), Split::kRows);
    l.wo = Add(p + "wo", matrix(hidden, s.heads * dim), Split::kColumns);
    l.mlp_norm = Add(p + "mlp_norm", ones(), Split::kReplicated);
    l.w_gate = Add(p + "w_gate", matrix(s.ffn, hidden), Split::kRows);
    l.w_up = Add(p + "w_up", matrix(s.ffn, hidden), Split::kRows);
    l.w_down = Add(p + "w_down", matrix(hidden, s.ffn), Split::kColumns);
    layers_.push_back(std::move(l));
  }
  final_norm_ = Add("final_norm", ones(), Split::kReplicated);
  head_ =
      config_.tie_embeddings ? embed_ : Add("head", matrix(s.vocab, hidden), Split::kReplicated);
}

std::vector<at::Tensor> Transformer::parameters() const {
  std::vector<at::Tensor> out;
  out.reserve(parameters_.size());
  for (const auto& p : parameters_) out.push_back(p.value);
  return out;
}

at::Tensor Transformer::Forward(const PackedBatch& batch) const {
  ValidatePackedBatch(batch);  // O(documents); a bad cu_seqlens would read out of range.
  const ModelSpec& s = config_.shape;
  const std::int64_t tokens = batch.num_tokens();
  const std::int64_t dim = config_.head_dim();
  const at::Tensor positions = PositionsInDocuments(batch);
  at::Tensor x = embed_.index_select(0, batch.tokens);  // [tokens, hidden]
  // This rank's heads: contiguous blocks of q heads and of kv heads, so local q head j
  // still reads local kv head j / (heads / kv_heads), as in the full model.
  const std::int64_t heads = s.heads / tp_size();
  const std::int64_t kv_heads = s.kv_heads / tp_size();
  CommGroup* group = tp_group_ != nullptr && tp_size() > 1 ? tp_group_ : nullptr;
  auto f = [&](const at::Tensor& t) {
    return group == nullptr ? t : CopyToTensorParallel::apply(t, group);
  };
  auto g = [&](const at::Tensor& t) {
    return group == nullptr ? t : ReduceFromTensorParallel::apply(t, group);
  };
  for (const Layer& l : layers_) {
    at::Tensor h = f(RmsNorm(x, l.attn_norm, config_.norm_eps));
    at::Tensor q = Linear(h, l.wq).view({tokens, heads, dim});
    at::Tensor k = Linear(h, l.wk).view({tokens, kv_heads, dim});
    at::Tensor v = Linear(h, l.wv).view({tokens, kv_heads, dim});
    q = ApplyRotary(q, positions, config_.rope_theta);
    k = ApplyRotary(k, positions, config_.rope_theta);
    at::Tensor attn = PackedCausalAttention(q, k, v, batch.cu_seqlens);
    x = x + g(Linear(attn.reshape({tokens, heads * dim}), l.wo));
    h = f(RmsNorm(x, l.mlp_norm, config_.norm_eps));
    x = x + g(Linear(at::silu(Linear(h, l.w_gate)) * Linear(h, l.w_up), l.w_down));
  }
  return Linear(RmsNorm(x, final_norm_, config_.norm_eps), head_);
}

TokenLoss SummedTokenLoss(const at::Tensor& logits, const PackedBatch& batch) {
  const NextTokenTargets t = NextTokenTargetsOf(batch);
  const at::Tensor log_probs = at::log_softmax(logits.index_select(0, t.inputs), -1);
  TokenLoss loss;
  loss.sum = -log_probs.gather(1, t.targets.unsqueeze(1)).sum();
  loss.tokens = t.inputs.size(0);
  return loss;
}

}  // namespace hydraulis
