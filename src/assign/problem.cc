#include "hydraulis/assign/problem.h"

#include <algorithm>

namespace hydraulis {

std::vector<double> MicroBatchStageMs(std::span<const std::int64_t> lengths,
                                      const PipelineModel& pipeline,
                                      const MicroBatches& micro_batches) {
  std::vector<double> stage_ms;
  stage_ms.reserve(micro_batches.size());
  for (const auto& mb : micro_batches) {
    double t = pipeline.time.c_ms;
    for (int d : mb) t += pipeline.time.DocumentMs(lengths[static_cast<std::size_t>(d)]);
    stage_ms.push_back(t);
  }
  return stage_ms;
}

double PipelineMs(const AssignProblem& problem, const PipelineModel& pipeline,
                  const MicroBatches& micro_batches) {
  return OneFOneBMs(MicroBatchStageMs(problem.lengths, pipeline, micro_batches), pipeline.scheme.pp,
                    problem.schedule);
}

void Evaluate(const AssignProblem& problem, Assignment& a) {
  a.pipeline_ms.assign(a.pipelines.size(), 0.0);
  a.step_ms = 0;
  for (std::size_t p = 0; p < a.pipelines.size(); ++p) {
    a.pipeline_ms[p] = PipelineMs(problem, problem.pipelines[p], a.pipelines[p]);
    a.step_ms = std::max(a.step_ms, a.pipeline_ms[p]);
  }
}

}  // namespace hydraulis
