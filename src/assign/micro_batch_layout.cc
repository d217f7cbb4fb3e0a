#include "hydraulis/assign/micro_batch_layout.h"

#include <string>

#include "hydraulis/base/error.h"

namespace hydraulis {

std::vector<std::int64_t> KeptLengths(const Plan& plan, std::span<const std::int64_t> available) {
  const bool planned = !plan.lengths.empty();
  if (planned && !available.empty() && available.size() != plan.lengths.size()) {
    throw InvalidInput("micro-batch layout: the plan keeps " + std::to_string(plan.lengths.size()) +
                       " documents, the batch has " + std::to_string(available.size()));
  }
  std::vector<std::int64_t> kept =
      planned ? plan.lengths : std::vector<std::int64_t>(available.begin(), available.end());
  for (std::size_t d = 0; d < kept.size(); ++d) {
    if (kept[d] < 1 || (!available.empty() && kept[d] > available[d])) {
      throw InvalidInput(
          "micro-batch layout: document " + std::to_string(d) + " keeps " +
          std::to_string(kept[d]) + " tokens" +
          (available.empty() ? std::string() : " of " + std::to_string(available[d])));
    }
  }
  return kept;
}

std::vector<MicroBatchLayout> PipelineLayouts(const Plan& plan, int pipeline,
                                              std::span<const std::int64_t> available) {
  if (pipeline < 0 || pipeline >= static_cast<int>(plan.pipelines.size())) {
    throw InvalidInput("micro-batch layout: pipeline " + std::to_string(pipeline) +
                       " is not one of the plan's " + std::to_string(plan.pipelines.size()));
  }
  const std::vector<std::int64_t> kept = KeptLengths(plan, available);
  std::vector<MicroBatchLayout> out;
  for (const std::vector<int>& mb :
       plan.pipelines[static_cast<std::size_t>(pipeline)].micro_batches) {
    MicroBatchLayout layout;
    layout.cu_seqlens.push_back(0);
    for (int d : mb) {
      if (d < 0 || static_cast<std::size_t>(d) >= kept.size()) {
        throw InvalidInput("micro-batch layout: document " + std::to_string(d) +
                           " is out of range (" + std::to_string(kept.size()) + " documents)");
      }
      layout.documents.push_back(d);
      layout.lengths.push_back(kept[static_cast<std::size_t>(d)]);
      layout.cu_seqlens.push_back(layout.cu_seqlens.back() + layout.lengths.back());
    }
    out.push_back(std::move(layout));
  }
  return out;
}

}  // namespace hydraulis
