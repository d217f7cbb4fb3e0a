// The flags of `hydraulis train`: the run's options they bind to, their defaults and help,
// the checks of --calibrate and --save-profile, and the flags written back as a --config file.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "hydraulis/runtime/job/training_run.h"

namespace hydraulis::tools {

// The run's options, and the flags that are not the run's: how ranks start, where the log
// goes, fault injection.
struct TrainArgs {
  TrainingRunOptions run;
  std::string log_json;
  int nproc = 0;
  int master_port = 0;
  // Fault injection for the launcher tests: this rank exits with status 3 before this step.
  int fail_rank = -1;
  int fail_step = 0;
  bool verbose = false;      // --nproc: every rank's lines and the launcher's, not one per failure
  std::string calibrate;     // on or off (TrainingJobOptions::calibrate); "": on on the CPU
  std::string save_profile;  // where rank 0 writes the calibrated profile at the end
  std::string save_measurements;  // where rank 0 writes each step's measurement (replay)
  std::string tensorboard;        // TensorBoard log directory (rank 0 streams its records there)
  const CLI::App* command = nullptr;  // to write the effective configuration

  // Registers every flag on `cmd` (the order of its --help) and its --config footer, and
  // keeps `cmd` for EffectiveConfig; `this` must outlive the parse.
  void AddTo(CLI::App* cmd);
};

// --calibrate and --save-profile, checked before any rank starts: sets
// a.run.job.calibrate (default: off on cuda, on on the CPU); InvalidInput when the saved
// profile would not be the calibration's or would overwrite the profile the run reads.
void ResolveCalibration(TrainArgs& a);

// Every flag of the run as a --config file reads it: written beside the checkpoints and into
// the first step record of --log-json, so a run can be repeated from its own directory.
std::string EffectiveConfig(const TrainArgs& a);

}  // namespace hydraulis::tools
