// The cost model fitted to the steps a run measures (docs/design.md, "Calibration from
// measured steps"): the planner starts from a profile fitted elsewhere and adopts a refit of
// each scheme's a, b, c and of each strategy's step time outside its pipelines once that
// predicts the newest steps better than the model in use. Torch-free: the trainer feeds it
// the measurements its ranks agreed on, and the same measurements give the same fits.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "hydraulis/assign/plan.h"
#include "hydraulis/cost/pipeline_time.h"
#include "hydraulis/spec/profile.h"
#include "hydraulis/spec/strategy.h"

namespace hydraulis {

struct CalibrationOptions {
  int window = 16;  // the newest steps a fit reads (>= 2)
  // The newest steps of the window a new fit must predict better than the fit in use; the
  // fit itself is made from the window's older steps (1 <= holdout < window).
  int holdout = 4;
};

// What one step measured, the same on every rank (the ranks agree on it first).
struct MeasuredStep {
  Plan plan;  // the plan the step ran
  // stage_ms[p][s][j]: forward + backward of micro-batch j on stage s of pipeline p, the
  // slowest of the stage's ranks (ms, finite, > 0).
  std::vector<std::vector<std::vector<double>>> stage_ms;
  double step_ms = 0;  // the whole step (ms, finite, > 0)
};

// A cost model the planner runs on: the profile's time terms and, per candidate strategy,
// the step time outside its pipelines (PlannerOptions::strategy_overhead_ms).
struct CalibratedFit {
  Profile profile;
  std::vector<double> overhead_ms;  // per candidate strategy, >= 0
  int version = 0;                  // 0: the profile as given, then 1, 2, ... per adoption
};

// A fit as a file (format hydraulis.calibration/1: its version, its overheads and its
// profile in the profile format), what a checkpoint keeps so a resumed run plans on it.
std::string CalibratedFitToJson(const CalibratedFit& fit);
// InvalidInput naming `source` and the field on a file that is not such a fit.
CalibratedFit ParseCalibratedFit(const std::string& text, const std::string& source);

// The step time (ms) `fit` predicts for `plan`: its slowest pipeline's 1F1B time, each
// micro-batch on the layout the plan gave it, plus the strategy's overhead. InvalidInput
// when the fit's profile lacks one of the plan's schemes.
double PredictStepMs(const CalibratedFit& fit, const OptimizerLayout& layout,
                     const ScheduleOptions& schedule, const Plan& plan);

// The fit from a run's measured steps, refitted after each.
//
// A refit, from the window's older steps: each cp = 1 scheme that ran gets a, b, c by
// non-negative least squares over its micro-batches (FitTimeModel, relative residuals),
// when the samples determine them and that fits them better than scaling; otherwise, and
// for cp > 1 schemes (whose laid-out time the exchange shapes), the profile's a, b, c (and
// kv_ms_per_token) scaled by one least-squares factor. A scheme that never ran is scaled by
// the geometric mean of the factors by which the refitted schemes' predictions moved (its
// hardware is the same; its shape is the profile's). Each strategy's overhead is the median
// of (measured step - predicted compute) over its steps, or over all steps for a strategy
// that never ran, and at least 0. The refit is adopted when its mean relative error on the
// held-out steps is below the fit in use's.
class StepCalibration {
 public:
  // InvalidInput on options out of range or a profile without a candidate's scheme.
  StepCalibration(const Profile& profile, const CandidateSet& candidates,
                  const ScheduleOptions& schedule, const CalibrationOptions& options = {});

  struct Outcome {
    // Why the step's measurement was not used ("" when it was): a time that is not finite
    // or not positive, or tables that do not match the plan.
    std::string rejected;
    bool adopted = false;  // a new fit is in use from now on
    // Mean relative error on the held-out steps: of the fit in use before this step, and of
    // the refit (0 when there was none).
    double in_use_error = 0;
    double refit_error = 0;
  };
  Outcome Add(MeasuredStep step);

  const CalibratedFit& fit() const { return fit_; }
  // What it was made from: the profile refits scale from, the candidates, the schedule and
  // the options.
  const Profile& initial_profile() const { return initial_; }
  const CandidateSet& candidates() const { return candidates_; }
  const ScheduleOptions& schedule() const { return schedule_; }
  const CalibrationOptions& options() const { return options_; }
  // Continues from `fit` (a resumed run's), with an empty window. False, and the fit in use
  // unchanged, when it does not fit these candidates (another number of strategies, or a
  // profile without one of their schemes: a resume under another candidate set).
  bool Restore(const CalibratedFit& fit);
  double PredictMs(const Plan& plan) const;

 private:
  // The refit of the steps [0, end) of the window, or false when none could be made.
  bool Refit(std::size_t end, CalibratedFit& out) const;
  double MeanError(const CalibratedFit& fit, std::size_t begin) const;

  Profile initial_;
  CandidateSet candidates_;
  ScheduleOptions schedule_;
  CalibrationOptions options_;
  CalibratedFit fit_;
  std::deque<MeasuredStep> window_;
};

}  // namespace hydraulis
