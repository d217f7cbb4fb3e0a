// A run's measured steps as a file, and the replay of its calibration from it
// (`hydraulis train --save-measurements`, `hydraulis simulate --replay`; docs/design.md,
// "Calibration from measured steps"). The file is JSON lines: a header with what the run's
// calibration started from (format hydraulis.measurements/1), then one line per step with
// the plan it ran, its documents' lengths and what the ranks agreed they measured. A replay
// feeds those steps to a StepCalibration as the run did, so it adopts the same fits at the
// same steps, and lets a user try another window, hold-out or starting profile offline.
#pragma once

#include <string>
#include <vector>

#include "hydraulis/assign/step_calibration.h"

namespace hydraulis {

// What a run's calibration started from.
struct MeasuredRunHeader {
  Profile profile;  // the profile the refits scale from (StepCalibration's)
  CandidateSet candidates;
  ScheduleOptions schedule;
  CalibrationOptions calibration;
  // The fit in use at the first recorded step: version 0 (the profile) unless the run
  // resumed from a checkpoint that kept a fit.
  CalibratedFit start;
};

struct MeasuredRunStep {
  int step = 0;
  MeasuredStep measured;
};

struct MeasuredRun {
  MeasuredRunHeader header;
  std::vector<MeasuredRunStep> steps;
};

// The header line and one step's line (each one line of JSON, without the newline; numbers
// written so they read back to the same doubles).
std::string MeasuredRunHeaderLine(const MeasuredRunHeader& header);
std::string MeasuredRunStepLine(int step, const MeasuredStep& measured);

// Reads a file of such lines. InvalidInput "<source>: line N: <field>: ..." on a header or
// step that is not one (another format, a missing field, a plan that does not read back
// with its lengths, times that are not numbers); a step whose tables do not match its plan
// is kept, and the replay reports it as the run did (StepCalibration::Add's `rejected`).
MeasuredRun ParseMeasuredRun(const std::string& text, const std::string& source);

// One step of a replay: what it measured, what the fit in use then predicted for its plan,
// and what the calibration did with it.
struct ReplayedStep {
  int step = 0;
  double measured_ms = 0;
  double predicted_ms = 0;  // by the fit in use before the step (PredictStepMs)
  int fit_version = 0;      // of that fit
  bool adopted = false;     // a refit was adopted after the step
  std::string rejected;     // why the step was not used ("" when it was)
};

struct CalibrationReplay {
  std::vector<ReplayedStep> steps;
  CalibratedFit fit;  // the fit in use after the last step
};

// Replays `run`'s steps through a StepCalibration made from its header, with `options`
// for the window and hold-out, from `profile` (the header's, or another to try) and from
// the header's starting fit when `profile` is the header's and that fit is a refit.
CalibrationReplay ReplayCalibration(const MeasuredRun& run, const Profile& profile,
                                    const CalibrationOptions& options);

}  // namespace hydraulis
