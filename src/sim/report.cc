#include "hydraulis/sim/report.h"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

namespace hydraulis {
namespace {

// Insertion order, so the summary reads in the order docs/simulator.md lists it.
using json = nlohmann::ordered_json;

// printf into a std::string (the sim layer does not depend on fmt).
template <typename... Args>
std::string Printf(const char* format, Args... args) {
  const int n = std::snprintf(nullptr, 0, format, args...);
  std::string out(static_cast<std::size_t>(n) + 1, '\0');
  std::snprintf(out.data(), out.size(), format, args...);
  out.pop_back();
  return out;
}

json OptionsJson(const SimOptions& o) {
  return json{{"tokens_per_batch", o.sampler.tokens_per_batch},
              {"max_len", o.sampler.max_len},
              {"seed", o.sampler.seed},
              {"planner_seed", o.planner_seed},
              {"backward_to_forward", o.schedule.backward_to_forward},
              {"communication",
               {{"enabled", o.comm.enabled},
                {"nvlink_gbytes_per_s", o.comm.nvlink_gbytes_per_s},
                {"network_gbits_per_s_per_node", o.comm.network_gbits_per_s_per_node},
                {"p2p_latency_us", o.comm.p2p_latency_us},
                {"collective_latency_us", o.comm.collective_latency_us},
                {"activation_bytes_per_value", o.comm.activation_bytes_per_value},
                {"param_bytes_per_param", o.comm.param_bytes_per_param},
                {"grad_bytes_per_param", o.comm.grad_bytes_per_param},
                {"overlap", o.comm.overlap},
                {"bucket_elements", o.comm.bucket_elements}}},
              {"optimizer",
               {{"fixed_ms", o.optimizer.fixed_ms},
                {"bytes_per_param", o.optimizer.bytes_per_param},
                {"hbm_gbytes_per_s", o.optimizer.hbm_gbytes_per_s}}}};
}

// Strategy name -> steps that chose it, in order of first use.
std::vector<std::pair<std::string, int>> StrategyCounts(const SimResult& result) {
  std::vector<std::pair<std::string, int>> counts;
  for (const StepResult& r : result.steps) {
    auto it = std::find_if(counts.begin(), counts.end(),
                           [&](const auto& c) { return c.first == r.strategy; });
    if (it == counts.end()) {
      counts.emplace_back(r.strategy, 1);
    } else {
      ++it->second;
    }
  }
  return counts;
}

}  // namespace

std::string SimSummaryJson(const SimResult& result) {
  json per_step = json::array();
  for (const StepResult& r : result.steps) {
    json pipelines = json::array();
    for (const PipelineStepResult& p : r.pipelines) {
      pipelines.push_back({{"scheme", SchemeName(p.scheme)},
                           {"micro_batches", p.micro_batches},
                           {"tokens", p.tokens},
                           {"planned_ms", p.planned_ms},
                           {"pipeline_ms", p.pipeline_ms},
                           {"busy_ms", p.busy_ms},
                           {"bubble_share", p.bubble_share}});
    }
    per_step.push_back({{"step", r.step},
                        {"start_ms", r.start_ms},
                        {"strategy", r.strategy},
                        {"strategy_index", r.strategy_index},
                        {"strategy_description", r.strategy_description},
                        {"documents", r.documents},
                        {"tokens", r.tokens},
                        {"truncated_documents", r.truncated_documents},
                        {"truncated_tokens", r.truncated_tokens},
                        {"planned_ms", r.planned_ms},
                        {"materialize_ms", r.materialize_ms},
                        {"compute_ms", r.compute_ms},
                        {"reduce_scatter_ms", r.reduce_scatter_ms},
                        {"optimizer_ms", r.optimizer_ms},
                        {"step_ms", r.step_ms},
                        {"tokens_per_second", r.tokens_per_second},
                        {"bubble_share", r.bubble_share},
                        {"materialize_total_ms", r.materialize_total_ms},
                        {"reduce_scatter_start_ms", r.reduce_scatter_start_ms},
                        {"reduce_scatter_total_ms", r.reduce_scatter_total_ms},
                        {"pipelines", std::move(pipelines)}});
  }
  json counts = json::object();
  for (const auto& [name, n] : StrategyCounts(result)) counts[name] = n;
  json out;
  out["format"] = "hydraulis.simulation/1";
  out["system"] = SystemName(result.options.system);
  out["steps"] = result.steps.size();
  out["total_time_ms"] = result.total_time_ms;
  out["total_tokens"] = result.total_tokens;
  out["tokens_per_second"] = result.tokens_per_second;
  out["mean_step_ms"] = result.mean_step_ms;
  out["mean_bubble_share"] = result.mean_bubble_share;
  out["strategy_counts"] = counts;
  out["options"] = OptionsJson(result.options);
  out["per_step"] = per_step;
  return out.dump(1) + "\n";
}

std::string SimTable(const SimResult& result) {
  std::string out = Printf("%5s  %-9s %5s %8s %9s %8s %10s %8s %7s %10s %8s %7s\n", "step",
                           "strategy", "docs", "tokens", "plan ms", "mat ms", "compute ms", "rs ms",
                           "opt ms", "step ms", "tok/s", "bubble");
  for (const StepResult& r : result.steps) {
    out += Printf("%5d  %-9s %5d %8lld %9.1f %8.1f %10.1f %8.1f %7.1f %10.1f %8.0f %6.1f%%\n",
                  r.step, r.strategy.c_str(), r.documents, static_cast<long long>(r.tokens),
                  r.planned_ms, r.materialize_ms, r.compute_ms, r.reduce_scatter_ms, r.optimizer_ms,
                  r.step_ms, r.tokens_per_second, 100.0 * r.bubble_share);
  }
  out += Printf(
      "%s: %zu steps, %.1f ms, %lld tokens, %.0f tokens/s, mean step %.1f ms, mean "
      "bubble %.1f%%\n",
      SystemName(result.options.system).c_str(), result.steps.size(), result.total_time_ms,
      static_cast<long long>(result.total_tokens), result.tokens_per_second, result.mean_step_ms,
      100.0 * result.mean_bubble_share);
  std::string strategies;
  for (const auto& [name, n] : StrategyCounts(result)) {
    strategies += (strategies.empty() ? "" : ", ") + name + " x " + std::to_string(n);
  }
  out += "strategies: " + strategies + "\n";
  return out;
}

}  // namespace hydraulis
