#include "hydraulis/sim/step_timer.h"

#include <algorithm>

#include "hydraulis/base/error.h"
#include "hydraulis/cost/capacity.h"
#include "hydraulis/spec/model.h"
#include "hydraulis/spec/placement.h"
#include "units.h"

namespace hydraulis {
namespace {

using sim_units::kBitsPerByte;
using sim_units::kBytesPerGigabyte;
using sim_units::kMsPerSecond;
using sim_units::kUsPerMs;

std::int64_t AlignUp(std::int64_t tokens) {
  return (tokens + kTokenAlignment - 1) / kTokenAlignment * kTokenAlignment;
}

}  // namespace

StepTimer::StepTimer(const Profile& profile, const CandidateSet& candidates,
                     const SimOptions& options)
    : profile_(profile),
      candidates_(candidates),
      options_(options),
      bucket_bounds_(BucketBounds(ParameterCount(profile.model), options.comm.bucket_elements)) {
  for (const Strategy& s : candidates_.strategies) {
    sync_.push_back(ComputeSyncCost(profile_, s, candidates_.optimizer_layout, candidates_.gpus,
                                    options_.comm, options_.optimizer));
    first_gpus_.push_back(PipelineFirstGpus(s));
    std::vector<PipelineModel> models;
    for (const Scheme& scheme : s.pipelines) {
      const SchemeProfile* sp = profile_.Find(scheme);
      if (sp == nullptr) {
        throw InternalError("scheme " + SchemeName(scheme) + " of strategy " +
                            QuoteForMessage(s.name) +
                            " has no profile entry; the candidates were not validated");
      }
      models.push_back(MakePipelineModel(profile_, *sp, candidates_.optimizer_layout));
      models.back().shard.space = options_.system == System::kStaticCp ? CpLayoutSpace::kEveryRank
                                                                       : options_.cp_layout_space;
    }
    models_.push_back(std::move(models));
  }
}

const SyncCost& StepTimer::Sync(int strategy_index) const {
  return sync_.at(static_cast<std::size_t>(strategy_index));
}

// A stage's GPUs each send their 1/(tp cp) slice of the micro-batch's activations (bf16,
// tokens x hidden) to their peers of the next stage, all at once: over NVLink when the two
// stages share a node, otherwise over the GPU's share of the node's network.
double StepTimer::SendMs(int strategy_index, int pipeline, int boundary,
                         std::int64_t tokens) const {
  if (!options_.comm.enabled) return 0.0;
  const Strategy& strategy = candidates_.strategies.at(static_cast<std::size_t>(strategy_index));
  const Scheme& scheme = strategy.pipelines.at(static_cast<std::size_t>(pipeline));
  const int first =
      first_gpus_[static_cast<std::size_t>(strategy_index)][static_cast<std::size_t>(pipeline)];
  const int gpus_per_node = profile_.cluster.gpus_per_node;
  const double bytes = static_cast<double>(tokens) * profile_.model.hidden *
                       options_.comm.activation_bytes_per_value / (scheme.tp * scheme.cp);
  const double bytes_per_s = StageBoundaryIntraNode(scheme, first, boundary, gpus_per_node)
                                 ? options_.comm.nvlink_gbytes_per_s * kBytesPerGigabyte
                                 : options_.comm.network_gbits_per_s_per_node * kBytesPerGigabyte /
                                       kBitsPerByte / gpus_per_node;
  return options_.comm.p2p_latency_us / kUsPerMs + bytes / bytes_per_s * kMsPerSecond;
}

StepResult StepTimer::Time(const Plan& plan, std::int64_t padded_tokens) const {
  if (plan.strategy_index < 0 ||
      plan.strategy_index >= static_cast<int>(candidates_.strategies.size())) {
    throw InternalError("plan names candidate " + std::to_string(plan.strategy_index) +
                        ", not in the candidate set");
  }
  const std::vector<PipelineModel>& models = models_[static_cast<std::size_t>(plan.strategy_index)];
  if (plan.pipelines.size() != models.size()) {
    throw InternalError("plan has " + std::to_string(plan.pipelines.size()) +
                        " pipelines, its candidate " + std::to_string(models.size()));
  }
  const SyncCost& sync = Sync(plan.strategy_index);
  StepResult r;
  r.strategy_index = plan.strategy_index;
  r.strategy = plan.strategy.name;
  r.strategy_description = StrategyDescription(plan.strategy);
  r.documents = static_cast<int>(plan.lengths.size());
  for (std::int64_t s : plan.lengths) r.tokens += s;
  for (const Truncation& t : plan.truncated) {
    ++r.truncated_documents;
    r.truncated_tokens += t.original - t.kept;
  }
  r.planned_ms = plan.estimated_step_ms;
  std::vector<PipelineWindows> windows;
  for (std::size_t p = 0; p < plan.pipelines.size(); ++p) {
    const PipelinePlan& pp = plan.pipelines[p];
    const PipelineModel& model = models[p];
    const int stages = pp.scheme.pp;
    const std::size_t v = pp.micro_batches.size();
    const std::int64_t padded[] = {padded_tokens};
    const std::vector<double> stage_ms =
        padded_tokens > 0 ? std::vector<double>(v, MicroBatchMs(padded, model))
                          : MicroBatchStageMs(plan.lengths, model, pp.micro_batches);
    std::vector<double> send_ms(static_cast<std::size_t>(stages - 1) * v);
    PipelineStepResult pr;
    pr.scheme = pp.scheme;
    pr.micro_batches = static_cast<int>(v);
    pr.planned_ms = pp.estimated_ms;
    for (std::size_t j = 0; j < v; ++j) {
      std::int64_t tokens = 0;
      for (int d : pp.micro_batches[j]) tokens += plan.lengths[static_cast<std::size_t>(d)];
      pr.tokens += tokens;
      pr.micro_batch_tokens.push_back(tokens);
      pr.micro_batch_documents.push_back(static_cast<int>(pp.micro_batches[j].size()));
      const std::int64_t activation_tokens = padded_tokens > 0 ? padded_tokens : AlignUp(tokens);
      for (int b = 0; b + 1 < stages; ++b) {
        send_ms[static_cast<std::size_t>(b) * v + j] =
            SendMs(plan.strategy_index, static_cast<int>(p), b, activation_tokens);
      }
    }
    pr.schedule = SimulateOneFOneB(stage_ms, send_ms, stages, options_.schedule);
    pr.pipeline_ms = pr.schedule.makespan_ms;
    pr.busy_ms = pr.schedule.stage_busy_ms.empty() ? 0.0 : pr.schedule.stage_busy_ms.front();
    r.compute_ms = std::max(r.compute_ms, pr.pipeline_ms);
    windows.push_back(StageWindowsOf(pr.schedule, stages));
    r.pipelines.push_back(std::move(pr));
  }
  SetSyncPhases(r, sync, options_.comm.overlap, windows, bucket_bounds_);
  CompleteStepResult(r);
  return r;
}

void SetSyncPhases(StepResult& r, const SyncCost& sync, bool overlap,
                   std::span<const PipelineWindows> windows, std::span<const double> bucket_bounds,
                   bool synchronised) {
  r.optimizer_ms = sync.optimizer_ms;
  if (!overlap) {
    r.materialize_ms = r.materialize_total_ms = sync.materialize_ms;
    r.reduce_scatter_ms = r.reduce_scatter_total_ms = sync.reduce_scatter_ms;
    r.reduce_scatter_start_ms = r.materialize_ms + r.compute_ms;
    return;
  }
  BucketedCollectives collectives;
  collectives.bounds = bucket_bounds;
  collectives.latency_ms = sync.collective_latency_ms;
  collectives.all_gather_transfer_ms = sync.materialize_transfer_ms;
  collectives.reduce_scatter_transfer_ms = sync.reduce_scatter_transfer_ms;
  const OverlappedSync o = OverlapSync(windows, r.compute_ms, collectives, synchronised);
  r.materialize_ms = o.exposed_all_gather_ms;
  r.reduce_scatter_ms = o.exposed_reduce_scatter_ms;
  r.materialize_total_ms = o.all_gather_total_ms;
  r.reduce_scatter_total_ms = o.reduce_scatter_total_ms;
  r.reduce_scatter_start_ms = o.reduce_scatter_start_ms;
}

void CompleteStepResult(StepResult& r) {
  double busy_gpu_ms = 0;
  int gpus = 0;
  for (auto& pr : r.pipelines) {
    pr.bubble_share = r.compute_ms > 0 ? 1.0 - pr.busy_ms / r.compute_ms : 0.0;
    busy_gpu_ms += pr.busy_ms * pr.scheme.Gpus();
    gpus += pr.scheme.Gpus();
  }
  r.bubble_share = r.compute_ms > 0 && gpus > 0 ? 1.0 - busy_gpu_ms / (gpus * r.compute_ms) : 0.0;
  r.step_ms = r.materialize_ms + r.compute_ms + r.reduce_scatter_ms + r.optimizer_ms;
  r.tokens_per_second =
      r.step_ms > 0 ? static_cast<double>(r.tokens) / (r.step_ms / kMsPerSecond) : 0.0;
}

}  // namespace hydraulis
