// Side-by-side planning benchmark on real data: every algorithm plans the same sampled
// global batches in one run, so quality ratios and timings compare under the same noise.
// Prints a markdown table (docs/benchmarks.md records its output).
#include <fmt/core.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <numeric>
#include <vector>

#include "bench_main.h"
#include "hydraulis/assign/planner.h"
#include "hydraulis/assign/published.h"
#include "hydraulis/base/error.h"
#include "hydraulis/data/batch_sampler.h"
#include "hydraulis/data/lengths.h"
#include "hydraulis/spec/spec_io.h"

namespace hydraulis {
namespace {

struct Row {
  std::vector<double> step_ms, bound_ms, planning_ms;
};

double Mean(const std::vector<double>& v) {
  return v.empty() ? 0 : std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
}
double Quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[static_cast<std::size_t>(q * static_cast<double>(v.size() - 1) + 0.5)];
}

// One row per algorithm, against the bound and against ours on the same steps; then how
// ours compares with the published planner on its steps.
void PrintComparison(const std::vector<Algorithm>& algos, const std::vector<Row>& rows) {
  fmt::print(
      "| algorithm | steps | mean step ms | mean bound ms | mean/bound | worst step gap "
      "| vs ours (same steps) | median plan ms | p90 plan ms |\n");
  fmt::print("|---|---|---|---|---|---|---|---|---|\n");
  const Row& ours = rows[0];
  for (std::size_t a = 0; a < algos.size(); ++a) {
    const Row& r = rows[a];
    if (r.step_ms.empty()) continue;
    double worst = 0, ours_sum = 0;
    for (std::size_t i = 0; i < r.step_ms.size(); ++i) {
      worst = std::max(worst, r.step_ms[i] / r.bound_ms[i] - 1);
      ours_sum += ours.step_ms[i];
    }
    const double sum = std::accumulate(r.step_ms.begin(), r.step_ms.end(), 0.0);
    fmt::print("| {} | {} | {:.1f} | {:.1f} | {:.4f} | {:.2f}% | {:.3f}x | {:.2f} | {:.2f} |\n",
               AlgorithmName(algos[a]), r.step_ms.size(), Mean(r.step_ms), Mean(r.bound_ms),
               Mean(r.step_ms) / Mean(r.bound_ms), 100 * worst, sum / ours_sum,
               Quantile(r.planning_ms, 0.5), Quantile(r.planning_ms, 0.9));
  }
  const Row& pub = rows[3];
  if (!pub.step_ms.empty()) {
    int worse = 0;
    for (std::size_t i = 0; i < pub.step_ms.size(); ++i) {
      worse += ours.step_ms[i] > pub.step_ms[i] * (1 + 1e-9);
    }
    fmt::print(
        "\nours slower than published on {} of {} steps; published median planning "
        "time / ours: {:.0f}x\n",
        worse, pub.step_ms.size(),
        Quantile(pub.planning_ms, 0.5) /
            Quantile(std::vector<double>(ours.planning_ms.begin(),
                                         ours.planning_ms.begin() +
                                             static_cast<std::ptrdiff_t>(pub.step_ms.size())),
                     0.5));
  }
}

int Run(int argc, char** argv) {
  CLI::App app{"plan_quality: all planning algorithms on the same sampled batches"};
  std::string profile_path, candidates_path, dataset_path;
  int steps = 200, published_steps = 0;
  std::int64_t tokens = 200'000, max_len = 32'768;
  std::uint64_t seed = 1;
  app.add_option("--profile", profile_path)->required();
  app.add_option("--candidates", candidates_path)->required();
  app.add_option("--dataset", dataset_path)->required();
  app.add_option("--steps", steps)->capture_default_str();
  app.add_option("--published-steps", published_steps,
                 "also run the published planner on the first N steps (slow: CBC limits)")
      ->capture_default_str();
  app.add_option("--tokens-per-batch", tokens)->capture_default_str();
  app.add_option("--max-len", max_len)->capture_default_str();
  app.add_option("--seed", seed)->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  Profile profile = LoadProfile(profile_path);
  CandidateSet candidates = LoadCandidates(candidates_path, profile);
  std::vector<std::int64_t> dataset = ReadLengths(dataset_path);
  BatchSampler sampler(dataset, {tokens, max_len, seed});
  std::vector<std::vector<std::int64_t>> batches;
  for (int i = 0; i < steps; ++i) batches.push_back(sampler.Next().lengths);

  const std::vector<Algorithm> algos = {Algorithm::kOurs, Algorithm::kStaticFixed,
                                        Algorithm::kKarmarkarKarp, Algorithm::kPublished};
  std::vector<Row> rows(algos.size());
  for (std::size_t a = 0; a < algos.size(); ++a) {
    PlannerOptions options;
    options.algorithm = algos[a];
    options.published_assigner = AssignPublished;
    options.context_tokens = max_len;
    options.seed = seed;
    Planner planner(profile, candidates, options);
    const int n = algos[a] == Algorithm::kPublished ? std::min(steps, published_steps) : steps;
    for (int i = 0; i < n; ++i) {
      Plan plan = planner.PlanBatch(batches[static_cast<std::size_t>(i)]);
      rows[a].step_ms.push_back(plan.estimated_step_ms);
      rows[a].bound_ms.push_back(plan.lower_bound_ms);
      rows[a].planning_ms.push_back(plan.planning_ms);
    }
    fmt::print(stderr, "plan_quality: {} done ({} steps)\n", AlgorithmName(algos[a]), n);
  }

  fmt::print("{} GPUs, {} steps of {} tokens (documents cut to {}), seed {}\n\n", candidates.gpus,
             steps, tokens, max_len, seed);
  PrintComparison(algos, rows);
  return 0;
}

}  // namespace
}  // namespace hydraulis

int main(int argc, char** argv) {
  return hydraulis::BenchMain("plan_quality", hydraulis::Run, argc, argv);
}
