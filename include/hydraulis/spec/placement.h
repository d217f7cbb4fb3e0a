// Where parameters and pipeline stages sit on the cluster's GPUs (ranks): the one rank
// layout the simulator's communication model and the runtime's process groups both use.
// Consecutive GPU ids share a node (gpus_per_node of them).
#pragma once

#include <vector>

#include "hydraulis/spec/scheme.h"
#include "hydraulis/spec/strategy.h"

namespace hydraulis {

// The parameters a GPU holds: the layers of stage `stage` of `pp` equal stages, and the
// tensor-parallel slice `tp_rank` of `tp`.
struct ParameterBlock {
  int stage = 0;
  int pp = 1;
  int tp_rank = 0;
  int tp = 1;
};

// A GPU's place in the compute layout; pipeline is -1 for GPUs the strategy leaves idle.
// cp_rank: which of its stage's cp ranks it is (0 for cp = 1), apart from the block because
// every cp rank of a stage holds the same parameters.
struct ComputeRole {
  int pipeline = -1;
  ParameterBlock block;
  int cp_rank = 0;
};

// Compute layout of `strategy` on `cluster_gpus` GPUs: pipelines take consecutive GPUs in
// strategy order (widest first), each pipeline stage-major, then cp, then tp
// (gpu = first + stage * cp * tp + cp_rank * tp + tp_rank), so tensor groups stay inside a
// node whenever tp divides gpus_per_node. Precondition: strategy.Gpus() <= cluster_gpus.
std::vector<ComputeRole> ComputePlacement(const Strategy& strategy, int cluster_gpus);

// First GPU of each pipeline of `strategy`, in strategy order.
std::vector<int> PipelineFirstGpus(const Strategy& strategy);

// The GPUs of pipeline `pipeline` of `strategy`, in ComputePlacement's order (group rank
// stage * cp * tp + cp_rank * tp + tp_rank).
std::vector<int> PipelineGpus(const Strategy& strategy, int pipeline);

// The tensor-parallel group of (stage, cp_rank) of pipeline `pipeline`: its tp GPUs in
// tp-rank order.
std::vector<int> TensorParallelGpus(const Strategy& strategy, int pipeline, int stage,
                                    int cp_rank = 0);

// The context-parallel group of (stage, tp_rank) of pipeline `pipeline`: its cp GPUs in
// cp-rank order (the ranks that share a stage's micro-batches and hold the same parameters).
std::vector<int> ContextParallelGpus(const Strategy& strategy, int pipeline, int stage,
                                     int tp_rank);

// Index inside PipelineGpus of the GPU holding (stage, cp_rank, tp_rank) of `scheme`.
int PipelineGroupRank(const Scheme& scheme, int stage, int tp_rank, int cp_rank = 0);

// Optimizer layout: GPU g owns 1/dp of the block of (pp rank, tp rank), Megatron's order
// (tp fastest, then dp, then pp): g = tp_rank + tp * (dp_rank + dp * pp_rank).
std::vector<ParameterBlock> OptimizerPlacement(const OptimizerLayout& layout);

// True when every GPU of stage `boundary` of a pipeline starting at `first_gpu` shares a
// node with its peer (same cp and tp rank) in stage boundary + 1.
bool StageBoundaryIntraNode(const Scheme& scheme, int first_gpu, int boundary, int gpus_per_node);

}  // namespace hydraulis
