// How long a training step waits for its plan with the trainer's look-ahead (PlanAhead, the
// mechanism of `hydraulis train` and of the Python LookaheadPlanner): batches sampled from
// real lengths and planned by ours on a candidate set while the "training step" runs. The
// step is emulated by sleeping `--step-scale` times the plan's estimated step time, so the
// planner competes with nothing but the clock; a scale below 1 makes steps shorter than
// the real ones, which only makes hiding the planning harder. Prints a markdown table
// (docs/benchmarks.md records it).
#include <fmt/core.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <numeric>
#include <thread>
#include <vector>

#include "bench_main.h"
#include "hydraulis/assign/planner.h"
#include "hydraulis/data/batch_sampler.h"
#include "hydraulis/data/lengths.h"
#include "hydraulis/runtime/job/plan_ahead.h"
#include "hydraulis/spec/spec_io.h"

namespace hydraulis {
namespace {

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

double Max(const std::vector<double>& v) {
  return v.empty() ? 0.0 : *std::max_element(v.begin(), v.end());
}

int Run(int argc, char** argv) {
  CLI::App app{"plan_ahead_bench: plan wait per step with the trainer's look-ahead"};
  std::string profile_path, candidates_path, dataset_path;
  int steps = 200, depth = 2;
  std::int64_t tokens = 200'000, max_len = 32'768;
  double step_scale = 0.01;
  std::uint64_t seed = 1;
  app.add_option("--profile", profile_path)->required();
  app.add_option("--candidates", candidates_path)->required();
  app.add_option("--dataset", dataset_path)->required();
  app.add_option("--steps", steps)->capture_default_str()->check(CLI::Range(2, 100'000));
  app.add_option("--depth", depth)->capture_default_str()->check(CLI::Range(1, 64));
  app.add_option("--tokens-per-batch", tokens)->capture_default_str();
  app.add_option("--max-len", max_len)->capture_default_str();
  app.add_option("--step-scale", step_scale, "emulated step = scale * estimated_step_ms")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 10.0));
  app.add_option("--seed", seed)->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  const Profile profile = LoadProfile(profile_path);
  const CandidateSet candidates = LoadCandidates(candidates_path, profile);
  const std::vector<std::int64_t> dataset = ReadLengths(dataset_path);
  PlannerOptions options;
  options.context_tokens = max_len;
  const Planner planner(profile, candidates, options);
  BatchSampler sampler(dataset, {tokens, max_len, seed});

  std::vector<double> waits, planning, step_ms;
  {
    PlannerTimeline timeline(std::shared_ptr<const Planner>(&planner, [](auto*) {}), 0, depth);
    PlanAhead ahead(timeline, sampler, 0, steps, depth);
    for (int s = 0; s < steps; ++s) {
      double waited = 0;
      const PlanAhead::Step step = ahead.Next(waited);
      waits.push_back(waited);
      planning.push_back(step.plan.planning_ms);
      const double emulated = step.plan.estimated_step_ms * step_scale;
      step_ms.push_back(emulated);
      std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(emulated));
      timeline.Publish(s);
    }
  }
  const std::vector<double> after_first(waits.begin() + 1, waits.end());
  const std::vector<double> planning_after(planning.begin() + 1, planning.end());
  fmt::print(
      "| steps | depth | emulated step (median ms) | planning (median / max ms) | "
      "wait at step 0 (ms) | wait after step 0 (median / max ms) | total wait after "
      "step 0 (ms) | synchronous planning would wait (ms) |\n");
  fmt::print("|---:|---:|---:|---|---:|---|---:|---:|\n");
  fmt::print(
      "| {} | {} | {:.1f} | {:.2f} / {:.2f} | {:.2f} | {:.4f} / {:.4f} | {:.3f} | {:.1f} |\n",
      steps, depth, Median(step_ms), Median(planning), Max(planning), waits.front(),
      Median(after_first), Max(after_first),
      std::accumulate(after_first.begin(), after_first.end(), 0.0),
      std::accumulate(planning_after.begin(), planning_after.end(), 0.0));
  return 0;
}

}  // namespace
}  // namespace hydraulis

int main(int argc, char** argv) {
  return hydraulis::BenchMain("plan_ahead_bench", hydraulis::Run, argc, argv);
}
