#include "hydraulis/checkpoint/checkpoint_meta.h"

#define XXH_INLINE_ALL  // header-only xxHash (Debian's libxxhash-dev)
#include <xxhash.h>

#include <algorithm>
#include <cstdio>
#include <limits>
#include <nlohmann/json.hpp>

#include "hydraulis/base/error.h"
#include "hydraulis/base/internal/json_text.h"
#include "hydraulis/spec/internal/json_reader.h"

namespace hydraulis {
namespace {

constexpr char kFormat[] = "hydraulis.checkpoint/3";
// Written before the optimizer's buckets (one bucket); still loaded.
constexpr char kFormatWithoutBuckets[] = "hydraulis.checkpoint/2";
// Written before checksums and buckets; still loaded, unverified.
constexpr char kFormatWithoutChecksums[] = "hydraulis.checkpoint/1";
constexpr std::int64_t kInt64Max = std::numeric_limits<std::int64_t>::max();

// The checksum meta.json carries over its own other fields (compact, keys sorted).
std::string MetaChecksum(nlohmann::json j) {
  j.erase("checksum");
  const std::string text = j.dump();
  return HexDigest(XXH3_64bits(text.data(), text.size()));
}

bool IsHexDigest(const std::string& text) {
  return text.size() == 16 && std::all_of(text.begin(), text.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

}  // namespace

std::string StepDirName(std::int64_t step) {
  char name[32];
  std::snprintf(name, sizeof name, "step-%08lld", static_cast<long long>(step));
  return name;
}

bool IsStepDirName(std::string_view name) {
  constexpr std::string_view kPrefix = "step-";
  if (!name.starts_with(kPrefix) || name.size() < kPrefix.size() + 8) return false;
  const std::string_view digits = name.substr(kPrefix.size());
  if (digits.size() > 19) return false;  // beyond any int64 step
  return std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; });
}

std::string HexDigest(std::uint64_t hash) {
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(hash));
  return text;
}

std::string CheckpointMetaToJson(const CheckpointMeta& meta,
                                 const std::vector<ShardRecord>& shards) {
  nlohmann::json j;
  j["format"] = kFormat;
  j["step"] = meta.step;
  j["sampler"] = {{"epoch", meta.sampler_epoch}, {"offset", meta.sampler_offset}};
  j["seed"] = meta.seed;
  j["world_size"] = meta.world_size;
  j["parameters"] = meta.parameters;
  j["bucket_elements"] = meta.bucket_elements;
  if (!meta.long_documents.empty()) {
    j["data"] = {{"long_documents", meta.long_documents}, {"max_len", meta.max_len}};
    if (meta.held_out_pieces > 0) j["data"]["held_out_pieces"] = meta.held_out_pieces;
  }
  j["shards"] = nlohmann::json::array();
  for (const ShardRecord& shard : shards) {
    j["shards"].push_back({{"bytes", shard.bytes}, {"xxh3_64", shard.xxh3_64}});
  }
  j["checksum"] = MetaChecksum(j);
  return j.dump(2) + "\n";
}

CheckpointMetaFile ParseCheckpointMeta(const std::string& text, const std::string& meta_path,
                                       const std::string& dir_name) {
  const nlohmann::json j = ParseJson(text, meta_path);
  if (!j.is_object()) {
    throw InvalidInput(meta_path + ": expected a JSON object, got " + JsonForMessage(j));
  }
  JsonObjectReader r(j, meta_path, "");
  const std::string format = r.String("format");
  if (format != kFormat && format != kFormatWithoutBuckets && format != kFormatWithoutChecksums) {
    r.Fail("format", "expected \"" + std::string(kFormat) + "\", got " + QuoteForMessage(format));
  }
  const bool verified = format != kFormatWithoutChecksums;
  if (verified && r.String("checksum") != MetaChecksum(j)) {
    throw InvalidInput(meta_path +
                       ": checksum mismatch: the file was edited or damaged since it was saved");
  }
  CheckpointMetaFile file;
  CheckpointMeta& meta = file.meta;
  meta.step = r.Int("step", 0, kInt64Max);
  if (dir_name != StepDirName(meta.step)) {
    r.Fail("step", std::to_string(meta.step) + " does not match the checkpoint's directory " +
                       QuoteForMessage(dir_name));
  }
  JsonObjectReader sampler = r.Object("sampler");
  meta.sampler_epoch = sampler.Int("epoch", 0, kInt64Max);
  meta.sampler_offset = sampler.Int("offset", 0, kInt64Max);
  const nlohmann::json& seed = r.Value("seed");
  if (!seed.is_number_unsigned()) {
    r.Fail("seed", "expected an integer from 0 to 2^64 - 1, got " + JsonForMessage(seed));
  }
  meta.seed = seed.get<std::uint64_t>();
  meta.world_size = static_cast<int>(r.Int("world_size", 1));
  meta.parameters = r.Int("parameters", 0, kInt64Max);
  if (format == kFormat) meta.bucket_elements = r.Int("bucket_elements", 0, kInt64Max);
  if (r.Has("data")) {
    JsonObjectReader data = r.Object("data");
    meta.long_documents = data.String("long_documents");
    meta.max_len = data.Int("max_len", 1, kInt64Max);
    meta.held_out_pieces = data.IntOr("held_out_pieces", 0, 0, kInt64Max);
  }
  if (verified) {
    const nlohmann::json& shards = r.Array("shards");
    if (shards.size() != static_cast<std::size_t>(meta.world_size)) {
      r.Fail("shards", "expected one entry per rank (" + std::to_string(meta.world_size) +
                           "), got " + std::to_string(shards.size()));
    }
    for (std::size_t i = 0; i < shards.size(); ++i) {
      JsonObjectReader shard = r.Element("shards", shards, i);
      ShardRecord record;
      record.bytes = shard.Int("bytes", 0, kInt64Max);
      record.xxh3_64 = shard.String("xxh3_64");
      if (!IsHexDigest(record.xxh3_64)) {
        shard.Fail("xxh3_64",
                   "expected 16 lowercase hex digits, got " + QuoteForMessage(record.xxh3_64));
      }
      file.shards.push_back(std::move(record));
    }
  }
  return file;
}

}  // namespace hydraulis
