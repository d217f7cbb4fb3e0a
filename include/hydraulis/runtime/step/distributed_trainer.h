// Distributed training over any strategy of a candidate set (method.md 2.2): pipelines of
// possibly different <cp, tp, pp> side by side, the strategy chosen per step, the optimizer
// disaggregated from computation (ShardedAdamW). A homogeneous run (dp pipelines of tp x
// pp) is the case of one candidate with identical pipelines.
//
// Per step, every rank is given the same global batch (token documents), the chosen
// strategy and the documents of each pipeline split into micro-batches (the plan). It
// checks with one all-gather that all ranks hold the same plan (a hash), copies its
// compute parameters out of the optimizer's full parameters, runs its pipeline stage's
// 1F1B schedule, and joins the optimizer step. Ranks the strategy leaves idle join only
// the collectives. On a cp > 1 pipeline every micro-batch's documents lie on the stage's cp
// ranks as the plan's cp_layouts say; each cp rank runs its local tokens (context-parallel
// attention gathering the sharded documents' keys and values over the stage's cp group),
// and its gradients join the optimizer's reduction like a data-parallel replica's.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "hydraulis/assign/micro_batch_layout.h"
#include "hydraulis/assign/plan.h"
#include "hydraulis/runtime/model/compute.h"
#include "hydraulis/runtime/model/transformer.h"
#include "hydraulis/runtime/step/adamw.h"
#include "hydraulis/runtime/step/sharded_optimizer.h"
#include "hydraulis/spec/strategy.h"

namespace hydraulis {

class CommGroup;
class Rendezvous;
struct StageLinks;
struct StageResult;

// What a step runs is the planner's Plan (assign/plan.h), the one plan type from
// planner to executor. The trainer reads strategy_index and, per pipeline of that
// candidate (in strategy order), its micro_batches in execution order, each a list of
// indices into the step's documents; every document appears exactly once; for a cp > 1
// pipeline, its cp_layouts (one per micro-batch, cost/cp_layout.h).

// A Plan holding only what the trainer reads, for callers that assign documents themselves
// (tests, benchmarks): candidate `strategy_index`, pipeline p running micro_batches[p].
Plan PlanOf(int strategy_index, std::vector<MicroBatches> micro_batches);

// 64-bit FNV-1a of the plan's strategy, micro-batches and cp layouts and of the documents'
// tokens:
// equal on two ranks only when they would run the same step.
std::uint64_t StepHash(const Plan& plan, const std::vector<std::vector<std::int64_t>>& documents);

struct DistributedStepResult {
  double loss = 0;       // mean token loss over the global batch
  double grad_norm = 0;  // global L2 norm of the summed gradients
  // Whether the optimizer updated the parameters: false when the loss or the gradient
  // norm was not finite (then nothing changed, on every rank).
  bool applied = false;
  std::int64_t targets = 0;     // target tokens of the global batch
  std::int64_t tokens_run = 0;  // tokens run by first stages, summed over all pipelines
  // Tokens this rank's pipeline ran (0 on an idle rank), its pipeline index (-1 idle).
  std::int64_t pipeline_tokens = 0;
  int pipeline = -1;
  int stage = -1;  // this rank's stage in its pipeline (-1 idle)
  // This rank's forward + backward time of each of its pipeline's micro-batches (host time,
  // the first without the parameters' materialisation), what the calibration fits.
  std::vector<double> micro_batch_ms;
  double compute_ms = 0;  // this rank: materialise + its 1F1B schedule (receive waits included)
  double wait_ms = 0;     // this rank: blocked in pipeline receives
  double sync_ms = 0;     // this rank: gradient reduction + optimizer + starting the gathers
  double step_ms = 0;     // this rank: the whole step, from the plan check to the end
  // Communication hidden behind computation: of the gradient buckets' reduce-scatters, how
  // many started while this rank's backward was still running, and how long the optimizer
  // step then waited for all of them to finish.
  int grad_buckets = 0;
  int grad_buckets_overlapped = 0;
  double grad_reduce_wait_ms = 0;
  // How long this step waited for the previous step's parameter all-gathers, which run
  // while the step begins and are waited for per bucket as forward first reads it.
  double param_gather_wait_ms = 0;
  // Where this rank's step time went (host time; on a GPU the time to queue the work):
  // checking the plan and agreeing on it with the other ranks, packing the micro-batches,
  // materialising the compute parameters (gather waits included), forward and backward
  // (each without the materialisation or gradient hooks inside them, and without receive
  // waits), the gradient hooks (collecting into the reduction buffer), and the optimizer's
  // own work (norm, AdamW, starting the all-gathers). What step_ms holds beyond these and
  // wait_ms, grad_reduce_wait_ms is bookkeeping (loss sums, timers).
  double check_ms = 0;
  double pack_ms = 0;
  double materialise_ms = 0;
  double forward_ms = 0;
  double backward_ms = 0;
  double grad_collect_ms = 0;
  double update_ms = 0;
};

class DistributedTrainer {
 public:
  // Builds the model from `seed` (identical on every rank), shards the optimizer over all
  // ranks of `rendezvous` (which must outlive this) and creates, once, every process group
  // any candidate needs (pipeline, cp and tp groups). InvalidInput when a candidate needs
  // more ranks than the world or does not split the model (tp must divide heads, kv_heads
  // and ffn; pp <= layers). A collective: every rank constructs it with the same arguments.
  // `compute`: this rank's device and precision (CheckComputeAvailable first).
  // `initial`: the starting weights instead of the draw from `seed` (a Hugging Face
  // checkpoint, hf_weights.h); they become the optimizer's fp32 master weights, from which
  // every step's compute layout is materialised, so any strategy starts from them.
  // `bucket_elements`: the optimizer's gradient bucket (shard_layout.h).
  DistributedTrainer(const ModelConfig& config, std::uint64_t seed, const AdamWOptions& options,
                     Rendezvous& rendezvous, const std::vector<Strategy>& candidates,
                     const ComputeOptions& compute = {}, const InitialWeights& initial = {},
                     std::int64_t bucket_elements = kDefaultBucketElements);
  ~DistributedTrainer();
  DistributedTrainer(const DistributedTrainer&) = delete;
  DistributedTrainer& operator=(const DistributedTrainer&) = delete;

