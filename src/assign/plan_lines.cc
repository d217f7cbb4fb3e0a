#include "hydraulis/assign/plan_lines.h"

#include <algorithm>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "hydraulis/assign/plan_checker.h"
#include "hydraulis/base/error.h"
#include "hydraulis/base/internal/json_text.h"
#include "hydraulis/base/tolerance.h"
#include "hydraulis/cost/cp_layout.h"
#include "hydraulis/spec/internal/json_reader.h"
#include "hydraulis/spec/spec_io.h"

namespace hydraulis {
namespace {

constexpr const char* kPlanFormat = "hydraulis.plan/1";

const nlohmann::json& ArrayAt(const nlohmann::json& value, const std::string& source,
                              const std::string& path) {
  if (!value.is_array()) {
    throw InvalidInput(source + ": " + path + ": expected an array, got " + JsonForMessage(value));
  }
  return value;
}

// The shard layout of one micro-batch of a cp > 1 pipeline (docs/plan-format.md): per
// document a rank, -1 (every rank) or an array of ranks.
CpLayout ReadCpLayout(const nlohmann::json& entries, std::size_t documents, int cp,
                      const std::string& source, const std::string& path) {
  ArrayAt(entries, source, path);
  std::vector<std::vector<int>> places;
  for (std::size_t d = 0; d < entries.size(); ++d) {
    const std::string at = path + "[" + std::to_string(d) + "]";
    const nlohmann::json& e = entries[d];
    if (e.is_array()) {
      std::vector<int> ranks;
      for (std::size_t k = 0; k < e.size(); ++k) {
        ranks.push_back(static_cast<int>(
            JsonIntegerAt(e[k], 0, cp - 1, source, at + "[" + std::to_string(k) + "]")));
      }
      places.push_back(std::move(ranks));
    } else {
      places.push_back({static_cast<int>(JsonIntegerAt(e, kSharded, cp - 1, source, at))});
    }
  }
  CpLayout layout = CpLayoutFromPlaces(places, cp);
  if (const std::string error = CpLayoutError(layout, documents, cp); !error.empty()) {
    throw InvalidInput(source + ": " + path + ": " + error);
  }
  return layout;
}

// Every field of `pipelines` a reader could use: the schemes (equal to the strategy's), the
// counts and times, the micro-batches (every document index in [0, num_documents) exactly
// once) and, for cp > 1, a valid shard layout per micro-batch.
void CheckPipelines(JsonObjectReader& p, JsonObjectReader& strategy, std::int64_t num_documents) {
  const nlohmann::json& strategy_pipes = strategy.Array("pipelines");
  std::vector<Scheme> schemes;
  for (std::size_t i = 0; i < strategy_pipes.size(); ++i) {
    JsonObjectReader e = strategy.Element("pipelines", strategy_pipes, i);
    schemes.push_back(ReadScheme(e));
  }
  const nlohmann::json& pipes = p.Array("pipelines");
  if (pipes.empty()) p.Fail("pipelines", "must list at least one pipeline");
  if (pipes.size() != schemes.size()) {
    p.Fail("pipelines", std::to_string(pipes.size()) + " pipelines, but strategy.pipelines lists " +
                            std::to_string(schemes.size()));
  }
  constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
  // Document indices are ints in the Plan type.
  const std::int64_t max_index =
      std::min<std::int64_t>(num_documents, JsonObjectReader::kIntMax + std::int64_t{1}) - 1;
  std::int64_t indices = 0;
  std::vector<MicroBatches> all;
  for (std::size_t i = 0; i < pipes.size(); ++i) {
    JsonObjectReader pipe = p.Element("pipelines", pipes, i);
    const Scheme scheme = ReadScheme(pipe);
    if (scheme != schemes[i]) {
      pipe.Fail("cp", SchemeName(scheme) + " differs from strategy.pipelines[" + std::to_string(i) +
                          "], " + SchemeName(schemes[i]));
    }
    pipe.Int("capacity_tokens", 0, kMax);
    pipe.Int("tokens", 0, kMax);
    pipe.Number("estimated_ms", 0);
    const nlohmann::json& mbs = pipe.Array("micro_batches");
    MicroBatches micro_batches;
    for (std::size_t j = 0; j < mbs.size(); ++j) {
      const std::string at = pipe.FieldPath("micro_batches") + "[" + std::to_string(j) + "]";
      const nlohmann::json& mb = ArrayAt(mbs[j], p.source(), at);
      std::vector<int> documents;
      for (std::size_t k = 0; k < mb.size(); ++k) {
        documents.push_back(static_cast<int>(
            JsonIntegerAt(mb[k], 0, max_index, p.source(), at + "[" + std::to_string(k) + "]")));
        ++indices;
      }
      micro_batches.push_back(std::move(documents));
    }
    if (scheme.cp == 1) {
      if (pipe.Has("cp_layouts")) pipe.Fail("cp_layouts", "a cp 1 pipeline has no shard layouts");
    } else if (!micro_batches.empty()) {
      const nlohmann::json& layouts = pipe.Array("cp_layouts");
      if (layouts.size() != micro_batches.size()) {
        pipe.Fail("cp_layouts", std::to_string(layouts.size()) + " layouts for " +
                                    std::to_string(micro_batches.size()) + " micro-batches");
      }
      for (std::size_t j = 0; j < layouts.size(); ++j) {
        ReadCpLayout(layouts[j], micro_batches[j].size(), scheme.cp, p.source(),
                     pipe.FieldPath("cp_layouts") + "[" + std::to_string(j) + "]");
      }
    }
    all.push_back(std::move(micro_batches));
  }
  if (indices != num_documents) {
    p.Fail("pipelines", "the micro-batches hold " + std::to_string(indices) +
                            " document indices, num_documents says " +
                            std::to_string(num_documents));
  }
  if (const std::string error = CheckCoverage(all, static_cast<std::size_t>(num_documents));
      !error.empty()) {
    p.Fail("pipelines", error);
  }
}

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
    CheckPipelines(p, strategy, plan.num_documents);
    plans.push_back(std::move(plan));
  }
  if (plans.empty()) throw InvalidInput(source + ": no plans");
  return plans;
}

}  // namespace hydraulis
