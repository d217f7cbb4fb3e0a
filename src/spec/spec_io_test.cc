#include "hydraulis/spec/spec_io.h"
#include "../base/test_support.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "hydraulis/base/error.h"
#include "hydraulis/base/file_io.h"

namespace hydraulis {
namespace {

using Json = nlohmann::json;

const std::string kSourceDir = HYDRAULIS_SOURCE_DIR;

std::string ProfilePath(const std::string& model) {
  return kSourceDir + "/configs/profiles/llama-" + model + "-a800.json";
}
std::string CandidatesPath(int gpus) {
  return kSourceDir + "/configs/candidates/llama-32b-" + std::to_string(gpus) + "gpu.json";
}
std::string A800Path(const std::string& model) {
  return kSourceDir + "/../shared/reference/a800-profiles/llama-" + model + ".json";
}

const Profile& Profile32b() {
  static const Profile profile = LoadProfile(ProfilePath("32b"));
  return profile;
}

using test_support::InvalidInputMessage;

Scheme S(int cp, int tp, int pp) { return Scheme{cp, tp, pp}; }

bool IsCanonicalOrder(const Strategy& st) {
  for (std::size_t i = 1; i < st.pipelines.size(); ++i) {
    const Scheme& a = st.pipelines[i - 1];
    const Scheme& b = st.pipelines[i];
    if (a.Gpus() < b.Gpus()) return false;
    if (a.Gpus() == b.Gpus() && a < b) return false;
  }
  return true;
}

// ---------------------------------------------------------------------------------------
// Shipped files.

struct ShippedModel {
  std::string key;
  std::string name;
  int layers, hidden, ffn, heads;
  std::size_t schemes;
  int max_tp;  // the profiled tp degrees are the powers of two up to max_tp
  int pp1;     // fitted schemes with pp = 1: each has derived <2|4|8, tp, 1> schemes
};

const std::vector<ShippedModel>& ShippedModels() {
  static const std::vector<ShippedModel> models = {
      {"7b", "llama-7b", 32, 4096, 11008, 32, 13, 16, 4},
      {"13b", "llama-13b", 40, 5120, 13824, 40, 12, 8, 4},
      {"32b", "llama-32b", 60, 6656, 17920, 64, 15, 16, 4},
  };
  return models;
}

TEST(SpecIoTest, ShippedProfilesParse) {
  for (const auto& m : ShippedModels()) {
    SCOPED_TRACE(m.key);
    const std::string path = ProfilePath(m.key);
    const Profile p = LoadProfile(path);
    EXPECT_EQ(p.model.name, m.name);
    EXPECT_EQ(p.model.layers, m.layers);
    EXPECT_EQ(p.model.hidden, m.hidden);
    EXPECT_EQ(p.model.ffn, m.ffn);
    EXPECT_EQ(p.model.heads, m.heads);
    EXPECT_EQ(p.model.kv_heads, m.heads);
    EXPECT_EQ(p.model.vocab, 30592);
    EXPECT_EQ(p.cluster.gpus, 0);
    EXPECT_EQ(p.cluster.gpus_per_node, 8);
    EXPECT_EQ(p.cluster.gpu_memory_bytes, 85198897152);
    EXPECT_EQ(p.memory.optimizer_share, 0.75);
    EXPECT_EQ(p.memory.context_bytes, 5242880000.0);
    std::vector<int> tps;
    for (int tp = 1; tp <= m.max_tp; tp *= 2) tps.push_back(tp);
    EXPECT_EQ(p.memory.activation_bytes_by_tp.size(), tps.size());
    EXPECT_EQ(p.utilization_tokens_by_tp.size(), tps.size());
    for (int tp : tps) {
      EXPECT_EQ(p.memory.activation_bytes_by_tp.count(tp), 1u) << "tp " << tp;
      EXPECT_EQ(p.utilization_tokens_by_tp.count(tp), 1u) << "tp " << tp;
    }
    // The fitted cp = 1 schemes, then the derived cp 2, 4 and 8 ones (docs/spec-format.md).
    ASSERT_EQ(p.schemes.size(), m.schemes + 3 * static_cast<std::size_t>(m.pp1));
    for (std::size_t i = 0; i < p.schemes.size(); ++i) {
      const SchemeProfile& s = p.schemes[i];
      EXPECT_EQ(s.scheme.cp == 1, i < m.schemes);
      EXPECT_LE(s.scheme.tp, m.max_tp);
      EXPECT_EQ(p.Find(s.scheme), &s);
      EXPECT_GE(s.a_ms_per_token2, 0);
      EXPECT_GT(s.b_ms_per_token, 0);
      EXPECT_GE(s.c_ms, 0);
      EXPECT_EQ(s.kv_ms_per_token > 0, s.scheme.cp > 1);
      if (s.scheme.cp > 1) {
        const SchemeProfile* base = p.Find(S(1, s.scheme.tp, 1));
        ASSERT_NE(base, nullptr);
        EXPECT_EQ(s.b_ms_per_token, base->b_ms_per_token);
      }
    }
    // The shipped files are in canonical form: writing the parsed profile reproduces them.
    EXPECT_EQ(ProfileToJson(p), ReadFileText(path));
  }
}

TEST(SpecIoTest, ShippedProfile32bValues) {
  const Profile& p = Profile32b();
  EXPECT_EQ(p.memory.activation_bytes_by_tp.at(1), 36.0);
  EXPECT_EQ(p.memory.activation_bytes_by_tp.at(16), 50.0);
  EXPECT_EQ(p.memory.state_bytes_per_h2_layer, 201.0);
  EXPECT_EQ(p.memory.reserved_bytes, 10737418240.0);
  const SchemeProfile* tp16 = p.Find(S(1, 16, 1));
  ASSERT_NE(tp16, nullptr);
  EXPECT_EQ(tp16->a_ms_per_token2, 1.37779723e-06);
  EXPECT_EQ(tp16->b_ms_per_token, 0.102435387);
  EXPECT_EQ(tp16->c_ms, 145.74761115393085);
  const SchemeProfile* tp1pp2 = p.Find(S(1, 1, 2));
  ASSERT_NE(tp1pp2, nullptr);
  EXPECT_EQ(tp1pp2->a_ms_per_token2, 0.0);
  EXPECT_EQ(tp1pp2->b_ms_per_token, 0.48988971);
  EXPECT_EQ(p.Find(S(1, 1, 1)), nullptr);
  EXPECT_EQ(p.Find(S(2, 8, 2)), nullptr);
  EXPECT_EQ(p.Find(S(1, 16, 2)), nullptr);
  // Derived: <4,16,1> spans 8 nodes, 60 layers x 3 transfers x 3/4 x 1,664 bytes / 12.5 GB/s.
  const SchemeProfile* cp4 = p.Find(S(4, 16, 1));
  ASSERT_NE(cp4, nullptr);
  EXPECT_NEAR(cp4->kv_ms_per_token, 0.0179712, 1e-12);
}

TEST(SpecIoTest, DuplicateKeysAndDeepNestingAreErrors) {
  // nlohmann would keep the last of two equal keys; a profile must not change silently.
  const std::string text = ReadFileText(ProfilePath("32b"));
  const std::size_t brace = text.find('{');
  const std::string dup =
      text.substr(0, brace + 1) + R"("format": "hydraulis.profile/1", )" + text.substr(brace + 1);
  std::string msg;
  try {
    ParseProfile(dup, "p.json");
  } catch (const InvalidInput& e) {
    msg = e.what();
  }
  EXPECT_EQ(msg, "p.json: invalid JSON: duplicate key 'format' in one object");
  EXPECT_THROW(ParseProfile(std::string(100'000, '['), "p.json"), InvalidInput);
}

// The recomputation a profile is for: absent reads as none (and is written only when not
// none, so older profiles read and write back unchanged); a value out of the three is an
// error naming the file and the field.
TEST(SpecIoTest, RecomputeRoundTripsAndNamesBadValues) {
  EXPECT_EQ(Profile32b().recompute, Recompute::kNone);
  for (const Recompute mode : {Recompute::kSelective, Recompute::kFull}) {
    Profile p = Profile32b();
    p.recompute = mode;
    const std::string text = ProfileToJson(p);
    EXPECT_NE(text.find("\"recompute\": \"" + ToString(mode) + "\""), std::string::npos);
    EXPECT_EQ(ParseProfile(text, "p.json").recompute, mode);
  }
  Json doc = Json::parse(ReadFileText(ProfilePath("32b")));
  doc["recompute"] = "partial";
  EXPECT_EQ(InvalidInputMessage([&] { ParseProfile(doc.dump(), "p.json"); }),
            "p.json: recompute: expected none, selective or full, got 'partial'");
  doc["recompute"] = 1;
  EXPECT_NE(InvalidInputMessage([&] { ParseProfile(doc.dump(), "p.json"); }).find("recompute"),
            std::string::npos);
  EXPECT_THROW(ParseRecompute("Full", "--recompute-granularity"), InvalidInput);
}

// Found by fuzz/profile: a key holding a newline was echoed raw, breaking the one-line
// message. Keys with control bytes, and long keys, are quoted, escaped and cut.
TEST(SpecIoTest, KeysAreEchoedAsOneBoundedLine) {
  const std::string text = ReadFileText(ProfilePath("32b"));
  for (const std::string& key : {std::string("\nf\"4"), std::string(500, 'k')}) {
    std::string bad = text;
    const std::size_t brace = bad.find('{');
    bad.insert(brace + 1, nlohmann::json(key).dump() + ": 1, ");
    std::string msg;
    try {
      ParseProfile(bad, "p.json");
    } catch (const InvalidInput& e) {
      msg = e.what();
    }
    EXPECT_NE(msg.find("p.json: "), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    EXPECT_LT(msg.size(), 200u) << msg;
  }
}

TEST(SpecIoTest, FormatValuesAreEchoedEscaped) {
  // Found by the profile fuzzer: a tab decoded from the format string was echoed raw.
  std::string bad = ReadFileText(ProfilePath("32b"));
  const std::string format = "\"hydraulis.profile/1\"";
  bad.replace(bad.find(format), format.size(), "\"hydr\\taulis.profile/1\"");
  const std::string msg = InvalidInputMessage([&] { ParseProfile(bad, "p.json"); });
  EXPECT_NE(msg.find("p.json: format: expected \"hydraulis.profile/1\", got 'hydr\\x09aulis"),
            std::string::npos)
      << msg;
}

TEST(SpecIoTest, ShippedCandidates64Gpus) {
  const CandidateSet c = LoadCandidates(CandidatesPath(64), Profile32b());
  EXPECT_EQ(c.gpus, 64);
  EXPECT_EQ(c.optimizer_layout.dp, 4);
  EXPECT_EQ(c.optimizer_layout.tp, 16);
  EXPECT_EQ(c.optimizer_layout.pp, 1);
  ASSERT_EQ(c.strategies.size(), 7u);
  const std::vector<std::string> descriptions = {
      "4 x TP16",        "2 x (TP8,PP3) + TP16", "TP16 + 6 x TP8",
      "TP16 + 12 x TP4", "(TP8,PP3) + 10 x TP4", "TP8 + 14 x TP4",
      "8 x (TP4,PP2)"};
  const std::vector<std::size_t> counts = {4, 3, 7, 13, 11, 15, 8};
  const std::vector<int> gpus = {64, 64, 64, 64, 64, 64, 64};
  for (std::size_t i = 0; i < c.strategies.size(); ++i) {
    SCOPED_TRACE(i);
    const Strategy& st = c.strategies[i];
    EXPECT_EQ(st.name, "S" + std::to_string(i));
    EXPECT_EQ(st.pipelines.size(), counts[i]);
    EXPECT_EQ(st.Gpus(), gpus[i]);
    EXPECT_EQ(StrategyDescription(st), descriptions[i]);
    EXPECT_TRUE(IsCanonicalOrder(st));
  }
  // S3: one TP16 then twelve TP4, widest first.
  const Strategy& s3 = c.strategies[3];
  ASSERT_EQ(s3.pipelines.size(), 13u);
  EXPECT_EQ(s3.pipelines[0], S(1, 16, 1));
  for (std::size_t i = 1; i < 13; ++i) EXPECT_EQ(s3.pipelines[i], S(1, 4, 1)) << i;
  EXPECT_EQ(StrategyDescription(s3), "TP16 + 12 x TP4");
  // S1: (TP8,PP3) uses 24 GPUs, more than TP16, so it comes first.
  EXPECT_EQ(c.strategies[1].pipelines[0], S(1, 8, 3));
  EXPECT_EQ(c.strategies[1].pipelines[2], S(1, 16, 1));
}

TEST(SpecIoTest, ShippedCandidates1024Gpus) {
  const CandidateSet c = LoadCandidates(CandidatesPath(1024), Profile32b());
  EXPECT_EQ(c.gpus, 1024);
  EXPECT_EQ(c.optimizer_layout.dp, 64);
  EXPECT_EQ(c.optimizer_layout.tp, 16);
  EXPECT_EQ(c.optimizer_layout.pp, 1);
  ASSERT_EQ(c.strategies.size(), 2u);
  EXPECT_EQ(c.strategies[0].name, "homogeneous");
  EXPECT_EQ(c.strategies[0].pipelines.size(), 64u);
  EXPECT_EQ(c.strategies[0].Gpus(), 1024);
  EXPECT_EQ(StrategyDescription(c.strategies[0]), "64 x TP16");
  const Strategy& h = c.strategies[1];
  EXPECT_EQ(h.name, "hetero");
  EXPECT_EQ(h.pipelines.size(), 1u + 3u + 238u + 2u);
  EXPECT_EQ(h.Gpus(), 1024);
  EXPECT_TRUE(IsCanonicalOrder(h));
  // TP16 and (TP4,PP4) both use 16 GPUs: ties go by (cp, tp, pp) descending.
  EXPECT_EQ(StrategyDescription(h), "TP16 + 2 x (TP4,PP4) + 3 x TP8 + 238 x TP4");
}

TEST(SpecIoTest, CandidatesNeedEverySchemeProfiled) {
  // The 13B profile has no TP16 entry, which the first 64-GPU strategy uses.
  const Profile p13 = LoadProfile(ProfilePath("13b"));
  const std::string path = CandidatesPath(64);
  const std::string msg = InvalidInputMessage([&] { LoadCandidates(path, p13); });
  EXPECT_NE(msg.find(path + ": strategies[0].pipelines[0].tp: "), std::string::npos) << msg;
  EXPECT_NE(msg.find("TP16"), std::string::npos) << msg;
}

TEST(SpecIoTest, LoadErrorsNameThePath) {
  const std::string missing = kSourceDir + "/configs/profiles/no-such-profile.json";
  std::string msg = InvalidInputMessage([&] { LoadProfile(missing); });
  EXPECT_NE(msg.find(missing), std::string::npos) << msg;
  msg = InvalidInputMessage([&] { LoadCandidates(missing, Profile32b()); });
  EXPECT_NE(msg.find(missing), std::string::npos) << msg;
}

// ---------------------------------------------------------------------------------------
// Import of the published A800 profiles.

TEST(SpecIoTest, ImportA800ProfileGivesTheShippedProfile) {
  const std::vector<ModelShape> shapes = {
      {"llama-7b", 11008, 32, 32}, {"llama-13b", 13824, 40, 40}, {"llama-32b", 17920, 64, 64}};
  const std::vector<std::string> keys = {"7b", "13b", "32b"};
  if (!std::filesystem::exists(A800Path("32b"))) {
    GTEST_SKIP() << A800Path("32b") << " is absent";
  }
  for (std::size_t i = 0; i < keys.size(); ++i) {
    SCOPED_TRACE(keys[i]);
    if (!std::filesystem::exists(A800Path(keys[i]))) continue;
    // The shipped files add derived cp schemes (cost_test checks those): compare the rest.
    const Profile imported = ImportA800Profile(A800Path(keys[i]), shapes[i]);
    Profile shipped = LoadProfile(ProfilePath(keys[i]));
    std::erase_if(shipped.schemes, [](const SchemeProfile& s) { return s.scheme.cp > 1; });
    EXPECT_EQ(ProfileToJson(imported), ProfileToJson(shipped));
  }
}

TEST(SpecIoTest, ImportA800ProfileRejectsUnknownFields) {
  const std::string source = A800Path("32b");
  if (!std::filesystem::exists(source)) GTEST_SKIP() << source << " is absent";
  Json doc = Json::parse(ReadFileText(source));
  doc["model_config"]["heads"] = 64;
  const std::string path = testing::TempDir() + "/hydraulis_spec_io_test_import.json";
  {
    std::ofstream out(path);
    out << doc.dump();
  }
  const ModelShape shape{"llama-32b", 17920, 64, 64};
  const std::string msg = InvalidInputMessage([&] { ImportA800Profile(path, shape); });
  std::filesystem::remove(path);
  EXPECT_NE(msg.find(path + ": model_config.heads: unknown field"), std::string::npos) << msg;
}

TEST(SpecIoTest, ImportA800ProfileChecksTheHeads) {
  const std::string source = A800Path("32b");
  if (!std::filesystem::exists(source)) GTEST_SKIP() << source << " is absent";
  // 32B: hidden 6656 = 52 x 128.
  EXPECT_NE(InvalidInputMessage([&] {
              ImportA800Profile(source, {"x", 17920, 63, 63});
            }).find("heads: must divide the hidden size (6656"),
            std::string::npos);
  EXPECT_NE(InvalidInputMessage([&] {
              ImportA800Profile(source, {"x", 17920, 52, 5});
            }).find("kv-heads: must divide heads (52), got 5"),
            std::string::npos);
  EXPECT_EQ(ImportA800Profile(source, {"x", 17920, 52, 4}).model.heads, 52);
}

TEST(SpecIoTest, ImportA800ProfileMissingFile) {
  const std::string path = kSourceDir + "/no-such-a800-profile.json";
  const std::string msg = InvalidInputMessage([&] {
    ImportA800Profile(path, ModelShape{"x", 1, 1, 1});
  });
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
}

// ---------------------------------------------------------------------------------------
// Round trips.

void ExpectSameProfile(const Profile& a, const Profile& b) {
  EXPECT_EQ(a.model.name, b.model.name);
  EXPECT_EQ(a.model.layers, b.model.layers);
  EXPECT_EQ(a.model.hidden, b.model.hidden);
  EXPECT_EQ(a.model.ffn, b.model.ffn);
  EXPECT_EQ(a.model.heads, b.model.heads);
  EXPECT_EQ(a.model.kv_heads, b.model.kv_heads);
  EXPECT_EQ(a.model.vocab, b.model.vocab);
  EXPECT_EQ(a.cluster.gpus_per_node, b.cluster.gpus_per_node);
  EXPECT_EQ(a.cluster.gpu_memory_bytes, b.cluster.gpu_memory_bytes);
  EXPECT_EQ(a.memory.activation_bytes_by_tp, b.memory.activation_bytes_by_tp);
  EXPECT_EQ(a.memory.state_bytes_per_h2_layer, b.memory.state_bytes_per_h2_layer);
  EXPECT_EQ(a.memory.optimizer_share, b.memory.optimizer_share);
  EXPECT_EQ(a.memory.context_bytes, b.memory.context_bytes);
  EXPECT_EQ(a.memory.reserved_bytes, b.memory.reserved_bytes);
  EXPECT_EQ(a.utilization_tokens_by_tp, b.utilization_tokens_by_tp);
  ASSERT_EQ(a.schemes.size(), b.schemes.size());
  for (std::size_t i = 0; i < a.schemes.size(); ++i) {
    EXPECT_EQ(a.schemes[i].scheme, b.schemes[i].scheme) << i;
    // Exact: the writer must print doubles with enough digits to read them back.
    EXPECT_EQ(a.schemes[i].a_ms_per_token2, b.schemes[i].a_ms_per_token2) << i;
    EXPECT_EQ(a.schemes[i].b_ms_per_token, b.schemes[i].b_ms_per_token) << i;
    EXPECT_EQ(a.schemes[i].c_ms, b.schemes[i].c_ms) << i;
  }
}

TEST(SpecIoTest, ProfileRoundTripShipped) {
  for (const auto& m : ShippedModels()) {
    SCOPED_TRACE(m.key);
    const Profile p = LoadProfile(ProfilePath(m.key));
    const std::string text = ProfileToJson(p);
    const Profile q = ParseProfile(text, "round-trip.json");
    ExpectSameProfile(p, q);
    EXPECT_EQ(ProfileToJson(q), text);
  }
}

TEST(SpecIoTest, ProfileRoundTripHandBuilt) {
  Profile p;
  p.model = {"tiny", 3, 96, 256, 6, 2, 1000};
  p.cluster.gpus_per_node = 4;
  p.cluster.gpu_memory_bytes = 17179869184;
  p.memory.activation_bytes_by_tp = {{1, 0.1 + 0.2}, {2, 1.0 / 3.0}};
  p.memory.state_bytes_per_h2_layer = 16.5;
  p.memory.optimizer_share = 2.0 / 3.0;
  p.memory.context_bytes = 1e9;
  p.memory.reserved_bytes = 0;
  // No utilization_tokens: the field is optional.
  p.schemes.push_back({S(1, 1, 1), 1e-7 / 3.0, 0.0123456789012345, 1.0 / 7.0});
  p.schemes.push_back({S(2, 2, 3), 0, 5e-300, 0});
  p.schemes.push_back({S(4, 1, 2), 3.3e-6, 0.07, 12.0});
  const std::string text = ProfileToJson(p);
  EXPECT_EQ(text.find("utilization_tokens"), std::string::npos);
  const Profile q = ParseProfile(text, "hand.json");
  ExpectSameProfile(p, q);
  EXPECT_EQ(ProfileToJson(q), text);
  EXPECT_NE(q.Find(S(2, 2, 3)), nullptr);
  EXPECT_EQ(q.Find(S(2, 2, 1)), nullptr);
}

void ExpectSameCandidates(const CandidateSet& a, const CandidateSet& b) {
  EXPECT_EQ(a.gpus, b.gpus);
  EXPECT_EQ(a.optimizer_layout.dp, b.optimizer_layout.dp);
  EXPECT_EQ(a.optimizer_layout.tp, b.optimizer_layout.tp);
  EXPECT_EQ(a.optimizer_layout.pp, b.optimizer_layout.pp);
  ASSERT_EQ(a.strategies.size(), b.strategies.size());
  for (std::size_t i = 0; i < a.strategies.size(); ++i) {
    EXPECT_EQ(a.strategies[i].name, b.strategies[i].name) << i;
    EXPECT_EQ(a.strategies[i].pipelines, b.strategies[i].pipelines) << i;
  }
}

TEST(SpecIoTest, CandidatesRoundTripShipped) {
  for (int gpus : {64, 1024}) {
    SCOPED_TRACE(gpus);
    const CandidateSet c = LoadCandidates(CandidatesPath(gpus), Profile32b());
    const std::string text = CandidatesToJson(c);
    const CandidateSet d = ParseCandidates(text, "round-trip.json", Profile32b());
    ExpectSameCandidates(c, d);
    EXPECT_EQ(CandidatesToJson(d), text);
  }
}

TEST(SpecIoTest, CandidatesToJsonGroupsEqualPipelines) {
  const CandidateSet c = LoadCandidates(CandidatesPath(64), Profile32b());
  const Json j = Json::parse(CandidatesToJson(c));
  EXPECT_EQ(j.at("format"), "hydraulis.candidates/1");
  EXPECT_EQ(j.at("gpus"), 64);
  const Json& s3 = j.at("strategies").at(3);
  EXPECT_EQ(s3.at("name"), "S3");
  const Json expected = Json::parse(R"([{"count": 1, "cp": 1, "tp": 16, "pp": 1},
                                        {"count": 12, "cp": 1, "tp": 4, "pp": 1}])");
  EXPECT_EQ(s3.at("pipelines"), expected);
}

TEST(SpecIoTest, PipelinesAreSortedWidestFirstAndNamesDefault) {
  const std::string text = R"({
    "format": "hydraulis.candidates/1",
    "gpus": 64,
    "optimizer_layout": {"dp": 4, "tp": 16, "pp": 1},
    "strategies": [
      {"pipelines": [{"count": 2, "tp": 4}, {"tp": 4, "pp": 2}, {"tp": 16},
                     {"cp": 1, "tp": 8, "pp": 2}]},
      {"name": "mine", "pipelines": [{"tp": 2, "pp": 1}, {"tp": 8, "pp": 3}]},
      {"pipelines": [{"tp": 2}]}
    ]
  })";
  const CandidateSet c = ParseCandidates(text, "sorted.json", Profile32b());
  ASSERT_EQ(c.strategies.size(), 3u);
  const std::vector<Scheme> expected = {S(1, 16, 1), S(1, 8, 2), S(1, 4, 2), S(1, 4, 1),
                                        S(1, 4, 1)};
  EXPECT_EQ(c.strategies[0].pipelines, expected);
  EXPECT_EQ(c.strategies[0].name, "S0");
  EXPECT_EQ(StrategyDescription(c.strategies[0]), "TP16 + (TP8,PP2) + (TP4,PP2) + 2 x TP4");
  EXPECT_EQ(c.strategies[0].Gpus(), 48);
  EXPECT_EQ(c.strategies[1].name, "mine");
  EXPECT_EQ(StrategyDescription(c.strategies[1]), "(TP8,PP3) + TP2");
  EXPECT_EQ(c.strategies[2].name, "S2");
  EXPECT_EQ(StrategyDescription(c.strategies[2]), "TP2");
}

TEST(SpecIoTest, SchemeNamesAndDescriptions) {
  EXPECT_EQ(SchemeName(S(1, 4, 1)), "TP4");
  EXPECT_EQ(SchemeName(S(1, 8, 3)), "(TP8,PP3)");
  EXPECT_EQ(SchemeName(S(2, 8, 1)), "(CP2,TP8)");
  EXPECT_EQ(SchemeName(S(2, 1, 4)), "(CP2,TP1,PP4)");
  Strategy st;
  EXPECT_EQ(StrategyDescription(st), "(empty)");
  st.pipelines = {S(2, 8, 1), S(2, 8, 1), S(1, 16, 1), S(1, 1, 1)};
  EXPECT_EQ(StrategyDescription(st), "2 x (CP2,TP8) + TP16 + TP1");
  EXPECT_EQ(st.Gpus(), 16 + 16 + 16 + 1);
}

// Ties in GPUs are ordered by (cp, tp, pp) descending: (CP2,TP8) before TP16 before
// (TP8,PP2). Needs a profile with cp > 1, built here.
TEST(SpecIoTest, TiesOrderedByCpTpPpDescending) {
  const Profile& q = Profile32b();
  ASSERT_NE(q.Find(S(2, 8, 1)), nullptr);
  const std::string text = R"({
    "format": "hydraulis.candidates/1", "gpus": 64,
    "optimizer_layout": {"dp": 4, "tp": 16, "pp": 1},
    "strategies": [{"pipelines": [{"tp": 8, "pp": 2}, {"tp": 16}, {"cp": 2, "tp": 8},
                                  {"tp": 4, "pp": 4}]}]
  })";
  const CandidateSet c = ParseCandidates(text, "ties.json", q);
  const std::vector<Scheme> expected = {S(2, 8, 1), S(1, 16, 1), S(1, 8, 2), S(1, 4, 4)};
  EXPECT_EQ(c.strategies.at(0).pipelines, expected);
}

// ---------------------------------------------------------------------------------------
// Validation errors. Each case mutates a valid document and names the field path the
// error must carry; the message must read "<source>: <path>: ...".

struct ErrorCase {
  std::string what;
  std::function<void(Json&)> mutate;
  std::string path;    // field path; "" when the error names no field (invalid JSON)
  std::string detail;  // another fragment the message must contain
};

void ExpectMessage(const std::string& msg, const std::string& source, const ErrorCase& c) {
  const std::string head = c.path.empty() ? source + ": " : source + ": " + c.path + ": ";
  EXPECT_EQ(msg.rfind(head, 0), 0u) << "message: " << msg << "\nexpected to start with: " << head;
  EXPECT_NE(msg.find(c.detail), std::string::npos)
      << "message: " << msg << "\nexpected to contain: " << c.detail;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
}

// Profiles with unknown fields, or sizes out of range.
std::vector<ErrorCase> ProfileFieldAndRangeCases() {
  return {
      // Unknown fields.
      {"unknown at root", [](Json& j) { j["colour"] = "blue"; }, "colour", "unknown field"},
      {"unknown in model", [](Json& j) { j["model"]["depth"] = 60; }, "model.depth",
       "unknown field"},
      {"unknown in scheme", [](Json& j) { j["schemes"][3]["d_ms"] = 1.0; }, "schemes[3].d_ms",
       "unknown field"},
      {"unknown in cluster", [](Json& j) { j["cluster"]["gpus"] = 64; }, "cluster.gpus",
       "unknown field"},
      {"unknown in memory", [](Json& j) { j["memory"]["gap"] = 1.0; }, "memory.gap",
       "unknown field"},
      // Zero or negative sizes.
      {"zero layers", [](Json& j) { j["model"]["layers"] = 0; }, "model.layers", "got 0"},
      {"negative hidden", [](Json& j) { j["model"]["hidden"] = -4096; }, "model.hidden", "-4096"},
      {"zero vocab", [](Json& j) { j["model"]["vocab"] = 0; }, "model.vocab", ">= 1"},
      {"zero memory", [](Json& j) { j["cluster"]["gpu_memory_bytes"] = 0; },
       "cluster.gpu_memory_bytes", ">= 1"},
      {"zero tp", [](Json& j) { j["schemes"][2]["tp"] = 0; }, "schemes[2].tp", "got 0"},
      {"negative pp", [](Json& j) { j["schemes"][0]["pp"] = -2; }, "schemes[0].pp", "-2"},
      {"zero cp", [](Json& j) { j["schemes"][1]["cp"] = 0; }, "schemes[1].cp", "got 0"},
      {"negative a", [](Json& j) { j["schemes"][1]["a_ms_per_token2"] = -1e-6; },
       "schemes[1].a_ms_per_token2", ">= 0"},
      {"negative c", [](Json& j) { j["schemes"][4]["c_ms"] = -3.0; }, "schemes[4].c_ms", "-3"},
      {"negative activation",
       [](Json& j) { j["memory"]["activation_bytes_per_token_hidden_layer"]["4"] = -1.0; },
       "memory.activation_bytes_per_token_hidden_layer.4", ">= 0"},
      {"activation key zero",
       [](Json& j) { j["memory"]["activation_bytes_per_token_hidden_layer"]["0"] = 1.0; },
       "memory.activation_bytes_per_token_hidden_layer.0", "tensor-parallel degree"},
      {"activation key not a number",
       [](Json& j) { j["memory"]["activation_bytes_per_token_hidden_layer"]["x"] = 1.0; },
       "memory.activation_bytes_per_token_hidden_layer.x", "tensor-parallel degree"},
      {"optimizer share above one", [](Json& j) { j["memory"]["optimizer_share"] = 1.5; },
       "memory.optimizer_share", "<= 1"},
      {"huge tp", [](Json& j) { j["schemes"][0]["tp"] = 1 << 21; }, "schemes[0].tp", "must be <="},
      // Too large for any integer type the reader converts to: refused as too large, not
      // wrapped (2^63 used to read as -2^63: "must be >= 1") nor called "not an integer".
      {"layers 2^63", [](Json& j) { j["model"]["layers"] = std::uint64_t{1} << 63; },
       "model.layers", "must be <= 2147483647, got 9223372036854775808"},
      {"hidden 2^64 - 1", [](Json& j) { j["model"]["hidden"] = ~std::uint64_t{0}; }, "model.hidden",
       "must be <= 2147483647, got 18446744073709551615"},
      {"tp 1e30", [](Json& j) { j["schemes"][0]["tp"] = 1e30; }, "schemes[0].tp", "must be <= "},
      {"layers -1e30", [](Json& j) { j["model"]["layers"] = -1e30; }, "model.layers",
       "must be >= 1"},
  };
}

// Profiles with values of the wrong type, fields missing, or another format.
std::vector<ErrorCase> ProfileTypeAndPresenceCases() {
  return {
      // Wrong types.
      {"layers as string", [](Json& j) { j["model"]["layers"] = "60"; }, "model.layers",
       "expected an integer"},
      {"layers fractional", [](Json& j) { j["model"]["layers"] = 60.5; }, "model.layers",
       "expected an integer"},
      {"tp as bool", [](Json& j) { j["schemes"][5]["tp"] = true; }, "schemes[5].tp",
       "expected an integer"},
      {"b as string", [](Json& j) { j["schemes"][0]["b_ms_per_token"] = "0.4"; },
       "schemes[0].b_ms_per_token", "expected a number"},
      {"name as number", [](Json& j) { j["model"]["name"] = 32; }, "model.name",
       "expected a string"},
      {"model as array",
       [](Json& j) {
         j["model"] = Json::array({1, 2});
       },
       "model", "expected an object"},
      {"schemes as object", [](Json& j) { j["schemes"] = Json::object(); }, "schemes",
       "expected an array"},
      {"scheme as number", [](Json& j) { j["schemes"][6] = 4; }, "schemes[6]",
       "expected a JSON object"},
      // Missing required fields.
      {"missing vocab", [](Json& j) { j["model"].erase("vocab"); }, "model.vocab",
       "missing required field"},
      {"missing c", [](Json& j) { j["schemes"][4].erase("c_ms"); }, "schemes[4].c_ms",
       "missing required field"},
      {"missing memory", [](Json& j) { j.erase("memory"); }, "memory", "missing required field"},
      {"missing schemes", [](Json& j) { j.erase("schemes"); }, "schemes", "missing required field"},
      {"missing format", [](Json& j) { j.erase("format"); }, "format", "missing required field"},
      // Wrong format.
      {"wrong format", [](Json& j) { j["format"] = "hydraulis.candidates/1"; }, "format",
       "hydraulis.profile/1"},
      {"future format", [](Json& j) { j["format"] = "hydraulis.profile/2"; }, "format",
       "hydraulis.profile/2"},
  };
}

// Profiles whose fields disagree, or whose values overflow a product.
std::vector<ErrorCase> ProfileConsistencyCases() {
  return {
      // Consistency.
      {"kv_heads not dividing heads", [](Json& j) { j["model"]["kv_heads"] = 3; }, "model.kv_heads",
       "must divide heads"},
      {"heads not dividing hidden",
       [](Json& j) {
         j["model"]["heads"] = 63;
         j["model"]["kv_heads"] = 63;
       },
       "model.heads", "must divide hidden"},
      {"duplicate scheme", [](Json& j) { j["schemes"].push_back(j["schemes"][0]); },
       "schemes[27].tp", "duplicate"},
      {"scheme without activation entry",
       [](Json& j) { j["memory"]["activation_bytes_per_token_hidden_layer"].erase("16"); },
       "schemes[14].tp", "tp 16"},
      {"a and b zero",
       [](Json& j) {
         j["schemes"][0]["a_ms_per_token2"] = 0;
         j["schemes"][0]["b_ms_per_token"] = 0;
       },
       "schemes[0].b_ms_per_token", "both zero"},
      {"no schemes", [](Json& j) { j["schemes"] = Json::array(); }, "schemes", "at least one"},
      // Values that would overflow an int or a product of degrees.
      {"layers beyond int", [](Json& j) { j["model"]["layers"] = 4294967296LL; }, "model.layers",
       "must be <="},
      {"cp*tp overflow",
       [](Json& j) {
         j["schemes"][0]["cp"] = 1048576;
         j["schemes"][0]["tp"] = 1048576;
       },
       "schemes[0].tp", "larger than"},
      {"tp key with leading zero",
       [](Json& j) { j["memory"]["activation_bytes_per_token_hidden_layer"]["04"] = 99; },
       "memory.activation_bytes_per_token_hidden_layer.04", "no leading zeros"},
      {"fractional utilization", [](Json& j) { j["utilization_tokens"]["1"] = 1.5; },
       "utilization_tokens.1", "integer"},
  };
}

TEST(SpecIoTest, ProfileValidationErrors) {
  const Json base = Json::parse(ReadFileText(ProfilePath("32b")));
  std::vector<ErrorCase> cases;
  for (auto cases_of :
       {&ProfileFieldAndRangeCases, &ProfileTypeAndPresenceCases, &ProfileConsistencyCases}) {
    for (ErrorCase& c : cases_of()) cases.push_back(std::move(c));
  }
  for (const auto& c : cases) {
    SCOPED_TRACE(c.what);
    Json doc = base;
    c.mutate(doc);
    const std::string text = doc.dump(2);
    const std::string msg = InvalidInputMessage([&] { ParseProfile(text, "bad-profile.json"); });
    ExpectMessage(msg, "bad-profile.json", c);
  }
  // The unmutated document parses: every failure above is due to its mutation.
  EXPECT_NO_THROW(ParseProfile(base.dump(), "good-profile.json"));
}

TEST(SpecIoTest, ProfileInvalidJsonAndNonObject) {
  for (const std::string text :
       {"", "{\"format\": ", "{\"format\": \"hydraulis.profile/1\",}", "{} trailing", "nope"}) {
    SCOPED_TRACE(text);
    const std::string msg = InvalidInputMessage([&] { ParseProfile(text, "broken.json"); });
    EXPECT_EQ(msg.rfind("broken.json: invalid JSON", 0), 0u) << msg;
  }
  for (const std::string text : {"[1, 2]", "42", "\"profile\"", "null"}) {
    SCOPED_TRACE(text);
    const std::string msg = InvalidInputMessage([&] { ParseProfile(text, "scalar.json"); });
    EXPECT_EQ(msg.rfind("scalar.json: ", 0), 0u) << msg;
    EXPECT_NE(msg.find("expected a JSON object"), std::string::npos) << msg;
  }
}

// Candidates with unknown fields, or sizes out of range.
std::vector<ErrorCase> CandidateFieldAndRangeCases() {
  return {
      // Unknown fields.
      {"unknown at root", [](Json& j) { j["comment"] = "x"; }, "comment", "unknown field"},
      {"unknown in strategy", [](Json& j) { j["strategies"][1]["weight"] = 2; },
       "strategies[1].weight", "unknown field"},
      {"unknown in pipeline", [](Json& j) { j["strategies"][1]["pipelines"][0]["dp"] = 1; },
       "strategies[1].pipelines[0].dp", "unknown field"},
      {"unknown in layout", [](Json& j) { j["optimizer_layout"]["zero"] = 1; },
       "optimizer_layout.zero", "unknown field"},
      // Zero or negative sizes.
      {"zero gpus", [](Json& j) { j["gpus"] = 0; }, "gpus", "got 0"},
      {"negative gpus", [](Json& j) { j["gpus"] = -64; }, "gpus", "-64"},
      {"zero tp", [](Json& j) { j["strategies"][1]["pipelines"][0]["tp"] = 0; },
       "strategies[1].pipelines[0].tp", "got 0"},
      {"negative pp", [](Json& j) { j["strategies"][4]["pipelines"][0]["pp"] = -3; },
       "strategies[4].pipelines[0].pp", "-3"},
      {"zero cp", [](Json& j) { j["strategies"][0]["pipelines"][0]["cp"] = 0; },
       "strategies[0].pipelines[0].cp", "got 0"},
      {"zero count", [](Json& j) { j["strategies"][2]["pipelines"][1]["count"] = 0; },
       "strategies[2].pipelines[1].count", "got 0"},
      {"negative count", [](Json& j) { j["strategies"][2]["pipelines"][1]["count"] = -6; },
       "strategies[2].pipelines[1].count", "-6"},
      {"zero layout dp", [](Json& j) { j["optimizer_layout"]["dp"] = 0; }, "optimizer_layout.dp",
       "got 0"},
      {"huge gpus", [](Json& j) { j["gpus"] = 1 << 21; }, "gpus", "must be <="},
      {"gpus 2^63", [](Json& j) { j["gpus"] = std::uint64_t{1} << 63; }, "gpus",
       "must be <= 1048576, got 9223372036854775808"},
      {"count 2^64 as a double",
       [](Json& j) { j["strategies"][0]["pipelines"][0]["count"] = 0x1p64; },
       "strategies[0].pipelines[0].count", "must be <= "},
  };
}

// Candidates with values of the wrong type, fields missing, or another format.
std::vector<ErrorCase> CandidateTypeAndPresenceCases() {
  return {
      // Wrong types.
      {"gpus as string", [](Json& j) { j["gpus"] = "64"; }, "gpus", "expected an integer"},
      {"tp fractional", [](Json& j) { j["strategies"][2]["pipelines"][1]["tp"] = 8.5; },
       "strategies[2].pipelines[1].tp", "expected an integer"},
      {"count as null", [](Json& j) { j["strategies"][0]["pipelines"][0]["count"] = nullptr; },
       "strategies[0].pipelines[0].count", "expected an integer"},
      {"name as number", [](Json& j) { j["strategies"][0]["name"] = 3; }, "strategies[0].name",
       "expected a string"},
      {"pipelines as object", [](Json& j) { j["strategies"][5]["pipelines"] = Json::object(); },
       "strategies[5].pipelines", "expected an array"},
      {"strategies as string", [](Json& j) { j["strategies"] = "all"; }, "strategies",
       "expected an array"},
      {"layout as number", [](Json& j) { j["optimizer_layout"] = 64; }, "optimizer_layout",
       "expected an object"},
      {"pipeline as array", [](Json& j) { j["strategies"][6]["pipelines"][0] = Json::array(); },
       "strategies[6].pipelines[0]", "expected a JSON object"},
      // Missing required fields.
      {"missing gpus", [](Json& j) { j.erase("gpus"); }, "gpus", "missing required field"},
      {"missing layout", [](Json& j) { j.erase("optimizer_layout"); }, "optimizer_layout",
       "missing required field"},
      {"missing layout tp", [](Json& j) { j["optimizer_layout"].erase("tp"); },
       "optimizer_layout.tp", "missing required field"},
      {"missing pipelines", [](Json& j) { j["strategies"][2].erase("pipelines"); },
       "strategies[2].pipelines", "missing required field"},
      {"missing strategies", [](Json& j) { j.erase("strategies"); }, "strategies",
       "missing required field"},
      {"missing format", [](Json& j) { j.erase("format"); }, "format", "missing required field"},
      // Wrong format.
      {"wrong format", [](Json& j) { j["format"] = "hydraulis.profile/1"; }, "format",
       "hydraulis.candidates/1"},
  };
}

// Candidates that do not fit the cluster or the profile, or list nothing.
std::vector<ErrorCase> CandidateClusterCases() {
  return {
      // tp*cp must divide the cluster: 72 GPUs cannot be tiled by TP16 groups.
      {"tp not dividing gpus",
       [](Json& j) {
         j["gpus"] = 72;
         j["optimizer_layout"] = {{"dp", 9}, {"tp", 8}, {"pp", 1}};
       },
       "strategies[0].pipelines[0].tp", "does not divide"},
      {"cp*tp not dividing gpus",
       [](Json& j) {
         j["strategies"][6]["pipelines"][0] = {{"cp", 3}, {"tp", 4}};
       },
       "strategies[6].pipelines[0].tp", "does not divide"},
      {"duplicate strategy name", [](Json& j) { j["strategies"][2]["name"] = "S0"; },
       "strategies[2].name", "'S0' is used twice"},
      // One scheme larger than the cluster.
      {"scheme larger than cluster",
       [](Json& j) {
         j["gpus"] = 16;
         j["optimizer_layout"] = {{"dp", 1}, {"tp", 16}, {"pp", 1}};
         j["strategies"] = Json::parse(R"([{"pipelines": [{"tp": 8, "pp": 3}]}])");
       },
       "strategies[0].pipelines[0].pp", "24 GPUs"},
      // A strategy using more GPUs than the cluster (16 + 13 * 4 = 68 > 64).
      {"strategy over the cluster",
       [](Json& j) { j["strategies"][3]["pipelines"][1]["count"] = 13; },
       "strategies[3].pipelines[1].count", "more GPUs"},
      {"strategy over the cluster by a later entry",
       [](Json& j) {
         j["strategies"][5]["pipelines"].push_back({{"tp", 1}, {"pp", 2}});
       },
       "strategies[5].pipelines[2].count", "more GPUs"},
      // The fuzzer's finding: a name is echoed escaped, so the message stays one line.
      {"strategy over the cluster with a control byte in its name",
       [](Json& j) {
         j["strategies"][3]["name"] = "a\rb";
         j["strategies"][3]["pipelines"][1]["count"] = 13;
       },
       "strategies[3].pipelines[1].count", "strategy 'a\\x0db' uses more GPUs"},
      // A scheme the profile has no fitted entry for.
      {"unprofiled scheme",
       [](Json& j) {
         j["strategies"][6]["pipelines"][0] = {{"count", 2}, {"tp", 16}, {"pp", 2}};
       },
       "strategies[6].pipelines[0].tp", "(TP16,PP2)"},
      {"unprofiled cp scheme",
       [](Json& j) {
         j["strategies"][1]["pipelines"][1] = {{"cp", 2}, {"tp", 8}, {"pp", 2}};
       },
       "strategies[1].pipelines[1].tp", "(CP2,TP8,PP2)"},
      // Optimizer layout not matching the cluster.
      {"layout too small", [](Json& j) { j["optimizer_layout"]["dp"] = 2; }, "optimizer_layout",
       "must equal gpus = 64"},
      {"layout too large", [](Json& j) { j["optimizer_layout"]["pp"] = 2; }, "optimizer_layout",
       "128"},
      // Empty lists.
      {"no strategies", [](Json& j) { j["strategies"] = Json::array(); }, "strategies",
       "at least one"},
      {"no pipelines", [](Json& j) { j["strategies"][0]["pipelines"] = Json::array(); },
       "strategies[0].pipelines", "at least one"},
      {"count beyond the cluster",
       [](Json& j) { j["strategies"][0]["pipelines"][0]["count"] = 4611686018427387904LL; },
       "strategies[0].pipelines[0].count", "must be <="},
      {"dp beyond int", [](Json& j) { j["optimizer_layout"]["dp"] = 4294967300LL; },
       "optimizer_layout.dp", "must be <="},
  };
}

TEST(SpecIoTest, CandidateValidationErrors) {
  const Json base = Json::parse(ReadFileText(CandidatesPath(64)));
  std::vector<ErrorCase> cases;
  for (auto cases_of :
       {&CandidateFieldAndRangeCases, &CandidateTypeAndPresenceCases, &CandidateClusterCases}) {
    for (ErrorCase& c : cases_of()) cases.push_back(std::move(c));
  }
  for (const auto& c : cases) {
    SCOPED_TRACE(c.what);
    Json doc = base;
    c.mutate(doc);
    const std::string text = doc.dump(2);
    const std::string msg =
        InvalidInputMessage([&] { ParseCandidates(text, "bad-candidates.json", Profile32b()); });
    ExpectMessage(msg, "bad-candidates.json", c);
  }
  EXPECT_NO_THROW(ParseCandidates(base.dump(), "good-candidates.json", Profile32b()));
}

TEST(SpecIoTest, CandidatesInvalidJson) {
  for (const std::string text : {"", "{", "{\"gpus\": 64,}", "[1, 2", "{\"gpus\": 0x40}"}) {
    SCOPED_TRACE(text);
    const std::string msg =
        InvalidInputMessage([&] { ParseCandidates(text, "broken-c.json", Profile32b()); });
    EXPECT_EQ(msg.rfind("broken-c.json: invalid JSON", 0), 0u) << msg;
  }
}

}  // namespace
}  // namespace hydraulis
