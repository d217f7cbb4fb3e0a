// The devices a run has.
#pragma once

#include <cstdint>

namespace hydraulis {

// A homogeneous GPU cluster. gpus is the total a strategy may use; nodes hold
// gpus_per_node GPUs each; every GPU has gpu_memory_bytes.
struct ClusterSpec {
  int gpus = 0;
  int gpus_per_node = 0;
  std::int64_t gpu_memory_bytes = 0;
};

}  // namespace hydraulis
