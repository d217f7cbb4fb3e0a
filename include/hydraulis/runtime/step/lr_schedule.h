// The learning rate of each training step: linear warmup, then constant, linear or cosine
// decay to a minimum, with Megatron-LM's formulas and flag names (--lr-warmup-steps,
// --lr-decay-style, --lr-decay-steps, --min-lr). A pure function of the step, so a resumed
// run continues its schedule exactly.
#pragma once

#include "hydraulis/base/enum_names.h"

namespace hydraulis {

enum class LrDecayStyle { kConstant, kLinear, kCosine };
inline constexpr EnumNames<LrDecayStyle, 3> kLrDecayStyleNames{
    {{LrDecayStyle::kConstant, "constant"},
     {LrDecayStyle::kLinear, "linear"},
     {LrDecayStyle::kCosine, "cosine"}}};

struct LrSchedule {
  int warmup_steps = 0;  // steps of linear warmup from 0 to the peak learning rate, >= 0
  LrDecayStyle decay_style = LrDecayStyle::kConstant;
  // The step at which decay reaches min_lr, counted from the run's first step (warmup
  // included, as Megatron's --lr-decay-iters); 0: the run's last step.
  int decay_steps = 0;
  double min_lr = 0.0;  // where linear and cosine decay end, in [0, peak]
};

// InvalidInput naming the flag when `schedule` cannot run in a run of `run_steps` steps at
// peak `peak_lr`: warmup longer than the run, decay ending before warmup does, a minimum
// above the peak, a negative count.
void ValidateLrSchedule(const LrSchedule& schedule, double peak_lr, int run_steps);

// The learning rate of step `step` (0-based) of a run of `run_steps` steps. With n = step + 1
// (the steps done after this one, as Megatron counts): n <= warmup: peak * n / warmup; then
// constant: peak; linear and cosine: min_lr + c * (peak - min_lr), r = (n - warmup) /
// (decay - warmup), c = 1 - r (linear) or (1 + cos(pi r)) / 2 (cosine); n > decay: min_lr.
double LearningRate(const LrSchedule& schedule, double peak_lr, int run_steps, int step);

}  // namespace hydraulis
