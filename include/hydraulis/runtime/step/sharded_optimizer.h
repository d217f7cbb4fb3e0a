// The optimizer layout of the disaggregated design (method.md 2.2): fp32 master weights and
// AdamW state live in one fixed layout, the single-process model's parameters flattened in
// their fixed order (FullParameters) and sharded over the world's ranks in buckets
// (shard_layout.h), whatever compute strategy runs the step. Each step:
//   1. Materialise: copy this rank's compute parameters (its pipeline stage and tp shard,
//      any strategy) out of the full parameter vector every rank holds.
//   2. Reduce: every rank adds the gradients it owns into a zero full-size buffer (a tp
//      shard into its slice; a tp-replicated parameter from tp rank 0 only, since its tp
//      copies carry the same gradient; both copies of a tied embedding add up), and one
//      asynchronous reduce-scatter per bucket sums each bucket's pieces into their owners,
//      started during backward as soon as the bucket's gradients are final (Attach/BeginStep).
//   3. AdamW on this rank's pieces, then one asynchronous all-gather per bucket rebuilds the
//      full vector while the next step begins: the next step's materialisation waits for a
//      bucket only when forward first reads a parameter in it (BeginMaterialise).
// Switching strategy between steps therefore moves no optimizer state. The bytes each rank
// moves per step do not depend on the strategy: docs/runtime.md.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "hydraulis/runtime/communication/comm_group.h"
#include "hydraulis/runtime/model/transformer.h"
#include "hydraulis/runtime/step/adamw.h"
#include "hydraulis/runtime/step/shard_layout.h"

namespace hydraulis {

// Where each single-process parameter sits in the flat vector.
struct FlatParameter {
  FullParameter parameter;
  std::int64_t offset = 0;  // first element
  std::int64_t numel = 0;
};
struct FlatLayout {
  std::vector<FlatParameter> parameters;  // in FullParameters order
  std::int64_t numel = 0;                 // sum of the parameters' sizes

  // InternalError when `name` is not a parameter of the model.
  const FlatParameter& Find(const std::string& name) const;
};
FlatLayout MakeFlatLayout(const ModelConfig& config);

// The view of `full` ([layout.numel] or longer, contiguous) that compute parameter `p` of a
// model with tp degree `tp_size` and tp rank `tp_rank` corresponds to.
at::Tensor RegionOf(const at::Tensor& full, const FlatLayout& layout, const NamedParameter& p,
                    int tp_size, int tp_rank);

class ShardedAdamW {
 public:
  // Master weights from `initial` (the whole model, e.g. Transformer(config, seed)), sharded
  // over `world` (which must outlive this) in buckets of `bucket_elements` (shard_layout.h).
  // InvalidInput on out-of-range options. The fp32 vectors (full parameters, gradient
  // buffer, moments) live on `device`, the compute device of this rank.
  ShardedAdamW(const Transformer& initial, CommGroup& world, const AdamWOptions& options,
               at::Device device = at::Device(at::kCPU),
               std::int64_t bucket_elements = kDefaultBucketElements);
  // The same from a source of the whole model's weights (SeededWeights, HfInitialWeights),
  // each copied into the master weights as it is read: no other full copy is ever held.
  // InvalidInput when a value has another shape than the parameter.
  ShardedAdamW(const ModelConfig& config, const InitialWeights& initial, CommGroup& world,
               const AdamWOptions& options, at::Device device = at::Device(at::kCPU),
               std::int64_t bucket_elements = kDefaultBucketElements);

  // Copies this rank's compute parameters of `model` (any part, any tp) from the current
  // full parameters. Not a collective.
  void Materialise(const Transformer& model) const;
  // The same, overlapped with the last step's parameter all-gathers: BeginMaterialise
  // installs a parameter fetch on `model` (Transformer::set_parameter_fetch) that copies
  // the parameters in forward order as the forward pass reaches them, each once the
  // all-gathers of the buckets it lies in have arrived; FinishMaterialise (after the
  // step's forward passes) copies what forward did not reach and removes the fetch.
  void BeginMaterialise(Transformer& model);
  void FinishMaterialise(Transformer& model);

  // Overlap of the gradient reduction with backward. Attach registers gradient hooks on
  // `model`'s parameters (once per model; the model must outlive this). BeginStep(model,
  // micro_batches) before a step's first backward (model: nullptr on a rank without compute
  // this step) makes those hooks add every gradient, in fp32, straight into the reduction
  // buffer and count its micro-batches: when every local parameter touching bucket k has
  // seen its last micro-batch, bucket k's reduce-scatter starts, buckets in descending
  // order (the order backward produces them), while backward goes on. The hooks take each
  // gradient out of the parameter's .grad as autograd accumulates it, so a collecting model
  // holds no gradient of its own (nor needs ZeroGradients). Without BeginStep, Step reads
  // the parameters' accumulated gradients instead.
  void Attach(const Transformer& model);
  void BeginStep(const Transformer* model, int micro_batches);

  // What Step did: the global gradient norm (L2 over every parameter, fp32 sums in double)
  // and whether AdamW was applied.
  struct StepOutcome {
    double grad_norm = 0;
    bool applied = false;
  };

  // The learning rate of the next steps (a schedule sets it every step); the options' lr
  // until then. InvalidInput when negative or not finite.
  void set_lr(double lr);
  double lr() const { return options_.lr; }
  // The options' lr: the peak a schedule scales.
  double base_lr() const { return base_lr_; }

