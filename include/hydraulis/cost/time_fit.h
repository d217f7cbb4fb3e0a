// Fitting the time model of one scheme (method.md 2.1) to measured micro-batch times:
// T(mb) = sum_i (a s_i^2 + b s_i) + c with a, b, c >= 0, by non-negative least squares.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "hydraulis/cost/time_model.h"

namespace hydraulis {

// One measurement: the document lengths of one micro-batch and the time one pipeline stage
// took for its forward and backward.
struct TimeSample {
  std::vector<std::int64_t> lengths;  // each >= 1, at least one document
  double ms = 0;                      // finite, > 0
};

// Which residuals the fit minimises.
enum class TimeFitWeighting {
  // sum ((T(mb) - ms) / ms)^2: every sample counts alike whatever its size, so the short
  // micro-batches (which fix c) are not drowned by the long ones (which fix a).
  kRelative,
  // sum (T(mb) - ms)^2: plain least squares, dominated by the longest samples.
  kAbsolute,
};

struct TimeFitOptions {
  TimeFitWeighting weighting = TimeFitWeighting::kRelative;
};

// The fitted model and how well it explains the samples.
struct TimeFit {
  TimeModel model;
  // 1 - SS_res / SS_tot of the unweighted residuals (1 is perfect; it can be negative).
  double r_squared = 0;
  // max_j |T(mb_j) - ms_j| / ms_j and the root mean square of the same ratios.
  double max_relative_error = 0;
  double rms_relative_error = 0;
  int samples = 0;
};

// The exact non-negative least-squares fit of a, b, c: with three unknowns the optimum is
// the unconstrained least-squares solution on some subset of the variables (the others at
// 0), so every subset is solved and the best non-negative solution is kept.
// InvalidInput (naming the sample) on an invalid sample, and when the samples do not
// determine all three coefficients (fewer than three samples, or samples that do not vary
// independently in sum s^2, sum s and 1, e.g. all of one length).
TimeFit FitTimeModel(std::span<const TimeSample> samples, const TimeFitOptions& options = {});

// A stage time of a micro-batch whose documents are all sharded over cp ranks (docs/design.md,
// "Context parallelism"): c + sum_i ((a s_i^2 + b s_i) / cp + kv_ms_per_token * s_i), with
// a, b, c of `placed`, the fit of documents placed whole.
double ShardedMicroBatchMs(const TimeModel& placed, int cp, double kv_ms_per_token,
                           std::span<const std::int64_t> lengths);

// The fit of a <cp, tp, 1> scheme from micro-batches timed with every document sharded:
// a, b, c stay the <1, tp, 1> fit `placed` (documents placed whole run as on the tp group),
// and kv_ms_per_token is the one-parameter non-negative least squares of the extra time
// per sharded token, ms_j - ShardedMicroBatchMs(placed, cp, 0, lengths_j) ~ kv * tokens_j,
// under the same weighting as FitTimeModel. The errors describe ShardedMicroBatchMs with
// the fitted kv against the samples.
struct ShardedTimeFit {
  double kv_ms_per_token = 0;
  TimeFit fit;  // model: `placed`; r_squared and errors of the sharded prediction
};
// InvalidInput on an invalid sample, no sample, or cp < 2.
ShardedTimeFit FitShardedTimeModel(std::span<const TimeSample> samples, const TimeModel& placed,
                                   int cp, const TimeFitOptions& options = {});

}  // namespace hydraulis
