// `hydraulis plan`: a strategy and the assignment of one batch, or of N sampled batches
// (JSON lines). Its flags are plan_args.h's.
#include <memory>
#include <string>
#include <vector>

#include "command_output.h"
#include "commands.h"
#include "hydraulis/assign/plan_json.h"
#include "hydraulis/assign/planner.h"
#include "hydraulis/assign/published.h"
#include "hydraulis/base/error.h"
#include "hydraulis/data/batch_sampler.h"
#include "hydraulis/data/lengths.h"
#include "output_paths.h"
#include "plan_args.h"
#include "planning_inputs.h"
#include "truncation_warnings.h"

namespace hydraulis::tools {
namespace {

int RunPlan(const PlanArgs& a) {
  if (a.lengths.empty() == a.dataset.empty()) {
    throw InvalidInput(
        "plan: give exactly one of --lengths (one batch) or --dataset (sampled steps)");
  }
  RefuseOutputOverInput({"-o/--output", a.output}, {{"--profile", a.inputs.profile},
                                                    {"--candidates", a.inputs.candidates},
                                                    {"--lengths", a.lengths},
                                                    {"--dataset", a.dataset}});
  const PlanningInputs inputs = a.inputs.Load();
  PlannerOptions options;
  options.algorithm = ParseAlgorithm(a.algorithm, "--algorithm");
  options.published_assigner = AssignPublished;
  options.overlong = a.reject_overlong ? OverlongRule::kReject : OverlongRule::kTruncate;
  options.context_tokens = a.max_len;
  options.seed = a.seed;
  options.schedule.backward_to_forward = a.backward_to_forward;
  options.threads = a.threads;
  options.prune_tolerance = a.prune_tolerance;
  options.cp_layout_space = ParseCpLayoutSpace(a.cp_layouts, "--cp-layouts");
  Planner planner(inputs.profile, inputs.candidates, options);
  std::string out;
  if (!a.lengths.empty()) {
    const std::vector<std::int64_t> lengths = LoadLengths(a.lengths, a.source.ToOptions());
    Plan plan = planner.PlanBatch(lengths);
    WarnTruncation(plan, -1);
    out = PlanToJson(plan, a.pretty, !a.no_timing) + "\n";
  } else {
    const std::vector<std::int64_t> dataset = LoadLengths(a.dataset, a.source.ToOptions());
    BatchSampler sampler(dataset, {a.tokens_per_batch, a.max_len, a.seed});
    for (int step = 0; step < a.steps; ++step) {
      SampledBatch batch = sampler.Next();
      Plan plan = planner.PlanBatch(batch.lengths);
      WarnTruncation(plan, step);
      out += PlanToJson(plan, false, !a.no_timing) + "\n";
    }
  }
  WriteOutput(a.output, out);
  return 0;
}

}  // namespace

Command AddPlanCommand(CLI::App& app) {
  auto* cmd = app.add_subcommand("plan",
                                 "Choose a strategy and assign one batch's documents "
                                 "(or N sampled batches) to pipelines and micro-batches");
  auto a = std::make_shared<PlanArgs>();
  a->AddTo(cmd);
  return [a] { return RunPlan(*a); };
}

}  // namespace hydraulis::tools
