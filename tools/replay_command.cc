// `hydraulis replay`: the simulator's replay mode. It refits the cost model offline from
// what a run measured (`train --save-measurements`), step by step as the run did
// (assign/measured_run.h), and prints what the fit in use predicted against what was
// measured. With another --profile, --window or --holdout it shows what calibration would
// have done from there (docs/simulator.md, "Replaying a run's calibration").
#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "command_output.h"
#include "commands.h"
#include "hydraulis/assign/measured_run.h"
#include "hydraulis/base/error.h"
#include "hydraulis/base/file_io.h"
#include "hydraulis/spec/spec_io.h"
#include "output_paths.h"

namespace hydraulis::tools {
namespace {

struct ReplayArgs {
  std::string measurements, profile, json, save_profile;
  int window = 0, holdout = 0;  // 0: the run's
  bool quiet = false;
};

double RelativeError(const ReplayedStep& s) {
  return std::abs(s.predicted_ms - s.measured_ms) / s.measured_ms;
}

int RunReplay(const ReplayArgs& a) {
  for (const FlagPath& out : {FlagPath{"--json", a.json}, {"--save-profile", a.save_profile}}) {
    RefuseOutputOverInput(out, {{"--measurements", a.measurements}, {"--profile", a.profile}});
  }
  const MeasuredRun run = ParseMeasuredRun(ReadFileText(a.measurements), a.measurements);
  const Profile profile = a.profile.empty() ? run.header.profile : LoadProfile(a.profile);
  CalibrationOptions options = run.header.calibration;
  if (a.window > 0) options.window = a.window;
  if (a.holdout > 0) options.holdout = a.holdout;
  if (options.holdout >= options.window) {
    throw InvalidInput("--holdout " + std::to_string(options.holdout) +
                       ": must be below the window (" + std::to_string(options.window) +
                       (a.window > 0 ? ", --window" : ", the run's") + ")");
  }
  CalibrationReplay replay;
  try {
    replay = ReplayCalibration(run, profile, options);
  } catch (const InvalidInput& e) {
    if (a.profile.empty()) throw;
    throw InvalidInput("--profile " + a.profile + ": " + e.what());
  }
  // The mean error of the last ten steps (the run's end), and the first step from which
  // every step is predicted within 10 %.
  const std::size_t n = replay.steps.size(), tail = std::min<std::size_t>(10, n);
  double tail_error = 0;
  std::size_t settled = n;
  for (std::size_t i = n; i-- > 0;) {
    if (RelativeError(replay.steps[i]) > 0.10) break;
    settled = i;
  }
  for (std::size_t i = n - tail; i < n; ++i) {
    tail_error += RelativeError(replay.steps[i]) / static_cast<double>(tail);
  }
  nlohmann::ordered_json j;
  j["steps"] = nlohmann::ordered_json::array();
  for (const ReplayedStep& s : replay.steps) {
    nlohmann::ordered_json step = {{"step", s.step},
                                   {"measured_ms", s.measured_ms},
                                   {"predicted_ms", s.predicted_ms},
                                   {"fit", s.fit_version},
                                   {"adopted", s.adopted}};
    if (!s.rejected.empty()) step["rejected"] = s.rejected;
    j["steps"].push_back(step);
  }
  j["last_steps_error"] = tail_error;
  j["within_10_percent_from_step"] =
      settled < n ? nlohmann::ordered_json(replay.steps[settled].step) : nlohmann::ordered_json();
  j["fit"] = replay.fit.version;
  // Every output is built before any is written.
  const std::string summary = j.dump(2) + "\n";
  const std::string fitted = a.save_profile.empty() ? "" : ProfileToJson(replay.fit.profile);
  if (!a.json.empty()) WriteOutput(a.json, summary);
  if (!a.save_profile.empty()) WriteFileAtomically(a.save_profile, fitted);
  if (a.quiet) return 0;
  fmt::print("{:>6} {:>12} {:>12} {:>8} {:>4}\n", "step", "measured ms", "predicted ms", "error",
             "fit");
  for (const ReplayedStep& s : replay.steps) {
    fmt::print("{:>6} {:>12.1f} {:>12.1f} {:>7.1f}% {:>4}{}{}\n", s.step, s.measured_ms,
               s.predicted_ms, 100 * RelativeError(s), s.fit_version,
               s.adopted ? "  refit adopted" : "",
               s.rejected.empty() ? "" : "  not used: " + s.rejected);
  }
  fmt::print(
      "{} steps; mean error of the last {}: {:.1f}%; {}; fit in use at the end: version {}\n", n,
      tail, 100 * tail_error,
      settled < n ? fmt::format("within 10% from step {}", replay.steps[settled].step)
                  : std::string("not within 10% on the last step"),
      replay.fit.version);
  return 0;
}

}  // namespace

Command AddReplayCommand(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "replay",
      "Replay a run's cost-model calibration offline from its measurements "
      "(train --save-measurements): predicted against measured step times, per step");
  auto a = std::make_shared<ReplayArgs>();
  cmd->add_option("--measurements", a->measurements, "the run's measurements file (JSON lines)")
      ->required();
  cmd->add_option("--profile", a->profile,
                  "start from this profile instead of the run's (it must have the run's schemes)");
  cmd->add_option("--window", a->window, "steps a refit reads (default: the run's)")
      ->check(CLI::Range(2, 1 << 20));
  cmd->add_option("--holdout", a->holdout,
                  "newest steps of the window a refit must predict better (default: the run's)")
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--json", a->json, "write every step and the summary here (- for stdout)")
      ->check(NonEmptyPath());
  cmd->add_option("--save-profile", a->save_profile, "write the fit in use at the end here")
      ->check(NonEmptyPath());
  cmd->add_flag("-q,--quiet", a->quiet, "do not print the table");
  return [a] { return RunReplay(*a); };
}

}  // namespace hydraulis::tools