  // One training step (a collective over all ranks). InvalidInput when the plan is
  // malformed (strategy index, pipeline count, a document missing or twice, cp layouts
  // missing or not CheckCpLayouts' shape) or the batch has no target; Error when the ranks' plans
  // differ (naming the ranks) or a peer fails.
  DistributedStepResult Step(const Plan& plan,
                             const std::vector<std::vector<std::int64_t>>& documents);

  // The global batch's mean next-token loss without training it (evaluation): every
  // pipeline of the plan's strategy runs its micro-batches forward only, on the parameters
  // of the last step's update; no gradient, no optimizer state changes. A collective, with
  // Step's checks and errors.
  struct EvalResult {
    double loss = 0;           // summed token loss over the batch's targets
    std::int64_t targets = 0;  // next-token targets of the kept tokens
    std::int64_t tokens = 0;   // tokens the first stages ran
  };
  EvalResult Evaluate(const Plan& plan, const std::vector<std::vector<std::int64_t>>& documents);

  const ShardedAdamW& optimizer() const { return *optimizer_; }
  ShardedAdamW& optimizer() { return *optimizer_; }
  const ModelConfig& config() const { return config_; }
  const ComputeOptions& compute() const { return compute_; }
  // All ranks, the optimizer's group (NCCL on GPUs): its collectives order the GPU's work.
  CommGroup& world();
  // All ranks over Gloo, for host-side agreement (checkpoint outcomes, the barrier before
  // rank 0 closes the store): its calls return only once every rank got there, whatever
  // the world's backend (docs/runtime.md, "GPU check").
  CommGroup& control();

  // Whether steps time each micro-batch on the device (StageLinks::time_on_device): the
  // CUDA events the calibration reads; off by default (the host clock on the CPU is free
  // and always on).
  void set_time_on_device(bool on) { time_on_device_ = on; }
  const std::vector<Strategy>& candidates() const { return candidates_; }

 private:
  struct Compute;  // this rank's role, model and links in one candidate
  Compute& ComputeFor(int strategy);
  CommGroup* Group(const std::vector<int>& members);
  // Step's phases, in order (distributed_trainer.cc).
  struct StepCounts {  // of the tokens the plan keeps (micro_batch_layout.h)
    std::int64_t targets = 0;
    std::int64_t tokens = 0;
  };
  StepCounts CheckStep(const Plan& plan,
                       const std::vector<std::vector<std::int64_t>>& documents) const;
  void AgreeOnStep(const Plan& plan, const std::vector<std::vector<std::int64_t>>& documents);
  // Also fills result's compute phases (pack, materialise, forward, backward, hooks).
  // This rank's pipeline's micro-batches of the plan, packed on its device.
  std::vector<PackedBatch> PackMicroBatches(
      const std::vector<MicroBatchLayout>& layouts,
      const std::vector<std::vector<std::int64_t>>& documents) const;
  // The pipeline stage over `micro_batches` (its cp shares under cp > 1), on `links` (the
  // compute's, or a forward-only copy).
  StageResult RunStage(const Compute& compute, const StageLinks& links, const Plan& plan,
                       const std::vector<MicroBatchLayout>& layouts,
                       const std::vector<PackedBatch>& micro_batches, std::int64_t global_targets);
  // Summed over the pipelines, each counted once (tp rank 0; the loss from last stages,
  // the tokens from first ones): loss sum, targets, tokens.
  std::array<double, 3> SumOverPipelines(const Compute& compute, const StageResult& stage);
  StageResult ComputeStep(Compute& compute, const Plan& plan,
                          const std::vector<std::vector<std::int64_t>>& documents,
                          std::int64_t global_targets, DistributedStepResult& result);
  void ReduceAndUpdate(Compute& compute, const StageResult& stage, std::int64_t global_targets,
                       std::int64_t batch_tokens, DistributedStepResult& result);

  ModelConfig config_;
  std::uint64_t seed_;
  ComputeOptions compute_;
  Rendezvous& rendezvous_;
  std::vector<Strategy> candidates_;
  std::unique_ptr<CommGroup> world_;
  std::unique_ptr<CommGroup> control_;  // all ranks over Gloo: the step's host-side scalars
  std::map<std::vector<int>, std::unique_ptr<CommGroup>> groups_;
  std::vector<std::unique_ptr<Compute>> computes_;  // per candidate, built at construction
  std::unique_ptr<ShardedAdamW> optimizer_;
  bool time_on_device_ = false;
};

}  // namespace hydraulis
