#include "hydraulis/runtime/model.h"

#include <ATen/CPUGeneratorImpl.h>

#include "hydraulis/runtime/attention.h"

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

}  // namespace

at::Tensor Transformer::Add(const std::string& name, at::Tensor value) {
  value.requires_grad_(true);
  parameters_.push_back({name, value});
  return value;
}

Transformer::Transformer(const ModelConfig& config, std::uint64_t seed) : config_(config) {
  ValidateModelConfig(config_, "model config");
  const ModelSpec& s = config_.shape;
  const std::int64_t hidden = s.hidden;
  const std::int64_t dim = config_.head_dim();
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  const at::TensorOptions fp32 = at::TensorOptions().dtype(at::kFloat);
  auto matrix = [&](std::int64_t rows, std::int64_t cols) {
    return at::normal(0.0, kInitStd, {rows, cols}, gen, fp32);
  };
  auto ones = [&]() { return at::ones({hidden}, fp32); };

  embed_ = Add("embed", matrix(s.vocab, hidden));
  for (int i = 0; i < s.layers; ++i) {
    const std::string p = "layers." + std::to_string(i) + ".";
    Layer l;
    l.attn_norm = Add(p + "attn_norm", ones());
    l.wq = Add(p + "wq", matrix(s.heads * dim, hidden));
    l.wk = Add(p + "wk", matrix(s.kv_heads * dim, hidden));
    l.wv = Add(p + "wv", matrix(s.kv_heads * dim, hidden));
    l.wo = Add(p + "wo", matrix(hidden, s.heads * dim));
    l.mlp_norm = Add(p + "mlp_norm", ones());
    l.w_gate = Add(p + "w_gate", matrix(s.ffn, hidden));
    l.w_up = Add(p + "w_up", matrix(s.ffn, hidden));
    l.w_down = Add(p + "w_down", matrix(hidden, s.ffn));
    layers_.push_back(std::move(l));
  }
  final_norm_ = Add("final_norm", ones());
  head_ = config_.tie_embeddings ? embed_ : Add("head", matrix(s.vocab, hidden));
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
  for (const Layer& l : layers_) {
    at::Tensor h = RmsNorm(x, l.attn_norm, config_.norm_eps);
    at::Tensor q = Linear(h, l.wq).view({tokens, s.heads, dim});
    at::Tensor k = Linear(h, l.wk).view({tokens, s.kv_heads, dim});
    at::Tensor v = Linear(h, l.wv).view({tokens, s.kv_heads, dim});
    q = ApplyRotary(q, positions, config_.rope_theta);
    k = ApplyRotary(k, positions, config_.rope_theta);
    at::Tensor attn = PackedCausalAttention(q, k, v, batch.cu_seqlens);
    x = x + Linear(attn.reshape({tokens, s.heads * dim}), l.wo);
    h = RmsNorm(x, l.mlp_norm, config_.norm_eps);
    x = x + Linear(at::silu(Linear(h, l.w_gate)) * Linear(h, l.w_up), l.w_down);
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
