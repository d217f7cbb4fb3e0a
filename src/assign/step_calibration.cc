#include "hydraulis/assign/step_calibration.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <map>

#include "hydraulis/assign/problem.h"
#include "hydraulis/base/error.h"
#include "hydraulis/base/median.h"
#include "hydraulis/cost/cp_layout.h"
#include "hydraulis/cost/time_fit.h"
#include "hydraulis/spec/internal/json_reader.h"
#include "hydraulis/spec/spec_io.h"

#include <nlohmann/json.hpp>

namespace hydraulis {
namespace {

const SchemeProfile& EntryFor(const Profile& profile, const Scheme& scheme) {
  const SchemeProfile* entry = profile.Find(scheme);
  if (entry == nullptr) {
    throw InvalidInput("calibration: the profile has no " + SchemeName(scheme) + " scheme");
  }
  return *entry;
}

// Each micro-batch's stage time on pipeline `p` of `plan` under `profile`, on the layout the
// plan gave it (cp > 1).
std::vector<double> PredictStageMs(const Profile& profile, const OptimizerLayout& layout,
                                   const Plan& plan, const PipelinePlan& p) {
  const PipelineModel model = MakePipelineModel(profile, EntryFor(profile, p.scheme), layout);
  std::vector<double> out;
  out.reserve(p.micro_batches.size());
  for (std::size_t j = 0; j < p.micro_batches.size(); ++j) {
    const std::vector<std::int64_t> lengths = MicroBatchLengths(plan.lengths, p.micro_batches[j]);
    const bool laid_out = p.scheme.cp > 1 && j < p.cp_layouts.size() && !p.cp_layouts[j].empty();
    out.push_back(laid_out ? LaidOutStageMs(lengths, p.cp_layouts[j], model.shard)
                           : MicroBatchMs(lengths, model));
  }
  return out;
}

double ComputeMs(const Profile& profile, const OptimizerLayout& layout,
                 const ScheduleOptions& schedule, const Plan& plan) {
  double step = 0;
  for (const PipelinePlan& p : plan.pipelines) {
    const std::vector<double> stage = PredictStageMs(profile, layout, plan, p);
    step = std::max(step, OneFOneBMs(stage, p.scheme.pp, schedule));
  }
  return step;
}

bool Positive(double x) { return std::isfinite(x) && x > 0; }

// One micro-batch on one stage: its documents, what it took, and what the initial profile
// predicted for it.
struct Sample {
  std::vector<std::int64_t> lengths;
  double ms = 0;
  double base_ms = 0;
};

void Scale(SchemeProfile& entry, double k) {
  entry.a_ms_per_token2 *= k;
  entry.b_ms_per_token *= k;
  entry.c_ms *= k;
  entry.kv_ms_per_token *= k;
}

// The factor k minimising sum ((k base - ms) / ms)^2, and the root mean square of those
// relative residuals at it.
std::pair<double, double> ScaleFit(const std::vector<Sample>& samples) {
  double xy = 0, xx = 0;
  for (const Sample& s : samples) {
    const double x = s.base_ms / s.ms;
    xy += x;
    xx += x * x;
  }
  const double k = xx > 0 ? xy / xx : 0;
  double sq = 0;
  for (const Sample& s : samples) {
    const double r = (k * s.base_ms - s.ms) / s.ms;
    sq += r * r;
  }
  return {k, std::sqrt(sq / static_cast<double>(samples.size()))};
}

// Every micro-batch on every stage of the steps [0, end) of `window`, by scheme, with what
// `initial` predicted for it.
std::map<Scheme, std::vector<Sample>> SamplesByScheme(const Profile& initial,
                                                      const OptimizerLayout& layout,
                                                      const std::deque<MeasuredStep>& window,
                                                      std::size_t end) {
  std::map<Scheme, std::vector<Sample>> samples;
  for (std::size_t i = 0; i < end; ++i) {
    const MeasuredStep& m = window[i];
    for (std::size_t p = 0; p < m.plan.pipelines.size(); ++p) {
      const PipelinePlan& pipe = m.plan.pipelines[p];
      const std::vector<double> base = PredictStageMs(initial, layout, m.plan, pipe);
      for (const std::vector<double>& stage : m.stage_ms[p]) {
        for (std::size_t j = 0; j < stage.size(); ++j) {
          samples[pipe.scheme].push_back(
              {MicroBatchLengths(m.plan.lengths, pipe.micro_batches[j]), stage[j], base[j]});
        }
      }
    }
  }
  return samples;
}

// A cp = 1 scheme's a, b and c fitted to its samples, kept in `entry` where they fit them
// better than scaling does (`scale_rms`); the log of how far its predictions moved into
// `moves`. False where not kept.
bool FitCoefficients(SchemeProfile& entry, const std::vector<Sample>& list, double scale_rms,
                     std::vector<double>& moves) {
  std::vector<TimeSample> timed;
  timed.reserve(list.size());
  for (const Sample& s : list) timed.push_back({s.lengths, s.ms});
  try {
    const TimeFit nnls = FitTimeModel(timed);
    // All in c (the lengths explain nothing, as on a machine whose noise drowns them) is no
    // model of documents, and no profile may say so: scaled instead.
    const bool costs_documents = nnls.model.a_ms_per_token2 > 0 || nnls.model.b_ms_per_token > 0;
    if (costs_documents && nnls.rms_relative_error < scale_rms) {
      entry.a_ms_per_token2 = nnls.model.a_ms_per_token2;
      entry.b_ms_per_token = nnls.model.b_ms_per_token;
      entry.c_ms = nnls.model.c_ms;
      double before = 0, after = 0;
      for (const Sample& s : list) {
        before += s.base_ms;
        after += nnls.model.MicroBatchMs(s.lengths);
      }
      if (Positive(after / before)) moves.push_back(std::log(after / before));
      return true;
    }
  } catch (const InvalidInput&) {
    // The samples do not determine a, b and c (too few, or too alike): scaled instead.
  }
  return false;
}

// Refits `scheme`'s entry of `profile` to its samples: its coefficients (cp = 1) or one
// factor; the log of how far its predictions moved into `moves`. False, the entry
// unchanged, where the samples give no positive factor.
bool RefitScheme(Profile& profile, const Scheme& scheme, const std::vector<Sample>& list,
                 std::vector<double>& moves) {
  const auto [k, scale_rms] = ScaleFit(list);
  if (!Positive(k)) return false;
  SchemeProfile& entry = *std::find_if(profile.schemes.begin(), profile.schemes.end(),
                                       [&](const SchemeProfile& e) { return e.scheme == scheme; });
  if (scheme.cp == 1 && FitCoefficients(entry, list, scale_rms, moves)) return true;
  Scale(entry, k);
  moves.push_back(std::log(k));
  return true;
}

// Each of `strategies` strategies' overhead under `profile`: the median of (measured step -
// predicted compute) over its steps of [0, end) of `window`, or over all of them for one
// that never ran, and at least 0.
std::vector<double> Overheads(const Profile& profile, const OptimizerLayout& layout,
                              const ScheduleOptions& schedule,
                              const std::deque<MeasuredStep>& window, std::size_t end,
                              std::size_t strategies) {
  std::map<int, std::vector<double>> residuals;
  std::vector<double> all;
  for (std::size_t i = 0; i < end; ++i) {
    const MeasuredStep& m = window[i];
    const double r = m.step_ms - ComputeMs(profile, layout, schedule, m.plan);
    residuals[m.plan.strategy_index].push_back(r);
    all.push_back(r);
  }
  std::vector<double> overhead_ms(strategies, std::max(0.0, Median(all)));
  for (const auto& [strategy, list] : residuals) {
    overhead_ms[static_cast<std::size_t>(strategy)] = std::max(0.0, Median(list));
  }
  return overhead_ms;
}

}  // namespace

constexpr char kCalibrationFormat[] = "hydraulis.calibration/1";

std::string CalibratedFitToJson(const CalibratedFit& fit) {
  nlohmann::json j;
  j["format"] = kCalibrationFormat;
  j["version"] = fit.version;
  j["overhead_ms"] = fit.overhead_ms;
  j["profile"] = nlohmann::json::parse(ProfileToJson(fit.profile));
  return j.dump(1) + "\n";
}

CalibratedFit ParseCalibratedFit(const std::string& text, const std::string& source) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    throw InvalidInput(source + ": not JSON: " + e.what());
  }
  if (!j.is_object()) throw InvalidInput(source + ": expected a JSON object");
  JsonObjectReader r(j, source, "");
  if (const std::string format = r.String("format"); format != kCalibrationFormat) {
    r.Fail("format",
           "expected \"" + std::string(kCalibrationFormat) + "\", got " + QuoteForMessage(format));
  }
  CalibratedFit fit;
  fit.version = static_cast<int>(r.Int("version", 0, 1 << 30));
  const nlohmann::json& overheads = r.Array("overhead_ms");
  for (const nlohmann::json& x : overheads) {
    if (!x.is_number() || !(x.get<double>() >= 0) || !std::isfinite(x.get<double>())) {
      r.Fail("overhead_ms", "expected finite numbers >= 0, got " + x.dump());
    }
    fit.overhead_ms.push_back(x.get<double>());
  }
  fit.profile = ParseProfile(r.Value("profile").dump(), source + ": profile");
  return fit;
}

