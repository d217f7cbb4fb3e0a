// How far `train`'s predicted step times were from the measured ones, for its closing
// summary.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

#include "hydraulis/runtime/job/training_job.h"

namespace hydraulis::tools {

// The relative error of the predicted step time of every step added, and the fit version
// of the last.
struct PredictionError {
  std::vector<double> errors;
  int fit_version = 0;
  // Records step `r`: its error when it measured a time, and its fit version.
  void Add(const TrainingStepRecord& r) {
    if (r.result.step_ms > 0) {
      errors.push_back(std::abs(r.predicted_step_ms - r.result.step_ms) / r.result.step_ms);
    }
    fit_version = r.fit_version;
  }
  // The mean over the last `k` steps (fewer when the run had fewer), setting `used` to how
  // many; 0 when none.
  double Mean(std::size_t k, std::size_t& used) const {
    used = std::min(k, errors.size());
    double sum = 0;
    for (std::size_t i = errors.size() - used; i < errors.size(); ++i) sum += errors[i];
    return used > 0 ? sum / static_cast<double>(used) : 0.0;
  }
};

}  // namespace hydraulis::tools
