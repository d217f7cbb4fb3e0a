#include "derived_profile.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "hydraulis/assign/planner.h"
#include "hydraulis/base/error.h"
#include "hydraulis/cost/capacity.h"
#include "hydraulis/spec/spec_io.h"

namespace hydraulis {
namespace {

const std::string kRoot = HYDRAULIS_SOURCE_DIR;

TEST(DerivedProfileTest, TheFittedModelGetsItsOwnTimesBack) {
  const Profile fitted = LoadProfile(kRoot + "/configs/profiles/tiny-cpu.json");
  const ModelConfig tiny = LoadModelConfig(kRoot + "/configs/models/tiny.json");
  const Profile derived = DeriveProfile(fitted, tiny);
  ASSERT_EQ(derived.schemes.size(), fitted.schemes.size());
  for (std::size_t i = 0; i < fitted.schemes.size(); ++i) {
    EXPECT_EQ(derived.schemes[i].scheme, fitted.schemes[i].scheme);
    EXPECT_DOUBLE_EQ(derived.schemes[i].a_ms_per_token2, fitted.schemes[i].a_ms_per_token2);
    EXPECT_DOUBLE_EQ(derived.schemes[i].b_ms_per_token, fitted.schemes[i].b_ms_per_token);
    EXPECT_DOUBLE_EQ(derived.schemes[i].c_ms, fitted.schemes[i].c_ms);
  }
}

// Twice the layers: every term of a pp = 1 stage doubles except the head's share of the
// linear one; twice the hidden: attention doubles; capacity in tokens is the fitted one.
TEST(DerivedProfileTest, TermsScaleWithTheWorkAndCapacityIsKept) {
  const Profile fitted = LoadProfile(kRoot + "/configs/profiles/tiny-cpu.json");
  ModelConfig deep = LoadModelConfig(kRoot + "/configs/models/tiny.json");
  deep.shape.layers *= 2;
  ModelConfig wide = deep;
  wide.shape.layers /= 2;
  wide.shape.hidden *= 2;
  const Profile d = DeriveProfile(fitted, deep);
  const Profile w = DeriveProfile(fitted, wide);
  const Scheme one{};
  const SchemeProfile& f1 = *fitted.Find(one);
  EXPECT_DOUBLE_EQ(d.Find(one)->a_ms_per_token2, 2 * f1.a_ms_per_token2);
  EXPECT_DOUBLE_EQ(d.Find(one)->c_ms, 2 * f1.c_ms);
  EXPECT_GT(d.Find(one)->b_ms_per_token, 1.5 * f1.b_ms_per_token);
  EXPECT_LT(d.Find(one)->b_ms_per_token, 2 * f1.b_ms_per_token);
  EXPECT_DOUBLE_EQ(w.Find(one)->a_ms_per_token2, 2 * f1.a_ms_per_token2);
  EXPECT_EQ(d.model.layers, deep.shape.layers);
  const OptimizerLayout layout{fitted.cluster.gpus_per_node, 1, 1};
  EXPECT_NEAR(RawCapacityTokens(d, one, layout), RawCapacityTokens(fitted, one, layout), 1.0);
  EXPECT_NEAR(RawCapacityTokens(w, one, layout), RawCapacityTokens(fitted, one, layout), 1.0);
  // The planner accepts it.
  const CandidateSet candidates = LoadCandidates(kRoot + "/configs/candidates/cpu-2rank.json", d);
  const Planner planner(d, candidates, PlannerOptions{});
  const Plan plan = planner.PlanBatch(std::vector<std::int64_t>{300, 200, 100});
  EXPECT_GT(plan.estimated_step_ms, 0);
}

// A run under recomputation without a profile fitted for it: the times carry the forward
// run again (full: every term 4/3; selective: the attention's quadratic term), the memory
// model is the mode's, and capacities grow from the fitted one by what recomputation frees.
// A profile fitted under one mode is not turned into another.
TEST(DerivedProfileTest, RecomputationChargesTheForwardAgainAndFreesMemory) {
  const Profile fitted = LoadProfile(kRoot + "/configs/profiles/tiny-cpu.json");
  const ModelConfig tiny = LoadModelConfig(kRoot + "/configs/models/tiny.json");
  const Profile none = DeriveProfile(fitted, tiny, Recompute::kNone);
  const Profile selective = DeriveProfile(fitted, tiny, Recompute::kSelective);
  const Profile full = DeriveProfile(fitted, tiny, Recompute::kFull);
  EXPECT_EQ(full.recompute, Recompute::kFull);
  const Scheme one{};
  const SchemeProfile& f = *none.Find(one);
  EXPECT_DOUBLE_EQ(full.Find(one)->a_ms_per_token2, f.a_ms_per_token2 * 4 / 3);
  EXPECT_DOUBLE_EQ(full.Find(one)->b_ms_per_token, f.b_ms_per_token * 4 / 3);
  EXPECT_DOUBLE_EQ(full.Find(one)->c_ms, f.c_ms * 4 / 3);
  EXPECT_DOUBLE_EQ(selective.Find(one)->a_ms_per_token2, f.a_ms_per_token2 * 4 / 3);
  EXPECT_DOUBLE_EQ(selective.Find(one)->b_ms_per_token, f.b_ms_per_token);
  const OptimizerLayout layout{fitted.cluster.gpus_per_node, 1, 1};
  const double kept = RawCapacityTokens(none, one, layout);
  const double a = none.memory.activation_bytes_by_tp.at(1);
  EXPECT_NEAR(RawCapacityTokens(selective, one, layout),
              kept * a / selective.memory.activation_bytes_by_tp.at(1), 1.0);
  EXPECT_NEAR(RawCapacityTokens(full, one, layout),
              kept * a / full.memory.activation_bytes_by_tp.at(1), 1.0);
  EXPECT_GT(RawCapacityTokens(full, one, layout), RawCapacityTokens(selective, one, layout));
  EXPECT_GT(RawCapacityTokens(selective, one, layout), kept);
  EXPECT_THROW(DeriveProfile(selective, tiny, Recompute::kFull), InvalidInput);
  EXPECT_EQ(DeriveProfile(selective, tiny, Recompute::kSelective).recompute, Recompute::kSelective);
}

// The small model's fitted profile against the one derived for it from the tiny model's:
// the derivation cannot know that larger matrices run faster per FLOP, so it is too slow,
// but by a factor the schemes roughly share (docs/runtime.md records the ratios printed).
TEST(DerivedProfileTest, AgainstTheSmallModelsFittedProfile) {
  const Profile tiny = LoadProfile(kRoot + "/configs/profiles/tiny-cpu.json");
  const Profile small = LoadProfile(kRoot + "/configs/profiles/small-cpu.json");
  const Profile derived =
      DeriveProfile(tiny, LoadModelConfig(kRoot + "/configs/models/small.json"));
  for (const SchemeProfile& f : small.schemes) {
    const SchemeProfile& d = *derived.Find(f.scheme);
    for (const double tokens : {512.0, 2048.0}) {
      const double ratio =
          (d.a_ms_per_token2 * tokens * tokens + d.b_ms_per_token * tokens + d.c_ms) /
          (f.a_ms_per_token2 * tokens * tokens + f.b_ms_per_token * tokens + f.c_ms);
      std::printf("%s %5.0f tokens: derived / fitted %.2f\n", SchemeName(f.scheme).c_str(), tokens,
                  ratio);
      EXPECT_GT(ratio, 1.0);
      EXPECT_LT(ratio, 4.0);
    }
  }
}

TEST(DerivedProfileTest, AModelThatDoesNotSplitIsRefused) {
  const Profile fitted = LoadProfile(kRoot + "/configs/profiles/tiny-cpu.json");
  ModelConfig odd = LoadModelConfig(kRoot + "/configs/models/tiny.json");
  odd.shape.kv_heads = 1;  // tp 2 cannot split one kv head
  EXPECT_THROW(DeriveProfile(fitted, odd), InvalidInput);
}

}  // namespace
}  // namespace hydraulis