double PredictStepMs(const CalibratedFit& fit, const OptimizerLayout& layout,
                     const ScheduleOptions& schedule, const Plan& plan) {
  const auto i = static_cast<std::size_t>(plan.strategy_index);
  const double overhead = i < fit.overhead_ms.size() ? fit.overhead_ms[i] : 0.0;
  return ComputeMs(fit.profile, layout, schedule, plan) + overhead;
}

StepCalibration::StepCalibration(const Profile& profile, const CandidateSet& candidates,
                                 const ScheduleOptions& schedule, const CalibrationOptions& options)
    : initial_(profile), candidates_(candidates), schedule_(schedule), options_(options) {
  if (options_.window < 2) {
    throw InvalidInput("calibration: window must be >= 2, got " + std::to_string(options_.window));
  }
  if (options_.holdout < 1 || options_.holdout >= options_.window) {
    throw InvalidInput("calibration: holdout must be from 1 to window - 1 (" +
                       std::to_string(options_.window - 1) + "), got " +
                       std::to_string(options_.holdout));
  }
  for (const Strategy& s : candidates_.strategies) {
    for (const Scheme& scheme : s.pipelines) EntryFor(initial_, scheme);
  }
  fit_.profile = initial_;
  fit_.overhead_ms.assign(candidates_.strategies.size(), 0.0);
}

