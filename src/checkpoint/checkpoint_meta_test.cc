#include "hydraulis/checkpoint/checkpoint_meta.h"

#include <gtest/gtest.h>

#define XXH_INLINE_ALL  // header-only xxHash, as the parser uses it
#include <xxhash.h>

#include <nlohmann/json.hpp>
#include <string>

#include "../base/test_support.h"
#include "hydraulis/base/error.h"

namespace hydraulis {
namespace {

CheckpointMeta SampleMeta() {
  CheckpointMeta meta;
  meta.step = 12;
  meta.sampler_epoch = 1;
  meta.sampler_offset = 345;
  meta.seed = 18446744073709551615ull;
  meta.world_size = 2;
  meta.parameters = 1000;
  meta.bucket_elements = 400;
  return meta;
}

std::vector<ShardRecord> SampleShards() {
  return {{1024, "0123456789abcdef"}, {2048, "fedcba9876543210"}};
}

TEST(CheckpointMetaTest, StepDirNamesAreTheOnlyLatestPointers) {
  EXPECT_TRUE(IsStepDirName(StepDirName(0)));
  EXPECT_TRUE(IsStepDirName(StepDirName(12)));
  EXPECT_TRUE(IsStepDirName(StepDirName(123'456'789'012)));
  for (const char* bad : {"", "step-", "step-9", "step-0000001", "../step-00000001",
                          "/tmp/step-00000001", "step-00000001/..", "step-00000001 ",
                          "step-0000000a", "Step-00000001", "step-00000000000000000001"}) {
    EXPECT_FALSE(IsStepDirName(bad)) << bad;
  }
}

TEST(CheckpointMetaTest, RoundTrips) {
  const std::string text = CheckpointMetaToJson(SampleMeta(), SampleShards());
  const CheckpointMetaFile file = ParseCheckpointMeta(text, "m.json", "step-00000012");
  EXPECT_EQ(file.meta.step, 12);
  EXPECT_EQ(file.meta.sampler_epoch, 1);
  EXPECT_EQ(file.meta.sampler_offset, 345);
  EXPECT_EQ(file.meta.seed, 18446744073709551615ull);
  EXPECT_EQ(file.meta.world_size, 2);
  EXPECT_EQ(file.meta.parameters, 1000);
  EXPECT_EQ(file.meta.bucket_elements, 400);
  ASSERT_TRUE(file.verified());
  EXPECT_EQ(file.shards[1].bytes, 2048);
  EXPECT_EQ(file.shards[1].xxh3_64, "fedcba9876543210");
  EXPECT_EQ(StepDirName(12), "step-00000012");
  EXPECT_EQ(HexDigest(0xabcULL), "0000000000000abc");
  // No data rule recorded: a checkpoint from before pieces.
  EXPECT_EQ(file.meta.long_documents, "");
  EXPECT_EQ(file.meta.max_len, 0);
}

TEST(CheckpointMetaTest, RoundTripsTheDataRule) {
  CheckpointMeta meta = SampleMeta();
  meta.long_documents = "split";
  meta.max_len = 4096;
  const std::string text = CheckpointMetaToJson(meta, SampleShards());
  const CheckpointMetaFile file = ParseCheckpointMeta(text, "m.json", "step-00000012");
  EXPECT_EQ(file.meta.long_documents, "split");
  EXPECT_EQ(file.meta.max_len, 4096);
}

TEST(CheckpointMetaTest, DetectsEveryEditedField) {
  const std::string text = CheckpointMetaToJson(SampleMeta(), SampleShards());
  // Any single changed digit of a recorded value breaks the checksum.
  for (const std::string from :
       {"\"step\": 12", "\"offset\": 345", "\"bytes\": 2048", "\"world_size\": 2",
        "\"parameters\": 1000", "\"bucket_elements\": 400"}) {
    std::string edited = text;
    const std::size_t at = edited.find(from);
    ASSERT_NE(at, std::string::npos) << from;
    edited[at + from.size() - 1] = edited[at + from.size() - 1] == '9' ? '8' : '9';
    EXPECT_NE(test_support::InvalidInputMessage([&] {
                ParseCheckpointMeta(edited, "m.json", "step-00000012");
              }).find("m.json: checksum mismatch"),
              std::string::npos)
        << from;
  }
}

TEST(CheckpointMetaTest, RejectsInconsistentFields) {
  const std::string text = CheckpointMetaToJson(SampleMeta(), SampleShards());
  EXPECT_NE(test_support::InvalidInputMessage([&] {
              ParseCheckpointMeta(text, "m.json", "step-00001000");
            }).find("m.json: step: 12 does not match the checkpoint's directory"),
            std::string::npos);
  CheckpointMeta negative = SampleMeta();
  negative.step = -4;
  EXPECT_NE(test_support::InvalidInputMessage([&] {
              ParseCheckpointMeta(CheckpointMetaToJson(negative, SampleShards()), "m.json",
                                  "step--0000004");
            }).find("m.json: step: must be >= 0"),
            std::string::npos);
  EXPECT_NE(test_support::InvalidInputMessage([&] {
              ParseCheckpointMeta(CheckpointMetaToJson(SampleMeta(), {SampleShards()[0]}), "m.json",
                                  "step-00000012");
            }).find("m.json: shards: expected one entry per rank (2), got 1"),
            std::string::npos);
  EXPECT_NE(test_support::InvalidInputMessage([&] {
              ParseCheckpointMeta(
                  CheckpointMetaToJson(SampleMeta(), {{1, "0123"}, {2, "0123456789abcdef"}}),
                  "m.json", "step-00000012");
            }).find("m.json: shards[0].xxh3_64: expected 16 lowercase hex digits"),
            std::string::npos);
  EXPECT_NE(test_support::InvalidInputMessage([&] {
              ParseCheckpointMeta("[1]", "m.json", "step-00000012");
            }).find("m.json: expected a JSON object"),
            std::string::npos);
  EXPECT_NE(test_support::InvalidInputMessage([&] {
              ParseCheckpointMeta(R"({"format": "hydraulis.checkpoint/9"})", "m.json",
                                  "step-00000012");
            }).find("m.json: format: expected \"hydraulis.checkpoint/3\""),
            std::string::npos);
}

// Counts past int64 are refused as too large, naming the field: 2^64 - 1 used to wrap to -1
// ("must be >= 0").
TEST(CheckpointMetaTest, CountsBeyondInt64NameTheField) {
  const auto error = [](const std::string& offset, const std::string& world_size) {
    return test_support::InvalidInputMessage([&] {
      ParseCheckpointMeta(R"({"format": "hydraulis.checkpoint/1", "step": 3, "sampler": )"
                          R"({"epoch": 0, "offset": )" +
                              offset + R"(}, "seed": 7, "world_size": )" + world_size +
                              R"(, "parameters": 10})",
                          "m.json", "step-00000003");
    });
  };
  EXPECT_EQ(error("18446744073709551615", "4"),
            "m.json: sampler.offset: must be <= 9223372036854775807, got 18446744073709551615");
  EXPECT_EQ(error("1e30", "4"),
            "m.json: sampler.offset: must be <= 9223372036854775807, got 1e+30");
  EXPECT_EQ(error("9", "4294967297"), "m.json: world_size: must be <= 2147483647, got 4294967297");
}

TEST(CheckpointMetaTest, ReadsTheFormatWithoutChecksumsUnverified) {
  const std::string text =
      R"({"format": "hydraulis.checkpoint/1", "step": 3, "sampler": {"epoch": 0, "offset": 9},
          "seed": 7, "world_size": 4, "parameters": 10})";
  const CheckpointMetaFile file = ParseCheckpointMeta(text, "m.json", "step-00000003");
  EXPECT_FALSE(file.verified());
  EXPECT_EQ(file.meta.world_size, 4);
  EXPECT_EQ(file.meta.sampler_offset, 9);
  EXPECT_EQ(file.meta.bucket_elements, 0);
}

// hydraulis.checkpoint/2 (checksums, no buckets; its checksum covers its own fields, as
// the writer of that format computed it): read verified, as one bucket.
TEST(CheckpointMetaTest, ReadsTheFormatWithoutBucketsAsOneBucket) {
  nlohmann::json j = nlohmann::json::parse(CheckpointMetaToJson(SampleMeta(), SampleShards()));
  j["format"] = "hydraulis.checkpoint/2";
  j.erase("bucket_elements");
  j.erase("checksum");
  const std::string fields = j.dump();
  j["checksum"] = HexDigest(XXH3_64bits(fields.data(), fields.size()));
  const CheckpointMetaFile file = ParseCheckpointMeta(j.dump(2), "m.json", "step-00000012");
  EXPECT_TRUE(file.verified());
  EXPECT_EQ(file.meta.bucket_elements, 0);
  EXPECT_EQ(file.meta.parameters, 1000);
  // The current format requires the field.
  j["format"] = "hydraulis.checkpoint/3";
  j.erase("checksum");
  const std::string current = j.dump();
  j["checksum"] = HexDigest(XXH3_64bits(current.data(), current.size()));
  EXPECT_NE(test_support::InvalidInputMessage([&] {
              ParseCheckpointMeta(j.dump(2), "m.json", "step-00000012");
            }).find("m.json: bucket_elements"),
            std::string::npos);
}

}  // namespace
}  // namespace hydraulis