  // A collective over the world: sums the gradients of `model` (nullptr on a rank that holds
  // no compute parameters this step) into the owned shards, computes the global gradient
  // norm (before clipping: what is logged), and, when `apply` is true on every rank and the
  // norm is finite, clips the gradients (AdamWOptions::clip_grad), applies AdamW (weight
  // decay on matrices only) and gathers the updated parameters. Otherwise nothing changes (master
  // weights, moments and step count stay), as Megatron skips a step whose gradients overflowed.
  // Every rank must call it once per step, with the same `apply`.
  StepOutcome Step(const Transformer* model, bool apply = true);

  // Of the last step: the buckets' reduce-scatters, how many started while this rank's
  // backward still had gradients to produce (hidden behind its computation), and how long
  // Step waited for all of them to finish.
  // param_gather_wait_ms: how long this step waited for the previous step's parameter
  // all-gathers (in forward, or before the update for buckets forward did not read).
  struct OverlapStats {
    int buckets = 0;
    int buckets_started_in_backward = 0;
    double reduce_wait_ms = 0;
    double param_gather_wait_ms = 0;
    // Host time materialising the compute parameters (the fetches in forward and the rest
    // after it, gather waits included), in the gradient hooks (adding each gradient into the
    // buffer, starting reduce-scatters), and in Step's own work: the gradient norm, the
    // AdamW update and starting the all-gathers.
    double materialise_ms = 0;
    double grad_collect_ms = 0;
    double update_ms = 0;
  };
  const OverlapStats& overlap_stats() const { return stats_; }

  // The full fp32 parameters (identical on every rank), [layout().numel]; waits for the
  // last step's all-gathers.
  at::Tensor full_parameters() const {
    WaitAllGathers();
    return full_.slice(0, 0, layout_.numel);
  }
  const FlatLayout& layout() const { return layout_; }
  const OptimizerShardLayout& shard_layout() const { return shards_; }
  std::int64_t steps() const { return steps_; }

  // This rank's optimizer state, for checkpoints: master shard, moments (each
  // [shard_layout().shard_numel], this rank's pieces in bucket order) and step count.
  struct ShardState {
    at::Tensor master, exp_avg, exp_avg_sq;
    std::int64_t steps = 0;
  };
  ShardState shard_state() const;
  // Restores the whole optimizer state (each [layout().numel], e.g. the shards of a
  // checkpoint written by any number of ranks, OptimizerShardLayout::Unshard): this rank keeps its
  // own shard of the moments and every rank the full parameters. Not a collective (every
  // rank passes the same state). InvalidInput when a size differs from the layout's.
  void LoadFullState(const at::Tensor& master, const at::Tensor& exp_avg,
                     const at::Tensor& exp_avg_sq, std::int64_t steps);

 private:
  // Bucket range [first, last] that flat parameter `flat` touches.
  std::pair<int, int> BucketsOf(const FlatParameter& flat) const;
  // Starts the reduce-scatters of the ready buckets, in descending order.
  void IssueReadyBuckets();
  // Parameter `index` of `model` has this backward pass's gradient in .grad.
  void OnGradient(const Transformer& model, std::size_t index);
  // Waits for the parameter all-gathers of buckets [first, last] still in flight.
  void WaitGathers(int first, int last) const;
  // Waits for every parameter all-gather still in flight.
  void WaitAllGathers() const;
  // Copies `model`'s parameters [materialised_, end) (BeginMaterialise's fetch).
  void MaterialiseThrough(const Transformer& model, std::size_t end);

  CommGroup& world_;
  AdamWOptions options_;
  double base_lr_ = 0;
  // This rank's shard ranges [begin, end) of one-dimensional parameters (norm weights,
  // biases), which weight decay skips; ascending, disjoint.
  std::vector<std::pair<std::int64_t, std::int64_t>> no_decay_;
  FlatLayout layout_;
  OptimizerShardLayout shards_;
  at::Tensor full_;        // [padded_numel], the padding stays zero
  at::Tensor grad_;        // [padded_numel]: every rank's gradients, reduce-scatter input
  at::Tensor grad_shard_;  // [shard_numel]: this rank's pieces of the summed gradients
  at::Tensor exp_avg_, exp_avg_sq_;
  std::int64_t steps_ = 0;

  // The overlapped reduction of the current step (BeginStep).
  bool begun_ = false;                              // BeginStep ran for the current step
  const Transformer* active_ = nullptr;             // the model whose hooks collect this step
  int micro_batches_ = 0;                           // backward passes each parameter sees
  std::vector<int> calls_;                          // per parameter of active_: hooks seen
  std::vector<int> waiting_;                        // per bucket: local parameters not final yet
  int next_bucket_ = -1;                            // next bucket to start (descending), -1: all
  std::vector<std::unique_ptr<CommWork>> pending_;  // in issue order
  std::vector<const Transformer*> attached_;
  OverlapStats stats_;

  // The last step's parameter all-gathers, per bucket until waited for (mutable: waiting
  // changes no value a reader sees, it only makes the full parameters current).
  mutable std::vector<std::unique_ptr<CommWork>> gathers_;
  mutable double gather_wait_ms_ = 0;  // waited for them since the last Step
  std::size_t materialised_ = 0;       // parameters of the model being materialised copied
};

}  // namespace hydraulis