bool StepCalibration::Restore(const CalibratedFit& fit) {
  if (fit.overhead_ms.size() != candidates_.strategies.size()) return false;
  for (const Strategy& s : candidates_.strategies) {
    for (const Scheme& scheme : s.pipelines) {
      if (fit.profile.Find(scheme) == nullptr) return false;
    }
  }
  fit_ = fit;
  window_.clear();
  return true;
}

double StepCalibration::PredictMs(const Plan& plan) const {
  return PredictStepMs(fit_, candidates_.optimizer_layout, schedule_, plan);
}

StepCalibration::Outcome StepCalibration::Add(MeasuredStep step) {
  Outcome outcome;
  const Plan& plan = step.plan;
  if (!Positive(step.step_ms)) {
    outcome.rejected = "step_ms " + std::to_string(step.step_ms) + " is not a positive time";
    return outcome;
  }
  if (plan.strategy_index < 0 ||
      static_cast<std::size_t>(plan.strategy_index) >= candidates_.strategies.size() ||
      step.stage_ms.size() != plan.pipelines.size()) {
    outcome.rejected = "the measured stages do not match the plan's pipelines";
    return outcome;
  }
  for (std::size_t p = 0; p < plan.pipelines.size(); ++p) {
    const PipelinePlan& pipe = plan.pipelines[p];
    if (step.stage_ms[p].size() != static_cast<std::size_t>(pipe.scheme.pp)) {
      outcome.rejected = "pipeline " + std::to_string(p) + ": measured " +
                         std::to_string(step.stage_ms[p].size()) + " stages, the plan has " +
                         std::to_string(pipe.scheme.pp);
      return outcome;
    }
    for (std::size_t s = 0; s < step.stage_ms[p].size(); ++s) {
      const std::vector<double>& times = step.stage_ms[p][s];
      if (times.size() != pipe.micro_batches.size()) {
        outcome.rejected = "pipeline " + std::to_string(p) + " stage " + std::to_string(s) +
                           ": measured " + std::to_string(times.size()) +
                           " micro-batches, the plan has " +
                           std::to_string(pipe.micro_batches.size());
        return outcome;
      }
      for (std::size_t j = 0; j < times.size(); ++j) {
        if (!Positive(times[j])) {
          outcome.rejected = "pipeline " + std::to_string(p) + " stage " + std::to_string(s) +
                             " micro-batch " + std::to_string(j) + ": " + std::to_string(times[j]) +
                             " ms is not a positive time";
          return outcome;
        }
      }
    }
  }
  window_.push_back(std::move(step));
  while (window_.size() > static_cast<std::size_t>(options_.window)) window_.pop_front();
  if (window_.size() <= static_cast<std::size_t>(options_.holdout)) return outcome;
  const std::size_t begin = window_.size() - static_cast<std::size_t>(options_.holdout);
  outcome.in_use_error = MeanError(fit_, begin);
  CalibratedFit refit;
  if (!Refit(begin, refit)) return outcome;
  outcome.refit_error = MeanError(refit, begin);
  if (outcome.refit_error < outcome.in_use_error) {
    fit_ = std::move(refit);
    outcome.adopted = true;
  }
  return outcome;
}

