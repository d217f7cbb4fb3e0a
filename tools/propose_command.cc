// `hydraulis propose`: candidate strategies from a dataset's length histogram
// (method.md 2.4, docs/propose.md), written in the format `hydraulis plan` reads.
#include <fmt/core.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "commands.h"
#include "hydraulis/assign/candidate_selection.h"
#include "hydraulis/base/error.h"
#include "hydraulis/base/file_io.h"
#include "hydraulis/data/batch_sampler.h"
#include "hydraulis/data/length_source.h"
#include "hydraulis/data/lengths.h"
#include "hydraulis/propose/propose.h"
#include "hydraulis/spec/spec_io.h"
#include "length_flags.h"
#include "output_paths.h"
#include "parsed_option.h"
#include "progress_bar.h"
#include "recompute_flag.h"

namespace hydraulis::tools {
namespace {

struct ProposeArgs {
  std::string profile, lengths, output = "-", optimizer_layout;
  int gpus = 0;
  std::int64_t max_len = 0;
  std::int64_t resolution = 128;
  std::int64_t tokens_per_batch = 200'000;
  int max_strategies = 0;
  int top_documents = 1;
  int select_batches = 0;
  std::uint64_t select_seed = 1;
  double select_tolerance = 0.0;
  bool select_tolerance_given = false;
  // Plan the --select-batches batches with the screening effort (the long-context default).
  bool screen = false;
  // The flags as given, to tell a default from a value the user chose.
  const CLI::Option* top_documents_flag = nullptr;
  const CLI::Option* max_strategies_flag = nullptr;
  const CLI::Option* select_batches_flag = nullptr;
  const CLI::Option* select_seed_flag = nullptr;
  CpSchemes cp_schemes = CpSchemes::kWhenNeeded;
  bool quiet = false;
  LengthFlags source;
  RecomputeFlag recompute;
};

// "DP,TP,PP", three integers >= 1.
OptimizerLayout ParseLayout(const std::string& text) {
  std::vector<int> parts;
  std::string_view rest = text;
  for (;;) {
    const std::size_t comma = rest.find(',');
    const std::string_view part = rest.substr(0, comma);
    int value = 0;
    const auto [end, ec] = std::from_chars(part.data(), part.data() + part.size(), value);
    if (ec != std::errc() || end != part.data() + part.size() || value < 1) {
      throw InvalidInput("--optimizer-layout \"" + text +
                         "\": expected DP,TP,PP with three integers >= 1");
    }
    parts.push_back(value);
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  if (parts.size() != 3) {
    throw InvalidInput("--optimizer-layout \"" + text +
                       "\": expected DP,TP,PP with three integers >= 1");
  }
  return {parts[0], parts[1], parts[2]};
}

// The long-context defaults (docs/propose.md, "Defaults"): with cp schemes taking part, a
// strategy per bin for batches that draw two long documents, and 8 kept by planning 16
// sampled batches with the screening effort and a 2 % prune tolerance, on seed 2 (not the
// seed 1 plan, simulate and train sample by default); docs/benchmarks.md has what they give.
constexpr int kLongContextTopDocuments = 2;
constexpr int kLongContextMaxStrategies = 8;
constexpr int kLongContextSelectBatches = 16;
constexpr double kLongContextSelectTolerance = 0.02;
constexpr std::uint64_t kLongContextSelectSeed = 2;
constexpr int kScreenLocalSearchSteps = 50;

// --select-batches: proposes every strategy, plans a.select_batches sampled batches with all
// of them and keeps the fallback, the longest bin's strategy and the a.max_strategies - 1
// others that most lower those batches' planned steps (assign/candidate_selection.h).
// Rewrites `p` to the kept strategies and prints what the choice costs on those batches.
void KeepByPlans(const Profile& profile, std::span<const std::int64_t> lengths,
                 const ProposeArgs& a, Proposal& p) {
  const int others = static_cast<int>(p.strategies.size()) - 1;
  if (others <= a.max_strategies) return;
  // The strategy proposed for the longest bin stays, so every document stays plannable.
  std::int64_t longest = 0;
  for (const ProposedStrategy& s : p.strategies) {
    if (!s.longest_tokens.empty()) longest = std::max(longest, s.longest_tokens.back());
  }
  int longest_index = 0;
  for (std::size_t i = 0; i < p.strategies.size(); ++i) {
    const std::vector<std::int64_t>& t = p.strategies[i].longest_tokens;
    if (std::find(t.begin(), t.end(), longest) != t.end()) {
      longest_index = static_cast<int>(i);
      break;
    }
  }
  std::vector<int> always{0};
  if (longest_index != 0) always.push_back(longest_index);
  BatchSampler sampler(lengths, {a.tokens_per_batch, a.max_len, a.select_seed});
  std::vector<std::vector<std::int64_t>> batches;
  for (int i = 0; i < a.select_batches; ++i) batches.push_back(sampler.Next().lengths);
  PlannerOptions options;
  options.context_tokens = a.max_len;
  options.threads = 0;
  options.prune_tolerance = a.select_tolerance;
  if (a.screen) {
    // The long-context default plans its sample batches with a shorter local search and no
    // cp calibration: faster per plan, its plans a little above the full search's.
    options.two_stage.max_local_search_steps = kScreenLocalSearchSteps;
    options.two_stage.cp_calibration_rounds = 0;
  }
  const int more = a.max_strategies - (longest_index != 0 ? 1 : 0);
  CandidateSelection chosen;
  {
    ProgressBar bar("batches planned");
    chosen = SelectCandidatesByPlans(profile, p.candidates, batches, always, more, options,
                                     [&bar](int done, int total) { bar.Update(done, total); });
  }
  std::vector<ProposedStrategy> strategies;
  for (int i : chosen.kept) {
    strategies.push_back(std::move(p.strategies[static_cast<std::size_t>(i)]));
  }
  CandidateSet candidates = KeptCandidates(p.candidates, chosen.kept);
  double all = 0, kept = 0;
  for (std::size_t b = 0; b < batches.size(); ++b) {
    all += chosen.all_ms[b];
    kept += chosen.kept_ms[b];
  }
  if (!a.quiet) {
    const double n = static_cast<double>(batches.size());
    fmt::print(stderr,
               "hydraulis: kept {} of {} strategies by planning {} sampled batches (seed {}): "
               "mean planned step {:.1f} ms, {:.1f} ms with all\n",
               strategies.size(), p.strategies.size(), batches.size(), a.select_seed, kept / n,
               all / n);
  }
  p.strategies = std::move(strategies);
  p.candidates = std::move(candidates);
}

void PrintSummary(const Proposal& p, const ProposeArgs& a) {
  const OptimizerLayout& l = p.candidates.optimizer_layout;
  if (p.top_documents < a.top_documents) {
    fmt::print(stderr,
               "hydraulis: --top-documents {} capped at {}, the expected documents of one batch "
               "of {} tokens\n",
               a.top_documents, p.top_documents, a.tokens_per_batch);
  }
  fmt::print(stderr,
             "hydraulis: {} strategies for {} GPUs (optimizer layout {},{},{}) from {} length "
             "bins of {} tokens in {:.3f} s\n",
             p.strategies.size(), p.candidates.gpus, l.dp, l.tp, l.pp, p.bins, a.resolution,
             p.dp_seconds);
  for (const ProposedStrategy& s : p.strategies) {
    std::string served = s.cp_pool ? "cp pool" : "fallback";
    if (!s.longest_tokens.empty()) {
      served = fmt::format("longest {}..{}", s.longest_tokens.front(), s.longest_tokens.back());
      if (s.fallback) served += ", fallback";
    } else if (!s.shared_top_tokens.empty()) {
      served = fmt::format("{} longest {}..{}", s.top_documents, s.shared_top_tokens.front(),
                           s.shared_top_tokens.back());
    }
    fmt::print(stderr, "  {:<14} {:<40} {:<26} batch share {:5.3f}\n", s.strategy.name,
               StrategyDescription(s.strategy), served, s.batch_share);
  }
}

// Each selection batch is planned with every proposed strategy (seconds each on a large
// cluster), and all of them are held in memory.
constexpr int kMaxSelectBatches = 10'000;

// Applies the long-context defaults to the flags the user did not give when cp schemes take
// part and none of --top-documents, --max-strategies, --select-batches was given.
void ApplyLongContextDefaults(const Profile& profile, std::span<const std::int64_t> lengths,
                              const ProposeOptions& options, ProposeArgs& a) {
  if (a.top_documents_flag->count() > 0 || a.max_strategies_flag->count() > 0 ||
      a.select_batches_flag->count() > 0 || a.tokens_per_batch < 1 || lengths.empty()) {
    return;
  }
  const OptimizerLayout layout = options.optimizer_layout
                                     ? *options.optimizer_layout
                                     : DefaultOptimizerLayout(profile, options.gpus);
  const std::int64_t longest =
      std::min(a.max_len, *std::max_element(lengths.begin(), lengths.end()));
  if (!CpSchemesTakePart(UsableSchemes(profile, options.gpus, layout), longest, a.cp_schemes)) {
    return;
  }
  a.top_documents = kLongContextTopDocuments;
  a.max_strategies = kLongContextMaxStrategies;
  a.select_batches = kLongContextSelectBatches;
  if (!a.select_tolerance_given) a.select_tolerance = kLongContextSelectTolerance;
  if (a.select_seed_flag->count() == 0) a.select_seed = kLongContextSelectSeed;
  a.screen = true;
  if (!a.quiet) {
    fmt::print(stderr,
               "hydraulis: long context (documents of {} tokens need cp): --top-documents {} "
               "--max-strategies {} --select-batches {} (give any of them to choose)\n",
               longest, a.top_documents, a.max_strategies, a.select_batches);
  }
}

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
  if (!a.optimizer_layout.empty()) options.optimizer_layout = ParseLayout(a.optimizer_layout);
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
  if (!a.quiet) PrintSummary(proposal, a);
  if (a.output == "-") {
    fmt::print("{}", json);
  } else {
    WriteFileAtomically(a.output, json);
  }
  return 0;
}

}  // namespace

Command AddProposeCommand(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "propose",
      "Propose candidate heterogeneous strategies from a dataset's length histogram "
      "(writes a candidates file for plan and simulate)");
  auto a = std::make_shared<ProposeArgs>();
  cmd->add_option("--profile", a->profile, "profile JSON (docs/spec-format.md)")->required();
  a->recompute.AddTo(cmd);
  a->source.AddTo(cmd);
  cmd->add_option("--lengths", a->lengths,
                  "dataset document lengths: text, JSON array, .jsonl or .idx; - for stdin")
      ->required();
  cmd->add_option("--gpus", a->gpus, "cluster size N")->required();
  cmd->add_option("--max-len", a->max_len,
                  "context length: documents are truncated to it; must fit some scheme")
      ->required();
  cmd->add_option("--resolution", a->resolution, "histogram bin width (tokens)")
      ->capture_default_str();
  cmd->add_option("--optimizer-layout", a->optimizer_layout,
                  "DP,TP,PP of the optimizer layout (default: the homogeneous layout whose "
                  "scheme has the largest capacity)");
  cmd->add_option("--tokens-per-batch", a->tokens_per_batch,
                  "global batch the histogram is scaled to; 0 plans for the whole dataset")
      ->capture_default_str();
  a->max_strategies_flag =
      cmd->add_option("--max-strategies", a->max_strategies,
                      "keep at most this many proposed strategies besides the fallback (0: all; 8 "
                      "when documents need cp and none of --top-documents, --max-strategies, "
                      "--select-batches is given)")
          ->capture_default_str();
  a->select_batches_flag =
      cmd->add_option(
             "--select-batches", a->select_batches,
             "with --max-strategies: plan this many sampled batches (at most 10000) with "
             "every proposed strategy and keep those that most lower their planned steps "
             "(0: keep by batch share; 16 with the long-context defaults, docs/propose.md)")
          ->capture_default_str();
  cmd->add_option_function<double>(
      "--select-tolerance",
      [a](double v) {
        a->select_tolerance = v;
        a->select_tolerance_given = true;
      },
      "with --select-batches: skip planning a strategy on a batch when its lower "
      "bound is within this fraction of the best plan found (e.g. 0.02; default 0)");
  a->select_seed_flag =
      cmd->add_option("--select-seed", a->select_seed,
                      "seed of the --select-batches batches (as plan --seed draws them)")
          ->capture_default_str();
  a->top_documents_flag =
      cmd->add_option(
             "--top-documents", a->top_documents,
             "also propose, for k = 2..this, a strategy per bin holding a batch's k "
             "longest documents (1: only its longest; 2 with the long-context defaults; at "
             "most 10000); capped at the "
             "expected documents of one batch, --tokens-per-batch / mean length")
          ->capture_default_str()
          ->check(CLI::Range(1, ProposeOptions::kMaxTopDocuments));
  AddEnumOption(cmd, "--cp-schemes", a->cp_schemes, kCpSchemesNames,
                "when the profile's context-parallel schemes take part (needed: only when "
                "the longest document fits no cp = 1 scheme)");
  cmd->add_flag("--quiet", a->quiet, "do not print the summary on stderr");
  cmd->add_option("-o,--output", a->output, "output file, written atomically; - for stdout")
      ->check(NonEmptyPath())
      ->capture_default_str();
  return [a] { return RunPropose(*a); };
}

}  // namespace hydraulis::tools
