// Tests of the non-negative least-squares fit of the time model: exact recovery, the
// constrained optimum against a brute-force oracle, and input errors.
#include "hydraulis/cost/time_fit.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "hydraulis/base/error.h"

namespace hydraulis {
namespace {

std::vector<TimeSample> Synthetic(const TimeModel& m) {
  std::vector<TimeSample> out;
  for (std::int64_t s = 16; s <= 4096; s *= 2) out.push_back({{s}, m.MicroBatchMs({&s, 1})});
  const std::vector<std::vector<std::int64_t>> packs = {
      {100, 300, 50}, {700, 20, 20, 1}, {1000, 1000}};
  for (const auto& p : packs) out.push_back({p, m.MicroBatchMs(p)});
  return out;
}

double WeightedSsr(std::span<const TimeSample> samples, const TimeModel& m, bool relative) {
  double ssr = 0;
  for (const TimeSample& s : samples) {
    const double r = m.MicroBatchMs(s.lengths) - s.ms;
    ssr += relative ? (r / s.ms) * (r / s.ms) : r * r;
  }
  return ssr;
}

TEST(TimeFitTest, RecoversExactCoefficients) {
  const TimeModel truth{2.5e-6, 0.031, 4.2};
  for (TimeFitWeighting w : {TimeFitWeighting::kRelative, TimeFitWeighting::kAbsolute}) {
    const TimeFit fit = FitTimeModel(Synthetic(truth), {w});
    EXPECT_NEAR(fit.model.a_ms_per_token2, truth.a_ms_per_token2, 1e-9 * truth.a_ms_per_token2);
    EXPECT_NEAR(fit.model.b_ms_per_token, truth.b_ms_per_token, 1e-9 * truth.b_ms_per_token);
    EXPECT_NEAR(fit.model.c_ms, truth.c_ms, 1e-8 * truth.c_ms);
    EXPECT_NEAR(fit.r_squared, 1.0, 1e-12);
    EXPECT_LT(fit.max_relative_error, 1e-9);
    EXPECT_EQ(fit.samples, 12);  // 9 single documents, 3 packs
  }
}

TEST(TimeFitTest, RecoversAZeroCoefficientExactly) {
  const TimeModel truth{0, 0.05, 1.0};  // no quadratic term: a boundary of the feasible set
  const TimeFit fit = FitTimeModel(Synthetic(truth));
  EXPECT_NEAR(fit.model.a_ms_per_token2, 0, 1e-15);
  EXPECT_NEAR(fit.model.b_ms_per_token, 0.05, 1e-12);
  EXPECT_NEAR(fit.model.c_ms, 1.0, 1e-9);
}

// Times that fall below a line through the longest samples: the unconstrained intercept
// is negative, so c must be clamped to 0 and a, b refitted.
TEST(TimeFitTest, StaysNonNegativeWhenTheUnconstrainedFitIsNot) {
  std::vector<TimeSample> samples;
  for (std::int64_t s : {64, 128, 256, 512, 1024, 2048}) {
    samples.push_back({{s}, 0.02 * static_cast<double>(s) - 0.5 + 1e-7 * double(s * s)});
  }
  const TimeFit fit = FitTimeModel(samples);
  EXPECT_EQ(fit.model.c_ms, 0.0);
  EXPECT_GE(fit.model.a_ms_per_token2, 0.0);
  EXPECT_GT(fit.model.b_ms_per_token, 0.0);
  EXPECT_LT(fit.max_relative_error, 0.5);
}

// The exact optimum on noisy data, some of whose true coefficients are 0. The objective is
// smooth and convex on the non-negative orthant, where optimality (KKT) is coordinate-wise,
// so no non-negative step along one coordinate may improve on the fit.
TEST(TimeFitTest, IsTheNonNegativeOptimumOnNoisyData) {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> noise(-0.3, 0.3);
  std::uniform_int_distribution<std::int64_t> length(1, 3000);
  for (int trial = 0; trial < 50; ++trial) {
    SCOPED_TRACE(trial);
    const TimeModel truth{trial % 3 == 0 ? 0.0 : 1e-6, 0.01, trial % 2 == 0 ? 0.0 : 2.0};
    std::vector<TimeSample> samples;
    for (int j = 0; j < 8; ++j) {
      std::vector<std::int64_t> docs;
      for (int d = 0; d <= j % 3; ++d) docs.push_back(length(rng));
      samples.push_back({docs, truth.MicroBatchMs(docs) * (1 + noise(rng)) + 0.05});
    }
    for (bool relative : {true, false}) {
      const TimeFit fit = FitTimeModel(
          samples, {relative ? TimeFitWeighting::kRelative : TimeFitWeighting::kAbsolute});
      const TimeModel& m = fit.model;
      ASSERT_GE(m.a_ms_per_token2, 0);
      ASSERT_GE(m.b_ms_per_token, 0);
      ASSERT_GE(m.c_ms, 0);
      const double best = WeightedSsr(samples, m, relative);
      for (int k = 0; k < 3; ++k) {
        for (double step : {1e-3, 1e-2, 1e-1, 1.0}) {
          for (double sign : {-1.0, 1.0}) {
            TimeModel p = m;
            double* v = k == 0 ? &p.a_ms_per_token2 : k == 1 ? &p.b_ms_per_token : &p.c_ms;
            const double unit = k == 0 ? 1e-6 : k == 1 ? 1e-2 : 1.0;
            *v = std::max(0.0, *v + sign * step * unit);
            EXPECT_GE(WeightedSsr(samples, p, relative), best * (1 - 1e-9));
          }
        }
      }
    }
  }
}

TEST(TimeFitTest, RejectsTooFewOrDegenerateSamples) {
  const TimeModel m{1e-6, 0.01, 1};
  std::vector<TimeSample> two = {{{100}, m.DocumentMs(100) + 1}, {{200}, m.DocumentMs(200) + 1}};
  EXPECT_THROW(FitTimeModel(two), InvalidInput);
  // Three samples of one length cannot tell a, b and c apart.
  std::vector<TimeSample> same = {{{100}, 2.0}, {{100}, 2.1}, {{100}, 1.9}};
  EXPECT_THROW(FitTimeModel(same), InvalidInput);
  // Two lengths only: s^2, s and 1 take two distinct rows, rank 2.
  std::vector<TimeSample> two_lengths = {{{100}, 2.0}, {{200}, 3.0}, {{100}, 2.1}};
  EXPECT_THROW(FitTimeModel(two_lengths), InvalidInput);
}

TEST(TimeFitTest, RejectsInvalidSamplesNamingThem) {
  std::vector<TimeSample> s = {{{100}, 2.0}, {{200}, 3.0}, {{400}, 5.0}};
  s[1].ms = -1;
  try {
    FitTimeModel(s);
    FAIL();
  } catch (const InvalidInput& e) {
    EXPECT_NE(std::string(e.what()).find("time samples[1].ms"), std::string::npos) << e.what();
  }
  s[1].ms = std::numeric_limits<double>::quiet_NaN();
  EXPECT_THROW(FitTimeModel(s), InvalidInput);
  s[1] = {{}, 3.0};
  EXPECT_THROW(FitTimeModel(s), InvalidInput);
  s[1] = {{200, 0}, 3.0};
  try {
    FitTimeModel(s);
    FAIL();
  } catch (const InvalidInput& e) {
    EXPECT_NE(std::string(e.what()).find("time samples[1].lengths[1]"), std::string::npos)
        << e.what();
  }
}

// The sharded fit keeps the placed a, b, c and recovers the exchange per token that the
// samples carry beyond (a s^2 + b s) / cp + c; a placed fit that already over-predicts
// gives 0, not a negative exchange.
TEST(TimeFitTest, ShardedFitRecoversTheExchangePerToken) {
  const TimeModel placed{1e-4, 2e-2, 3.0};
  const double kv = 5e-3;
  std::vector<TimeSample> samples;
  for (const std::vector<std::int64_t>& lengths :
       std::vector<std::vector<std::int64_t>>{{128}, {512}, {2048}, {300, 700}, {64, 64, 900}}) {
    samples.push_back({lengths, ShardedMicroBatchMs(placed, 2, kv, lengths)});
  }
  const ShardedTimeFit fit = FitShardedTimeModel(samples, placed, 2);
  EXPECT_NEAR(fit.kv_ms_per_token, kv, 1e-12);
  EXPECT_EQ(fit.fit.model.c_ms, placed.c_ms);
  EXPECT_LT(fit.fit.max_relative_error, 1e-12);
  // 2048 tokens sharded over 2: c + (a 2048^2 + b 2048) / 2 + kv 2048.
  EXPECT_NEAR(ShardedMicroBatchMs(placed, 2, kv, std::vector<std::int64_t>{2048}),
              3.0 + (1e-4 * 2048 * 2048 + 2e-2 * 2048) / 2 + kv * 2048, 1e-9);
  for (TimeSample& s : samples) s.ms = ShardedMicroBatchMs(placed, 2, 0, s.lengths) * 0.8;
  EXPECT_EQ(FitShardedTimeModel(samples, placed, 2).kv_ms_per_token, 0.0);
  EXPECT_THROW(FitShardedTimeModel(samples, placed, 1), InvalidInput);
  EXPECT_THROW(FitShardedTimeModel({}, placed, 2), InvalidInput);
}

}  // namespace
}  // namespace hydraulis
