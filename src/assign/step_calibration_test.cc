// The calibration from measured steps against a known truth: steps planned on the fit in
// use and "measured" on another model recover that model (exactly, without noise), its
// prediction error falls under 10 % and stays there (with noise), a true profile is kept,
// measurements that are not times are refused, the same steps give the same fits, and a
// replay of the steps written as a measurements file does what the run did.
#include "hydraulis/assign/step_calibration.h"

#include "hydraulis/assign/measured_run.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "../base/test_support.h"
#include "hydraulis/assign/planner.h"
#include "hydraulis/assign/problem.h"
#include "hydraulis/base/error.h"
#include "hydraulis/base/rng.h"
#include "hydraulis/data/batch_sampler.h"
#include "hydraulis/data/lengths.h"
#include "hydraulis/spec/spec_io.h"

namespace hydraulis {
namespace {

const std::string kRoot = HYDRAULIS_SOURCE_DIR;

Profile TinyProfile() { return LoadProfile(kRoot + "/configs/profiles/tiny-cpu.json"); }

CandidateSet TwoRankCandidates(const Profile& profile) {
  return LoadCandidates(kRoot + "/configs/candidates/cpu-2rank.json", profile);
}

// The machine the steps are "measured" on: the profile's terms bent per scheme (not one
// factor for all, so a scaled copy cannot match it) and a fixed cost per strategy.
CalibratedFit Machine(const Profile& profile) {
  CalibratedFit truth;
  truth.profile = profile;
  for (SchemeProfile& e : truth.profile.schemes) {
    const double bend = 1.0 + 0.5 * e.scheme.tp;
    e.a_ms_per_token2 *= 2.0 * bend;
    e.b_ms_per_token *= 3.0;
    e.c_ms *= 4.0 / bend;
  }
  truth.overhead_ms = {40.0, 25.0};
  return truth;
}

// A step of `plan` measured on `truth`: every stage's micro-batches at truth's times, each
// times (1 + noise * u) for u uniform in [-1, 1], and the step as truth predicts it times the
// same kind of factor.
MeasuredStep Measure(const CalibratedFit& truth, const CandidateSet& candidates, const Plan& plan,
                     double noise, Rng& rng) {
  auto jitter = [&] { return 1.0 + noise * (2.0 * rng.Uniform() - 1.0); };
  MeasuredStep m;
  m.plan = plan;
  for (const PipelinePlan& p : plan.pipelines) {
    const PipelineModel model = MakePipelineModel(truth.profile, *truth.profile.Find(p.scheme),
                                                  candidates.optimizer_layout);
    const std::vector<double> times = MicroBatchStageMs(plan.lengths, model, p.micro_batches);
    std::vector<std::vector<double>> stages;
    for (int s = 0; s < p.scheme.pp; ++s) {
      std::vector<double> row;
      for (double t : times) row.push_back(t * jitter());
      stages.push_back(row);
    }
    m.stage_ms.push_back(stages);
  }
  m.step_ms = PredictStepMs(truth, candidates.optimizer_layout, {}, plan) * jitter();
  return m;
}

// Runs `steps` steps as the trainer does: each batch planned on the fit in use, measured
// on `truth`, added. Returns each step's relative error of the fit in use before it; when
// `trace` is given, appends each step's measurement and what the calibration did with it.
std::vector<double> RunSteps(StepCalibration& calibration, const CalibratedFit& truth,
                             const CandidateSet& candidates, int steps, double noise,
                             std::vector<std::pair<MeasuredStep, ReplayedStep>>* trace = nullptr) {
  const std::vector<std::int64_t> corpus =
      ReadLengths(kRoot + "/data/wikipedia-sample-lengths.txt");
  std::vector<std::int64_t> scaled;
  for (std::int64_t s : corpus) scaled.push_back(std::max<std::int64_t>(2, s / 4));
  BatchSampler sampler(scaled, {8192, 1024, 3});
  Rng rng(11);
  std::vector<double> errors;
  for (int step = 0; step < steps; ++step) {
    PlannerOptions options;
    options.context_tokens = 1024;
    options.strategy_overhead_ms = calibration.fit().overhead_ms;
    const Planner planner(calibration.fit().profile, candidates, options);
    const Plan plan = planner.PlanBatch(sampler.Next().lengths);
    MeasuredStep m = Measure(truth, candidates, plan, noise, rng);
    errors.push_back(std::abs(calibration.PredictMs(plan) - m.step_ms) / m.step_ms);
    ReplayedStep r;
    r.step = step;
    r.measured_ms = m.step_ms;
    r.predicted_ms = calibration.PredictMs(plan);
    r.fit_version = calibration.fit().version;
    const MeasuredStep kept = trace != nullptr ? m : MeasuredStep{};
    const StepCalibration::Outcome outcome = calibration.Add(std::move(m));
    EXPECT_EQ(outcome.rejected, "");
    r.adopted = outcome.adopted;
    if (trace != nullptr) trace->emplace_back(kept, r);
  }
  return errors;
}

TEST(StepCalibrationTest, RecoversTheMachineExactlyWithoutNoise) {
  const Profile profile = TinyProfile();
  const CandidateSet candidates = TwoRankCandidates(profile);
  const CalibratedFit truth = Machine(profile);
  StepCalibration calibration(profile, candidates, {});
  const std::vector<double> errors = RunSteps(calibration, truth, candidates, 24, 0.0);
  EXPECT_GT(errors.front(), 0.5);  // the foreign profile is far off
  EXPECT_LT(errors.back(), 1e-9);
  EXPECT_GE(calibration.fit().version, 1);
  // The scheme the plans run on (2 x TP1 is the faster on this machine) has truth's terms
  // back; TP2, which ran in the first steps only, is scaled.
  const SchemeProfile& e = *calibration.fit().profile.Find(Scheme{1, 1, 1});
  const SchemeProfile& t = *truth.profile.Find(Scheme{1, 1, 1});
  EXPECT_NEAR(e.a_ms_per_token2, t.a_ms_per_token2, 1e-6 * t.a_ms_per_token2);
  EXPECT_NEAR(e.b_ms_per_token, t.b_ms_per_token, 1e-6 * t.b_ms_per_token);
  EXPECT_NEAR(e.c_ms, t.c_ms, 1e-6 * t.c_ms);
  EXPECT_NEAR(calibration.fit().overhead_ms[1], truth.overhead_ms[1], 1e-6);
}

TEST(StepCalibrationTest, ErrorFallsUnderTenPercentWithinTwentyStepsAndStaysWithNoise) {
  const Profile profile = TinyProfile();
  const CandidateSet candidates = TwoRankCandidates(profile);
  StepCalibration calibration(profile, candidates, {});
  const std::vector<double> errors =
      RunSteps(calibration, Machine(profile), candidates, 60, /*noise=*/0.05);
  for (std::size_t i = 20; i < errors.size(); ++i) {
    EXPECT_LE(errors[i], 0.10) << "step " << i;
  }
}

TEST(StepCalibrationTest, AProfileThatIsAlreadyTrueIsKept) {
  const Profile profile = TinyProfile();
  const CandidateSet candidates = TwoRankCandidates(profile);
  CalibratedFit truth;
  truth.profile = profile;
  truth.overhead_ms = {0.0, 0.0};
  StepCalibration calibration(profile, candidates, {});
  const std::vector<double> errors = RunSteps(calibration, truth, candidates, 20, 0.0);
  EXPECT_EQ(calibration.fit().version, 0);
  for (double e : errors) EXPECT_LT(e, 1e-12);
}

TEST(StepCalibrationTest, TheSameStepsGiveTheSameFits) {
  const Profile profile = TinyProfile();
  const CandidateSet candidates = TwoRankCandidates(profile);
  StepCalibration one(profile, candidates, {}), two(profile, candidates, {});
  RunSteps(one, Machine(profile), candidates, 30, 0.05);
  RunSteps(two, Machine(profile), candidates, 30, 0.05);
  EXPECT_EQ(ProfileToJson(one.fit().profile), ProfileToJson(two.fit().profile));
  EXPECT_EQ(one.fit().overhead_ms, two.fit().overhead_ms);
}

TEST(StepCalibrationTest, MeasurementsThatAreNotTimesAreRefused) {
  const Profile profile = TinyProfile();
  const CandidateSet candidates = TwoRankCandidates(profile);
  StepCalibration calibration(profile, candidates, {});
  const Planner planner(profile, candidates, PlannerOptions{});
  Rng rng(1);
  const Plan plan = planner.PlanBatch(std::vector<std::int64_t>{300, 200, 100, 50});
  const MeasuredStep good = Measure(Machine(profile), candidates, plan, 0, rng);
  MeasuredStep m = good;
  m.step_ms = std::nan("");
  EXPECT_NE(calibration.Add(m).rejected.find("step_ms nan is not a positive time"),
            std::string::npos);
  m = good;
  m.stage_ms[0][0][0] = 0;
  EXPECT_NE(calibration.Add(m).rejected.find("micro-batch 0: 0.000000 ms is not a positive time"),
            std::string::npos);
  m = good;
  m.stage_ms[0].push_back(m.stage_ms[0][0]);
  EXPECT_NE(calibration.Add(m).rejected.find("stages"), std::string::npos);
  m = good;
  m.stage_ms.clear();
  EXPECT_NE(calibration.Add(m).rejected.find("do not match the plan"), std::string::npos);
  EXPECT_EQ(calibration.fit().version, 0);
  EXPECT_THROW(StepCalibration(profile, candidates, {}, {.window = 4, .holdout = 4}), InvalidInput);
}

}  // namespace
}  // namespace hydraulis

