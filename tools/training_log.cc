#include "training_log.h"

#include <nlohmann/json.hpp>
#include <utility>

#include "hydraulis/base/error.h"

namespace hydraulis::tools {

TrainingLog::TrainingLog(const std::string& log_json, const std::string& tensorboard,
                         std::string config, bool append)
    : log_json_(log_json), config_(std::move(config)) {
  if (!log_json.empty()) {
    log_.open(log_json, append ? std::ios::app : std::ios::trunc);
    if (!log_) throw InvalidInput("--log-json: cannot write " + log_json);
  }
  if (!tensorboard.empty()) events_ = std::make_unique<EventWriter>(tensorboard);
}

void TrainingLog::WriteStep(const TrainingStepRecord& r, const ComputeOptions& compute,
                            int world_size, bool profile_derived) {
  if (!log_.is_open() && !events_) return;
  const std::string line = StepLogLine(r, compute, world_size, profile_derived);
  if (log_.is_open()) {
    std::string record = line;
    if (!config_logged_) {
      // The first record this process writes carries the run's configuration.
      nlohmann::json j = nlohmann::json::parse(record);
      j["config"] = config_;
      record = j.dump();
      config_logged_ = true;
    }
    log_ << record << '\n' << std::flush;
    if (!log_) {
      throw IoError("--log-json " + log_json_ + ": write failed (step " + std::to_string(r.step) +
                    ")");
    }
  }
  if (events_) events_->Write(line);
}

void TrainingLog::WriteEvaluation(const EvaluationRecord& e) {
  if (!log_.is_open() && !events_) return;
  const std::string line = EvaluationLogLine(e);
  if (log_.is_open()) {
    log_ << line << '\n' << std::flush;
    if (!log_) throw IoError("--log-json " + log_json_ + ": write failed (evaluation)");
  }
  if (events_) events_->Write(line);
}

void TrainingLog::Close() {
  if (events_) events_->Close();
}

}  // namespace hydraulis::tools
