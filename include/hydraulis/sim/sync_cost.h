// The step-level work of the disaggregated design (method.md 2.2): materialising bf16
// parameters from the optimizer layout into the step's compute layout, reduce-scattering
// the gradients of every pipeline back into the optimizer shards, and the optimizer step.
// Formulas and assumptions: docs/simulator.md, "Synchronisation".
#pragma once

#include "hydraulis/sim/sim_options.h"
#include "hydraulis/spec/model.h"
#include "hydraulis/spec/profile.h"
#include "hydraulis/spec/strategy.h"

namespace hydraulis {

// Traffic of the reduce-scatter of one step, in units of the whole model (multiply by
// ParameterCount (spec/model.h) and by bytes per value). Materialisation is its transpose (every
// byte that leaves a node in one enters it in the other), so it has the same maxima.
struct SyncTraffic {
  // Max over nodes of max(sent to, received from other nodes) after the gradients of
  // pipeline copies on the node are summed over NVLink; 0 on a single node.
  double inter_node_share = 0;
  // Max over busy GPUs of the parameter block it exchanges over NVLink (1 / (tp pp));
  // 0 when a node has a single GPU.
  double intra_node_share = 0;
};

// Precondition: strategy.Gpus() <= cluster_gpus == layout.dp * layout.tp * layout.pp,
// gpus_per_node >= 1.
SyncTraffic ComputeSyncTraffic(const Strategy& strategy, const OptimizerLayout& layout,
                               int cluster_gpus, int gpus_per_node);

struct SyncCost {
  double materialize_ms = 0;     // bf16 parameters into the compute layout
  double reduce_scatter_ms = 0;  // gradients into the optimizer shards
  double optimizer_ms = 0;       // one optimizer step on the shards
  // The parts of the two collectives above, for cutting them into buckets: the latency of
  // one collective (one collective_latency per phase that moves data) and the time the
  // whole model's bytes take (materialize_ms = collective_latency_ms +
  // materialize_transfer_ms up to rounding; likewise the reduce-scatter).
  double collective_latency_ms = 0;
  double materialize_transfer_ms = 0;
  double reduce_scatter_transfer_ms = 0;
  SyncTraffic traffic;
};

// The synchronisation cost of one step on `strategy` (independent of the batch and of the
// previous step's strategy: switching strategies costs nothing extra under disaggregation).
SyncCost ComputeSyncCost(const Profile& profile, const Strategy& strategy,
                         const OptimizerLayout& layout, int cluster_gpus, const CommOptions& comm,
                         const OptimizerStepOptions& optimizer);

}  // namespace hydraulis
