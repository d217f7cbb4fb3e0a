// One step's work as the simulator times it: the batch after the long-document rule, the
// chosen strategy, and per pipeline its micro-batches in execution order.
#pragma once

#include <cstdint>
#include <vector>

#include "hydraulis/spec/scheme.h"
#include "hydraulis/spec/strategy.h"

namespace hydraulis {

struct MicroBatchWork {
  std::vector<int> documents;  // indices into StepWork::lengths
  std::int64_t tokens = 0;     // real tokens (the documents' lengths summed)
  // Tokens whose activations travel between stages: the micro-batch padded to the
  // variable-length alignment (128), or to the context length for the padding system.
  std::int64_t activation_tokens = 0;
  double stage_ms = 0;  // forward + backward of one stage, from the scheme's time model
};

struct PipelineWork {
  Scheme scheme;
  std::vector<MicroBatchWork> micro_batches;  // execution order
  double planned_ms = 0;  // exact 1F1B time without communication (the plan's estimate)
};

struct StepWork {
  int strategy_index = 0;  // position in the candidate set
  Strategy strategy;
  std::vector<std::int64_t> lengths;    // the batch after the long-document rule
  std::vector<PipelineWork> pipelines;  // in the order of strategy.pipelines
  double planned_step_ms = 0;           // max of planned_ms
  int truncated_documents = 0;
  std::int64_t truncated_tokens = 0;  // tokens cut by the long-document rule
};

}  // namespace hydraulis
