// Checkpoints of the sharded optimizer: the round trip, damaged files, `latest` and retention.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "hydraulis/base/error.h"
#include "hydraulis/base/file_io.h"
#include "hydraulis/runtime/communication/comm_group.h"
#include "hydraulis/runtime/job/checkpoint.h"
#include "hydraulis/runtime/model/transformer.h"
#include "hydraulis/runtime/step/sharded_optimizer.h"
#include "runtime/testing/rank_harness.h"
#include "runtime/testing/training_equivalence.h"

namespace hydraulis {
namespace {

using test_support::Adam;
using test_support::Tiny;

// Damaged files of the checkpoint at `path` are named when `into` loads it: one flipped bit
// anywhere in the shard, a truncated shard, an edited meta.json. Leaves it as it was.
void ExpectDamageNamed(const std::string& path, ShardedAdamW& into) {
  auto load_error = [&](const std::string& checkpoint) {
    try {
      LoadCheckpoint(checkpoint, into);
    } catch (const InvalidInput& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string shard = path + "/rank-00000.bin";
  const std::string meta_path = path + "/meta.json";
  const std::string pristine_shard = ReadFileText(shard), pristine_meta = ReadFileText(meta_path);
  // One flipped bit anywhere in the shard: the checksum names it.
  for (std::size_t at : {std::size_t{3}, pristine_shard.size() / 2, pristine_shard.size() - 1}) {
    std::string damaged = pristine_shard;
    damaged[at] = static_cast<char>(damaged[at] ^ 0x10);
    WriteFileAtomically(shard, damaged);
    EXPECT_EQ(load_error(path), shard + ": checksum mismatch (damaged shard)") << "byte " << at;
  }
  WriteFileAtomically(shard, pristine_shard.substr(0, pristine_shard.size() - 4));
  EXPECT_NE(load_error(path).find(shard + ": " + std::to_string(pristine_shard.size() - 4) +
                                  " bytes, meta.json recorded"),
            std::string::npos);
  WriteFileAtomically(shard, pristine_shard);
  // meta.json edited (a step of 1000, or -4): its own checksum catches it.
  for (const char* step : {"1000", "-4"}) {
    std::string edited = pristine_meta;
    const std::size_t pos = edited.find("\"step\": 7");
    ASSERT_NE(pos, std::string::npos) << edited;
    edited.replace(pos, 9, std::string("\"step\": ") + step);
    WriteFileAtomically(meta_path, edited);
    EXPECT_NE(load_error(path).find("meta.json: checksum mismatch"), std::string::npos);
  }
  WriteFileAtomically(meta_path, pristine_meta);
  EXPECT_EQ(load_error(path), "no error");
}

// `latest` may only name a checkpoint of `dir` (whose newest is step 9): a path out of it
// (relative or absolute) or a checkpoint that is a link out of it is refused, naming the file.
void ExpectLatestStaysInDirectory(const std::string& dir) {
  const std::string outside = dir + "-outside";
  std::filesystem::create_directories(outside);
  std::filesystem::copy(dir + "/step-00000009", outside + "/step-00000011",
                        std::filesystem::copy_options::recursive);
  auto latest_error = [&](const std::string& pointer) {
    WriteFileAtomically(dir + "/latest", pointer + "\n");
    try {
      LatestCheckpoint(dir);
      return std::string("no error");
    } catch (const InvalidInput& e) {
      return std::string(e.what());
    }
  };
  for (const std::string& pointer :
       {"../" + std::filesystem::path(outside).filename().string() + "/step-00000011",
        outside + "/step-00000011", std::string("step-00000009/.."), std::string("step-9")}) {
    EXPECT_NE(latest_error(pointer).find("not a checkpoint name of this directory"),
              std::string::npos)
        << pointer;
  }
  std::filesystem::create_directory_symlink(outside + "/step-00000011", dir + "/step-00000011");
  EXPECT_NE(latest_error("step-00000011").find("outside the checkpoint directory"),
            std::string::npos);
  EXPECT_EQ(latest_error("step-00000009"), "no error");
  std::filesystem::remove_all(outside);
}

// A checkpoint round-trips the optimizer state; damaged files are named in the error.
TEST(CheckpointTest, RoundTripAndDamagedFiles) {
  DistributedOptions options;
  options.master_port = test_support::FreePort();
  options.timeout = std::chrono::milliseconds(10000);
  Rendezvous rendezvous(options);
  std::unique_ptr<CommGroup> world_ptr = MakeCommGroup(rendezvous, "world");
  CommGroup& world = *world_ptr;
  const ModelConfig c = Tiny();
  ShardedAdamW a(Transformer(c, 11), world, Adam(1e-4));
  a.Step(nullptr);  // zero gradients: moves the weights by weight decay, counts a step
  const std::string dir = ::testing::TempDir() + "/hydraulis_ckpt_" + std::to_string(getpid());
  CheckpointMeta meta;
  meta.step = 7;
  meta.sampler_offset = 42;
  meta.seed = 5;
  SaveCheckpoint(dir, meta, a, c, world);
  const std::optional<std::string> path = LatestCheckpoint(dir);
  ASSERT_TRUE(path.has_value());
  EXPECT_EQ(*path, dir + "/step-00000007");

  ShardedAdamW b(Transformer(c, 12), world, Adam(1e-4));
  const CheckpointMeta loaded = LoadCheckpoint(*path, b);
  EXPECT_EQ(loaded.step, 7);
  EXPECT_EQ(loaded.sampler_offset, 42);
  EXPECT_EQ(loaded.world_size, 1);
  EXPECT_EQ(b.steps(), 1);
  EXPECT_TRUE(at::equal(a.full_parameters(), b.full_parameters()));
  EXPECT_TRUE(at::equal(a.shard_state().exp_avg_sq, b.shard_state().exp_avg_sq));

  ModelConfig bigger = c;
  bigger.shape.layers = 3;
  ShardedAdamW other(Transformer(bigger, 11), world, Adam(1e-4));
  try {
    LoadCheckpoint(*path, other);
    ADD_FAILURE() << "no error";
  } catch (const InvalidInput& e) {
    EXPECT_NE(std::string(e.what()).find("meta.json: parameters"), std::string::npos) << e.what();
  }
  ExpectDamageNamed(*path, b);

  // `latest` deleted while a complete checkpoint exists: never a silent fresh start.
  std::filesystem::remove(dir + "/latest");
  try {
    LatestCheckpoint(dir);
    ADD_FAILURE() << "no error";
  } catch (const InvalidInput& e) {
    EXPECT_NE(std::string(e.what()).find("missing, but 1 complete checkpoint(s) exist (newest "
                                         "step-00000007)"),
              std::string::npos)
        << e.what();
  }
  // Keeping the newest 2: after steps 8 and 9, step 7 is gone.
  for (std::int64_t step : {8, 9}) {
    meta.step = step;
    SaveCheckpoint(dir, meta, a, c, world, 2);
  }
  EXPECT_FALSE(std::filesystem::exists(dir + "/step-00000007"));
  EXPECT_TRUE(std::filesystem::exists(dir + "/step-00000008/meta.json"));
  EXPECT_EQ(*LatestCheckpoint(dir), dir + "/step-00000009");
  // A shard that cannot be written (its name taken by a directory) fails the save on every
  // rank, removes the incomplete checkpoint and leaves `latest` as it was.
  std::filesystem::create_directories(dir + "/step-00000010/rank-00000.bin.tmp");
  meta.step = 10;
  EXPECT_THROW(SaveCheckpoint(dir, meta, a, c, world, 2), IoError);
  EXPECT_FALSE(std::filesystem::exists(dir + "/step-00000010"));
  EXPECT_EQ(*LatestCheckpoint(dir), dir + "/step-00000009");
  ExpectLatestStaysInDirectory(dir);
  std::filesystem::remove_all(dir);
  EXPECT_FALSE(LatestCheckpoint(dir).has_value());
}

}  // namespace
}  // namespace hydraulis