double StepCalibration::MeanError(const CalibratedFit& fit, std::size_t begin) const {
  double sum = 0;
  for (std::size_t i = begin; i < window_.size(); ++i) {
    const MeasuredStep& m = window_[i];
    sum +=
        std::abs(PredictStepMs(fit, candidates_.optimizer_layout, schedule_, m.plan) - m.step_ms) /
        m.step_ms;
  }
  return sum / static_cast<double>(window_.size() - begin);
}

bool StepCalibration::Refit(std::size_t end, CalibratedFit& out) const {
  const OptimizerLayout& layout = candidates_.optimizer_layout;
  const std::map<Scheme, std::vector<Sample>> samples =
      SamplesByScheme(initial_, layout, window_, end);
  out.profile = initial_;
  // log of how far each refitted scheme's predictions moved from the initial profile's.
  std::vector<double> moves;
  std::map<Scheme, bool> refitted;
  for (const auto& [scheme, list] : samples) {
    if (RefitScheme(out.profile, scheme, list, moves)) refitted[scheme] = true;
  }
  if (moves.empty()) return false;
  double mean_move = 0;
  for (double x : moves) mean_move += x;
  mean_move /= static_cast<double>(moves.size());
  for (SchemeProfile& entry : out.profile.schemes) {
    if (!refitted.contains(entry.scheme)) Scale(entry, std::exp(mean_move));
  }
  out.overhead_ms =
      Overheads(out.profile, layout, schedule_, window_, end, candidates_.strategies.size());
  out.version = fit_.version + 1;
  return true;
}

}  // namespace hydraulis
