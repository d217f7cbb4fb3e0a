#include "hydraulis/assign/plan_json.h"

#include <cmath>
#include <nlohmann/json.hpp>
#include <span>
#include <vector>

namespace hydraulis {
namespace {

nlohmann::ordered_json Ms(double x) {
  if (!std::isfinite(x)) return nullptr;
  return x;
}

nlohmann::ordered_json SchemeJson(const Scheme& s) {
  return nlohmann::ordered_json{{"cp", s.cp}, {"tp", s.tp}, {"pp", s.pp}};
}

// One micro-batch's layout in the plan format (docs/plan-format.md): per document its rank
// when it is whole on one, -1 when it is over every rank (the format before subsets), else
// the array of its ranks.
nlohmann::ordered_json CpLayoutJson(const CpLayout& layout, int cp) {
  nlohmann::ordered_json j = nlohmann::ordered_json::array();
  for (std::size_t d = 0; d < layout.size(); ++d) {
    const std::span<const int> ranks = layout.Ranks(d);
    if (ranks.size() == 1) {
      j.push_back(ranks[0]);
    } else if (static_cast<int>(ranks.size()) == cp) {
      j.push_back(kSharded);
    } else {
      j.push_back(std::vector<int>(ranks.begin(), ranks.end()));
    }
  }
  return j;
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
    if (!p.cp_layouts.empty()) {
      pj["cp_layouts"] = nlohmann::ordered_json::array();
      for (const CpLayout& layout : p.cp_layouts) {
        pj["cp_layouts"].push_back(CpLayoutJson(layout, p.scheme.cp));
      }
    }
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
