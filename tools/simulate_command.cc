// `hydraulis simulate`: a simulated training run of one system (docs/simulator.md).
#include <fmt/core.h>

#include <memory>
#include <string>
#include <vector>

#include "commands.h"
#include "hydraulis/base/error.h"
#include "hydraulis/base/file_io.h"
#include "hydraulis/data/length_source.h"
#include "hydraulis/data/lengths.h"
#include "hydraulis/sim/report.h"
#include "hydraulis/sim/simulator.h"
#include "hydraulis/sim/trace.h"
#include "hydraulis/spec/spec_io.h"
#include "length_flags.h"
#include "number_flags.h"
#include "output_paths.h"
#include "progress_bar.h"
#include "recompute_flag.h"

namespace hydraulis::tools {
namespace {

struct SimulateArgs {
  std::string profile, candidates, lengths, system = "ours", json, trace, cp_layouts = "subsets";
  std::vector<int> trace_steps;
  bool quiet = false;
  bool no_communication = false;
  bool sync_blind = false;
  bool no_overlap = false;
  SimOptions options;
  LengthFlags source;
  RecomputeFlag recompute;
};

// More steps than anyone waits for (a step plans a batch: milliseconds to a second), and
// the per-step results are kept in memory.
constexpr int kMaxSteps = 1'000'000;

int RunSimulate(SimulateArgs a) {
  if (a.options.steps > kMaxSteps) {
    throw InvalidInput("--steps " + std::to_string(a.options.steps) + ": at most " +
                       std::to_string(kMaxSteps) + " (each step plans a batch)");
  }
  for (const FlagPath& out : {FlagPath{"--json", a.json}, FlagPath{"--trace", a.trace}}) {
    RefuseOutputOverInput(
        out, {{"--profile", a.profile}, {"--candidates", a.candidates}, {"--lengths", a.lengths}});
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
  const Profile profile = a.recompute.Apply(LoadProfile(a.profile), a.profile);
  const CandidateSet candidates = LoadCandidates(a.candidates, profile);
  const std::vector<std::int64_t> dataset = LoadLengths(a.lengths, a.source.ToOptions());
  SimResult result;
  {
    ProgressBar bar("steps");
    result = Simulate(profile, candidates, dataset, a.options,
                      [&bar](int done, int total) { bar.Update(done, total); });
  }
  int truncated = 0;
  std::int64_t lost = 0;
  for (const StepResult& r : result.steps) {
    truncated += r.truncated_documents;
    lost += r.truncated_tokens;
  }
  if (truncated > 0) {
    fmt::print(stderr,
               "hydraulis: warning: {} document(s) longer than the system can hold were "
               "truncated; {} tokens lost\n",
               truncated, lost);
  }
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
  SimOptions& o = a->options;
  cmd->add_option("--profile", a->profile, "profile JSON (docs/spec-format.md)")->required();
  cmd->add_option("--candidates", a->candidates, "candidate strategies JSON")->required();
  a->recompute.AddTo(cmd);
  a->source.AddTo(cmd);
  cmd->add_option("--lengths", a->lengths, "length dataset to sample the global batches from")
      ->required();
  cmd->add_option("--steps", o.steps, "global batches to simulate (at most 1000000)")
      ->check(PositiveNumber())
      ->capture_default_str();
  cmd->add_option("--tokens-per-batch", o.sampler.tokens_per_batch,
                  "token budget of a global batch")
      ->check(PositiveNumber())
      ->capture_default_str();
  cmd->add_option("--max-len", o.sampler.max_len,
                  "context length: documents are cut to it; static bin and padding size")
      ->check(PositiveNumber())
      ->capture_default_str();
  cmd->add_option(
         "--system", a->system,
         "padding, static-fixed, static-balanced, static-cp, dynamic-cp, published or ours")
      ->capture_default_str();
  cmd->add_option("--seed", o.sampler.seed, "seed of the sampler and the published planner")
      ->capture_default_str();
  cmd->add_option("--json", a->json, "write the run summary JSON here (atomically)")
      ->check(NonEmptyPath());
  cmd->add_option("--trace", a->trace, "write a Chrome trace (Perfetto) of --trace-steps here")
      ->check(NonEmptyPath());
  cmd->add_option("--trace-steps", a->trace_steps,
                  "0-based steps to trace, comma-separated (default: the first)")
      ->delimiter(',');
  cmd->add_option("--backward-to-forward", o.schedule.backward_to_forward,
                  "backward:forward time ratio of a stage")
      ->capture_default_str();
  cmd->add_option("--nvlink-gbytes-per-s", o.comm.nvlink_gbytes_per_s,
                  "NVLink bandwidth per GPU within a node, GB/s")
      ->capture_default_str();
  cmd->add_option("--network-gbits-per-node", o.comm.network_gbits_per_s_per_node,
                  "network bandwidth of one node to the others (all NICs), Gb/s")
      ->capture_default_str();
  cmd->add_option("--p2p-latency-us", o.comm.p2p_latency_us,
                  "latency of one point-to-point message between stages, us")
      ->capture_default_str();
  cmd->add_option("--collective-latency-us", o.comm.collective_latency_us,
                  "latency of one collective phase, us")
      ->capture_default_str();
  cmd->add_option("--grad-bytes-per-param", o.comm.grad_bytes_per_param,
                  "bytes per reduce-scattered gradient value (2 bf16, 4 fp32)")
      ->capture_default_str();
  cmd->add_flag("--no-overlap", a->no_overlap,
                "the serial model: the parameter all-gather before compute and the gradient "
                "reduce-scatter after it, nothing overlapped (default: bucket by bucket, "
                "overlapped with forward and backward)");
  cmd->add_option("--ddp-bucket-size", o.comm.bucket_elements,
                  "parameters per bucket of the overlapped collectives (as train's)")
      ->check(PositiveNumber())
      ->capture_default_str();
  cmd->add_option("--cp-layouts", a->cp_layouts,
                  "where a cp > 1 pipeline may put a document: subsets (over any of its cp "
                  "ranks), whole-or-every (one rank or all) or every-rank (Megatron-LM's rule; "
                  "static-cp always uses it)")
      ->capture_default_str();
  cmd->add_flag("--sync-blind", a->sync_blind,
                "ours chooses strategies on compute time alone (default: compute + modelled "
                "synchronisation)");
  cmd->add_flag("--no-communication", a->no_communication,
                "every communication term takes 0 ms (the planner's view)");
  cmd->add_option("--optimizer-ms", o.optimizer.fixed_ms,
                  "fixed optimizer-step time, ms (default: from parameters per GPU and HBM "
                  "bandwidth)")
      ->check(NonNegativeNumber());
  cmd->add_option("--hbm-gbytes-per-s", o.optimizer.hbm_gbytes_per_s,
                  "effective HBM bandwidth per GPU for the optimizer step, GB/s")
      ->capture_default_str();
  cmd->add_flag("-q,--quiet", a->quiet, "do not print the table");
  return [a] { return RunSimulate(*a); };
}

}  // namespace hydraulis::tools
