// Writing a plan as JSON (docs/plan-format.md); plan_lines.h reads such lines back.
#pragma once

#include <string>

#include "hydraulis/assign/plan.h"

namespace hydraulis {

// The plan as JSON, one line when `pretty` is false. With `include_timing` false,
// planning_ms is left out so the text is byte-identical across runs.
std::string PlanToJson(const Plan& plan, bool pretty, bool include_timing = true);

}  // namespace hydraulis
