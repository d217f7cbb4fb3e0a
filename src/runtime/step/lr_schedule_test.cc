// The learning-rate schedule against Megatron-LM's formulas, step by step, and its checks.
#include "hydraulis/runtime/step/lr_schedule.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numbers>
#include <string>

#include "hydraulis/base/error.h"

namespace hydraulis {
namespace {

constexpr double kPeak = 1e-3;

std::string ErrorOf(const LrSchedule& s, double peak, int steps) {
  try {
    ValidateLrSchedule(s, peak, steps);
  } catch (const InvalidInput& e) {
    return e.what();
  }
  return "no error";
}

TEST(LrScheduleTest, ConstantAfterLinearWarmup) {
  LrSchedule s;
  s.warmup_steps = 4;
  const double expected[] = {0.25e-3, 0.5e-3, 0.75e-3, 1e-3, 1e-3, 1e-3};
  for (int step = 0; step < 6; ++step) {
    EXPECT_DOUBLE_EQ(LearningRate(s, kPeak, 6, step), expected[step]) << step;
  }
  EXPECT_DOUBLE_EQ(LearningRate(LrSchedule{}, kPeak, 6, 0), kPeak);  // no warmup
}

// Linear and cosine decay from the end of warmup to min_lr at decay_steps (n = step + 1).
TEST(LrScheduleTest, LinearAndCosineDecayFollowTheirFormulas) {
  for (LrDecayStyle style : {LrDecayStyle::kLinear, LrDecayStyle::kCosine}) {
    LrSchedule s;
    s.warmup_steps = 2;
    s.decay_style = style;
    s.decay_steps = 10;
    s.min_lr = 1e-4;
    for (int step = 0; step < 14; ++step) {
      const double n = step + 1;
      double want = 0;
      if (n <= 2) {
        want = kPeak * n / 2;
      } else if (n > 10) {
        want = 1e-4;
      } else {
        const double r = (n - 2) / 8;
        const double c =
            style == LrDecayStyle::kLinear ? 1 - r : 0.5 * (1 + std::cos(std::numbers::pi * r));
        want = 1e-4 + c * (kPeak - 1e-4);
      }
      EXPECT_NEAR(LearningRate(s, kPeak, 14, step), want, 1e-15)
          << NameOf(style, kLrDecayStyleNames) << " step " << step;
    }
    // Halfway through decay both give the midpoint; the last decay step gives min_lr.
    EXPECT_NEAR(LearningRate(s, kPeak, 14, 5), 5.5e-4, 1e-15);
    EXPECT_NEAR(LearningRate(s, kPeak, 14, 9), 1e-4, 1e-15);
  }
  // decay_steps 0: decay ends at the run's last step.
  LrSchedule run_long;
  run_long.decay_style = LrDecayStyle::kLinear;
  EXPECT_NEAR(LearningRate(run_long, kPeak, 5, 4), 0.0, 1e-18);
  EXPECT_NEAR(LearningRate(run_long, kPeak, 5, 0), kPeak * 0.8, 1e-15);
}

TEST(LrScheduleTest, SchedulesThatCannotRunNameTheFlag) {
  LrSchedule s;
  EXPECT_EQ(ErrorOf(s, kPeak, 10), "no error");
  s.warmup_steps = 11;
  EXPECT_EQ(ErrorOf(s, kPeak, 10), "--lr-warmup-steps 11: longer than the run (--steps 10)");
  s.warmup_steps = -1;
  EXPECT_NE(ErrorOf(s, kPeak, 10).find("--lr-warmup-steps: must be >= 0"), std::string::npos);
  s = LrSchedule{};
  s.min_lr = 2e-3;
  EXPECT_NE(ErrorOf(s, kPeak, 10).find("--min-lr 0.002: must be from 0 to --lr 0.001"),
            std::string::npos);
  s = LrSchedule{};
  s.decay_style = LrDecayStyle::kCosine;
  s.warmup_steps = 5;
  s.decay_steps = 5;
  EXPECT_NE(ErrorOf(s, kPeak, 10).find("--lr-decay-steps 5: decay must end after"),
            std::string::npos);
  s.decay_steps = -3;
  EXPECT_NE(ErrorOf(s, kPeak, 10).find("--lr-decay-steps: must be >= 0"), std::string::npos);
  EXPECT_EQ(ParseName("cosine", kLrDecayStyleNames, "--lr-decay-style"), LrDecayStyle::kCosine);
}

}  // namespace
}  // namespace hydraulis
