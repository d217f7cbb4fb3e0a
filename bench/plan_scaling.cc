// Planning time against documents per batch: batches of n documents drawn (seeded, with
// replacement) from a real length distribution, planned by ours on one candidate set.
// "cold" is a fresh planner (what one `hydraulis plan` call pays); "warm" plans further
// batches of the same size on that planner (what a training run pays per step, its
// relaxation cache filled). Prints a markdown table (docs/benchmarks.md records it).
#include <fmt/core.h>
#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <vector>

#include "bench_main.h"
#include "hydraulis/assign/planner.h"
#include "hydraulis/base/error.h"
#include "hydraulis/base/rng.h"
#include "hydraulis/data/lengths.h"
#include "hydraulis/spec/spec_io.h"

namespace hydraulis {
namespace {

double PeakRssMiB() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024.0;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

int Run(int argc, char** argv) {
  CLI::App app{"plan_scaling: planning time and quality against documents per batch"};
  std::string profile_path, candidates_path, dataset_path;
  std::vector<std::int64_t> sizes = {1'000, 3'000, 10'000, 30'000, 100'000, 300'000, 1'000'000};
  int warm_batches = 3;
  std::uint64_t seed = 1;
  app.add_option("--profile", profile_path)->required();
  app.add_option("--candidates", candidates_path)->required();
  app.add_option("--dataset", dataset_path)->required();
  app.add_option("--sizes", sizes, "documents per batch")->capture_default_str();
  app.add_option("--warm-batches", warm_batches)->capture_default_str()->check(CLI::Range(0, 1000));
  app.add_option("--seed", seed)->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  const Profile profile = LoadProfile(profile_path);
  const CandidateSet candidates = LoadCandidates(candidates_path, profile);
  const std::vector<std::int64_t> dataset = ReadLengths(dataset_path);
  if (dataset.empty()) throw InvalidInput(dataset_path + ": no lengths");
  Rng rng(seed);
  auto draw = [&](std::int64_t n) {
    std::vector<std::int64_t> batch(static_cast<std::size_t>(n));
    for (auto& s : batch) s = dataset[rng.Below(dataset.size())];
    return batch;
  };

  fmt::print(
      "| documents | tokens | cold ms | warm ms (median of {}) | strategy | gap to bound | "
      "peak RSS MiB |\n",
      warm_batches);
  fmt::print("|---:|---:|---:|---:|---|---:|---:|\n");
  for (std::int64_t n : sizes) {
    if (n < 1) throw InvalidInput("--sizes: every size must be >= 1, got " + std::to_string(n));
    const std::vector<std::int64_t> batch = draw(n);
    std::int64_t tokens = 0;
    for (auto s : batch) tokens += s;
    const Planner planner(profile, candidates, PlannerOptions{});
    auto timed = [&](const std::vector<std::int64_t>& b) {
      const auto t0 = std::chrono::steady_clock::now();
      Plan plan = planner.PlanBatch(b);
      const double ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      return std::make_pair(ms, std::move(plan));
    };
    const auto [cold_ms, plan] = timed(batch);
    std::vector<double> warm;
    for (int k = 0; k < warm_batches; ++k) warm.push_back(timed(draw(n)).first);
    fmt::print("| {} | {} | {:.1f} | {:.1f} | {} | {:.2f} % | {:.0f} |\n", n, tokens, cold_ms,
               Median(warm), plan.strategy.name,
               100.0 * (plan.estimated_step_ms / plan.lower_bound_ms - 1.0), PeakRssMiB());
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace
}  // namespace hydraulis

int main(int argc, char** argv) {
  return hydraulis::BenchMain("plan_scaling", hydraulis::Run, argc, argv);
}
