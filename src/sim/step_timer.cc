#include "hydraulis/sim/step_timer.h"

#include <algorithm>

#include "hydraulis/base/error.h"
#include "hydraulis/spec/placement.h"
#include "units.h"

namespace hydraulis {
namespace {

using sim_units::kBitsPerByte;
using sim_units::kBytesPerGigabyte;
using sim_units::kMsPerSecond;
using sim_units::kUsPerMs;

}  // namespace

StepTimer::StepTimer(const Profile& profile, const CandidateSet& candidates,
                     const SimOptions& options)
    : profile_(profile), candidates_(candidates), options_(options) {
  for (const Strategy& s : candidates_.strategies) {
    sync_.push_back(ComputeSyncCost(profile_, s, candidates_.optimizer_layout, candidates_.gpus,
                                    options_.comm, options_.optimizer));
    first_gpus_.push_back(PipelineFirstGpus(s));
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

StepResult StepTimer::Time(const StepWork& work) const {
  if (work.strategy_index < 0 ||
      work.strategy_index >= static_cast<int>(candidates_.strategies.size())) {
    throw InternalError("step work names candidate " + std::to_string(work.strategy_index) +
                        ", not in the candidate set");
  }
  const SyncCost& sync = Sync(work.strategy_index);
  StepResult r;
  r.strategy_index = work.strategy_index;
  r.strategy = work.strategy.name;
  r.strategy_description = StrategyDescription(work.strategy);
  r.documents = static_cast<int>(work.lengths.size());
  for (std::int64_t s : work.lengths) r.tokens += s;
  r.truncated_documents = work.truncated_documents;
  r.truncated_tokens = work.truncated_tokens;
  r.planned_ms = work.planned_step_ms;
  r.materialize_ms = sync.materialize_ms;
  r.reduce_scatter_ms = sync.reduce_scatter_ms;
  r.optimizer_ms = sync.optimizer_ms;
  for (std::size_t p = 0; p < work.pipelines.size(); ++p) {
    const PipelineWork& pw = work.pipelines[p];
    const int pp = pw.scheme.pp;
    const std::size_t v = pw.micro_batches.size();
    std::vector<double> stage_ms;
    std::vector<double> send_ms(static_cast<std::size_t>(pp - 1) * v);
    PipelineStepResult pr;
    pr.scheme = pw.scheme;
    pr.micro_batches = static_cast<int>(v);
    pr.planned_ms = pw.planned_ms;
    for (std::size_t j = 0; j < v; ++j) {
      const MicroBatchWork& m = pw.micro_batches[j];
      stage_ms.push_back(m.stage_ms);
      pr.tokens += m.tokens;
      pr.micro_batch_tokens.push_back(m.tokens);
      pr.micro_batch_documents.push_back(static_cast<int>(m.documents.size()));
      for (int b = 0; b + 1 < pp; ++b) {
        send_ms[static_cast<std::size_t>(b) * v + j] =
            SendMs(work.strategy_index, static_cast<int>(p), b, m.activation_tokens);
      }
    }
    pr.schedule = SimulateOneFOneB(stage_ms, send_ms, pp, options_.schedule);
    pr.pipeline_ms = pr.schedule.makespan_ms;
    pr.busy_ms = pr.schedule.stage_busy_ms.empty() ? 0.0 : pr.schedule.stage_busy_ms.front();
    r.compute_ms = std::max(r.compute_ms, pr.pipeline_ms);
    r.pipelines.push_back(std::move(pr));
  }
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
  return r;
}

}  // namespace hydraulis