namespace hydraulis {
namespace {

TEST(StepCalibrationTest, AFitRoundTripsThroughItsFileAndRestoresOnlyWhereItFits) {
  const Profile profile = TinyProfile();
  const CandidateSet candidates = TwoRankCandidates(profile);
  StepCalibration calibration(profile, candidates, {});
  RunSteps(calibration, Machine(profile), candidates, 12, 0.0);
  const CalibratedFit& fit = calibration.fit();
  ASSERT_GE(fit.version, 1);
  const CalibratedFit back = ParseCalibratedFit(CalibratedFitToJson(fit), "c.json");
  EXPECT_EQ(back.version, fit.version);
  EXPECT_EQ(back.overhead_ms, fit.overhead_ms);
  EXPECT_EQ(ProfileToJson(back.profile), ProfileToJson(fit.profile));
  StepCalibration resumed(profile, candidates, {});
  ASSERT_TRUE(resumed.Restore(back));
  EXPECT_EQ(resumed.fit().version, fit.version);
  // Another candidate set: three strategies, or a scheme the fit's profile lacks.
  CandidateSet more = candidates;
  more.strategies.push_back(more.strategies.front());
  StepCalibration other(profile, more, {});
  EXPECT_FALSE(other.Restore(back));
  EXPECT_EQ(other.fit().version, 0);
  CalibratedFit partial = back;
  std::erase_if(partial.profile.schemes, [](const SchemeProfile& e) { return e.scheme.tp == 2; });
  EXPECT_FALSE(resumed.Restore(partial));
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"[]", "c.json: expected a JSON object"},
      {R"({"format": "hydraulis.profile/1"})", "format: expected \"hydraulis.calibration/1\""},
      {R"({"format": "hydraulis.calibration/1", "version": 1, "overhead_ms": [-1]})",
       "overhead_ms: expected finite numbers >= 0"}};
  for (const auto& c : bad) {
    const std::string message =
        test_support::InvalidInputMessage([&] { ParseCalibratedFit(c.first, "c.json"); });
    EXPECT_NE(message.find(c.second), std::string::npos) << c.first << ": " << message;
  }
}

