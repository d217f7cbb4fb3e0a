// What `hydraulis replay` reports of a calibration replay: the table it prints and the JSON
// it writes (docs/simulator.md, "Replaying a run's calibration").
#pragma once

#include <optional>
#include <string>

#include "hydraulis/assign/measured_run.h"

namespace hydraulis::tools {

// The replay's end in two numbers.
struct ReplaySummary {
  int tail_steps = 0;             // the last steps the error is averaged over (<= 10)
  double last_steps_error = 0;    // their mean relative error of prediction
  std::optional<int> settled_at;  // the first step from which every step is within 10 %
};
ReplaySummary Summarize(const CalibrationReplay& replay);

// The steps and the summary as JSON (steps: step, measured_ms, predicted_ms, fit, adopted,
// rejected; last_steps_error, within_10_percent_from_step, fit).
std::string ReplayJson(const CalibrationReplay& replay, const ReplaySummary& summary);

// One line per step, then the summary line, on stdout.
void PrintReplay(const CalibrationReplay& replay, const ReplaySummary& summary);

}  // namespace hydraulis::tools
