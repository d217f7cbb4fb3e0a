// Chrome trace event JSON (the "traceEvents" format Perfetto and chrome://tracing load)
// of simulated steps.
#pragma once

#include <span>
#include <string>

#include "hydraulis/sim/simulator.h"

namespace hydraulis {

// The chosen steps (indices into result.steps), at their simulated start times. One
// process per pipeline (pid = pipeline index + 1, named "pipeline <index>"), one thread
// per stage (tid = stage); one complete ("X") event per micro-batch forward or backward
// (cat "forward" / "backward"), one per stage track for each of materialise,
// reduce-scatter and optimizer (cat "sync": the parts the step waits for), one per step on
// a "steps" process, and on a "collectives" process one per step for each of the all-gather
// (tid 0) and reduce-scatter (tid 1) collectives from their first bucket's start to their
// last bucket's end (cat "collective"; with overlap they run beside compute).
// Timestamps and durations in microseconds. InvalidInput when a step index is out of range.
std::string ChromeTraceJson(const SimResult& result, std::span<const int> steps);

}  // namespace hydraulis
