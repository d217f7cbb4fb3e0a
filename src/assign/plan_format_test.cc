// The plan as readers take it: the checker's coverage rule, the JSON written and read back
// (summarize's reader, PlanFromJson) and the micro-batch layout the runtime packs.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <numeric>
#include <optional>
#include <thread>

#include "../base/test_support.h"
#include "assign_test_support.h"
#include "hydraulis/assign/micro_batch_layout.h"
#include "hydraulis/assign/pack.h"
#include "hydraulis/assign/pipeline_relaxation.h"
#include "hydraulis/assign/plan_checker.h"
#include "hydraulis/assign/plan_json.h"
#include "hydraulis/assign/plan_lines.h"
#include "hydraulis/assign/planner.h"
#include "hydraulis/assign/published.h"
#include "hydraulis/assign/two_stage.h"
#include "hydraulis/base/error.h"
#include "hydraulis/base/rng.h"
#include "hydraulis/base/tolerance.h"
#include "hydraulis/data/batch_sampler.h"
#include "hydraulis/data/lengths.h"
#include "hydraulis/spec/spec_io.h"
#include "lower_bound.h"

namespace hydraulis {
namespace {

// The coverage rule CheckAssignment and the runtime's step share: every document once.
TEST(PlanCheckerTest, CoverageNamesTheFirstDocumentOutOfRangeTwiceOrMissing) {
  EXPECT_EQ(CheckCoverage({{{0, 2}}, {{1}}}, 3), "");
  EXPECT_EQ(CheckCoverage({{}, {}}, 0), "");
  EXPECT_EQ(CheckCoverage({{{0}}, {{1}, {5}}}, 3),
            "pipeline 1 micro-batch 1 has invalid document index 5");
  EXPECT_EQ(CheckCoverage({{{-1}}}, 3), "pipeline 0 micro-batch 0 has invalid document index -1");
  EXPECT_EQ(CheckCoverage({{{0, 1}}, {{1, 2}}}, 3), "document 1 is assigned more than once");
  EXPECT_EQ(CheckCoverage({{{0}}, {{2}}}, 3), "document 1 is not assigned");
}

// A plan read back from its JSON (with the lengths the format does not keep) is the same
// plan: cp layouts of subsets and of every rank, pp > 1 pipelines, truncations, candidate
// reports, timing; lengths that disagree with the plan are refused.
TEST(PlanJsonTest, ReadsBackEveryPlanWhole) {
  const LongContextStudy study;
  const Planner long_context(study.profile, study.candidates, study.options);
  const CaseStudy cases;
  const Planner case_study(cases.profile, cases.candidates, PlannerOptions{});
  std::vector<Plan> plans;
  for (const auto& batch : RealBatches(2, 2'097'152, 11, 131'072)) {
    plans.push_back(long_context.PlanBatch(batch));
  }
  std::vector<std::int64_t> batch = RealBatches(1, 200'000, 3).front();
  batch.push_back(1'000'000);  // longer than every capacity: truncated
  plans.push_back(case_study.PlanBatch(batch));
  ASSERT_FALSE(plans.back().truncated.empty());
  bool subsets = false;
  for (const Plan& plan : plans) {
    const std::string text = PlanToJson(plan, false, true);
    const Plan back = PlanFromJson(text, plan.lengths, "plan");
    EXPECT_EQ(PlanToJson(back, false, true), text);
    EXPECT_EQ(back.lengths, plan.lengths);
    ASSERT_EQ(back.pipelines.size(), plan.pipelines.size());
    for (std::size_t p = 0; p < plan.pipelines.size(); ++p) {
      const auto& layouts = plan.pipelines[p].cp_layouts;
      ASSERT_EQ(back.pipelines[p].cp_layouts.size(), layouts.size());
      for (std::size_t m = 0; m < layouts.size(); ++m) {
        for (std::size_t d = 0; d < layouts[m].size(); ++d) {
          const auto a = layouts[m].Ranks(d), b = back.pipelines[p].cp_layouts[m].Ranks(d);
          EXPECT_TRUE(std::equal(a.begin(), a.end(), b.begin(), b.end()));
          const int k = static_cast<int>(a.size());
          subsets = subsets || (k > 1 && k < plan.pipelines[p].scheme.cp);
        }
      }
    }
  }
  EXPECT_TRUE(subsets);
  const Plan& plan = plans.front();
  const std::string text = PlanToJson(plan, false, true);
  std::vector<std::int64_t> fewer(plan.lengths.begin(), plan.lengths.end() - 1);
  EXPECT_NE(test_support::InvalidInputMessage([&] {
              PlanFromJson(text, fewer, "pickled");
            }).find("lengths"),
            std::string::npos);
  std::vector<std::int64_t> longer = plan.lengths;
  ++longer.front();
  EXPECT_THROW(PlanFromJson(text, longer, "pickled"), InvalidInput);
  EXPECT_THROW(PlanFromJson(text + text, plan.lengths, "pickled"), InvalidInput);
  nlohmann::json wrong = nlohmann::json::parse(text);
  wrong["truncated"] = "none";
  EXPECT_THROW(PlanFromJson(wrong.dump(), plan.lengths, "pickled"), InvalidInput);
}

// The first of `plan`'s pipelines for which `pick` holds, if any.
std::optional<std::size_t> FirstPipeline(const Plan& plan,
                                         const std::function<bool(const PipelinePlan&)>& pick) {
  for (std::size_t i = 0; i < plan.pipelines.size(); ++i) {
    if (pick(plan.pipelines[i])) return i;
  }
  return std::nullopt;
}

// One way to corrupt a plan's JSON, and what the refusal must say.
struct PlanCorruption {
  std::string what;
  std::function<void(nlohmann::json&)> corrupt;
  std::string fragment;
};

// Corruptions of `plan`'s pipeline `cp` (a cp > 1 one with micro-batches): its layouts, its
// cp, its strategy entry, its documents, and the pipelines' count.
std::vector<PlanCorruption> CpPipelineCorruptions(const Plan& plan, std::size_t cp) {
  using Json = nlohmann::json;
  const std::string at = "pipelines[" + std::to_string(cp) + "]";
  const int cp_degree = plan.pipelines[cp].scheme.cp;
  const bool several = plan.pipelines[cp].micro_batches[0].size() > 1;
  return {
      {"rank 99", [cp](Json& j) { j["pipelines"][cp]["cp_layouts"][0][0] = 99; },
       at + ".cp_layouts[0][0]: must be <= " + std::to_string(cp_degree - 1)},
      {"rank -2", [cp](Json& j) { j["pipelines"][cp]["cp_layouts"][0][0] = -2; },
       at + ".cp_layouts[0][0]: must be >= -1"},
      {"subset rank",
       [cp](Json& j) {
         j["pipelines"][cp]["cp_layouts"][0][0] = Json::array({0, 99});
       },
       at + ".cp_layouts[0][0][1]: must be <= "},
      {"repeated rank",
       [cp](Json& j) {
         j["pipelines"][cp]["cp_layouts"][0][0] = Json::array({1, 1});
       },
       at + ".cp_layouts[0]: "},
      {"layouts missing", [cp](Json& j) { j["pipelines"][cp].erase("cp_layouts"); },
       at + ".cp_layouts: missing required field"},
      {"layout too short", [cp](Json& j) { j["pipelines"][cp]["cp_layouts"][0] = Json::array(); },
       at + ".cp_layouts[0]: "},
      {"cp 0", [cp](Json& j) { j["pipelines"][cp]["cp"] = 0; }, at + ".cp: must be >= 1"},
      {"cp -4", [cp](Json& j) { j["pipelines"][cp]["cp"] = -4; }, at + ".cp: must be >= 1"},
      {"cp string", [cp](Json& j) { j["pipelines"][cp]["cp"] = "4"; },
       at + ".cp: expected an integer"},
      {"cp 2^62", [cp](Json& j) { j["pipelines"][cp]["cp"] = std::int64_t{1} << 62; },
       at + ".cp: must be <= 1048576"},
      {"cp differs", [cp, cp_degree](Json& j) { j["pipelines"][cp]["cp"] = 2 * cp_degree; },
       at + ".cp: (CP" + std::to_string(2 * cp_degree)},
      {"strategy cp 0", [cp](Json& j) { j["strategy"]["pipelines"][cp]["cp"] = 0; },
       "strategy.pipelines[" + std::to_string(cp) + "].cp: must be >= 1"},
      {"document index", [cp](Json& j) { j["pipelines"][cp]["micro_batches"][0][0] = 1'000'000; },
       at + ".micro_batches[0][0]: must be <= "},
      {"document twice",
       [cp, several](Json& j) {
         j["pipelines"][cp]["micro_batches"][0][0] =
             several ? j["pipelines"][cp]["micro_batches"][0][1] : Json(-1);
       },
       "p.jsonl:1: "},
      {"pipelines dropped", [](Json& j) { j["pipelines"].erase(j["pipelines"].begin()); },
       "pipelines: " + std::to_string(plan.pipelines.size() - 1) + " pipelines, but"},
  };
}

// summarize's reader checks every field of a plan a reader could use, cp fields included,
// and names the field; a real cp plan reads back.
TEST(PlanLinesTest, CorruptPipelineAndShardFieldsAreRefusedByFieldPath) {
  const LongContextStudy study;
  const Planner planner(study.profile, study.candidates, study.options);
  const Plan plan = planner.PlanBatch(RealBatches(1, 2'097'152, 11, 131'072).front());
  const nlohmann::json good = nlohmann::json::parse(PlanToJson(plan, false, false));
  ASSERT_EQ(ParsePlanLines(good.dump(), "p.jsonl").size(), 1u);
  const std::optional<std::size_t> cp = FirstPipeline(
      plan, [](const PipelinePlan& p) { return p.scheme.cp > 1 && !p.micro_batches.empty(); });
  const std::optional<std::size_t> whole =
      FirstPipeline(plan, [](const PipelinePlan& p) { return p.scheme.cp == 1; });
  ASSERT_TRUE(cp.has_value()) << StrategyDescription(plan.strategy);
  for (const PlanCorruption& c : CpPipelineCorruptions(plan, *cp)) {
    SCOPED_TRACE(c.what);
    nlohmann::json bad = good;
    c.corrupt(bad);
    const std::string message =
        test_support::InvalidInputMessage([&] { ParsePlanLines(bad.dump(), "p.jsonl"); });
    EXPECT_NE(message.find(c.fragment), std::string::npos) << message;
    EXPECT_EQ(message.rfind("p.jsonl:1: ", 0), 0u) << message;
  }
  if (whole) {
    nlohmann::json bad = good;
    bad["pipelines"][*whole]["cp_layouts"] = nlohmann::json::array();
    EXPECT_NE(test_support::InvalidInputMessage([&] {
                ParsePlanLines(bad.dump(), "p.jsonl");
              }).find("pipelines[" + std::to_string(*whole) + "].cp_layouts: a cp 1 pipeline"),
              std::string::npos);
  }
}

// The packing rule the runtime and the Python package share: a micro-batch's documents in
// order, each cut to the plan's kept length, end to end; a plan without lengths keeps them
// whole.
TEST(MicroBatchLayoutTest, DocumentsInOrderCutToThePlanEndToEnd) {
  Plan plan;
  plan.lengths = {5, 3, 7, 2};
  plan.pipelines.resize(2);
  plan.pipelines[0].micro_batches = {{2, 0}, {3}};
  plan.pipelines[1].micro_batches = {{1}};
  const std::vector<MicroBatchLayout> first = PipelineLayouts(plan, 0);
  ASSERT_EQ(first.size(), 2u);
  EXPECT_EQ(first[0].documents, (std::vector<int>{2, 0}));
  EXPECT_EQ(first[0].lengths, (std::vector<std::int64_t>{7, 5}));
  EXPECT_EQ(first[0].cu_seqlens, (std::vector<std::int64_t>{0, 7, 12}));
  EXPECT_EQ(first[1].cu_seqlens, (std::vector<std::int64_t>{0, 2}));
  const std::vector<std::int64_t> available = {9, 3, 7, 4};
  EXPECT_EQ(PipelineLayouts(plan, 1, available)[0].lengths, (std::vector<std::int64_t>{3}));
  EXPECT_THROW(PipelineLayouts(plan, 2), InvalidInput);
  const std::vector<std::int64_t> too_short = {9, 2, 7, 4};  // document 1 keeps 3 of 2
  EXPECT_THROW(PipelineLayouts(plan, 1, too_short), InvalidInput);
  Plan by_hand;
  by_hand.pipelines.resize(1);
  by_hand.pipelines[0].micro_batches = {{1, 0}};
  EXPECT_EQ(PipelineLayouts(by_hand, 0, available)[0].cu_seqlens,
            (std::vector<std::int64_t>{0, 3, 12}));
  by_hand.pipelines[0].micro_batches = {{4}};
  EXPECT_THROW(PipelineLayouts(by_hand, 0, available), InvalidInput);
}

}  // namespace
}  // namespace hydraulis
