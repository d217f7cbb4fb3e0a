#include "hydraulis/spec/placement.h"

namespace hydraulis {

std::vector<int> PipelineFirstGpus(const Strategy& strategy) {
  std::vector<int> first;
  int next = 0;
  for (const Scheme& s : strategy.pipelines) {
    first.push_back(next);
    next += s.Gpus();
  }
  return first;
}

int PipelineGroupRank(const Scheme& scheme, int stage, int tp_rank, int cp_rank) {
  return (stage * scheme.cp + cp_rank) * scheme.tp + tp_rank;
}

std::vector<int> PipelineGpus(const Strategy& strategy, int pipeline) {
  const int first = PipelineFirstGpus(strategy)[static_cast<std::size_t>(pipeline)];
  std::vector<int> gpus;
  for (int g = 0; g < strategy.pipelines[static_cast<std::size_t>(pipeline)].Gpus(); ++g) {
    gpus.push_back(first + g);
  }
  return gpus;
}

std::vector<int> TensorParallelGpus(const Strategy& strategy, int pipeline, int stage,
                                    int cp_rank) {
  const Scheme& s = strategy.pipelines[static_cast<std::size_t>(pipeline)];
  const int first = PipelineFirstGpus(strategy)[static_cast<std::size_t>(pipeline)];
  std::vector<int> gpus;
  for (int r = 0; r < s.tp; ++r) gpus.push_back(first + PipelineGroupRank(s, stage, r, cp_rank));
  return gpus;
}

std::vector<int> ContextParallelGpus(const Strategy& strategy, int pipeline, int stage,
                                     int tp_rank) {
  const Scheme& s = strategy.pipelines[static_cast<std::size_t>(pipeline)];
  const int first = PipelineFirstGpus(strategy)[static_cast<std::size_t>(pipeline)];
  std::vector<int> gpus;
  for (int c = 0; c < s.cp; ++c) gpus.push_back(first + PipelineGroupRank(s, stage, tp_rank, c));
  return gpus;
}

std::vector<ComputeRole> ComputePlacement(const Strategy& strategy, int cluster_gpus) {
  std::vector<ComputeRole> roles(static_cast<std::size_t>(cluster_gpus));
  const std::vector<int> first = PipelineFirstGpus(strategy);
  for (std::size_t p = 0; p < strategy.pipelines.size(); ++p) {
    const Scheme& s = strategy.pipelines[p];
    for (int stage = 0; stage < s.pp; ++stage) {
      for (int c = 0; c < s.cp; ++c) {
        for (int r = 0; r < s.tp; ++r) {
          const int gpu = first[p] + PipelineGroupRank(s, stage, r, c);
          roles[static_cast<std::size_t>(gpu)] = {static_cast<int>(p), {stage, s.pp, r, s.tp}, c};
        }
      }
    }
  }
  return roles;
}

std::vector<ParameterBlock> OptimizerPlacement(const OptimizerLayout& layout) {
  std::vector<ParameterBlock> blocks(static_cast<std::size_t>(layout.dp * layout.tp * layout.pp));
  for (int stage = 0; stage < layout.pp; ++stage) {
    for (int d = 0; d < layout.dp; ++d) {
      for (int r = 0; r < layout.tp; ++r) {
        blocks[static_cast<std::size_t>(r + layout.tp * (d + layout.dp * stage))] = {
            stage, layout.pp, r, layout.tp};
      }
    }
  }
  return blocks;
}

bool StageBoundaryIntraNode(const Scheme& scheme, int first_gpu, int boundary, int gpus_per_node) {
  const int width = scheme.cp * scheme.tp;
  for (int k = 0; k < width; ++k) {
    const int from = first_gpu + boundary * width + k;
    if (from / gpus_per_node != (from + width) / gpus_per_node) return false;
  }
  return true;
}

}  // namespace hydraulis
