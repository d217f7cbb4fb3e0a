#include "hydraulis/runtime/step/distributed_trainer.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <string>

#include "hydraulis/assign/micro_batch_layout.h"
#include "hydraulis/assign/plan_checker.h"
#include "hydraulis/base/elapsed.h"
#include "hydraulis/base/error.h"
#include "hydraulis/runtime/communication/comm_group.h"
#include "hydraulis/runtime/model/context_parallel_attention.h"
#include "hydraulis/runtime/model/local_tokens.h"
#include "hydraulis/runtime/model/packed_batch.h"
#include "hydraulis/runtime/step/pipeline_stage.h"
#include "hydraulis/spec/placement.h"

namespace hydraulis {
namespace {

using Clock = std::chrono::steady_clock;

class Fnv1a {
 public:
  void Add(std::int64_t value) {
    for (int i = 0; i < 8; ++i) {
      hash_ ^= static_cast<std::uint64_t>(value >> (8 * i)) & 0xffu;
      hash_ *= 1099511628211ull;
    }
  }
  std::uint64_t value() const { return hash_; }

 private:
  std::uint64_t hash_ = 14695981039346656037ull;
};

// Each document's token count.
std::vector<std::int64_t> TokenCounts(const std::vector<std::vector<std::int64_t>>& documents) {
  std::vector<std::int64_t> counts;
  for (const auto& doc : documents) counts.push_back(static_cast<std::int64_t>(doc.size()));
  return counts;
}

std::string GroupName(const std::vector<int>& members) {
  std::string name = "g";
  for (int m : members) name.append("-").append(std::to_string(m));
  return name;
}

// This cp rank's share of each packed micro-batch of a cp > 1 pipeline, laid out by the
// plan's cp_layouts (checked by CheckStep): every cp rank of the stage derives the same
// layouts, so their attention gathers match.
std::vector<ContextParallelMicroBatch> ContextParallelShares(
    const std::vector<PackedBatch>& micro_batches, const std::vector<MicroBatchLayout>& layouts,
    const PipelinePlan& pipeline, int cp, int cp_rank, at::Device device) {
  std::vector<ContextParallelMicroBatch> shares;
  for (std::size_t j = 0; j < micro_batches.size(); ++j) {
    const LocalTokenLayout local =
        MakeLocalTokenLayout(layouts[j].lengths, pipeline.cp_layouts[j], cp, cp_rank);
    shares.push_back(
        {LocalTokensOf(micro_batches[j].tokens, local), MakeContextParallelRows(local, device)});
  }
  return shares;
}

}  // namespace

Plan PlanOf(int strategy_index, std::vector<MicroBatches> micro_batches) {
  Plan plan;
  plan.strategy_index = strategy_index;
  for (MicroBatches& mbs : micro_batches) {
    plan.pipelines.emplace_back();
    plan.pipelines.back().micro_batches = std::move(mbs);
  }
  return plan;
}

std::uint64_t StepHash(const Plan& plan, const std::vector<std::vector<std::int64_t>>& documents) {
  Fnv1a h;
  h.Add(plan.strategy_index);
  h.Add(static_cast<std::int64_t>(plan.pipelines.size()));
  for (const PipelinePlan& pipeline : plan.pipelines) {
    h.Add(static_cast<std::int64_t>(pipeline.micro_batches.size()));
    for (const auto& mb : pipeline.micro_batches) {
      h.Add(static_cast<std::int64_t>(mb.size()));
      for (int d : mb) h.Add(d);
    }
    // The cp ranks of a stage must agree on where every document lies, or their attention
    // gathers would mismatch.
    h.Add(static_cast<std::int64_t>(pipeline.cp_layouts.size()));
    for (const CpLayout& layout : pipeline.cp_layouts) {
      h.Add(static_cast<std::int64_t>(layout.size()));
      for (std::size_t d = 0; d < layout.size(); ++d) {
        h.Add(static_cast<std::int64_t>(layout.Width(d)));
        for (int r : layout.Ranks(d)) h.Add(r);
      }
    }
  }
  h.Add(static_cast<std::int64_t>(documents.size()));
  for (const auto& doc : documents) {
    h.Add(static_cast<std::int64_t>(doc.size()));
    for (std::int64_t t : doc) h.Add(t);
  }
  return h.value();
}

namespace {

// Every candidate fits the job's ranks and splits the model, each error naming the
// candidate and its scheme.
void CheckCandidates(const std::vector<Strategy>& candidates, const ModelConfig& config,
                     int world_size) {
  if (candidates.empty()) throw InvalidInput("distributed training: no candidate strategy");
  for (std::size_t c = 0; c < candidates.size(); ++c) {
    const Strategy& s = candidates[c];
    const std::string where = "candidate " + std::to_string(c) + " (" +
                              (s.name.empty() ? StrategyDescription(s) : s.name) + ")";
    if (s.pipelines.empty()) throw InvalidInput(where + ": has no pipeline");
    if (s.Gpus() > world_size) {
      throw InvalidInput(where + ": needs " + std::to_string(s.Gpus()) + " ranks, the job has " +
                         std::to_string(world_size));
    }
    for (const Scheme& scheme : s.pipelines) {
      if (scheme.cp < 1) {
        throw InvalidInput(where + ": " + SchemeName(scheme) + ": cp must be at least 1");
      }
      try {
        ValidateTensorParallel(config, scheme.tp);
        (void)ModelPart::Stage(config, 0, scheme.pp);
      } catch (const InvalidInput& e) {
        throw InvalidInput(where + ": " + SchemeName(scheme) + ": " + e.what());
      }
    }
  }
}

}  // namespace

struct DistributedTrainer::Compute {
  ComputeRole role;  // pipeline -1: idle in this candidate
  int cp = 1;        // of this rank's pipeline
  std::unique_ptr<Transformer> model;
  StageLinks links;
  // cp > 1: this stage's cp ranks of this rank's tp rank, in cp-rank order.
  CommGroup* cp_group = nullptr;
};

DistributedTrainer::DistributedTrainer(const ModelConfig& config, std::uint64_t seed,
                                       const AdamWOptions& options, Rendezvous& rendezvous,
                                       const std::vector<Strategy>& candidates,
                                       const ComputeOptions& compute_options,
                                       const InitialWeights& initial, std::int64_t bucket_elements)
    : config_(config),
      seed_(seed),
      compute_(compute_options),
      rendezvous_(rendezvous),
      candidates_(candidates) {
  CheckComputeAvailable(compute_);
  UseDevice(compute_);  // this thread's current GPU (a test runs ranks as threads)
  const DistributedOptions& o = rendezvous_.options();
  CheckCandidates(candidates_, config_, o.world_size);
  world_ = MakeCommGroup(rendezvous_, "world");
  // The step's control messages (the plan-hash check, the loss sums) are a few host values:
  // over Gloo they never wait behind the world's GPU collectives (under NCCL, the previous
  // step's parameter all-gathers, which the step is meant to overlap).
  control_ = MakeCommGroup(rendezvous_, "control", {}, CommBackend::kGloo);
  // Every rank walks the candidates in the same order and creates the groups it belongs to,
  // in each candidate its pipeline group, then its cp group, then its tp group: one global
  // creation order (a group is first met in the same candidate by all its members, and
  // within a candidate every rank creates the kinds in the same order), so group creation
  // cannot deadlock (comm_group.h).
  // The master weights come straight from the source, one tensor at a time; the compute
  // models are left uninitialised, as every step materialises them from the master weights:
  // so no process ever holds a second full copy of the weights.
  optimizer_ =
      std::make_unique<ShardedAdamW>(config_, initial ? initial : SeededWeights(config_, seed_),
                                     *world_, options, TorchDevice(compute_), bucket_elements);
  for (const Strategy& s : candidates_) {
    auto compute = std::make_unique<Compute>();
    const std::vector<ComputeRole> roles = ComputePlacement(s, o.world_size);
    compute->role = roles[static_cast<std::size_t>(o.rank)];
    for (std::size_t p = 0; p < s.pipelines.size(); ++p) {
      if (compute->role.pipeline != static_cast<int>(p)) continue;
      const Scheme& scheme = s.pipelines[p];
      const ParameterBlock& block = compute->role.block;
      const int pipeline = static_cast<int>(p);
      const int cp_rank = compute->role.cp_rank;
      CommGroup* pipeline_group = scheme.pp > 1 ? Group(PipelineGpus(s, pipeline)) : nullptr;
      compute->cp = scheme.cp;
      compute->cp_group = scheme.cp > 1
                              ? Group(ContextParallelGpus(s, pipeline, block.stage, block.tp_rank))
                              : nullptr;
      CommGroup* tp_group =
          scheme.tp > 1 ? Group(TensorParallelGpus(s, pipeline, block.stage, cp_rank)) : nullptr;
      compute->model = std::make_unique<Transformer>(
          config_, seed_, tp_group, ModelPart::Stage(config_, block.stage, scheme.pp), compute_,
          UninitializedWeights());
      compute->links.pipeline = pipeline_group;
      compute->links.stage = block.stage;
      compute->links.pp = scheme.pp;
      if (block.stage > 0) {
        compute->links.prev = PipelineGroupRank(scheme, block.stage - 1, block.tp_rank, cp_rank);
      }
      if (block.stage + 1 < scheme.pp) {
        compute->links.next = PipelineGroupRank(scheme, block.stage + 1, block.tp_rank, cp_rank);
      }
    }
    computes_.push_back(std::move(compute));
  }
  // Every rank has made its groups before any leaves: a rank whose first step fails at
  // once (a plan without cp layouts) would otherwise close its connections while another
  // rank is still connecting a group they share, and that rank would report Gloo's
  // "Connection closed by peer" instead of the step's own error (seen once in CI, under load).
  control_->Barrier();
}

DistributedTrainer::~DistributedTrainer() = default;

CommGroup& DistributedTrainer::world() { return *world_; }
CommGroup& DistributedTrainer::control() { return *control_; }

CommGroup* DistributedTrainer::Group(const std::vector<int>& members) {
  auto it = groups_.find(members);
  if (it != groups_.end()) return it->second.get();
  auto group = MakeCommGroup(rendezvous_, GroupName(members), members);
  CommGroup* raw = group.get();
  groups_.emplace(members, std::move(group));
  return raw;
}

DistributedTrainer::Compute& DistributedTrainer::ComputeFor(int strategy) {
  return *computes_[static_cast<std::size_t>(strategy)];
}

// Phase 1: the plan fits the candidates and covers the batch; returns the batch's target
// count.
DistributedTrainer::StepCounts DistributedTrainer::CheckStep(
    const Plan& plan, const std::vector<std::vector<std::int64_t>>& documents) const {
  if (plan.strategy_index < 0 || plan.strategy_index >= static_cast<int>(candidates_.size())) {
    throw InvalidInput("step plan: strategy " + std::to_string(plan.strategy_index) +
                       " is not a candidate index (0.." + std::to_string(candidates_.size() - 1) +
                       ")");
  }
  const Strategy& strategy = candidates_[static_cast<std::size_t>(plan.strategy_index)];
  if (plan.pipelines.size() != strategy.pipelines.size()) {
    throw InvalidInput("step plan: " + std::to_string(plan.pipelines.size()) +
                       " pipelines for a strategy of " + std::to_string(strategy.pipelines.size()));
  }
  std::vector<MicroBatches> assignment;
  for (const PipelinePlan& pipeline : plan.pipelines) assignment.push_back(pipeline.micro_batches);
  if (const std::string error = CheckCoverage(assignment, documents.size()); !error.empty()) {
    throw InvalidInput("step plan: " + error);
  }
  // Checked against the candidate's scheme, not the plan's copy of it (a plan made by hand,
  // PlanOf, leaves that at its default).
  for (std::size_t p = 0; p < plan.pipelines.size(); ++p) {
    PipelinePlan pipeline;
    pipeline.scheme = strategy.pipelines[p];
    pipeline.micro_batches = plan.pipelines[p].micro_batches;
    pipeline.cp_layouts = plan.pipelines[p].cp_layouts;
    if (const std::string error = CheckCpLayouts(pipeline); !error.empty()) {
      throw InvalidInput("step plan: pipeline " + std::to_string(p) + " (" +
                         SchemeName(pipeline.scheme) + "): " + error +
                         " (a cp > 1 pipeline needs the plan's cp_layouts, one per micro-batch)");
    }
  }
  for (std::size_t d = 0; d < documents.size(); ++d) {
    if (documents[d].empty()) {
      throw InvalidInput("step batch: document " + std::to_string(d) + " is empty");
    }
  }
  StepCounts counts;
  for (const std::int64_t kept : KeptLengths(plan, TokenCounts(documents))) {
    counts.targets += kept - 1;
    counts.tokens += kept;
  }
  if (counts.targets <= 0) {
    throw InvalidInput("training step: the global batch has no target token");
  }
  return counts;
}

// Phase 2: one collective of every rank's hash, so a mismatch names who differs.
void DistributedTrainer::AgreeOnStep(const Plan& plan,
                                     const std::vector<std::vector<std::int64_t>>& documents) {
  const std::uint64_t hash = StepHash(plan, documents);
  at::Tensor hashes = at::empty({control_->size()}, at::kLong);
  control_->AllGather(at::tensor({static_cast<std::int64_t>(hash)}, at::kLong), hashes);
  for (int r = 0; r < control_->size(); ++r) {
    const auto other = static_cast<std::uint64_t>(hashes[r].item<std::int64_t>());
    if (other != hash) {
      throw Error("the ranks hold different step plans: rank " +
                  std::to_string(rendezvous_.options().rank) + " has hash " + std::to_string(hash) +
                  ", rank " + std::to_string(r) + " has " + std::to_string(other) +
                  " (same data, seed, candidates and planner options on every rank?)");
    }
  }
}

std::vector<PackedBatch> DistributedTrainer::PackMicroBatches(
    const std::vector<MicroBatchLayout>& layouts,
    const std::vector<std::vector<std::int64_t>>& documents) const {
  std::vector<PackedBatch> micro_batches;
  for (const MicroBatchLayout& layout : layouts) {
    std::vector<std::vector<std::int64_t>> docs;
    for (std::size_t i = 0; i < layout.documents.size(); ++i) {
      const auto& doc = documents[static_cast<std::size_t>(layout.documents[i])];
      docs.emplace_back(doc.begin(), doc.begin() + layout.lengths[i]);
    }
    micro_batches.push_back(PackDocuments(docs, config_.shape.vocab, TorchDevice(compute_)));
    if (micro_batches.back().cu_seqlens != layout.cu_seqlens) {
      throw InternalError("step: a packed micro-batch differs from its layout");
    }
  }
  return micro_batches;
}

StageResult DistributedTrainer::RunStage(const Compute& compute, const StageLinks& links,
                                         const Plan& plan,
                                         const std::vector<MicroBatchLayout>& layouts,
                                         const std::vector<PackedBatch>& micro_batches,
                                         std::int64_t global_targets) {
  if (compute.cp_group == nullptr) {
    return RunPipelineStage(*compute.model, micro_batches, links, global_targets);
  }
  return RunPipelineStage(
      *compute.model,
      ContextParallelShares(micro_batches, layouts,
                            plan.pipelines[static_cast<std::size_t>(compute.role.pipeline)],
                            compute.cp, compute.role.cp_rank, TorchDevice(compute_)),
      *compute.cp_group, links, global_targets);
}

std::array<double, 3> DistributedTrainer::SumOverPipelines(const Compute& compute,
                                                           const StageResult& stage) {
  // Loss from the last stages and tokens from the first stages, each counted on tp rank 0
  // only, so every pipeline contributes once (each cp rank its own tokens and targets, which
  // add up to the pipeline's).
  const bool tp0 = compute.model != nullptr && compute.model->tp_rank() == 0;
  const bool first = tp0 && compute.links.stage == 0;
  const bool last = tp0 && compute.links.stage == compute.links.pp - 1;
  at::Tensor sums = at::tensor({last ? stage.loss_sum : 0.0, last ? double(stage.targets) : 0.0,
                                first ? double(stage.tokens) : 0.0},
                               at::kDouble);
  control_->AllReduceSum(sums);
  return {sums[0].item<double>(), sums[1].item<double>(), sums[2].item<double>()};
}

// Phase 3: this rank's pipeline stage runs its micro-batches (an idle rank only joins the
// optimizer's step), its gradients flowing into the optimizer's buffers during backward.
StageResult DistributedTrainer::ComputeStep(Compute& compute, const Plan& plan,
                                            const std::vector<std::vector<std::int64_t>>& documents,
                                            std::int64_t global_targets,
                                            DistributedStepResult& result) {
  if (compute.model == nullptr) {
    optimizer_->BeginStep(nullptr, 0);
    return {};
  }
  Transformer& model = *compute.model;
  // Parameters are copied from the optimizer as forward first reads them, so the last
  // step's all-gathers overlap this step's first forward pass.
  optimizer_->BeginMaterialise(model);
  const std::vector<MicroBatchLayout> layouts =
      PipelineLayouts(plan, compute.role.pipeline, TokenCounts(documents));
  // Gradients flow into the optimizer's buffer during backward, and each shard's
  // reduction starts as soon as it is final.
  optimizer_->BeginStep(&model, static_cast<int>(layouts.size()));
  const auto pack_start = Clock::now();
  const std::vector<PackedBatch> micro_batches = PackMicroBatches(layouts, documents);
  result.pack_ms = MsSince(pack_start);
  compute.links.time_on_device = time_on_device_;
  const StageResult stage =
      RunStage(compute, compute.links, plan, layouts, micro_batches, global_targets);
  const auto finish_start = Clock::now();
  optimizer_->FinishMaterialise(model);
  const double finish_ms = MsSince(finish_start);
  // Forward fetches parameters as it reaches them and backward runs the gradient hooks:
  // each is reported without them (what FinishMaterialise copied after forward is not in
  // forward's time).
  const ShardedAdamW::OverlapStats& stats = optimizer_->overlap_stats();
  result.materialise_ms = stats.materialise_ms;
  result.grad_collect_ms = stats.grad_collect_ms;
  result.forward_ms = std::max(0.0, stage.forward_ms - (stats.materialise_ms - finish_ms));
  result.backward_ms = std::max(0.0, stage.backward_ms - stats.grad_collect_ms);
  result.stage = compute.links.stage;
  result.micro_batch_ms = stage.micro_batch_ms;
  if (!result.micro_batch_ms.empty() && compute_.device != DeviceKind::kCuda) {
    // The first forward fetched the parameters (the step's cost, not the micro-batch's);
    // the rest of the materialisation ran after the schedule. (On a GPU the events time
    // the device, where the copies overlap the computation.)
    double& first = result.micro_batch_ms.front();
    first = std::max(0.5 * first, first - (stats.materialise_ms - finish_ms));
  }
  return stage;
}

// Phase 4: the loss and token sums over the pipelines, then the optimizer's reduction and
// update (skipped on every rank alike when the loss or gradient norm is not finite).
void DistributedTrainer::ReduceAndUpdate(Compute& compute, const StageResult& stage,
                                         std::int64_t global_targets, std::int64_t batch_tokens,
                                         DistributedStepResult& result) {
  // Summed before the update, so a non-finite loss stops it on every rank alike.
  const std::array<double, 3> sums = SumOverPipelines(compute, stage);
  result.targets = static_cast<std::int64_t>(sums[1]);
  if (result.targets != global_targets) {
    throw InternalError("step: the pipelines' last stages covered " +
                        std::to_string(result.targets) + " targets, the batch has " +
                        std::to_string(global_targets));
  }
  result.loss = sums[0] / static_cast<double>(global_targets);
  const ShardedAdamW::StepOutcome outcome =
      optimizer_->Step(compute.model.get(), std::isfinite(result.loss));
  result.grad_norm = outcome.grad_norm;
  result.applied = outcome.applied;
  result.grad_buckets = optimizer_->overlap_stats().buckets;
  result.grad_buckets_overlapped = optimizer_->overlap_stats().buckets_started_in_backward;
  result.grad_reduce_wait_ms = optimizer_->overlap_stats().reduce_wait_ms;
  result.param_gather_wait_ms = optimizer_->overlap_stats().param_gather_wait_ms;
  result.tokens_run = static_cast<std::int64_t>(sums[2]);
  if (result.tokens_run != batch_tokens) {
    throw InternalError("step: the pipelines' first stages ran " +
                        std::to_string(result.tokens_run) + " tokens, the batch has " +
                        std::to_string(batch_tokens));
  }
}

DistributedStepResult DistributedTrainer::Step(
    const Plan& plan, const std::vector<std::vector<std::int64_t>>& documents) {
  const auto start = Clock::now();
  const StepCounts counts = CheckStep(plan, documents);
  AgreeOnStep(plan, documents);
  const double check_ms = MsSince(start);

  DistributedStepResult result;
  Compute& compute = ComputeFor(plan.strategy_index);
  result.pipeline = compute.role.pipeline;
  const auto compute_start = Clock::now();
  const StageResult stage = ComputeStep(compute, plan, documents, counts.targets, result);
  result.pipeline_tokens = stage.tokens;
  result.wait_ms = stage.wait_ms;
  result.compute_ms = MsSince(compute_start);

  const auto sync_start = Clock::now();
  ReduceAndUpdate(compute, stage, counts.targets, counts.tokens, result);
  result.sync_ms = MsSince(sync_start);
  result.step_ms = MsSince(start);
  result.check_ms = check_ms;
  result.update_ms = optimizer_->overlap_stats().update_ms;
  return result;
}

DistributedTrainer::EvalResult DistributedTrainer::Evaluate(
    const Plan& plan, const std::vector<std::vector<std::int64_t>>& documents) {
  const StepCounts counts = CheckStep(plan, documents);
  AgreeOnStep(plan, documents);
  Compute& compute = ComputeFor(plan.strategy_index);
  StageResult stage;
  if (compute.model != nullptr) {
    Transformer& model = *compute.model;
    // The last update's parameters (this candidate's model may hold another step's).
    optimizer_->BeginMaterialise(model);
    const std::vector<MicroBatchLayout> layouts =
        PipelineLayouts(plan, compute.role.pipeline, TokenCounts(documents));
    const std::vector<PackedBatch> micro_batches = PackMicroBatches(layouts, documents);
    StageLinks links = compute.links;
    links.forward_only = true;
    stage = RunStage(compute, links, plan, layouts, micro_batches, counts.targets);
    optimizer_->FinishMaterialise(model);
  }
  const std::array<double, 3> sums = SumOverPipelines(compute, stage);
  EvalResult result;
  result.targets = static_cast<std::int64_t>(sums[1]);
  result.tokens = static_cast<std::int64_t>(sums[2]);
  if (result.targets != counts.targets || result.tokens != counts.tokens) {
    throw InternalError("evaluation: the pipelines covered " + std::to_string(result.targets) +
                        " targets and " + std::to_string(result.tokens) +
                        " tokens, the batch has " + std::to_string(counts.targets) + " and " +
                        std::to_string(counts.tokens));
  }
  result.loss = sums[0] / static_cast<double>(counts.targets);
  return result;
}

}  // namespace hydraulis
