// Summaries of a simulated run: JSON for tools and a compact table for the terminal.
#pragma once

#include <string>

#include "hydraulis/sim/simulator.h"

namespace hydraulis {

// The run as JSON (docs/simulator.md, "Summary"): format, system, steps, total_time_ms,
// total_tokens, tokens_per_second, mean_step_ms, the options, and per_step with step_ms,
// strategy, the phases, and per pipeline busy time and bubble share. Deterministic:
// nothing wall-clock.
std::string SimSummaryJson(const SimResult& result);

// One line per step and a total line, fixed-width columns.
std::string SimTable(const SimResult& result);

}  // namespace hydraulis
