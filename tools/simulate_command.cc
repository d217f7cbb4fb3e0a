// `hydraulis simulate`: a simulated training run of one system (docs/simulator.md). Its
// flags are simulate_args.h's.
#include <fmt/core.h>

#include <memory>
#include <string>
#include <vector>

#include "commands.h"
#include "hydraulis/base/error.h"
#include "hydraulis/base/file_io.h"
#include "hydraulis/data/lengths.h"
#include "hydraulis/sim/report.h"
#include "hydraulis/sim/simulator.h"
#include "hydraulis/sim/trace.h"
#include "output_paths.h"
#include "planning_inputs.h"
#include "progress_bar.h"
#include "simulate_args.h"
#include "truncation_warnings.h"

namespace hydraulis::tools {
namespace {

// More steps than anyone waits for (a step plans a batch: milliseconds to a second), and
// the per-step results are kept in memory.
constexpr int kMaxSteps = 1'000'000;

int RunSimulate(SimulateArgs a) {
  if (a.options.steps > kMaxSteps) {
    throw InvalidInput("--steps " + std::to_string(a.options.steps) + ": at most " +
                       std::to_string(kMaxSteps) + " (each step plans a batch)");
  }
  for (const FlagPath& out : {FlagPath{"--json", a.json}, FlagPath{"--trace", a.trace}}) {
    RefuseOutputOverInput(out, {{"--profile", a.inputs.profile},
                                {"--candidates", a.inputs.candidates},
                                {"--lengths", a.lengths}});
  }
  a.options.system = ParseSystem(a.system, "--system");
  a.options.comm.enabled = !a.no_communication;
  a.options.sync_aware = !a.sync_blind;
  a.options.comm.overlap = !a.no_overlap;
  a.options.planner_seed = a.options.sampler.seed;
  a.options.cp_layout_space = ParseCpLayoutSpace(a.cp_layouts, "--cp-layouts");
  ValidateSimOptions(a.options);
  if (!a.trace_steps.empty() && a.trace.empty()) {
    throw InvalidInput("--trace-steps: give --trace FILE to write the trace to");
  }
  if (a.trace_steps.empty()) a.trace_steps = {0};
  for (int s : a.trace_steps) {
    if (s < 0 || s >= a.options.steps) {
      throw InvalidInput("--trace-steps: step " + std::to_string(s) + " is out of range (0.." +
                         std::to_string(a.options.steps - 1) + ")");
    }
  }
  const PlanningInputs inputs = a.inputs.Load();
  const std::vector<std::int64_t> dataset = LoadLengths(a.lengths, a.source.ToOptions());
  SimResult result;
  {
    ProgressBar bar("steps");
    result = Simulate(inputs.profile, inputs.candidates, dataset, a.options,
                      [&bar](int done, int total) { bar.Update(done, total); });
  }
  WarnTruncation(result);
  // Build every output before writing any, so an error leaves no partial set of files.
  const std::string summary = a.json.empty() ? "" : SimSummaryJson(result);
  const std::string trace = a.trace.empty() ? "" : ChromeTraceJson(result, a.trace_steps);
  if (!a.json.empty()) WriteFileAtomically(a.json, summary);
  if (!a.trace.empty()) WriteFileAtomically(a.trace, trace);
  if (!a.quiet) {
    fmt::print("{}planning: {:.2f} s wall-clock\n", SimTable(result),
               result.planning_wall_ms / 1e3);
  }
  return 0;
}

}  // namespace

Command AddSimulateCommand(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "simulate",
      "Simulate N training steps of one system: sample, plan and time every step "
      "(1F1B with point-to-point sends, parameter materialisation, gradient reduce-scatter, "
      "optimizer step)");
  auto a = std::make_shared<SimulateArgs>();
  a->AddTo(cmd);
  return [a] { return RunSimulate(*a); };
}

}  // namespace hydraulis::tools
