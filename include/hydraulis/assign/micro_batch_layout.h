// Where the documents of a plan's micro-batch lie in its packed token sequence: the
// micro-batch's documents in execution order, each cut to the tokens the plan keeps of it
// (Plan::lengths: the sampler's context cut and the long-document rule), laid end to end
// with no padding. The one rule by which the runtime (DistributedTrainer's step) and the
// Python package (torch_data.step_micro_batches) pack a plan's micro-batches.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "hydraulis/assign/plan.h"

namespace hydraulis {

struct MicroBatchLayout {
  std::vector<int> documents;            // indices into the step's batch, in order
  std::vector<std::int64_t> lengths;     // tokens kept of each, >= 1
  std::vector<std::int64_t> cu_seqlens;  // 0, then where each document ends
};

// How many tokens the plan keeps of each batch document: plan.lengths (the planner's cuts),
// or for a plan without lengths (made by hand for a test) every document whole, i.e.
// `available`. `available` (optional with lengths) is each batch document's token count.
// InvalidInput when the counts differ, or a kept length is below 1 or above what is
// available.
std::vector<std::int64_t> KeptLengths(const Plan& plan, std::span<const std::int64_t> available);

// The layouts of pipeline `pipeline`'s micro-batches of `plan`, in execution order.
// Documents keep KeptLengths(plan, available). InvalidInput when `pipeline` is not one of
// the plan's, a document index is out of range, or as KeptLengths.
std::vector<MicroBatchLayout> PipelineLayouts(const Plan& plan, int pipeline,
                                              std::span<const std::int64_t> available = {});

}  // namespace hydraulis
