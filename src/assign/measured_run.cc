#include "hydraulis/assign/measured_run.h"

#include <cmath>
#include <sstream>

#include "hydraulis/assign/plan_json.h"
#include "hydraulis/base/error.h"
#include "hydraulis/base/internal/json_text.h"
#include "hydraulis/spec/internal/json_reader.h"
#include "hydraulis/spec/spec_io.h"

#include <nlohmann/json.hpp>

namespace hydraulis {
namespace {

constexpr const char* kMeasurementsFormat = "hydraulis.measurements/1";

// A finite number, else InvalidInput naming the field.
double FiniteNumber(const nlohmann::json& v, const JsonObjectReader& r, const std::string& key) {
  if (!v.is_number() || !std::isfinite(v.get<double>())) {
    r.Fail(key, "expected finite numbers, got " + JsonForMessage(v));
  }
  return v.get<double>();
}

MeasuredRunHeader ParseHeader(const nlohmann::json& j, const std::string& source) {
  if (!j.is_object()) throw InvalidInput(source + ": expected the header object");
  JsonObjectReader r(j, source, "");
  if (const std::string format = r.String("format"); format != kMeasurementsFormat) {
    r.Fail("format",
           "expected \"" + std::string(kMeasurementsFormat) + "\", got " + QuoteForMessage(format));
  }
  MeasuredRunHeader h;
  h.profile = ParseProfile(r.Value("profile").dump(), source + ": profile");
  h.candidates = ParseCandidates(r.Value("candidates").dump(), source + ": candidates", h.profile);
  h.schedule.backward_to_forward = r.Number("backward_to_forward", 0.0);
  if (!(h.schedule.backward_to_forward > 0)) r.Fail("backward_to_forward", "must be > 0");
  h.calibration.window = static_cast<int>(r.Int("window", 2));
  h.calibration.holdout = static_cast<int>(r.Int("holdout", 1, h.calibration.window - 1));
  h.start = ParseCalibratedFit(r.Value("start").dump(), source + ": start");
  r.RejectUnknown();
  return h;
}

MeasuredRunStep ParseStep(const nlohmann::json& j, const std::string& source) {
  if (!j.is_object()) throw InvalidInput(source + ": expected a step object");
  JsonObjectReader r(j, source, "");
  MeasuredRunStep s;
  s.step = static_cast<int>(r.Int("step", 0));
  std::vector<std::int64_t> lengths;
  for (const nlohmann::json& x : r.Array("lengths")) {
    if (!x.is_number_integer() || x.get<std::int64_t>() < 1) {
      r.Fail("lengths", "expected integers >= 1, got " + JsonForMessage(x));
    }
    lengths.push_back(x.get<std::int64_t>());
  }
  s.measured.plan = PlanFromJson(r.Value("plan").dump(), std::move(lengths), source + ": plan");
  for (const nlohmann::json& pipeline : r.Array("stage_ms")) {
    std::vector<std::vector<double>> stages;
    if (!pipeline.is_array()) r.Fail("stage_ms", "expected [pipeline][stage][micro-batch] arrays");
    for (const nlohmann::json& stage : pipeline) {
      if (!stage.is_array()) r.Fail("stage_ms", "expected [pipeline][stage][micro-batch] arrays");
      std::vector<double> times;
      for (const nlohmann::json& t : stage) times.push_back(FiniteNumber(t, r, "stage_ms"));
      stages.push_back(std::move(times));
    }
    s.measured.stage_ms.push_back(std::move(stages));
  }
  s.measured.step_ms = FiniteNumber(r.Value("step_ms"), r, "step_ms");
  r.RejectUnknown();
  return s;
}

}  // namespace

std::string MeasuredRunHeaderLine(const MeasuredRunHeader& header) {
  nlohmann::ordered_json j;
  j["format"] = kMeasurementsFormat;
  j["profile"] = nlohmann::ordered_json::parse(ProfileToJson(header.profile));
  j["candidates"] = nlohmann::ordered_json::parse(CandidatesToJson(header.candidates));
  j["backward_to_forward"] = header.schedule.backward_to_forward;
  j["window"] = header.calibration.window;
  j["holdout"] = header.calibration.holdout;
  j["start"] = nlohmann::ordered_json::parse(CalibratedFitToJson(header.start));
  return j.dump();
}

std::string MeasuredRunStepLine(int step, const MeasuredStep& measured) {
  nlohmann::ordered_json j;
  j["step"] = step;
  j["lengths"] = measured.plan.lengths;
  j["plan"] = nlohmann::ordered_json::parse(PlanToJson(measured.plan, false, false));
  j["stage_ms"] = measured.stage_ms;
  j["step_ms"] = measured.step_ms;
  return j.dump();
}

MeasuredRun ParseMeasuredRun(const std::string& text, const std::string& source) {
  MeasuredRun run;
  std::istringstream in(text);
  std::string line;
  int number = 0;
  bool header = false;
  while (std::getline(in, line)) {
    ++number;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = source + ": line " + std::to_string(number);
    if (!header && !nlohmann::json::accept(line)) {
      // A whole JSON document (a profile, a plan) is the usual wrong file: say so.
      const nlohmann::json whole = nlohmann::json::parse(text, nullptr, false);
      if (!whole.is_discarded()) {
        throw InvalidInput(
            source + ": one JSON document" +
            (whole.is_object() && whole.contains("format") && whole["format"].is_string()
                 ? " of format " + QuoteForMessage(whole["format"].get<std::string>())
                 : std::string()) +
            ", not a measurements file (JSON lines beginning with a " + kMeasurementsFormat +
            " header, as train --save-measurements writes)");
      }
    }
    const nlohmann::json j = ParseJson(line, where);
    if (!header) {
      run.header = ParseHeader(j, where);
      header = true;
    } else {
      run.steps.push_back(ParseStep(j, where));
    }
  }
  if (!header) throw InvalidInput(source + ": empty (expected the measurements' header line)");
  return run;
}

CalibrationReplay ReplayCalibration(const MeasuredRun& run, const Profile& profile,
                                    const CalibrationOptions& options) {
  StepCalibration calibration(profile, run.header.candidates, run.header.schedule, options);
  if (run.header.start.version > 0 && ProfileToJson(profile) == ProfileToJson(run.header.profile)) {
    calibration.Restore(run.header.start);
  }
  CalibrationReplay replay;
  for (const MeasuredRunStep& s : run.steps) {
    ReplayedStep r;
    r.step = s.step;
    r.measured_ms = s.measured.step_ms;
    r.fit_version = calibration.fit().version;
    r.predicted_ms = calibration.PredictMs(s.measured.plan);
    const StepCalibration::Outcome outcome = calibration.Add(s.measured);
    r.adopted = outcome.adopted;
    r.rejected = outcome.rejected;
    replay.steps.push_back(std::move(r));
  }
  replay.fit = calibration.fit();
  return replay;
}

}  // namespace hydraulis