// A machine whose micro-batches take the same time whatever their documents (a, b = 0):
// the least-squares fit puts everything in c, which no profile may hold (documents would
// cost nothing), so the calibration scales instead, and what it saves reads back.
TEST(StepCalibrationTest, AFitInWhichDocumentsCostNothingIsNotAdopted) {
  const Profile profile = TinyProfile();
  const CandidateSet candidates = TwoRankCandidates(profile);
  CalibratedFit flat = Machine(profile);
  for (SchemeProfile& e : flat.profile.schemes) {
    e.a_ms_per_token2 = 0;
    e.b_ms_per_token = 0;
    e.c_ms = 50;
  }
  StepCalibration calibration(profile, candidates, {});
  RunSteps(calibration, flat, candidates, 12, 0.0);
  const CalibratedFit& fit = calibration.fit();
  ASSERT_GE(fit.version, 1);  // the foreign profile was replaced, by scaling
  for (const SchemeProfile& e : fit.profile.schemes) {
    EXPECT_TRUE(e.a_ms_per_token2 > 0 || e.b_ms_per_token > 0) << ProfileToJson(fit.profile);
  }
  const CalibratedFit back = ParseCalibratedFit(CalibratedFitToJson(fit), "c.json");
  EXPECT_EQ(ProfileToJson(back.profile), ProfileToJson(fit.profile));
}

