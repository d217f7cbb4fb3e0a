// Where rank 0 of `train` records its steps and evaluations besides stdout: --log-json (one
// JSON object a line, flushed, so a log read during or after a failed run never holds half a
// record) and --tensorboard (event_writer.h).
#pragma once

#include <fstream>
#include <memory>
#include <string>

#include "event_writer.h"
#include "hydraulis/runtime/job/training_job.h"
#include "hydraulis/runtime/model/compute.h"

namespace hydraulis::tools {

// Both sinks of one run; an empty path is a sink not written.
class TrainingLog {
 public:
  // Opens `log_json`, appending when `append` (a resumed run continues its log), then starts
  // the event writer on `tensorboard`. `config` (EffectiveConfig) goes into the first step
  // record this process writes. InvalidInput when the log cannot be opened.
  TrainingLog(const std::string& log_json, const std::string& tensorboard, std::string config,
              bool append);

  // Step `r`'s record (StepLogLine of `r` and the other arguments), made only when a sink
  // is written; IoError when a write failed.
  void WriteStep(const TrainingStepRecord& r, const ComputeOptions& compute, int world_size,
                 bool profile_derived);
  // An evaluation's record (EvaluationLogLine), made only when a sink is written; IoError
  // when a write failed.
  void WriteEvaluation(const EvaluationRecord& e);
  // Waits for the event writer to finish its files; IoError when it failed.
  void Close();

 private:
  std::string log_json_;
  std::string config_;
  bool config_logged_ = false;
  std::ofstream log_;
  std::unique_ptr<EventWriter> events_;
};

}  // namespace hydraulis::tools
