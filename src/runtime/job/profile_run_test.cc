// Tests of RunProfile on one process: a 1x1 profile of the tiny model has its scheme's time
// model, memory model and model shape set, its samples are the micro-batches timed, and the
// checks before timing refuse what cannot be profiled.
#include "hydraulis/runtime/job/profile_run.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "hydraulis/base/error.h"
#include "hydraulis/spec/model_config.h"

namespace hydraulis {
namespace {

ProfileOptions TinyOptions() {
  ProfileOptions o;
  o.model = std::string(HYDRAULIS_SOURCE_DIR) + "/configs/models/tiny.json";
  o.lengths = std::string(HYDRAULIS_SOURCE_DIR) + "/data/wikipedia-sample-lengths.txt";
  o.min_len = 32;
  o.max_len = 512;  // singles 32, 48, 64, 96, 128, 192, 256, 384, 512
  o.packed = 2;
  o.warmup = 0;
  o.repeats = 1;
  return o;
}

TEST(ProfileRunTest, OneRankProfileOfOneSchemeIsComplete) {
  const ProfileOptions o = TinyOptions();
  const ModelConfig model = LoadModelConfig(o.model);
  const ProfileRun run = RunProfile(o, nullptr);
  EXPECT_EQ(run.rank, 0);
  EXPECT_EQ(run.world_size, 1);
  const Profile& p = run.profile;
  EXPECT_EQ(p.model.layers, model.shape.layers);
  EXPECT_EQ(p.model.hidden, model.shape.hidden);
  EXPECT_EQ(p.model.ffn, model.shape.ffn);
  EXPECT_EQ(p.model.heads, model.shape.heads);
  EXPECT_EQ(p.model.kv_heads, model.shape.kv_heads);
  EXPECT_EQ(p.model.vocab, model.shape.vocab);
  EXPECT_EQ(p.cluster.gpus_per_node, 1);
  EXPECT_EQ(p.cluster.gpu_memory_bytes, o.memory_bytes);
  ASSERT_EQ(p.schemes.size(), 1u);
  EXPECT_EQ(p.schemes[0].scheme, (Scheme{1, 1, 1}));
  EXPECT_GT(p.schemes[0].a_ms_per_token2 + p.schemes[0].b_ms_per_token, 0);
  EXPECT_GE(p.schemes[0].c_ms, 0);
  EXPECT_GT(p.memory.activation_bytes_by_tp.at(1), 0);
  EXPECT_GT(p.memory.state_bytes_per_h2_layer, 0);
  EXPECT_GT(p.utilization_tokens_by_tp.at(1), 0);
  ASSERT_EQ(run.fits.size(), 1u);
  EXPECT_EQ(run.fits[0].model.b_ms_per_token, p.schemes[0].b_ms_per_token);
  ASSERT_EQ(run.samples.size(), 1u);
  EXPECT_EQ(run.samples[0].size(), 9u + 2u);

  const nlohmann::json samples = nlohmann::json::parse(ProfileSamplesToJson(run));
  ASSERT_EQ(samples.size(), 1u);
  EXPECT_EQ(samples[0]["tp"], 1);
  EXPECT_EQ(samples[0]["samples"].size(), 11u);
  EXPECT_GT(samples[0]["samples"][0]["fitted_ms"].get<double>(), 0);
}

// A fit whose time does not grow with tokens (too short or too few samples) is refused with
// what to change, the flags and their values; a fit that grows passes.
TEST(ProfileRunTest, AFlatFitNamesWhatToChange) {
  ProfileOptions options;
  options.max_len = 64;
  options.repeats = 1;
  Scheme scheme;
  scheme.tp = 2;
  TimeModel flat;
  flat.c_ms = 3.0;
  try {
    RequireGrowingFit(scheme, flat, options);
    ADD_FAILURE() << "a flat fit was accepted";
  } catch (const InvalidInput& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("--max-len (now 64)"), std::string::npos) << what;
    EXPECT_NE(what.find("--repeats (now 1)"), std::string::npos) << what;
    EXPECT_NE(what.find(SchemeName(scheme)), std::string::npos) << what;
  }
  TimeModel growing = flat;
  growing.b_ms_per_token = 1e-3;
  EXPECT_NO_THROW(RequireGrowingFit(scheme, growing, options));
}

TEST(ProfileRunTest, WhatCannotBeProfiledIsRefusedBeforeTiming) {
  ProfileOptions o = TinyOptions();
  o.schemes = {Scheme{1, 2, 1}};
  try {
    RunProfile(o, nullptr);
    ADD_FAILURE() << "tp 2 ran on one process";
  } catch (const InvalidInput& e) {
    EXPECT_NE(std::string(e.what()).find("tp = 2 needs 2 ranks"), std::string::npos) << e.what();
  }
  o.schemes = {Scheme{1, 3, 1}};  // tiny has 4 heads
  EXPECT_THROW(CheckProfileOptions(o, 3), InvalidInput);
  o = TinyOptions();
  o.memory_bytes = 100000;
  try {
    CheckProfileOptions(o, 1);
    ADD_FAILURE() << "no error";
  } catch (const InvalidInput& e) {
    EXPECT_NE(std::string(e.what()).find("cannot hold a micro-batch of 128 tokens"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace hydraulis
