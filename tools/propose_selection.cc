#include "propose_selection.h"

#include <fmt/core.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "hydraulis/assign/candidate_selection.h"
#include "hydraulis/data/batch_sampler.h"
#include "progress_bar.h"

namespace hydraulis::tools {
namespace {

// Local-search steps of a plan with the screening effort (ProposeArgs::screen).
constexpr int kScreenLocalSearchSteps = 50;

}  // namespace

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

}  // namespace hydraulis::tools
