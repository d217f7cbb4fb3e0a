#include "hydraulis/assign/plan_json.h"

#include <cmath>
#include <nlohmann/json.hpp>

namespace hydraulis {
namespace {

nlohmann::ordered_json Ms(double x) {
  if (!std::isfinite(x)) return nullptr;
  return x;
}

nlohmann::ordered_json SchemeJson(const Scheme& s) {
  return nlohmann::ordered_json{{"cp", s.cp}, {"tp", s.tp}, {"pp", s.pp}};
}

}  // namespace

std::string PlanToJson(const Plan& plan, bool pretty, bool include_timing) {
  nlohmann::ordered_json j;
  j["format"] = "hydraulis.plan/1";
  j["algorithm"] = AlgorithmName(plan.algorithm);
  nlohmann::ordered_json strategy;
  strategy["index"] = plan.strategy_index;
  strategy["name"] = plan.strategy.name;
  strategy["description"] = StrategyDescription(plan.strategy);
  strategy["pipelines"] = nlohmann::ordered_json::array();
  for (const auto& s : plan.strategy.pipelines) strategy["pipelines"].push_back(SchemeJson(s));
  j["strategy"] = strategy;
  j["estimated_step_ms"] = Ms(plan.estimated_step_ms);
  j["lower_bound_ms"] = Ms(plan.lower_bound_ms);
  const std::optional<double> gap = RelativeGap(plan.estimated_step_ms, plan.lower_bound_ms);
  j["gap"] = gap ? Ms(*gap) : nlohmann::ordered_json(nullptr);
  j["status"] = SolveStatusName(plan.status);
  j["time_limited_solves"] = plan.time_limited_solves;
  if (include_timing) j["planning_ms"] = plan.planning_ms;
  j["overhead_ms"] = plan.overhead_ms;
  j["num_documents"] = plan.lengths.size();
  std::int64_t tokens = 0;
  for (auto s : plan.lengths) tokens += s;
  j["num_tokens"] = tokens;
  j["pipelines"] = nlohmann::ordered_json::array();
  for (const auto& p : plan.pipelines) {
    nlohmann::ordered_json pj = SchemeJson(p.scheme);
    pj["capacity_tokens"] = p.capacity_tokens;
    pj["tokens"] = p.tokens;
    pj["estimated_ms"] = Ms(p.estimated_ms);
    pj["closed_form_ms"] = Ms(p.closed_form_ms);
    pj["micro_batches"] = p.micro_batches;
    if (!p.cp_layouts.empty()) pj["cp_layouts"] = p.cp_layouts;
    j["pipelines"].push_back(pj);
  }
  j["truncated"] = nlohmann::ordered_json::array();
  for (const auto& t : plan.truncated) {
    j["truncated"].push_back({{"index", t.index}, {"original", t.original}, {"kept", t.kept}});
  }
  j["candidates"] = nlohmann::ordered_json::array();
  for (const auto& c : plan.candidates) {
    j["candidates"].push_back({{"index", c.index},
                               {"name", c.name},
                               {"status", CandidateStatusName(c.status)},
                               {"estimated_step_ms", c.status == CandidateStatus::kPlanned
                                                         ? Ms(c.estimated_step_ms)
                                                         : nlohmann::ordered_json(nullptr)},
                               {"lower_bound_ms", Ms(c.lower_bound_ms)}});
  }
  return pretty ? j.dump(2) : j.dump();
}

}  // namespace hydraulis
