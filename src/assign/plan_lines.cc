#include "hydraulis/assign/plan_lines.h"

#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "hydraulis/base/error.h"
#include "hydraulis/base/json_text.h"
#include "hydraulis/base/tolerance.h"
#include "hydraulis/spec/json_reader.h"

namespace hydraulis {
namespace {

constexpr const char* kPlanFormat = "hydraulis.plan/1";

}  // namespace

std::vector<PlanLine> ParsePlanLines(const std::string& text, const std::string& source) {
  std::istringstream in(text);
  std::string line;
  std::vector<PlanLine> plans;
  std::size_t number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (line.empty()) continue;
    const std::string where = source + ":" + std::to_string(number);
    const nlohmann::json j = ParseJson(line, where);
    if (!j.is_object()) {
      throw InvalidInput(where + ": expected a JSON object (a plan), got " + JsonForMessage(j));
    }
    // Keys this reader does not know are ignored (docs/plan-format.md): no RejectUnknown.
    JsonObjectReader p(j, where, "");
    if (p.String("format") != kPlanFormat) {
      p.Fail("format", "expected \"" + std::string(kPlanFormat) + "\", got " +
                           JsonForMessage(j.at("format")));
    }
    PlanLine plan;
    plan.estimated_step_ms = p.Number("estimated_step_ms", 0);
    plan.lower_bound_ms = p.Number("lower_bound_ms", 0);
    if (DefinitelyLess(plan.estimated_step_ms, plan.lower_bound_ms)) {
      p.Fail("lower_bound_ms", "a lower bound above the plan's own estimated_step_ms (" +
                                   std::to_string(plan.lower_bound_ms) + " > " +
                                   std::to_string(plan.estimated_step_ms) + ")");
    }
    plan.planning_ms = p.Has("planning_ms") ? p.Number("planning_ms", 0) : 0.0;
    JsonObjectReader strategy = p.Object("strategy");
    plan.strategy = strategy.String("name") + " " + strategy.String("description");
    constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
    plan.num_documents = p.Int("num_documents", 0, kMax);
    plan.num_tokens = p.Int("num_tokens", 0, kMax);
    if (p.Array("pipelines").empty()) p.Fail("pipelines", "must list at least one pipeline");
    plans.push_back(std::move(plan));
  }
  if (plans.empty()) throw InvalidInput(source + ": no plans");
  return plans;
}

}  // namespace hydraulis
