#include "hydraulis/runtime/step/sharded_optimizer.h"

#include <ATen/core/grad_mode.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <string>

#include "hydraulis/base/elapsed.h"
#include "hydraulis/base/error.h"
#include "hydraulis/runtime/communication/comm_group.h"

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

namespace {

// The whole model's parameters of `model` as a source, in FullParameters' order.
InitialWeights WeightsOf(const Transformer& model) {
  if (!model.part().IsWhole(model.config()) || model.tp_size() != 1) {
    throw InternalError("ShardedAdamW: the initial model must be the whole single-process model");
  }
  return [&model](const FullParameter& p) {
    for (const NamedParameter& n : model.named_parameters()) {
      if (n.name == p.name) return n.value.detach();
    }
    throw InternalError("ShardedAdamW: the initial model has no " + p.name);
  };
}

// The shard ranges of `rank` that hold one-dimensional parameters: each such parameter's
// elements intersected with the rank's piece of every bucket they touch.
std::vector<std::pair<std::int64_t, std::int64_t>> NoDecayRanges(const FlatLayout& layout,
                                                                 const OptimizerShardLayout& shards,
                                                                 int rank) {
  std::vector<std::pair<std::int64_t, std::int64_t>> out;
  for (const FlatParameter& f : layout.parameters) {
    if (f.parameter.shape.size() != 1 || f.numel == 0) continue;
    const int first = shards.BucketOf(f.offset);
    const int last = shards.BucketOf(f.offset + f.numel - 1);
    for (int k = first; k <= last; ++k) {
      const ShardBucket& b = shards.buckets[static_cast<std::size_t>(k)];
      const std::int64_t piece_begin = b.offset + rank * b.piece;
      const std::int64_t begin = std::max(f.offset, piece_begin);
      const std::int64_t end = std::min(f.offset + f.numel, piece_begin + b.piece);
      if (begin >= end) continue;
      const std::int64_t shard_begin = b.shard_offset + (begin - piece_begin);
      const std::int64_t shard_end = shard_begin + (end - begin);
      if (!out.empty() && out.back().second == shard_begin) {
        out.back().second = shard_end;
      } else {
        out.emplace_back(shard_begin, shard_end);
      }
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

void ShardedAdamW::set_lr(double lr) {
  if (!(lr >= 0.0) || !std::isfinite(lr)) {
    throw InvalidInput("learning rate: must be a finite number >= 0, got " + std::to_string(lr));
  }
  options_.lr = lr;
}

ShardedAdamW::ShardedAdamW(const Transformer& initial, CommGroup& world,
                           const AdamWOptions& options, at::Device device,
                           std::int64_t bucket_elements)
    : ShardedAdamW(initial.config(), WeightsOf(initial), world, options, device, bucket_elements) {}

ShardedAdamW::ShardedAdamW(const ModelConfig& config, const InitialWeights& initial,
                           CommGroup& world, const AdamWOptions& options, at::Device device,
                           std::int64_t bucket_elements)
    : world_(world), options_(options), base_lr_(options.lr), layout_(MakeFlatLayout(config)) {
  ValidateAdamWOptions(options_);
  shards_ = MakeOptimizerShardLayout(layout_.numel, world_.size(), bucket_elements);
  no_decay_ = NoDecayRanges(layout_, shards_, world_.rank());
  const at::TensorOptions fp32 = at::TensorOptions().dtype(at::kFloat).device(device);
  full_ = at::zeros({shards_.padded_numel}, fp32);
  grad_ = at::zeros({shards_.padded_numel}, fp32);
  // One rank owns every piece, in place: its shard is the buffer itself, and summing over
  // one rank is nothing to do (so a single rank holds no second gradient vector).
  grad_shard_ = world_.size() == 1 ? grad_ : at::zeros({shards_.shard_numel}, fp32);
  at::NoGradGuard no_grad;
  for (const FlatParameter& f : layout_.parameters) {
    const at::Tensor v = initial(f.parameter);
    if (v.sizes().vec() != f.parameter.shape) {
      throw InvalidInput("initial weights: " + f.parameter.name + " has shape " +
                         c10::str(v.sizes()) + ", the model needs " +
                         c10::str(at::IntArrayRef(f.parameter.shape)));
    }
    full_.slice(0, f.offset, f.offset + f.numel).view(f.parameter.shape).copy_(v);
  }
  exp_avg_ = at::zeros({shards_.shard_numel}, fp32);
  exp_avg_sq_ = at::zeros({shards_.shard_numel}, fp32);
}

std::pair<int, int> ShardedAdamW::BucketsOf(const FlatParameter& flat) const {
  return {shards_.BucketOf(flat.offset), shards_.BucketOf(flat.offset + flat.numel - 1)};
}

void ShardedAdamW::Materialise(const Transformer& model) const {
  at::NoGradGuard no_grad;
  WaitAllGathers();
  for (const NamedParameter& p : model.named_parameters()) {
    p.value.copy_(RegionOf(full_, layout_, p, model.tp_size(), model.tp_rank()));
  }
}

void ShardedAdamW::WaitGathers(int first, int last) const {
  for (int k = std::max(first, 0); k <= last && k < static_cast<int>(gathers_.size()); ++k) {
    std::unique_ptr<CommWork>& work = gathers_[static_cast<std::size_t>(k)];
    if (!work) continue;
    const auto start = std::chrono::steady_clock::now();
    auto done = std::move(work);
    done->Wait();
    gather_wait_ms_ +=
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  }
}

void ShardedAdamW::WaitAllGathers() const { WaitGathers(0, static_cast<int>(gathers_.size()) - 1); }

void ShardedAdamW::BeginMaterialise(Transformer& model) {
  materialised_ = 0;
  model.set_parameter_fetch([this, &model](std::size_t end) { MaterialiseThrough(model, end); });
}

void ShardedAdamW::FinishMaterialise(Transformer& model) {
  MaterialiseThrough(model, model.named_parameters().size());
  model.set_parameter_fetch(nullptr);
}

void ShardedAdamW::MaterialiseThrough(const Transformer& model, std::size_t end) {
  const ElapsedInto timed(stats_.materialise_ms);
  at::NoGradGuard no_grad;
  const auto& params = model.named_parameters();
  for (; materialised_ < std::min(end, params.size()); ++materialised_) {
    const NamedParameter& p = params[materialised_];
    const auto [first, last] = BucketsOf(layout_.Find(p.full_name));
    WaitGathers(first, last);
    p.value.copy_(RegionOf(full_, layout_, p, model.tp_size(), model.tp_rank()));
  }
}

namespace {

// Local parameters that count towards the reduction: the tp copies of a replicated
// parameter carry the same gradient, so only tp rank 0's counts.
bool Contributes(const Transformer& model, const NamedParameter& p) {
  return p.split != TensorSplit::kReplicated || model.tp_rank() == 0;
}

// Elements per piece of the optimizer's whole-shard work with temporaries (the gradient
// norm's double copy and square, the reference AdamW's): 4 MiB of fp32 on the CPU, so they
// stay small however large the shard is; 64 MiB on a GPU, where each piece costs a few
// kernel launches (a 1B-parameter shard: 60 pieces, not 1,000).
std::int64_t WorkChunk(const at::Tensor& t) {
  return t.is_cuda() ? std::int64_t{1} << 24 : std::int64_t{1} << 20;
}

// Without BeginStep's hooks: every contributing parameter's accumulated gradient, added
// into its region of `grad`.
void CollectGradients(const Transformer& model, const FlatLayout& layout, at::Tensor& grad) {
  for (const NamedParameter& p : model.named_parameters()) {
    if (!Contributes(model, p)) continue;
    const at::Tensor& g = GradientOf(p);
    if (!g.defined()) {
      throw InternalError("ShardedAdamW: parameter '" + p.name + "' has no gradient");
    }
    RegionOf(grad, layout, p, model.tp_size(), model.tp_rank()).add_(g);
  }
}

// The squared norm of `shard`, on the CPU. Summed in double chunk by chunk: a double copy
// of the whole shard would cost 8 (and its square another 8) bytes per parameter at the
// step's peak.
at::Tensor SquaredNorm(const at::Tensor& shard) {
  const std::int64_t chunk_numel = WorkChunk(shard);
  at::Tensor norm_sq = at::zeros({1}, shard.options().dtype(at::kDouble));
  for (std::int64_t begin = 0; begin < shard.numel(); begin += chunk_numel) {
    const at::Tensor chunk = shard.slice(0, begin, std::min(begin + chunk_numel, shard.numel()));
    norm_sq.add_(chunk.to(at::kDouble).square().sum());
  }
  return norm_sq.cpu();
}

// One AdamW step on elements [0, n) of `state`'s tensors (updated in place) with `grad`.
// The fused kernel in one call (no temporaries); the reference chunk by chunk, so its
// temporaries stay small. The update is elementwise: the values are the same as in one
// piece. `full` is the full vector, whose device picks the kernel and the chunk.
void UpdateShard(const ShardedAdamW::ShardState& state, const at::Tensor& grad, std::int64_t n,
                 const at::Tensor& full, const AdamWOptions& options,
                 const std::vector<std::pair<std::int64_t, std::int64_t>>& no_decay_ranges) {
  const AdamWKernel kernel = DefaultAdamWKernel(full.device());
  const std::int64_t piece =
      kernel == AdamWKernel::kFused ? std::max<std::int64_t>(n, 1) : WorkChunk(full);
  // Weight decay skips the no-decay ranges: the shard is updated in segments, with or
  // without decay, each in pieces (the update is elementwise, so segments change nothing
  // else).
  AdamWOptions no_decay = options;
  no_decay.weight_decay = 0;
  auto update = [&](std::int64_t first, std::int64_t last, const AdamWOptions& o) {
    for (std::int64_t begin = first; begin < last; begin += piece) {
      const std::int64_t end = std::min(begin + piece, last);
      AdamWUpdate(state.master.slice(0, begin, end), grad.slice(0, begin, end),
                  state.exp_avg.slice(0, begin, end), state.exp_avg_sq.slice(0, begin, end),
                  state.steps, o, kernel);
    }
  };
  if (options.weight_decay == 0 || no_decay_ranges.empty()) {
    update(0, n, options);
  } else {
    std::int64_t at = 0;
    for (const auto& [begin, end] : no_decay_ranges) {
      update(at, begin, options);
      update(begin, end, no_decay);
      at = end;
    }
    update(at, n, options);
  }
}

}  // namespace

namespace {

// Runs after autograd accumulated a backward pass's gradient (all uses of the parameter
// summed) into the parameter's .grad: a tensor has one such hook, the optimizer's.
class AfterAccumulation final : public torch::autograd::PostAccumulateGradHook {
 public:
  explicit AfterAccumulation(std::function<void()> run) : run_(std::move(run)) {}
  void operator()(const torch::autograd::Variable& /*tensor*/) override { run_(); }

 private:
  std::function<void()> run_;
};

}  // namespace

void ShardedAdamW::Attach(const Transformer& model) {
  for (const Transformer* m : attached_) {
    if (m == &model) return;
  }
  attached_.push_back(&model);
  const auto& params = model.named_parameters();
  for (std::size_t i = 0; i < params.size(); ++i) {
    if (torch::autograd::impl::post_acc_grad_hooks(params[i].value) != nullptr) {
      throw InternalError("ShardedAdamW: parameter '" + params[i].name +
                          "' already has a post-accumulate hook (another optimizer?)");
    }
    // After accumulation rather than before, so the hook can take the gradient out of .grad:
    // a pre-hook sees it first, but autograd then still keeps it (2 bytes per parameter in
    // bf16, 4 in fp32) beside the fp32 reduction buffer that already holds it.
    torch::autograd::impl::set_post_acc_grad_hooks(
        params[i].value,
        std::make_unique<AfterAccumulation>([this, &model, i] { OnGradient(model, i); }));
  }
}

void ShardedAdamW::BeginStep(const Transformer* model, int micro_batches) {
  at::NoGradGuard no_grad;
  if (model != nullptr) Attach(*model);
  grad_.zero_();
  pending_.clear();
  begun_ = true;
  stats_ = OverlapStats{};
  const int buckets = static_cast<int>(shards_.buckets.size());
  stats_.buckets = buckets;
  waiting_.assign(static_cast<std::size_t>(buckets), 0);
  calls_.clear();
  active_ = micro_batches > 0 ? model : nullptr;
  micro_batches_ = micro_batches;
  if (active_ != nullptr) {
    calls_.assign(active_->named_parameters().size(), 0);
    for (const NamedParameter& p : active_->named_parameters()) {
      // A gradient left by a backward pass run outside a step would be added to this one's.
      p.value.mutable_grad().reset();
      if (!Contributes(*active_, p)) continue;
      // The parameter's whole flat range: a tp shard covers a subset, so this may wait for
      // a bucket it does not touch, never start one too early.
      const auto [first, last] = BucketsOf(layout_.Find(p.full_name));
      for (int k = first; k <= last; ++k) ++waiting_[static_cast<std::size_t>(k)];
    }
  }
  next_bucket_ = buckets - 1;
  IssueReadyBuckets();
}

void ShardedAdamW::OnGradient(const Transformer& model, std::size_t index) {
  if (&model != active_) return;  // not collecting: .grad accumulates as autograd's default
  const ElapsedInto timed(stats_.grad_collect_ms);
  const NamedParameter& p = model.named_parameters()[index];
  at::Tensor& grad = p.value.mutable_grad();
  // Taken out of .grad (freed once the add is done): this pass's gradient exists only
  // between autograd's accumulation and this hook, never a whole parameter set at once.
  const at::Tensor taken = std::move(grad);
  grad.reset();
  if (!Contributes(model, p)) return;
  at::NoGradGuard no_grad;
  RegionOf(grad_, layout_, p, model.tp_size(), model.tp_rank()).add_(taken);
  if (++calls_[index] != micro_batches_) return;
  const auto [first, last] = BucketsOf(layout_.Find(p.full_name));
  for (int k = first; k <= last; ++k) --waiting_[static_cast<std::size_t>(k)];
  IssueReadyBuckets();
}

void ShardedAdamW::IssueReadyBuckets() {
  while (next_bucket_ >= 0 && waiting_[static_cast<std::size_t>(next_bucket_)] == 0) {
    // Hidden behind this rank's own computation when a gradient of a lower bucket is still
    // to come from backward.
    if (std::any_of(waiting_.begin(), waiting_.begin() + next_bucket_,
                    [](int w) { return w > 0; })) {
      ++stats_.buckets_started_in_backward;
    }
    const ShardBucket& b = shards_.buckets[static_cast<std::size_t>(next_bucket_)];
    if (world_.size() > 1) {
      pending_.push_back(world_.ReduceScatterSumAsync(
          grad_.slice(0, b.offset, b.offset + b.numel),
          grad_shard_.slice(0, b.shard_offset, b.shard_offset + b.piece)));
    }
    --next_bucket_;
  }
}

ShardedAdamW::StepOutcome ShardedAdamW::Step(const Transformer* model, bool apply) {
  at::NoGradGuard no_grad;
  if (!begun_) {
    // No BeginStep: collect the accumulated gradients now, then reduce every shard.
    grad_.zero_();
    if (model != nullptr) CollectGradients(*model, layout_, grad_);
    pending_.clear();
    stats_ = OverlapStats{};
    stats_.buckets = static_cast<int>(shards_.buckets.size());
    next_bucket_ = stats_.buckets - 1;
  }
  // Every backward pass has run: every bucket is final (a parameter that missed a hook
  // would change nothing, its gradients were collected as they came).
  waiting_.assign(shards_.buckets.size(), 0);
  IssueReadyBuckets();
  begun_ = false;
  // The update reads and writes the full vector: the last step's gathers must be in.
  WaitAllGathers();
  stats_.param_gather_wait_ms = gather_wait_ms_;
  gather_wait_ms_ = 0;
  active_ = nullptr;
  const auto wait_start = std::chrono::steady_clock::now();
  for (auto& work : pending_) work->Wait();
  stats_.reduce_wait_ms = MsSince(wait_start);
  pending_.clear();
  const ElapsedInto timed(stats_.update_ms);
  // This rank's pieces of the sum are in grad_shard_. One small collective gives every rank
  // the global norm, so all of them decide alike.
  at::Tensor norm_sq = SquaredNorm(grad_shard_);
  world_.AllReduceSum(norm_sq);
  StepOutcome outcome;
  outcome.grad_norm = std::sqrt(norm_sq.item<double>());
  if (!apply || !std::isfinite(outcome.grad_norm)) return outcome;
  ++steps_;
  if (options_.clip_grad > 0) {
    // Megatron's rule (and torch's clip_grad_norm_): scale only when the norm is above.
    const double coefficient = options_.clip_grad / (outcome.grad_norm + 1e-6);
    if (coefficient < 1.0) grad_shard_.mul_(coefficient);
  }
  // One rank updates the full vector in place (its shard); more update a copy of their
  // pieces, which the all-gathers then write back into every rank's full vector.
  const bool alone = world_.size() == 1;
  const at::Tensor master = alone ? full_ : shards_.Shard(full_, world_.rank());
  const ShardState state{master, exp_avg_, exp_avg_sq_, steps_};
  UpdateShard(state, grad_shard_, shards_.shard_numel, full_, options_, no_decay_);
  if (!alone) {
    // In bucket order, the order the next forward pass reads them (embedding first); each
    // keeps its piece of `master` alive until done.
    gathers_.clear();
    for (const ShardBucket& b : shards_.buckets) {
      gathers_.push_back(
          world_.AllGatherAsync(master.slice(0, b.shard_offset, b.shard_offset + b.piece),
                                full_.slice(0, b.offset, b.offset + b.numel)));
    }
  }
  outcome.applied = true;
  return outcome;
}

ShardedAdamW::ShardState ShardedAdamW::shard_state() const {
  WaitAllGathers();
  return {shards_.Shard(full_, world_.rank()), exp_avg_.clone(), exp_avg_sq_.clone(), steps_};
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
  WaitAllGathers();
  auto padded = [&](const at::Tensor& t) {
    at::Tensor out = at::zeros({full_.numel()}, full_.options());
    out.slice(0, 0, layout_.numel).copy_(t.reshape({-1}));
    return out;
  };
  full_.copy_(padded(master));
  exp_avg_.copy_(shards_.Shard(padded(exp_avg), world_.rank()));
  exp_avg_sq_.copy_(shards_.Shard(padded(exp_avg_sq), world_.rank()));
  steps_ = steps;
}

}  // namespace hydraulis
