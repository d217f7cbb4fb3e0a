// Speed of the strategy proposal (method.md 2.4) on the real Wikipedia lengths, and, with
// --compare-steps N, the planned step time of the proposed candidates versus the
// case-study list S0..S6 on the same sampled batches. Run from the repository root:
//
//   build/release/bench/propose_bench [--profile FILE] [--lengths FILE] [--repeat N]
//                                     [--compare-steps N] [--tokens-per-batch T]
#include <fmt/core.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "bench_main.h"
#include "hydraulis/assign/planner.h"
#include "hydraulis/base/error.h"
#include "hydraulis/data/batch_sampler.h"
#include "hydraulis/data/lengths.h"
#include "hydraulis/propose/propose.h"
#include "hydraulis/spec/spec_io.h"

namespace hydraulis {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

// The published settings (method.md section 3): 200K-token batches on 64 GPUs, 1.6M on
// 1,024; layouts (4,16,1) and (64,16,1).
struct Case {
  int gpus;
  std::int64_t resolution;
  OptimizerLayout layout;
  std::int64_t tokens_per_batch;
};

void PrintProposal(const Proposal& p) {
  for (const ProposedStrategy& s : p.strategies) {
    fmt::print("    {:<14} {:<44} longest {:>5}..{:<5} share {:5.3f}  est {:9.1f} ms{}\n",
               s.strategy.name, StrategyDescription(s.strategy),
               s.longest_tokens.empty() ? 0 : s.longest_tokens.front(),
               s.longest_tokens.empty() ? 0 : s.longest_tokens.back(), s.batch_share,
               s.estimated_ms, s.fallback ? "  (fallback)" : "");
  }
}

// Mean planned step time (ours, exact 1F1B) of `set` over `batches`, and how often each
// candidate was chosen.
double MeanStepMs(const Profile& profile, const CandidateSet& set,
                  const std::vector<std::vector<std::int64_t>>& batches, std::vector<int>* chosen) {
  PlannerOptions options;
  Planner planner(profile, set, options);
  chosen->assign(set.strategies.size(), 0);
  double total = 0;
  for (const auto& batch : batches) {
    const Plan plan = planner.PlanBatch(batch);
    total += plan.estimated_step_ms;
    ++(*chosen)[static_cast<std::size_t>(plan.strategy_index)];
  }
  return total / static_cast<double>(batches.size());
}

// Proposes for `options` `repeat` times and prints the best times, the schemes and the
// proposal.
Proposal TimeProposal(const Profile& profile, const std::vector<std::int64_t>& lengths,
                      const ProposeOptions& options, int repeat) {
  double best_total = 1e300, best_histogram = 1e300, best_dp = 1e300;
  Proposal p;
  for (int r = 0; r < std::max(repeat, 1); ++r) {
    const auto t0 = Clock::now();
    const LengthHistogram h =
        BuildLengthHistogram(lengths, options.max_len, options.resolution_tokens);
    best_histogram = std::min(best_histogram, Seconds(t0));
    p = ProposeFromHistogram(profile, h, options);
    best_total = std::min(best_total, Seconds(t0));
    best_dp = std::min(best_dp, p.dp_seconds);
  }
  fmt::print(
      "{:>5} GPUs, resolution {:>4}, batch {} tokens: {:.3f} s total (histogram {:.3f} s, DP + "
      "trace-back "
      "{:.3f} s); {} bins, {} schemes, GPU step {}, {} group evaluations, {} strategies\n",
      options.gpus, options.resolution_tokens, options.tokens_per_batch, best_total, best_histogram,
      best_dp, p.bins, p.schemes.size(), p.gpu_step, p.evaluations, p.strategies.size());
  fmt::print("    schemes (capacity tokens):");
  for (const DpScheme& s : p.schemes) {
    fmt::print(" {} {}", SchemeName(s.scheme), s.capacity_tokens);
  }
  fmt::print("\n");
  PrintProposal(p);
  return p;
}

// Plans the same sampled batches with S0..S6 and with the case study's proposal.
void CompareWithCaseStudy(const Profile& profile, const CandidateSet& s0s6,
                          const Proposal& case_study, const std::vector<std::int64_t>& lengths,
                          const SamplerOptions& sampling, int compare_steps) {
  const std::int64_t batch_tokens = sampling.tokens_per_batch;
  BatchSampler sampler(lengths, sampling);
  std::vector<std::vector<std::int64_t>> batches;
  for (int i = 0; i < compare_steps; ++i) batches.push_back(sampler.Next().lengths);
  const CandidateSet proposed =
      ParseCandidates(CandidatesToJson(case_study.candidates), "proposed", profile);
  std::vector<int> chosen;
  for (const auto* set : {&s0s6, &proposed}) {
    const auto t0 = Clock::now();
    const double ms = MeanStepMs(profile, *set, batches, &chosen);
    fmt::print(
        "{} ({} candidates): mean planned step {:.1f} ms, {:.0f} tokens/s over {} "
        "batches of {} tokens (planned in {:.1f} s); chosen:",
        set == &s0s6 ? "S0..S6" : "proposed", set->strategies.size(), ms,
        static_cast<double>(batch_tokens) / ms * 1000.0, compare_steps, batch_tokens, Seconds(t0));
    for (std::size_t i = 0; i < chosen.size(); ++i) {
      if (chosen[i] > 0) fmt::print(" {}x{}", set->strategies[i].name, chosen[i]);
    }
    fmt::print("\n");
  }
}

int Run(int argc, char** argv) {
  CLI::App app{"propose_bench: speed and quality of the strategy proposal"};
  std::string profile_path = "configs/profiles/llama-32b-a800.json";
  std::string lengths_path = "../shared/data/wikipedia-doc-lengths.txt";
  std::string s0s6_path = "configs/candidates/llama-32b-64gpu.json";
  int repeat = 3;
  int compare_steps = 0;
  std::int64_t tokens_per_batch = -1;
  int max_strategies = 0;
  app.add_option("--profile", profile_path)->capture_default_str();
  app.add_option("--lengths", lengths_path)->capture_default_str();
  app.add_option("--case-study", s0s6_path, "S0..S6 candidates")->capture_default_str();
  app.add_option("--repeat", repeat, "runs per case; the best time is reported")
      ->capture_default_str();
  app.add_option("--compare-steps", compare_steps, "batches to plan with proposed vs S0..S6")
      ->capture_default_str();
  app.add_option("--tokens-per-batch", tokens_per_batch,
                 "ProposeOptions::tokens_per_batch (-1: the case's batch, 0: whole histogram)")
      ->capture_default_str();
  app.add_option("--max-strategies", max_strategies, "ProposeOptions::max_strategies")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  const Profile profile = LoadProfile(profile_path);
  const auto t0 = Clock::now();
  const std::vector<std::int64_t> lengths = ReadLengths(lengths_path);
  fmt::print("{} documents read in {:.2f} s ({})\n", lengths.size(), Seconds(t0), lengths_path);

  const std::int64_t max_len = 32'768;
  const std::vector<Case> cases = {{64, 128, {4, 16, 1}, 200'000},
                                   {64, 32, {4, 16, 1}, 200'000},
                                   {1024, 512, {64, 16, 1}, 1'600'000},
                                   {1024, 128, {64, 16, 1}, 1'600'000}};
  Proposal case_study;
  for (const Case& c : cases) {
    ProposeOptions options;
    options.gpus = c.gpus;
    options.max_len = max_len;
    options.resolution_tokens = c.resolution;
    options.optimizer_layout = c.layout;
    options.tokens_per_batch = tokens_per_batch >= 0 ? tokens_per_batch : c.tokens_per_batch;
    options.max_strategies = max_strategies;
    const Proposal p = TimeProposal(profile, lengths, options, repeat);
    if (c.gpus == 64 && c.resolution == 128) case_study = p;
  }

  if (compare_steps > 0) {
    CompareWithCaseStudy(profile, LoadCandidates(s0s6_path, profile), case_study, lengths,
                         {cases.front().tokens_per_batch, max_len, 1}, compare_steps);
  }
  return 0;
}

}  // namespace
}  // namespace hydraulis

int main(int argc, char** argv) {
  return hydraulis::BenchMain("propose_bench", hydraulis::Run, argc, argv);
}
