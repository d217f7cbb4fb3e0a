// A checkpoint's meta.json (docs/runtime.md, "Checkpoints"): where training stands and the
// size and XXH3-64 hash of every rank's shard, sealed by a checksum over its own fields.
// Torch-free, so the parser is fuzzed (fuzz/) and tested without the runtime.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace hydraulis {

// What besides the optimizer a run needs to continue exactly where it stopped.
struct CheckpointMeta {
  std::int64_t step = 0;  // steps completed
  std::int64_t sampler_epoch = 0;
  std::int64_t sampler_offset = 0;
  std::uint64_t seed = 0;
  int world_size = 0;           // ranks that wrote the shards
  std::int64_t parameters = 0;  // elements of the flat parameter vector (checked on load)
  // The shards' bucket size (runtime/shard_layout.h); 0: one bucket, as in the formats
  // before buckets.
  std::int64_t bucket_elements = 0;
  // What the sampler's position counts (runtime/job/training_run.h): the long-document rule
  // ("split", "truncate" or "reject") and the context length, which make the pieces. "" and
  // 0 in checkpoints written before pieces existed, which sampled as "truncate" does.
  std::string long_documents;
  std::int64_t max_len = 0;
  // Pieces at the end of the data held out of training for evaluation (train --eval-every
  // without --eval-data): the sampler draws from the others. 0 when none (or not recorded).
  std::int64_t held_out_pieces = 0;
};

// One rank's shard file as meta.json records it.
struct ShardRecord {
  std::int64_t bytes = 0;
  std::string xxh3_64;  // 16 lowercase hex digits
};

// meta.json as read. `shards` is empty for the old format without checksums
// (hydraulis.checkpoint/1), whose shards load unverified; /1 and /2 have no buckets.
struct CheckpointMetaFile {
  CheckpointMeta meta;
  std::vector<ShardRecord> shards;
  bool verified() const { return !shards.empty(); }
};

// "step-00000012": the directory of the checkpoint after `step` steps.
std::string StepDirName(std::int64_t step);

// Whether `name` is a name StepDirName writes ("step-" and at least 8 digits, nothing
// else): what a checkpoint directory's `latest` may hold, so it can never point elsewhere.
bool IsStepDirName(std::string_view name);

// 16 lowercase hex digits.
std::string HexDigest(std::uint64_t hash);

// meta.json's text (format hydraulis.checkpoint/3) with one record per rank and its checksum.
std::string CheckpointMetaToJson(const CheckpointMeta& meta,
                                 const std::vector<ShardRecord>& shards);

// Parses and validates meta.json read from `meta_path` inside the directory named
// `dir_name`. InvalidInput naming meta_path and the field: invalid JSON, an unknown format,
// a checksum that does not match (edited or damaged), a missing or mistyped field, a step
// that is negative or not the directory's, a negative sampler position, world_size < 1,
// parameters < 0, bucket_elements < 0 (format /3), not one shard record per rank, a record
// with negative bytes or a hash that is not 16 hex digits.
CheckpointMetaFile ParseCheckpointMeta(const std::string& text, const std::string& meta_path,
                                       const std::string& dir_name);

}  // namespace hydraulis