// The run's steps written as a measurements file and read back: the replay predicts each
// step exactly as the run did, adopts the same fits at the same steps and ends on the same
// fit; another hold-out changes what it adopts.
TEST(StepCalibrationTest, AReplayOfTheMeasurementsDoesWhatTheRunDid) {
  const Profile profile = TinyProfile();
  const CandidateSet candidates = TwoRankCandidates(profile);
  const CalibrationOptions options{.window = 8, .holdout = 2};
  StepCalibration live(profile, candidates, {}, options);
  MeasuredRunHeader header{profile, candidates, {}, options, live.fit()};
  std::vector<std::pair<MeasuredStep, ReplayedStep>> trace;
  RunSteps(live, Machine(profile), candidates, 24, 0.05, &trace);
  std::string text = MeasuredRunHeaderLine(header) + "\n";
  for (const auto& [m, r] : trace) text += MeasuredRunStepLine(r.step, m) + "\n";
  const MeasuredRun run = ParseMeasuredRun(text, "m.jsonl");
  ASSERT_EQ(run.steps.size(), trace.size());
  const CalibrationReplay replay =
      ReplayCalibration(run, run.header.profile, run.header.calibration);
  int adoptions = 0;
  for (std::size_t i = 0; i < trace.size(); ++i) {
    const ReplayedStep &want = trace[i].second, &got = replay.steps[i];
    EXPECT_EQ(got.step, want.step);
    EXPECT_EQ(got.measured_ms, want.measured_ms) << "step " << i;
    EXPECT_EQ(got.predicted_ms, want.predicted_ms) << "step " << i;
    EXPECT_EQ(got.fit_version, want.fit_version) << "step " << i;
    EXPECT_EQ(got.adopted, want.adopted) << "step " << i;
    EXPECT_EQ(got.rejected, "");
    adoptions += got.adopted ? 1 : 0;
  }
  EXPECT_GE(adoptions, 1);
  EXPECT_EQ(CalibratedFitToJson(replay.fit), CalibratedFitToJson(live.fit()));
  // Offline, another hold-out: the same steps, other decisions.
  const CalibrationReplay other = ReplayCalibration(run, profile, {.window = 8, .holdout = 6});
  EXPECT_NE(CalibratedFitToJson(other.fit), CalibratedFitToJson(live.fit()));
}

TEST(StepCalibrationTest, AMeasurementsFileThatIsNotOneIsRefusedByLineAndField) {
  const Profile profile = TinyProfile();
  const CandidateSet candidates = TwoRankCandidates(profile);
  StepCalibration live(profile, candidates, {});
  const std::string header =
      MeasuredRunHeaderLine({profile, candidates, {}, CalibrationOptions{}, live.fit()});
  auto error = [](const std::string& text) {
    try {
      ParseMeasuredRun(text, "m.jsonl");
    } catch (const InvalidInput& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(error(""), "m.jsonl: empty (expected the measurements' header line)");
  std::string wrong = header;
  wrong.replace(wrong.find("hydraulis.measurements/1"), 24, "hydraulis.measurements/9");
  EXPECT_NE(error(wrong).find("m.jsonl: line 1: format: expected \"hydraulis.measurements/1\""),
            std::string::npos);
  EXPECT_NE(error(header + "\n{\"step\": 0}").find("m.jsonl: line 2: lengths: missing"),
            std::string::npos)
      << error(header + "\n{\"step\": 0}");
  EXPECT_NE(error(header + "\nnot json").find("m.jsonl: line 2: invalid JSON"), std::string::npos);
}

}  // namespace
}  // namespace hydraulis
