#include "hydraulis/assign/plan_checker.h"
#include "hydraulis/base/tolerance.h"

#include <cmath>
#include <vector>

namespace hydraulis {
namespace {

bool Close(double a, double b) { return NearlyEqual(a, b); }

}  // namespace

std::string CheckCoverage(const std::vector<MicroBatches>& pipelines, std::size_t num_documents) {
  std::vector<int> seen(num_documents, 0);
  for (std::size_t p = 0; p < pipelines.size(); ++p) {
    for (std::size_t j = 0; j < pipelines[p].size(); ++j) {
      for (int d : pipelines[p][j]) {
        if (d < 0 || static_cast<std::size_t>(d) >= num_documents) {
          return "pipeline " + std::to_string(p) + " micro-batch " + std::to_string(j) +
                 " has invalid document index " + std::to_string(d);
        }
        if (seen[static_cast<std::size_t>(d)]++) {
          return "document " + std::to_string(d) + " is assigned more than once";
        }
      }
    }
  }
  for (std::size_t d = 0; d < num_documents; ++d) {
    if (!seen[d]) return "document " + std::to_string(d) + " is not assigned";
  }
  return "";
}

std::string CheckCpLayouts(const PipelinePlan& pipeline) {
  const int cp = pipeline.scheme.cp;
  if (cp == 1) {
    return pipeline.cp_layouts.empty() ? "" : "a cp 1 pipeline has shard layouts";
  }
  if (pipeline.cp_layouts.size() != pipeline.micro_batches.size()) {
    return std::to_string(pipeline.cp_layouts.size()) + " shard layouts for " +
           std::to_string(pipeline.micro_batches.size()) + " micro-batches";
  }
  for (std::size_t j = 0; j < pipeline.micro_batches.size(); ++j) {
    const std::string error =
        CpLayoutError(pipeline.cp_layouts[j], pipeline.micro_batches[j].size(), cp);
    if (!error.empty()) return "micro-batch " + std::to_string(j) + ": " + error;
  }
  return "";
}

std::string CheckAssignment(const AssignProblem& problem, const Assignment& a) {
  if (a.pipelines.size() != problem.pipelines.size()) {
    return "assignment has " + std::to_string(a.pipelines.size()) + " pipelines, strategy has " +
           std::to_string(problem.pipelines.size());
  }
  if (std::string error = CheckCoverage(a.pipelines, problem.lengths.size()); !error.empty()) {
    return error;
  }
  double step = 0;
  for (std::size_t p = 0; p < a.pipelines.size(); ++p) {
    const auto& pipe = problem.pipelines[p];
    for (std::size_t j = 0; j < a.pipelines[p].size(); ++j) {
      const auto& mb = a.pipelines[p][j];
      const std::string where =
          "pipeline " + std::to_string(p) + " micro-batch " + std::to_string(j);
      if (mb.empty()) return where + " is empty";
      std::int64_t tokens = 0;
      for (int d : mb) tokens += problem.lengths[static_cast<std::size_t>(d)];
      if (tokens > pipe.capacity_tokens) {
        return where + " holds " + std::to_string(tokens) + " tokens, capacity " +
               std::to_string(pipe.capacity_tokens);
      }
      if (pipe.scheme.cp > 1) {
        std::vector<std::int64_t> lengths;
        for (int d : mb) lengths.push_back(problem.lengths[static_cast<std::size_t>(d)]);
        const CpLayout layout = LayOutMicroBatch(lengths, pipe.shard);
        const std::vector<double> memory = RankMemoryTokens(lengths, layout, pipe.shard);
        for (std::size_t r = 0; r < memory.size(); ++r) {
          if (!pipe.shard.FitsRank(memory[r])) {
            return where + " needs " + std::to_string(memory[r]) + " tokens of memory on cp rank " +
                   std::to_string(r) + ", which holds " +
                   std::to_string(pipe.shard.rank_capacity_tokens);
          }
        }
      }
    }
    const double ms = PipelineMs(problem, pipe, a.pipelines[p]);
    if (a.pipeline_ms.size() != a.pipelines.size() || !Close(a.pipeline_ms[p], ms)) {
      return "pipeline " + std::to_string(p) + " time is not the cost model's " +
             std::to_string(ms);
    }
    step = std::max(step, ms);
  }
  if (!Close(a.step_ms, step))
    return "step time is not the slowest pipeline's " + std::to_string(step);
  return "";
}

}  // namespace hydraulis
