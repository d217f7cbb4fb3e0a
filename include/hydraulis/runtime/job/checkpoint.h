// Checkpoints of distributed training: the optimizer layout's state (fp32 master weights,
// AdamW moments, step count; every rank writes its own shard) plus where the data stream
// stands, in one directory per checkpoint:
//   DIR/step-00000012/model.json      the model trained (ModelConfigToJson), by rank 0
//   DIR/step-00000012/rank-00003.bin  each rank's shard, written to a temporary and renamed
//   DIR/step-00000012/meta.json       written by rank 0 after every shard is in place
//   DIR/latest                        the name of the newest complete checkpoint (atomic)
// A checkpoint is complete once meta.json exists; `latest` moves only then, so a job killed
// while saving leaves the previous checkpoint as the one to resume from. The shards only
// depend on the world size and the model, not on the compute strategy, so a checkpoint
// loads under any candidate set; on load every rank reads all shards, so it also loads on
// a different number of ranks.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "hydraulis/checkpoint/checkpoint_meta.h"
#include "hydraulis/runtime/step/sharded_optimizer.h"
#include "hydraulis/spec/model_config.h"

namespace hydraulis {

class CommGroup;

// Saves a checkpoint of `optimizer`, which holds the weights of `model`, as step `meta.step`
// under `dir` (created if needed): a collective over `world` (the ranks of the optimizer's world in
// the same order; the trainer passes its Gloo control group, so the agreement on every shard's
// outcome and the closing barrier block the host under NCCL too). meta.json records each shard's
// size and XXH3-64 hash and a checksum of itself. When any rank cannot write its shard (a full
// disk), every rank throws IoError, the incomplete checkpoint is removed and `latest` still names
// the previous one (model.json counts as rank 0's shard here). keep_last > 0 then removes all but
// the newest keep_last complete checkpoints.
// `extra_files` (name, text): further files rank 0 writes into the checkpoint before it is
// sealed, as model.json (the calibration's fit).
void SaveCheckpoint(const std::string& dir, CheckpointMeta meta, const ShardedAdamW& optimizer,
                    const ModelConfig& model, CommGroup& world, int keep_last = 0,
                    const std::vector<std::pair<std::string, std::string>>& extra_files = {});

// The file of a checkpoint that holds the calibration's fit (assign/step_calibration.h).
inline constexpr char kCheckpointCalibrationFile[] = "calibration.json";

// The file in a checkpoint's directory that records its model.
inline constexpr char kCheckpointModelFile[] = "model.json";

// The model recorded in the checkpoint directory `path` (its model.json), or nullopt for a
// checkpoint written before checkpoints recorded their model. InvalidInput naming the file
// when it does not parse (ParseModelConfig).
std::optional<ModelConfig> CheckpointModel(const std::string& path);

// The directory of the newest complete checkpoint under `dir`, or nullopt when there is none.
// InvalidInput when `latest` is missing but complete checkpoints exist (never silently
// start from scratch) or names something that is not a complete checkpoint.
std::optional<std::string> LatestCheckpoint(const std::string& dir);

// Checks the checkpoint directory `path` as LoadCheckpoint does before reading tensors:
// meta.json, then every shard present, of the recorded size and checksum, with a header that
// matches. For a launcher, before any rank starts: InvalidInput naming the file as
// LoadCheckpoint would. Reads every shard once (the checksum).
void VerifyCheckpoint(const std::string& path);

// Loads the checkpoint directory `path` (as LatestCheckpoint returns) into `optimizer` and
// returns its meta. Not a collective: every rank reads every shard. InvalidInput naming the
// file on a missing, truncated, damaged (checksum) or inconsistent shard, an edited
// meta.json (its checksum, a step that is not its directory's), or a model of another size.
CheckpointMeta LoadCheckpoint(const std::string& path, ShardedAdamW& optimizer);

}  // namespace hydraulis
