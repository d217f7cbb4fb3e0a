#include "hydraulis/runtime/sharded_optimizer.h"

#include <ATen/core/grad_mode.h>

#include <cmath>
#include <string>

#include "hydraulis/base/error.h"
#include "hydraulis/runtime/distributed.h"

namespace hydraulis {

const FlatParameter& FlatLayout::Find(const std::string& name) const {
  for (const FlatParameter& p : parameters) {
    if (p.parameter.name == name) return p;
  }
  throw InternalError("flat layout: no parameter '" + name + "'");
}

FlatLayout MakeFlatLayout(const ModelConfig& config) {
  FlatLayout layout;
  for (const FullParameter& p : FullParameters(config)) {
    std::int64_t numel = 1;
    for (std::int64_t d : p.shape) numel *= d;
    layout.parameters.push_back({p, layout.numel, numel});
    layout.numel += numel;
  }
  return layout;
}

at::Tensor RegionOf(const at::Tensor& full, const FlatLayout& layout, const NamedParameter& p,
                    int tp_size, int tp_rank) {
  const FlatParameter& f = layout.Find(p.full_name);
  at::Tensor region = full.slice(0, f.offset, f.offset + f.numel).view(f.parameter.shape);
  if (p.split == TensorSplit::kReplicated || tp_size == 1) return region;
  const std::int64_t dim = p.split == TensorSplit::kRows ? 0 : 1;
  const std::int64_t part = region.size(dim) / tp_size;
  return region.slice(dim, part * tp_rank, part * (tp_rank + 1));
}

void AdamWUpdate(const at::Tensor& param, const at::Tensor& grad, const at::Tensor& exp_avg,
                 const at::Tensor& exp_avg_sq, std::int64_t step, const AdamWOptions& o) {
  // The statement order and scalar arithmetic of torch/csrc/api/src/optim/adamw.cpp, so the
  // update is bit-identical to torch::optim::AdamW's.
  at::Tensor p = param;
  if (o.weight_decay != 0) p.mul_(1 - o.lr * o.weight_decay);
  const double bias_correction1 = 1 - std::pow(o.beta1, static_cast<double>(step));
  const double bias_correction2 = 1 - std::pow(o.beta2, static_cast<double>(step));
  exp_avg.mul_(o.beta1).add_(grad, 1 - o.beta1);
  exp_avg_sq.mul_(o.beta2).addcmul_(grad, grad, 1 - o.beta2);
  const at::Tensor denom = (exp_avg_sq.sqrt() / std::sqrt(bias_correction2)).add_(o.eps);
  const double step_size = o.lr / bias_correction1;
  p.addcdiv_(exp_avg, denom, -step_size);
}

ShardedAdamW::ShardedAdamW(const Transformer& initial, CommGroup& world,
                           const AdamWOptions& options, at::Device device)
    : world_(world), options_(options), layout_(MakeFlatLayout(initial.config())) {
  ValidateAdamWOptions(options_);
  if (!initial.part().IsWhole(initial.config()) || initial.tp_size() != 1) {
    throw InternalError("ShardedAdamW: the initial model must be the whole single-process model");
  }
  const std::int64_t ranks = world_.size();
  shard_numel_ = (layout_.numel + ranks - 1) / ranks;
  const at::TensorOptions fp32 = at::TensorOptions().dtype(at::kFloat).device(device);
  full_ = at::zeros({shard_numel_ * ranks}, fp32);
  grad_ = at::zeros({shard_numel_ * ranks}, fp32);
  for (const NamedParameter& p : initial.named_parameters()) {
    RegionOf(full_, layout_, p, 1, 0).copy_(p.value.detach());
  }
  grad_shard_ = at::zeros({shard_numel_}, fp32);
  exp_avg_ = at::zeros({shard_numel_}, fp32);
  exp_avg_sq_ = at::zeros({shard_numel_}, fp32);
}

at::Tensor ShardedAdamW::Shard(const at::Tensor& padded) const {
  const std::int64_t first = shard_numel_ * world_.rank();
  return padded.slice(0, first, first + shard_numel_);
}

void ShardedAdamW::Materialise(const Transformer& model) const {
  at::NoGradGuard no_grad;
  for (const NamedParameter& p : model.named_parameters()) {
    p.value.copy_(RegionOf(full_, layout_, p, model.tp_size(), model.tp_rank()));
  }
}

void ShardedAdamW::Step(const Transformer* model) {
  at::NoGradGuard no_grad;
  grad_.zero_();
  if (model != nullptr) {
    for (const NamedParameter& p : model->named_parameters()) {
      // The tp copies of a replicated parameter carry the same gradient: count it once.
      if (p.split == TensorSplit::kReplicated && model->tp_rank() != 0) continue;
      const at::Tensor& grad = GradientOf(p);
      if (!grad.defined()) {
        throw InternalError("ShardedAdamW: parameter '" + p.name + "' has no gradient");
      }
      RegionOf(grad_, layout_, p, model->tp_size(), model->tp_rank()).add_(grad);
    }
  }
  // Each rank receives only the sum of its own shard (a real reduce-scatter on Gloo and
  // NCCL since PyTorch 2.x; libtorch 1.13's Gloo needed an all-reduce here).
  world_.ReduceScatterSum(grad_, grad_shard_);
  ++steps_;
  const at::Tensor master = Shard(full_).clone();
  AdamWUpdate(master, grad_shard_, exp_avg_, exp_avg_sq_, steps_, options_);
  world_.AllGather(master, full_);
}

ShardedAdamW::ShardState ShardedAdamW::shard_state() const {
  return {Shard(full_).clone(), exp_avg_.clone(), exp_avg_sq_.clone(), steps_};
}

void ShardedAdamW::LoadFullState(const at::Tensor& master, const at::Tensor& exp_avg,
                                 const at::Tensor& exp_avg_sq, std::int64_t steps) {
  const char* names[] = {"master weights", "exp_avg", "exp_avg_sq"};
  const at::Tensor* tensors[] = {&master, &exp_avg, &exp_avg_sq};
  for (int i = 0; i < 3; ++i) {
    const at::Tensor& t = *tensors[i];
    if (!t.defined() || t.numel() != layout_.numel) {
      throw InvalidInput(std::string("optimizer state: ") + names[i] + ": expected " +
                         std::to_string(layout_.numel) + " elements, got " +
                         std::to_string(t.defined() ? t.numel() : 0));
    }
  }
  if (steps < 0) throw InvalidInput("optimizer state: negative step count");
  at::NoGradGuard no_grad;
  auto padded = [&](const at::Tensor& t) {
    at::Tensor out = at::zeros({full_.numel()}, full_.options());
    out.slice(0, 0, layout_.numel).copy_(t.reshape({-1}));
    return out;
  };
  full_.copy_(padded(master));
  exp_avg_.copy_(Shard(padded(exp_avg)));
  exp_avg_sq_.copy_(Shard(padded(exp_avg_sq)));
  steps_ = steps;
}

}  // namespace hydraulis
