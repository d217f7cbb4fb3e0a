#include <fmt/core.h>

#include <memory>

#include "commands.h"
#include "hydraulis/assign/plan_json.h"
#include "hydraulis/assign/planner.h"
#include "hydraulis/assign/published.h"
#include "hydraulis/base/error.h"
#include "hydraulis/data/batch_sampler.h"
#include "hydraulis/data/length_source.h"
#include "hydraulis/data/lengths.h"
#include "hydraulis/spec/spec_io.h"
#include "length_flags.h"
#include "number_flags.h"
#include "output_paths.h"
#include "recompute_flag.h"

namespace hydraulis::tools {
namespace {

struct PlanArgs {
  std::string profile, candidates, lengths, dataset, output, algorithm = "ours";
  std::uint64_t seed = 1;
  int steps = 1;
  std::int64_t tokens_per_batch = 200'000;
  std::int64_t max_len = 32'768;
  bool reject_overlong = false;
  bool pretty = false;
  bool no_timing = false;
  double backward_to_forward = 2.0;
  int threads = 0;
  double prune_tolerance = 0.0;
  std::string cp_layouts = "subsets";
  LengthFlags source;
  RecomputeFlag recompute;
};

void WarnTruncation(const Plan& plan, int step) {
  if (plan.truncated.empty()) return;
  std::int64_t lost = 0;
  for (const auto& t : plan.truncated) lost += t.original - t.kept;
  fmt::print(stderr,
             "hydraulis: warning: {}{} document(s) longer than every candidate's capacity "
             "truncated to {} tokens; {} tokens lost\n",
             step >= 0 ? fmt::format("step {}: ", step) : "", plan.truncated.size(),
             plan.truncated.front().kept, lost);
}

int RunPlan(const PlanArgs& a) {
  if (a.lengths.empty() == a.dataset.empty()) {
    throw InvalidInput(
        "plan: give exactly one of --lengths (one batch) or --dataset (sampled steps)");
  }
  RefuseOutputOverInput({"-o/--output", a.output}, {{"--profile", a.profile},
                                                    {"--candidates", a.candidates},
                                                    {"--lengths", a.lengths},
                                                    {"--dataset", a.dataset}});
  Profile profile = a.recompute.Apply(LoadProfile(a.profile), a.profile);
  CandidateSet candidates = LoadCandidates(a.candidates, profile);
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
  Planner planner(profile, candidates, options);
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
  if (a.output.empty() || a.output == "-") {
    fmt::print("{}", out);
  } else {
    WriteFileAtomically(a.output, out);
  }
  return 0;
}

}  // namespace

Command AddPlanCommand(CLI::App& app) {
  auto* cmd = app.add_subcommand("plan",
                                 "Choose a strategy and assign one batch's documents "
                                 "(or N sampled batches) to pipelines and micro-batches");
  auto a = std::make_shared<PlanArgs>();
  cmd->add_option("--profile", a->profile, "profile JSON (docs/spec-format.md)")->required();
  cmd->add_option("--candidates", a->candidates, "candidate strategies JSON")->required();
  a->recompute.AddTo(cmd);
  cmd->add_option(
      "--lengths", a->lengths,
      "one batch's document lengths: one integer per line or a JSON array; - for stdin");
  cmd->add_option("--dataset", a->dataset,
                  "length dataset to sample --steps batches from (writes JSON lines)");
  cmd->add_option("--algorithm", a->algorithm, "ours, static-fixed, published or kk")
      ->capture_default_str();
  cmd->add_option("--seed", a->seed, "seed of the sampler and the randomised baselines")
      ->capture_default_str();
  cmd->add_option("--steps", a->steps, "batches to sample with --dataset")
      ->check(PositiveNumber())
      ->capture_default_str();
  cmd->add_option("--tokens-per-batch", a->tokens_per_batch, "token budget of a sampled batch")
      ->check(PositiveNumber())
      ->capture_default_str();
  cmd->add_option("--max-len", a->max_len,
                  "context length: sampled documents are cut to it; static-fixed bin size")
      ->check(PositiveNumber())
      ->capture_default_str();
  cmd->add_flag("--reject-overlong", a->reject_overlong,
                "fail on a document longer than every capacity instead of truncating it");
  cmd->add_option("--backward-to-forward", a->backward_to_forward,
                  "backward:forward time ratio of the 1F1B model")
      ->check(PositiveNumber())
      ->capture_default_str();
  cmd->add_option("--threads", a->threads,
                  "threads that plan candidates (0: one per hardware thread); the plans are "
                  "the same for every count")
      ->check(CLI::Range(0, 4096))
      ->capture_default_str();
  cmd->add_option("--prune-tolerance", a->prune_tolerance,
                  "skip a candidate whose lower bound is within this fraction of the best plan "
                  "found (0: plan every candidate that can beat it); a plan is then at most "
                  "this fraction slower than with 0")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  a->source.AddTo(cmd);
  cmd->add_option("--cp-layouts", a->cp_layouts,
                  "where a cp > 1 pipeline may put a document: subsets (over any of its cp "
                  "ranks), whole-or-every (one rank or all) or every-rank (Megatron-LM's rule)")
      ->capture_default_str();
  cmd->add_flag("--pretty", a->pretty, "indent the JSON (single-batch mode)");
  cmd->add_flag("--no-timing", a->no_timing,
                "leave out planning_ms so the output is byte-identical across runs");
  cmd->add_option("-o,--output", a->output, "output file, written atomically (default stdout)")
      ->check(NonEmptyPath());
  return [a] { return RunPlan(*a); };
}

}  // namespace hydraulis::tools
