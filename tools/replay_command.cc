// `hydraulis replay`: the simulator's replay mode. It refits the cost model offline from
// what a run measured (`train --save-measurements`), step by step as the run did
// (assign/measured_run.h), and prints what the fit in use predicted against what was
// measured. With another --profile, --window or --holdout it shows what calibration would
// have done from there (docs/simulator.md, "Replaying a run's calibration").
#include <memory>
#include <string>

#include "command_output.h"
#include "commands.h"
#include "hydraulis/assign/measured_run.h"
#include "hydraulis/base/error.h"
#include "hydraulis/base/file_io.h"
#include "hydraulis/spec/spec_io.h"
#include "output_paths.h"
#include "replay_report.h"

namespace hydraulis::tools {
namespace {

struct ReplayArgs {
  std::string measurements, profile, json, save_profile;
  int window = 0, holdout = 0;  // 0: the run's
  bool quiet = false;
};

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
  const ReplaySummary summary = Summarize(replay);
  // Every output is built before any is written.
  const std::string json = a.json.empty() ? "" : ReplayJson(replay, summary);
  const std::string fitted = a.save_profile.empty() ? "" : ProfileToJson(replay.fit.profile);
  if (!a.json.empty()) WriteOutput(a.json, json);
  if (!a.save_profile.empty()) WriteFileAtomically(a.save_profile, fitted);
  if (!a.quiet) PrintReplay(replay, summary);
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
