// `hydraulis propose`: candidate strategies from a dataset's length histogram
// (method.md 2.4, docs/propose.md), written in the format `hydraulis plan` reads. Its flags
// are propose_args.h's.
#include <fmt/core.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "command_output.h"
#include "commands.h"
#include "hydraulis/base/error.h"
#include "hydraulis/data/lengths.h"
#include "hydraulis/propose/propose.h"
#include "hydraulis/spec/spec_io.h"
#include "output_paths.h"
#include "progress_bar.h"
#include "propose_args.h"
#include "propose_long_context.h"
#include "propose_selection.h"
#include "propose_summary.h"

namespace hydraulis::tools {
namespace {

// Each selection batch is planned with every proposed strategy (seconds each on a large
// cluster), and all of them are held in memory.
constexpr int kMaxSelectBatches = 10'000;

int RunPropose(ProposeArgs a) {
  RefuseOutputOverInput({"-o/--output", a.output},
                        {{"--profile", a.profile}, {"--lengths", a.lengths}});
  ProposeOptions options;
  options.gpus = a.gpus;
  options.max_len = a.max_len;
  options.resolution_tokens = a.resolution;
  options.tokens_per_batch = a.tokens_per_batch;
  options.max_strategies = a.max_strategies;
  options.top_documents = a.top_documents;
  options.cp_schemes = a.cp_schemes;
  if (!a.optimizer_layout.empty()) {
    options.optimizer_layout = ParseOptimizerLayout(a.optimizer_layout);
  }
  if (a.select_batches < 0 || a.select_batches > kMaxSelectBatches) {
    throw InvalidInput("--select-batches: must be from 0 to " + std::to_string(kMaxSelectBatches) +
                       ", got " + std::to_string(a.select_batches));
  }
  if (a.select_tolerance_given && a.select_batches == 0) {
    throw InvalidInput("--select-tolerance " + fmt::format("{}", a.select_tolerance) +
                       ": needs --select-batches >= 1 (it prunes the plans of that selection)");
  }
  if (!(a.select_tolerance >= 0.0) || !std::isfinite(a.select_tolerance)) {
    throw InvalidInput("--select-tolerance: must be a finite number >= 0, got " +
                       std::to_string(a.select_tolerance));
  }
  if (a.select_batches > 0) {
    if (a.max_strategies < 1) {
      throw InvalidInput("--select-batches " + std::to_string(a.select_batches) +
                         ": needs --max-strategies >= 1 (how many strategies to keep)");
    }
    if (a.tokens_per_batch < 1) {
      throw InvalidInput("--select-batches " + std::to_string(a.select_batches) +
                         ": needs --tokens-per-batch >= 1 (the batches it plans)");
    }
    options.max_strategies = 0;
  }
  const Profile profile = a.recompute.Apply(LoadProfile(a.profile), a.profile);
  const std::vector<std::int64_t> lengths = LoadLengths(a.lengths, a.source.ToOptions());
  ApplyLongContextDefaults(profile, lengths, options, a);
  options.top_documents = a.top_documents;
  if (a.select_batches > 0) options.max_strategies = 0;
  Proposal proposal;
  {
    ProgressBar bar("k (--top-documents)");
    options.progress = [&bar](int done, int total) { bar.Update(done, total); };
    proposal = ProposeStrategies(profile, lengths, options);
  }
  if (a.select_batches > 0) KeepByPlans(profile, lengths, a, proposal);
  const std::string json = CandidatesToJson(proposal.candidates);
  // The file must be one `plan` accepts; check before writing anything.
  ParseCandidates(json, "proposed candidates", profile);
  if (!a.quiet) PrintProposalSummary(proposal, a);
  WriteOutput(a.output, json);
  return 0;
}

}  // namespace

Command AddProposeCommand(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "propose",
      "Propose candidate heterogeneous strategies from a dataset's length histogram "
      "(writes a candidates file for plan and simulate)");
  auto a = std::make_shared<ProposeArgs>();
  a->AddTo(cmd);
  return [a] { return RunPropose(*a); };
}

}  // namespace hydraulis::tools
