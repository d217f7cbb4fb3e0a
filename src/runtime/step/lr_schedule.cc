#include "hydraulis/runtime/step/lr_schedule.h"

#include <fmt/core.h>

#include <cmath>
#include <numbers>

#include "hydraulis/base/error.h"

namespace hydraulis {

namespace {

int DecayEnd(const LrSchedule& s, int run_steps) {
  return s.decay_steps > 0 ? s.decay_steps : run_steps;
}

}  // namespace

void ValidateLrSchedule(const LrSchedule& s, double peak_lr, int run_steps) {
  if (s.warmup_steps < 0) {
    throw InvalidInput("--lr-warmup-steps: must be >= 0, got " + std::to_string(s.warmup_steps));
  }
  if (s.warmup_steps > run_steps) {
    throw InvalidInput("--lr-warmup-steps " + std::to_string(s.warmup_steps) +
                       ": longer than the run (--steps " + std::to_string(run_steps) + ")");
  }
  if (s.decay_steps < 0) {
    throw InvalidInput("--lr-decay-steps: must be >= 0, got " + std::to_string(s.decay_steps));
  }
  if (!(s.min_lr >= 0.0) || !std::isfinite(s.min_lr) || s.min_lr > peak_lr) {
    throw InvalidInput("--min-lr " + fmt::format("{}", s.min_lr) + ": must be from 0 to --lr " +
                       fmt::format("{}", peak_lr));
  }
  if (s.decay_style != LrDecayStyle::kConstant && DecayEnd(s, run_steps) <= s.warmup_steps) {
    throw InvalidInput("--lr-decay-steps " + std::to_string(DecayEnd(s, run_steps)) +
                       ": decay must end after the warmup's " + std::to_string(s.warmup_steps) +
                       " steps");
  }
}

double LearningRate(const LrSchedule& s, double peak_lr, int run_steps, int step) {
  const double n = static_cast<double>(step) + 1;
  const double warmup = s.warmup_steps;
  if (s.warmup_steps > 0 && n <= warmup) return peak_lr * n / warmup;
  if (s.decay_style == LrDecayStyle::kConstant) return peak_lr;
  const double end = DecayEnd(s, run_steps);
  if (n > end) return s.min_lr;
  const double ratio = (n - warmup) / (end - warmup);
  const double c = s.decay_style == LrDecayStyle::kLinear
                       ? 1.0 - ratio
                       : 0.5 * (std::cos(std::numbers::pi * ratio) + 1.0);
  return s.min_lr + c * (peak_lr - s.min_lr);
}

}  // namespace hydraulis
