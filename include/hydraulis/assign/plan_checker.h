// Independent check of an assignment: used by tests and, in debug builds, after each stage.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "hydraulis/assign/plan.h"
#include "hydraulis/assign/problem.h"

namespace hydraulis {

// Returns "" when `assignment` is valid for `problem`: one entry per pipeline, every
// document index valid and assigned exactly once, no empty micro-batch, every micro-batch
// within its pipeline's capacity (for cp > 1 also every cp rank of its laid-out micro-batch
// within the rank's memory), and pipeline_ms/step_ms equal to the cost model's
// values (relative tolerance 1e-9). Otherwise a description of the first violation.
std::string CheckAssignment(const AssignProblem& problem, const Assignment& assignment);

// The part of the check every executor of a plan repeats (the runtime's step): "" when every
// document index in `pipelines` (per pipeline, its micro-batches) is in [0, num_documents)
// and appears exactly once; otherwise the first violation.
std::string CheckCoverage(const std::vector<MicroBatches>& pipelines, std::size_t num_documents);

// "" when `pipeline`'s shard layouts have the shape its scheme needs: none for cp = 1; for
// cp > 1 one per micro-batch, one entry per document, each a rank in [0, cp) or kSharded.
std::string CheckCpLayouts(const PipelinePlan& pipeline);

}  // namespace hydraulis
