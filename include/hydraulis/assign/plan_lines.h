// Reading back the plans `hydraulis plan --dataset` writes: one JSON object per line
// (docs/plan-format.md), the input of `summarize`.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace hydraulis {

// The facts of one plan a summary needs.
struct PlanLine {
  std::string strategy;  // the strategy's name and description
  std::int64_t num_documents = 0;
  std::int64_t num_tokens = 0;
  double estimated_step_ms = 0;
  double lower_bound_ms = 0;
  double planning_ms = 0;  // 0 when the plan was written without timing
};

// Parses every non-empty line of `text` (read from `source`). Keys it does not know are
// ignored; every key it knows is checked, even those the summary does not print.
// InvalidInput "<source>:<line>: <field path>: ..." for invalid JSON, a line that is not an
// object, a format tag other than hydraulis.plan/1, a missing or mistyped field, negative
// counts or times, a lower bound above the plan's estimate, no pipelines, a pipeline whose
// {cp, tp, pp} is out of range or differs from strategy.pipelines, micro-batches that do
// not hold every document index once, or a cp > 1 pipeline without a valid shard layout per
// micro-batch (a cp 1 pipeline with one); "<source>: no plans" for a text without any.
std::vector<PlanLine> ParsePlanLines(const std::string& text, const std::string& source);

}  // namespace hydraulis
