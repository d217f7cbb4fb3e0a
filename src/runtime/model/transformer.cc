#include "hydraulis/runtime/model/transformer.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <memory>
#include <string>

#include "hydraulis/base/error.h"
#include "hydraulis/runtime/communication/comm_group.h"
#include "hydraulis/runtime/model/attention.h"
#include "hydraulis/runtime/model/rms_norm.h"
#include "recomputed.h"

namespace hydraulis {
namespace {

// Standard deviation of the initial weight matrices (GPT-2 / LLaMA reference init).
constexpr double kInitStd = 0.02;

// x [tokens, in] times a weight stored [out, in], as torch.nn.Linear without bias.
at::Tensor Linear(const at::Tensor& x, const at::Tensor& weight) {
  return at::matmul(x, weight.t());
}

// As torch.nn.Linear with `bias` when it is defined (one addmm), else Linear.
at::Tensor Linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  return bias.defined() ? at::addmm(bias, x, weight.t()) : Linear(x, weight);
}

// Qwen3's norm of each head's vector x [tokens, heads, dim] when `weight` is defined.
at::Tensor HeadNorm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  return weight.defined() ? RmsNorm(x, weight, eps) : x;
}

// A layer's parameter: biases start at zero (as torch.nn.Linear's are often set and
// transformers' Qwen2 initialises them), norms at one, matrices at N(0, kInitStd).
bool IsBias(const std::string& name) {
  return name.ends_with(".bq") || name.ends_with(".bk") || name.ends_with(".bv");
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

// x + g(Linear(y, weight)). Without tensor parallelism the sum is the product's accumulator
// (one addmm: no separate addition pass or temporary, and its gradient is the output's).
at::Tensor Residual(const at::Tensor& x, const at::Tensor& y, const at::Tensor& weight,
                    CommGroup* group) {
  if (group == nullptr) return at::addmm(x, y, weight.t());
  return x + ReduceFromTensorParallel::apply(Linear(y, weight), group);
}

void CheckLayerRange(const ModelPart& part, int layers) {
  if (part.first_layer < 0 || part.first_layer > part.end_layer || part.end_layer > layers) {
    throw InvalidInput("model part: layers [" + std::to_string(part.first_layer) + ", " +
                       std::to_string(part.end_layer) + ") out of range for " +
                       std::to_string(layers) + " layers");
  }
}

// Whether a rank with `part` holds (a shard of) `p`: only those are read from the initial
// weights.
bool Holds(const ModelPart& part, const ModelConfig& config, const FullParameter& p) {
  if (p.name == "embed") return part.has_embedding || (config.tie_embeddings && part.has_head);
  if (p.name == "final_norm" || p.name == "head") return part.has_head;
  const int layer = std::stoi(p.name.substr(7, p.name.find('.', 7) - 7));
  return layer >= part.first_layer && layer < part.end_layer;
}

void CheckPreviousStageHidden(const at::Tensor& hidden, std::int64_t tokens,
                              std::int64_t hidden_size) {
  if (!hidden.defined() || hidden.dim() != 2 || hidden.size(0) != tokens ||
      hidden.size(1) != hidden_size) {
    throw InvalidInput("ForwardStage: expected hidden states [" + std::to_string(tokens) + ", " +
                       std::to_string(hidden_size) + "] from the previous stage");
  }
}

// fn's one output; under selective recomputation its activations are not kept but
// computed again in the backward.
at::Tensor SelectivelyRecomputed(Recompute mode, const TensorFunction& fn,
                                 const std::vector<at::Tensor>& inputs) {
  return mode == Recompute::kSelective ? Recomputed(fn, inputs)[0] : fn(inputs)[0];
}

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

std::vector<FullParameter> FullParameters(const ModelConfig& config) {
  const ModelSpec& s = config.shape;
  const std::int64_t hidden = s.hidden;
  const std::int64_t dim = config.head_dim();
  std::vector<FullParameter> out;
  out.push_back({"embed", {s.vocab, hidden}, TensorSplit::kReplicated});
  for (int i = 0; i < s.layers; ++i) {
    const std::string p = "layers." + std::to_string(i) + ".";
    out.push_back({p + "attn_norm", {hidden}, TensorSplit::kReplicated});
    out.push_back({p + "wq", {s.heads * dim, hidden}, TensorSplit::kRows});
    out.push_back({p + "wk", {s.kv_heads * dim, hidden}, TensorSplit::kRows});
    out.push_back({p + "wv", {s.kv_heads * dim, hidden}, TensorSplit::kRows});
    out.push_back({p + "wo", {hidden, s.heads * dim}, TensorSplit::kColumns});
    if (config.qkv_bias()) {  // split as their projections' rows
      out.push_back({p + "bq", {s.heads * dim}, TensorSplit::kRows});
      out.push_back({p + "bk", {s.kv_heads * dim}, TensorSplit::kRows});
      out.push_back({p + "bv", {s.kv_heads * dim}, TensorSplit::kRows});
    }
    if (config.qk_norm()) {  // one weight for every head, so every tp rank holds it whole
      out.push_back({p + "q_norm", {dim}, TensorSplit::kReplicated});
      out.push_back({p + "k_norm", {dim}, TensorSplit::kReplicated});
    }
    out.push_back({p + "mlp_norm", {hidden}, TensorSplit::kReplicated});
    out.push_back({p + "w_gate", {s.ffn, hidden}, TensorSplit::kRows});
    out.push_back({p + "w_up", {s.ffn, hidden}, TensorSplit::kRows});
    out.push_back({p + "w_down", {hidden, s.ffn}, TensorSplit::kColumns});
  }
  out.push_back({"final_norm", {hidden}, TensorSplit::kReplicated});
  if (!config.tie_embeddings) out.push_back({"head", {s.vocab, hidden}, TensorSplit::kReplicated});
  return out;
}

ModelPart ModelPart::Stage(const ModelConfig& config, int stage, int pp) {
  const int layers = config.shape.layers;
  if (pp < 1 || pp > layers) {
    throw InvalidInput("pipeline parallelism: pp = " + std::to_string(pp) +
                       " must be in [1, layers = " + std::to_string(layers) + "]");
  }
  if (stage < 0 || stage >= pp) {
    throw InvalidInput("pipeline parallelism: stage " + std::to_string(stage) +
                       " out of range for pp = " + std::to_string(pp));
  }
  const int base = layers / pp;
  const int extra = layers % pp;
  ModelPart part;
  part.first_layer = stage * base + std::min(stage, extra);
  part.end_layer = part.first_layer + base + (stage < extra ? 1 : 0);
  part.has_embedding = stage == 0;
  part.has_head = stage == pp - 1;
  return part;
}

bool ModelPart::IsWhole(const ModelConfig& config) const {
  return first_layer == 0 && (end_layer < 0 || end_layer == config.shape.layers) && has_embedding &&
         has_head;
}

int Transformer::tp_size() const { return tp_group_ == nullptr ? 1 : tp_group_->size(); }
int Transformer::tp_rank() const { return tp_group_ == nullptr ? 0 : tp_group_->rank(); }

at::Tensor Transformer::Add(const std::string& name, const std::string& full_name,
                            const at::Tensor& value, TensorSplit split) {
  at::Tensor local = value;
  if (split != TensorSplit::kReplicated && tp_size() > 1) {
    const std::int64_t dim = split == TensorSplit::kRows ? 0 : 1;
    const std::int64_t part = value.size(dim) / tp_size();
    // A copy, not a view: the shard must not keep the full weight alive.
    local = value.slice(dim, part * tp_rank(), part * (tp_rank() + 1)).clone();
  }
  local = local.to(TorchDevice(compute_), ComputeDtype(compute_));
  local.requires_grad_(true);
  at::Tensor main_grad;
  // Empty until ZeroGradients sizes it: a model that only runs forward (eval of a 7B in
  // bf16) never holds 4 bytes per parameter of gradient.
  if (local.scalar_type() != at::kFloat)
    main_grad = at::empty({0}, local.options().dtype(at::kFloat));
  parameters_.push_back({name, local, full_name, split, main_grad});
  return local;
}

std::vector<NamedParameter> Transformer::GatherFullParameters() const {
  std::vector<NamedParameter> out;
  out.reserve(parameters_.size());
  for (const NamedParameter& p : parameters_) {
    // The full parameters are fp32 whatever the compute precision.
    const at::Tensor local = p.value.detach().to(at::kFloat);
    if (p.split == TensorSplit::kReplicated || tp_size() == 1) {
      out.push_back({p.name, local.clone(), p.full_name, p.split, at::Tensor()});
      continue;
    }
    // Each rank writes its shard into zeros and a sum assembles the whole; adding zeros is
    // exact, so this is a gather without a separate all-gather wrapper.
    const std::int64_t dim = p.split == TensorSplit::kRows ? 0 : 1;
    std::vector<std::int64_t> shape = local.sizes().vec();
    const std::int64_t part = shape[static_cast<std::size_t>(dim)];
    shape[static_cast<std::size_t>(dim)] = part * tp_size();
    at::Tensor full = at::zeros(shape, local.options());
    full.slice(dim, part * tp_rank(), part * (tp_rank() + 1)).copy_(local);
    tp_group_->AllReduceSum(full);
    out.push_back({p.name, full, p.full_name, p.split, at::Tensor()});
  }
  return out;
}

const at::Tensor& GradientOf(const NamedParameter& p) {
  return p.main_grad.defined() ? p.main_grad : p.value.grad();
}

at::TensorOptions Transformer::activation_options() const {
  return at::TensorOptions().device(TorchDevice(compute_)).dtype(ComputeDtype(compute_));
}

InitialWeights SeededWeights(const ModelConfig& config, std::uint64_t seed) {
  struct State {
    at::Generator gen;
    std::vector<FullParameter> order;
    std::size_t next = 0;  // index in `order` of the next draw
  };
  auto state = std::make_shared<State>(
      State{at::make_generator<at::CPUGeneratorImpl>(seed), FullParameters(config), 0});
  return [state](const FullParameter& p) {
    const at::TensorOptions fp32 = at::TensorOptions().dtype(at::kFloat);
    auto draw = [&](const FullParameter& q) {
      if (IsBias(q.name)) return at::zeros(q.shape, fp32);
      return q.shape.size() == 1 ? at::ones(q.shape, fp32)
                                 : at::normal(0.0, kInitStd, q.shape, state->gen, fp32);
    };
    while (state->next < state->order.size()) {
      const FullParameter& q = state->order[state->next++];
      at::Tensor v = draw(q);
      if (q.name == p.name) return v;
    }
    throw InternalError("SeededWeights: " + p.name + " asked for out of order");
  };
}

InitialWeights UninitializedWeights() {
  return [](const FullParameter& p) {
    return at::empty(p.shape, at::TensorOptions().dtype(at::kFloat));
  };
}

Transformer::Transformer(const ModelConfig& config, std::uint64_t seed, CommGroup* tp_group,
                         const ModelPart& part, const ComputeOptions& compute,
                         const InitialWeights& initial)
    : tp_group_(tp_group), part_(part), config_(config), compute_(compute) {
  ValidateModelConfig(config_, "model config");
  CheckComputeAvailable(compute_);
  ValidateTensorParallel(config_, tp_size());
  if (part_.end_layer < 0) part_.end_layer = config_.shape.layers;
  CheckLayerRange(part_, config_.shape.layers);
  const InitialWeights seeded = initial ? InitialWeights() : SeededWeights(config_, seed);
  auto value_of = [&](const FullParameter& p) {
    if (!Holds(part_, config_, p)) return at::Tensor();
    at::Tensor v = initial ? initial(p) : seeded(p);
    if (v.sizes().vec() != p.shape) {
      throw InvalidInput("initial weights: " + p.name + " has shape " + c10::str(v.sizes()) +
                         ", the model needs " + c10::str(at::IntArrayRef(p.shape)));
    }
    return v.to(at::kFloat).contiguous();
  };
  at::Tensor embed_value;
  for (const FullParameter& p : FullParameters(config_)) {
    const at::Tensor value = value_of(p);
    if (p.name == "embed") {
      embed_value = value;
      if (part_.has_embedding) embed_ = Add(p.name, p.name, value, p.split);
      continue;
    }
    if (p.name == "final_norm") {
      if (part_.has_head) final_norm_ = Add(p.name, p.name, value, p.split);
      continue;
    }
    if (p.name == "head") {
      if (part_.has_head) head_ = Add(p.name, p.name, value, p.split);
      continue;
    }
    // "layers.{i}.{field}"
    const std::size_t dot = p.name.find('.', 7);
    const int layer = std::stoi(p.name.substr(7, dot - 7));
    if (layer < part_.first_layer || layer >= part_.end_layer) continue;
    const std::size_t index = static_cast<std::size_t>(layer - part_.first_layer);
    if (layers_.size() <= index) layers_.resize(index + 1);
    Layer& l = layers_[index];
    const std::string field = p.name.substr(dot + 1);
    static const std::pair<const char*, at::Tensor Layer::*> kSlots[] = {
        {"attn_norm", &Layer::attn_norm},
        {"wq", &Layer::wq},
        {"wk", &Layer::wk},
        {"wv", &Layer::wv},
        {"wo", &Layer::wo},
        {"bq", &Layer::bq},
        {"bk", &Layer::bk},
        {"bv", &Layer::bv},
        {"q_norm", &Layer::q_norm},
        {"k_norm", &Layer::k_norm},
        {"mlp_norm", &Layer::mlp_norm},
        {"w_gate", &Layer::w_gate},
        {"w_up", &Layer::w_up},
        {"w_down", &Layer::w_down}};
    const auto slot = std::find_if(std::begin(kSlots), std::end(kSlots),
                                   [&](const auto& s) { return field == s.first; });
    if (slot == std::end(kSlots)) throw InternalError("Transformer: unknown parameter " + p.name);
    l.*(slot->second) = Add(p.name, p.name, value, p.split);
    if (layer_ends_.size() <= index) layer_ends_.resize(index + 1);
    layer_ends_[index] = parameters_.size();
  }
  if (config_.tie_embeddings && part_.has_head) {
    // Without the embedding on this stage the tied head is a copy of it, kept equal by the
    // optimizer (which sums both copies' gradients into its one parameter).
    head_ =
        part_.has_embedding ? embed_ : Add("head", "embed", embed_value, TensorSplit::kReplicated);
  }
}

std::vector<at::Tensor> Transformer::parameters() const {
  std::vector<at::Tensor> out;
  out.reserve(parameters_.size());
  for (const auto& p : parameters_) out.push_back(p.value);
  return out;
}

at::Tensor Transformer::Forward(const PackedBatch& batch) const {
  if (!part_.IsWhole(config_)) {
    throw InvalidInput(
        "Transformer::Forward: this rank holds one pipeline stage; use ForwardStage");
  }
  return ForwardStage(batch, at::Tensor());
}

at::Tensor Transformer::ForwardStage(const PackedBatch& batch, const at::Tensor& hidden) const {
  ValidatePackedBatch(batch);  // O(documents); a bad cu_seqlens would read out of range.
  const at::Tensor positions = layers_.empty() ? at::Tensor() : PositionsInDocuments(batch);
  // Made once per micro-batch for the flash kernel, which reads the boundaries on the GPU.
  const at::Tensor cu_seqlens =
      !layers_.empty() &&
              UsesFlashAttention(TorchDevice(compute_), ComputeDtype(compute_), config_.head_dim())
          ? CuSeqlensOnDevice(batch.cu_seqlens, TorchDevice(compute_))
          : at::Tensor();
  // By value: under recomputation the attention runs again in the backward, after this
  // call has returned.
  return RunStage(
      batch.tokens, positions, batch.num_tokens(),
      [offsets = batch.cu_seqlens, cu_seqlens](const at::Tensor& q, const at::Tensor& k,
                                               const at::Tensor& v) {
        return PackedCausalAttention(q, k, v, offsets, cu_seqlens);
      },
      hidden);
}

at::Tensor Transformer::ForwardStageContextParallel(const LocalTokens& tokens,
                                                    const ContextParallelRows& rows,
                                                    CommGroup& cp_group,
                                                    const at::Tensor& hidden) const {
  const std::int64_t storage = rows.local.storage_tokens();
  if (!tokens.tokens.defined() || tokens.tokens.dim() != 1 || tokens.tokens.size(0) != storage ||
      !tokens.positions.defined() || tokens.positions.sizes() != tokens.tokens.sizes()) {
    throw InvalidInput("ForwardStageContextParallel: the local tokens and positions must be [" +
                       std::to_string(storage) +
                       "] (the storage rows of the attention rows' layout)");
  }
  // By value, as in ForwardStage (the group outlives the backward, as the model does).
  return RunStage(
      tokens.tokens, tokens.positions, storage,
      [held = std::make_shared<const ContextParallelRows>(rows), group = &cp_group](
          const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
        return ContextParallelAttention(q, k, v, *held, *group);
      },
      hidden);
}

at::Tensor Transformer::RunStage(const at::Tensor& token_ids, const at::Tensor& positions,
                                 std::int64_t tokens, const Attention& attend,
                                 const at::Tensor& hidden) const {
  const ModelSpec& s = config_.shape;
  const std::int64_t dim = config_.head_dim();
  at::Tensor x;
  auto fetch = [&](std::size_t end) {
    if (fetch_) fetch_(end);
  };
  if (part_.has_embedding) {
    fetch(1);                               // the embedding is parameter 0
    x = embed_.index_select(0, token_ids);  // [tokens, hidden]
  } else {
    CheckPreviousStageHidden(hidden, tokens, s.hidden);
    x = hidden;
  }
  // This rank's heads: contiguous blocks of q heads and of kv heads, so local q head j
  // still reads local kv head j / (heads / kv_heads), as in the full model.
  const std::int64_t heads = s.heads / tp_size();
  const std::int64_t kv_heads = s.kv_heads / tp_size();
  CommGroup* group = tp_group_ != nullptr && tp_size() > 1 ? tp_group_ : nullptr;
  const RotaryTable rotary =
      layers_.empty() ? RotaryTable{}
                      : MakeRotaryTable(positions, dim, config_.rope_theta, ComputeDtype(compute_));
  const Recompute mode = compute_.recompute;
  const double eps = config_.norm_eps;
  // One layer from its input. Everything is captured by value: under full recomputation
  // the layer runs again in the backward, after this call has returned.
  auto layer = [=](const Layer& l, const at::Tensor& input) {
    auto f = [group](const at::Tensor& t) {
      return group == nullptr ? t : CopyToTensorParallel::apply(t, group);
    };
    at::Tensor h = f(RmsNorm(input, l.attn_norm, eps));
    // A head norm's weight is shared by every head, and each tp rank normalises only its
    // own heads: f sums the weight's gradient over the ranks, as for a replicated input.
    auto shared = [&](const at::Tensor& w) { return w.defined() ? f(w) : w; };
    at::Tensor q = ApplyRotary(
        HeadNorm(Linear(h, l.wq, l.bq).view({tokens, heads, dim}), shared(l.q_norm), eps), rotary);
    at::Tensor k = ApplyRotary(
        HeadNorm(Linear(h, l.wk, l.bk).view({tokens, kv_heads, dim}), shared(l.k_norm), eps),
        rotary);
    at::Tensor v = Linear(h, l.wv, l.bv).view({tokens, kv_heads, dim});
    const at::Tensor attn =
        SelectivelyRecomputed(mode,
                              [attend](const std::vector<at::Tensor>& in) {
                                return std::vector<at::Tensor>{attend(in[0], in[1], in[2])};
                              },
                              {q, k, v});
    const at::Tensor mid = Residual(input, attn.reshape({tokens, heads * dim}), l.wo, group);
    h = f(RmsNorm(mid, l.mlp_norm, eps));
    const at::Tensor gate = Linear(h, l.w_gate), up = Linear(h, l.w_up);
    const at::Tensor act =
        SelectivelyRecomputed(mode,
                              [](const std::vector<at::Tensor>& in) {
                                return std::vector<at::Tensor>{at::silu(in[0]) * in[1]};
                              },
                              {gate, up});
    return Residual(mid, act, l.w_down, group);
  };
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    fetch(layer_ends_[i]);
    if (mode == Recompute::kFull) {
      x = Recomputed(
          [layer, l = layers_[i]](const std::vector<at::Tensor>& in) {
            return std::vector<at::Tensor>{layer(l, in[0])};
          },
          {x})[0];
    } else {
      x = layer(layers_[i], x);
    }
  }
  if (!part_.has_head) return x;
  fetch(parameters_.size());
  return Linear(RmsNorm(x, final_norm_, config_.norm_eps), head_);
}

TokenLoss SummedTokenLoss(const at::Tensor& logits, const PackedBatch& batch) {
  return SummedTokenLoss(logits, NextTokenTargetsOf(batch));
}

TokenLoss SummedTokenLoss(const at::Tensor& logits, const NextTokenTargets& t) {
  // In fp32 whatever the compute precision: a bf16 log-softmax over a large vocabulary
  // loses the small probabilities the loss is made of.
  const at::Tensor log_probs = at::log_softmax(logits.index_select(0, t.inputs).to(at::kFloat), -1);
  TokenLoss loss;
  loss.sum = -log_probs.gather(1, t.targets.unsqueeze(1)).sum();
  loss.tokens = t.inputs.size(0);
  return loss;
}

}  // namespace hydraulis
