// Writing a plan as JSON (docs/plan-format.md); plan_lines.h reads such lines back.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "hydraulis/assign/plan.h"

namespace hydraulis {

// The plan as JSON, one line when `pretty` is false. With `include_timing` false,
// planning_ms is left out so the text is byte-identical across runs.
std::string PlanToJson(const Plan& plan, bool pretty, bool include_timing = true);

// The plan PlanToJson wrote, read back whole (a copy of a plan in another process: Python's
// pickle). The format keeps no document lengths, so `lengths` gives them (the plan's
// lengths, after the long-document rule). Every field is checked as ParsePlanLines checks
// it; InvalidInput "<source>: ..." also when the text is not one plan, or when `lengths`
// disagrees with its num_documents or num_tokens.
Plan PlanFromJson(const std::string& text, std::vector<std::int64_t> lengths,
                  const std::string& source);

}  // namespace hydraulis
