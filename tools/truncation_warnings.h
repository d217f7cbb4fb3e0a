// The warning `plan` and `simulate` print on stderr when documents longer than any strategy
// can hold were truncated rather than rejected: how many, and the tokens lost.
#pragma once

#include "hydraulis/assign/plan.h"
#include "hydraulis/sim/simulator.h"

namespace hydraulis::tools {

// One planned batch's truncations; `step` >= 0 prefixes "step N: " (a sampled batch).
void WarnTruncation(const Plan& plan, int step);

// The truncations of every simulated step, summed into one warning.
void WarnTruncation(const SimResult& result);

}  // namespace hydraulis::tools
