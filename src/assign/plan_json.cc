#include "hydraulis/assign/plan_json.h"

#include <limits>

#include <cmath>
#include <nlohmann/json.hpp>
#include <span>
#include <vector>

#include "hydraulis/assign/plan_lines.h"
#include "hydraulis/base/error.h"

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

// A time the writer gave as a number, or null for one that was not finite.
double MsFrom(const nlohmann::json& j) {
  return j.is_null() ? std::numeric_limits<double>::infinity() : j.get<double>();
}

Scheme SchemeFrom(const nlohmann::json& j) {
  return {j.at("cp").get<int>(), j.at("tp").get<int>(), j.at("pp").get<int>()};
}

Plan PlanFromCheckedJson(const nlohmann::json& j, std::vector<std::int64_t> lengths,
                         const std::string& source);

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

Plan PlanFromJson(const std::string& text, std::vector<std::int64_t> lengths,
                  const std::string& source) {
  // The reader of `summarize` checks every field, layouts and document indices included.
  const std::vector<PlanLine> lines = ParsePlanLines(text, source);
  if (lines.size() != 1) {
    throw InvalidInput(source + ": expected one plan, got " + std::to_string(lines.size()));
  }
  std::int64_t tokens = 0;
  for (const std::int64_t s : lengths) tokens += s;
  if (static_cast<std::int64_t>(lengths.size()) != lines[0].num_documents ||
      tokens != lines[0].num_tokens) {
    throw InvalidInput(source + ": " + std::to_string(lengths.size()) + " lengths of " +
                       std::to_string(tokens) + " tokens for a plan of " +
                       std::to_string(lines[0].num_documents) + " documents and " +
                       std::to_string(lines[0].num_tokens) + " tokens");
  }
  try {
    return PlanFromCheckedJson(nlohmann::json::parse(text), std::move(lengths), source);
  } catch (const nlohmann::json::exception& e) {
    // A field ParsePlanLines does not read, of the wrong type.
    throw InvalidInput(source + ": " + e.what());
  }
}

namespace {

// PlanFromJson's fields, from a plan ParsePlanLines accepted.
Plan PlanFromCheckedJson(const nlohmann::json& j, std::vector<std::int64_t> lengths,
                         const std::string& source) {
  Plan plan;
  plan.algorithm = ParseAlgorithm(j.at("algorithm").get<std::string>(), source + ": algorithm");
  const nlohmann::json& strategy = j.at("strategy");
  plan.strategy_index = strategy.at("index").get<int>();
  plan.strategy.name = strategy.at("name").get<std::string>();
  for (const nlohmann::json& s : strategy.at("pipelines")) {
    plan.strategy.pipelines.push_back(SchemeFrom(s));
  }
  plan.estimated_step_ms = MsFrom(j.at("estimated_step_ms"));
  plan.lower_bound_ms = MsFrom(j.at("lower_bound_ms"));
  plan.status = ParseSolveStatus(j.at("status").get<std::string>(), source + ": status");
  plan.time_limited_solves = j.at("time_limited_solves").get<int>();
  plan.planning_ms = j.value("planning_ms", 0.0);
  plan.overhead_ms = j.at("overhead_ms").get<double>();
  plan.lengths = std::move(lengths);
  for (const nlohmann::json& pj : j.at("pipelines")) {
    PipelinePlan& p = plan.pipelines.emplace_back();
    p.scheme = SchemeFrom(pj);
    p.capacity_tokens = pj.at("capacity_tokens").get<std::int64_t>();
    p.tokens = pj.at("tokens").get<std::int64_t>();
    p.estimated_ms = MsFrom(pj.at("estimated_ms"));
    p.closed_form_ms = MsFrom(pj.at("closed_form_ms"));
    p.micro_batches = pj.at("micro_batches").get<MicroBatches>();
    if (!pj.contains("cp_layouts")) continue;
    for (const nlohmann::json& mb : pj.at("cp_layouts")) {
      CpLayout& layout = p.cp_layouts.emplace_back();
      for (const nlohmann::json& place : mb) {
        if (place.is_array()) {
          layout.Add(place.get<std::vector<int>>());
        } else if (place.get<int>() == kSharded) {
          layout.AddEvery(p.scheme.cp);
        } else {
          layout.AddWhole(place.get<int>());
        }
      }
    }
  }
  for (const nlohmann::json& t : j.at("truncated")) {
    plan.truncated.push_back({t.at("index").get<int>(), t.at("original").get<std::int64_t>(),
                              t.at("kept").get<std::int64_t>()});
  }
  for (const nlohmann::json& c : j.at("candidates")) {
    CandidateReport& r = plan.candidates.emplace_back();
    r.index = c.at("index").get<int>();
    r.name = c.at("name").get<std::string>();
    r.status =
        ParseCandidateStatus(c.at("status").get<std::string>(), source + ": candidates status");
    r.estimated_step_ms =
        c.at("estimated_step_ms").is_null() ? 0.0 : c.at("estimated_step_ms").get<double>();
    r.lower_bound_ms = MsFrom(c.at("lower_bound_ms"));
  }
  return plan;
}

}  // namespace

}  // namespace hydraulis
