// The memory check train and eval run before building a model: the bytes a run must hold
// for every parameter whatever it does with them, against the device's memory, so a model
// far too large is one line naming both sizes rather than an allocator's failure (or, on
// the CPU, a machine driven into swap).
#pragma once

#include <string>

#include "hydraulis/runtime/model/compute.h"
#include "hydraulis/spec/model_config.h"

namespace hydraulis {

// InvalidInput when `bytes_per_parameter` bytes for each of `config`'s parameters
// (ModelParameterCount of spec/model_config.h, so sizes whose product passes int64 are counted, not
// wrapped) exceed the memory of `compute`'s device (DeviceMemoryBytes): "the model (N parameters)
// needs at least 1.0 TiB <what>; this machine has 24.0 GiB" ("GPU 0 has ..." on cuda). `what` says
// what those bytes hold, e.g. "per rank for its training state (...)".
void CheckModelMemoryFits(const ModelConfig& config, double bytes_per_parameter,
                          const std::string& what, const ComputeOptions& compute);

}  // namespace hydraulis
