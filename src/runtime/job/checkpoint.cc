#include "hydraulis/runtime/job/checkpoint.h"

#define XXH_INLINE_ALL  // header-only xxHash (Debian's libxxhash-dev)
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "hydraulis/base/error.h"
#include "hydraulis/base/file_io.h"
#include "hydraulis/base/internal/json_text.h"
#include "hydraulis/runtime/communication/comm_group.h"

namespace hydraulis {
namespace {

namespace fs = std::filesystem;

constexpr char kMagic[8] = {'H', 'Y', 'D', 'C', 'K', 'P', 'T', '1'};

std::string Padded(std::int64_t value, int width) {
  std::string text = std::to_string(value);
  return std::string(static_cast<std::size_t>(std::max(0, width - static_cast<int>(text.size()))),
                     '0') +
         text;
}

std::string ShardPath(const std::string& step_dir, int rank) {
  return step_dir + "/rank-" + Padded(rank, 5) + ".bin";
}

// Shard file: magic, then int64 world_size, rank, parameters, shard_numel, steps, then the
// master weights, exp_avg and exp_avg_sq of the shard (float32, shard_numel each).
struct ShardHeader {
  std::int64_t world_size, rank, parameters, shard_numel, steps;
};

// What writing a shard gave: its size and XXH3-64 hash, or the reason it failed.
struct WrittenShard {
  bool ok = false;
  std::int64_t bytes = 0;
  std::uint64_t hash = 0;
  std::string error;
};

// Writes the shard to `path` + ".tmp" hashing every byte, then renames it; on failure
// removes the temporary and says why (a full disk must not leave a half shard behind).
WrittenShard WriteShard(const std::string& path, const ShardHeader& header,
                        const ShardedAdamW::ShardState& state) {
  WrittenShard w;
  const std::string tmp = path + ".tmp";
  std::FILE* out = std::fopen(tmp.c_str(), "wb");
  if (out == nullptr) {
    w.error = tmp + ": cannot create: " + std::strerror(errno);
    return w;
  }
  XXH3_state_t* hasher = XXH3_createState();
  XXH3_64bits_reset(hasher);
  bool ok = true;
  auto put = [&](const void* data, std::size_t size) {
    if (!ok) return;
    ok = std::fwrite(data, 1, size, out) == size;
    XXH3_64bits_update(hasher, data, size);
    w.bytes += static_cast<std::int64_t>(size);
  };
  put(kMagic, sizeof(kMagic));
  put(&header, sizeof(header));
  for (const at::Tensor* t : {&state.master, &state.exp_avg, &state.exp_avg_sq}) {
    const at::Tensor c = t->contiguous().cpu();
    put(c.data_ptr<float>(), static_cast<std::size_t>(c.numel()) * sizeof(float));
  }
  const int write_errno = errno;
  ok = ok && std::fflush(out) == 0;
  ok = (std::fclose(out) == 0) && ok;
  w.hash = XXH3_64bits_digest(hasher);
  XXH3_freeState(hasher);
  if (!ok) {
    w.error = tmp + ": write failed: " + std::strerror(write_errno != 0 ? write_errno : errno);
    std::remove(tmp.c_str());
    return w;
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    w.error = "cannot rename " + tmp + " to " + path + ": " + ec.message();
    std::remove(tmp.c_str());
    return w;
  }
  w.ok = true;
  return w;
}

// XXH3-64 of a whole file, streamed.
std::uint64_t HashFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  XXH3_state_t* hasher = XXH3_createState();
  XXH3_64bits_reset(hasher);
  std::vector<char> buffer(1 << 20);
  while (in) {
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    XXH3_64bits_update(hasher, buffer.data(), static_cast<std::size_t>(in.gcount()));
  }
  const std::uint64_t hash = XXH3_64bits_digest(hasher);
  XXH3_freeState(hasher);
  return hash;
}

// Complete checkpoints (a meta.json inside) under `dir`, oldest first.
std::vector<std::string> CompleteCheckpoints(const std::string& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("step-", 0) == 0 && fs::exists(entry.path() / "meta.json")) {
      names.push_back(name);
    }
  }
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace

void SaveCheckpoint(const std::string& dir, CheckpointMeta meta, const ShardedAdamW& optimizer,
                    const ModelConfig& model, CommGroup& world, int keep_last,
                    const std::vector<std::pair<std::string, std::string>>& extra_files) {
  const std::string name = StepDirName(meta.step);
  const std::string step_dir = dir + "/" + name;
  std::error_code ec;
  fs::create_directories(step_dir, ec);
  const ShardedAdamW::ShardState state = optimizer.shard_state();
  const ShardHeader header{world.size(), world.rank(), optimizer.layout().numel,
                           optimizer.shard_layout().shard_numel, state.steps};
  WrittenShard mine;
  if (ec) {
    mine.error = "cannot create " + step_dir + ": " + ec.message();
  } else {
    try {
      // Before meta.json, which seals the checkpoint: a complete one names its model.
      if (world.rank() == 0) {
        WriteFileAtomically(step_dir + "/" + kCheckpointModelFile, ModelConfigToJson(model));
        for (const auto& [file, text] : extra_files)
          WriteFileAtomically(step_dir + "/" + file, text);
      }
      mine = WriteShard(ShardPath(step_dir, world.rank()), header, state);
    } catch (const Error& e) {  // IoError, or InvalidInput for a directory in the way
      mine.error = e.what();
    }
  }
  // Every rank learns every shard's outcome, size and hash, so all stop alike on a failed
  // write and rank 0 can record the checksums.
  at::Tensor gathered = at::empty({3 * world.size()}, at::kLong);
  world.AllGather(at::tensor({static_cast<std::int64_t>(mine.ok), mine.bytes,
                              static_cast<std::int64_t>(mine.hash)},
                             at::kLong),
                  gathered);
  int failed = -1;  // the first rank whose shard was not written
  for (int r = world.size() - 1; r >= 0; --r) {
    if (gathered[3 * r].item<std::int64_t>() == 0) failed = r;
  }
  if (failed >= 0) {
    // Every rank learns the first failed rank's own message, so whichever rank reports the
    // failure (a launcher shows the first rank to exit) names its cause ("No space left on
    // device"), not "rank 0 could not write".
    constexpr std::int64_t kMessageBytes = 512;
    at::Tensor message = at::zeros({kMessageBytes}, at::kByte);
    std::memcpy(message.data_ptr(), mine.error.data(),
                std::min<std::size_t>(mine.error.size(), kMessageBytes - 1));
    at::Tensor messages = at::empty({kMessageBytes * world.size()}, at::kByte);
    world.AllGather(message, messages);
    if (world.rank() == 0) fs::remove_all(step_dir, ec);  // an incomplete checkpoint
    const char* text = reinterpret_cast<const char*>(messages.data_ptr()) + kMessageBytes * failed;
    throw IoError("checkpoint " + step_dir + ": rank " + std::to_string(failed) + ": " + text +
                  "; the previous checkpoint stays the newest");
  }
  if (world.rank() == 0) {
    meta.world_size = world.size();
    meta.parameters = optimizer.layout().numel;
    meta.bucket_elements = optimizer.shard_layout().bucket_elements;
    std::vector<ShardRecord> shards;
    for (int r = 0; r < world.size(); ++r) {
      shards.push_back(
          {gathered[3 * r + 1].item<std::int64_t>(),
           HexDigest(static_cast<std::uint64_t>(gathered[3 * r + 2].item<std::int64_t>()))});
    }
    WriteFileAtomically(step_dir + "/meta.json", CheckpointMetaToJson(meta, shards));
    WriteFileAtomically(dir + "/latest", name + "\n");
    if (keep_last > 0) {
      const std::vector<std::string> complete = CompleteCheckpoints(dir);
      for (std::size_t i = 0; i + static_cast<std::size_t>(keep_last) < complete.size(); ++i) {
        if (complete[i] != name) fs::remove_all(dir + "/" + complete[i], ec);
      }
    }
  }
  world.Barrier();
}

std::optional<std::string> LatestCheckpoint(const std::string& dir) {
  const std::string latest = dir + "/latest";
  if (!fs::exists(latest)) {
    const std::vector<std::string> complete = CompleteCheckpoints(dir);
    if (!complete.empty()) {
      throw InvalidInput(latest + ": missing, but " + std::to_string(complete.size()) +
                         " complete checkpoint(s) exist (newest " + complete.back() +
                         "); restore it (echo " + complete.back() + " > " + latest +
                         ") or use another checkpoint directory to start from scratch");
    }
    return std::nullopt;
  }
  std::string name = ReadFileText(latest);
  while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
  // The pointer names a checkpoint of this directory by the writer's name format, and that
  // checkpoint resolves inside the directory: no `..`, absolute path or symbolic link may
  // make a resume read another directory's checkpoint.
  if (!IsStepDirName(name)) {
    throw InvalidInput(latest + ": holds " + QuoteForMessage(name) +
                       ", not a checkpoint name of this directory (step-NNNNNNNN)");
  }
  const std::string path = dir + "/" + name;
  std::error_code ec;
  const fs::path resolved = fs::canonical(path, ec);
  if (!ec && resolved.parent_path() != fs::canonical(dir, ec)) {
    throw InvalidInput(path + ": resolves to " + QuoteForMessage(resolved.string(), 200) +
                       ", outside the checkpoint directory; refusing to resume from it");
  }
  if (!fs::exists(path + "/meta.json")) {
    throw InvalidInput(latest + ": names " + QuoteForMessage(name) +
                       ", which is not a complete checkpoint");
  }
  return path;
}

std::optional<ModelConfig> CheckpointModel(const std::string& path) {
  const std::string model_path = path + "/" + kCheckpointModelFile;
  if (!fs::exists(model_path)) return std::nullopt;
  return ParseModelConfig(ReadFileText(model_path), model_path);
}

namespace {

// A checkpoint's meta.json and the shard layout it records; InvalidInput naming the file.
struct OpenedCheckpoint {
  CheckpointMetaFile meta_file;
  OptimizerShardLayout layout;
};
OpenedCheckpoint OpenCheckpoint(const std::string& path) {
  const std::string meta_path = path + "/meta.json";
  CheckpointMetaFile meta_file =
      ParseCheckpointMeta(ReadFileText(meta_path), meta_path, fs::path(path).filename().string());
  const CheckpointMeta& meta = meta_file.meta;
  try {
    OptimizerShardLayout layout =
        MakeOptimizerShardLayout(meta.parameters, meta.world_size, meta.bucket_elements);
    return {std::move(meta_file), std::move(layout)};
  } catch (const InvalidInput& e) {
    throw InvalidInput(meta_path + ": " + e.what());
  }
}

// Opens shard `r` of checkpoint `path`, checks its size and checksum against meta.json and
// its header against the layout, and leaves `in` at its first tensor. `steps` is the step
// count of the shards read before (-1: none); returns this shard's.
std::int64_t OpenShard(const std::string& path, int r, const OpenedCheckpoint& c,
                       std::int64_t steps, std::ifstream& in) {
  const CheckpointMetaFile& meta_file = c.meta_file;
  const CheckpointMeta& meta = meta_file.meta;
  const std::string shard_path = ShardPath(path, r);
  in.open(shard_path, std::ios::binary);
  if (!in) throw InvalidInput(shard_path + ": cannot open (checkpoint shard missing)");
  if (meta_file.verified()) {
    const ShardRecord& record = meta_file.shards[static_cast<std::size_t>(r)];
    std::error_code ec;
    const auto bytes = static_cast<std::int64_t>(fs::file_size(shard_path, ec));
    if (bytes != record.bytes) {
      throw InvalidInput(shard_path + ": " + std::to_string(bytes) + " bytes, meta.json recorded " +
                         std::to_string(record.bytes) + " (truncated or damaged shard)");
    }
    if (HexDigest(HashFile(shard_path)) != record.xxh3_64) {
      throw InvalidInput(shard_path + ": checksum mismatch (damaged shard)");
    }
  }
  char magic[sizeof(kMagic)];
  ShardHeader h{};
  in.read(magic, sizeof(magic));
  in.read(reinterpret_cast<char*>(&h), sizeof(h));
  if (!in || std::memcmp(magic, kMagic, sizeof(kMagic)) != 0) {
    throw InvalidInput(shard_path + ": not a hydraulis checkpoint shard (bad header)");
  }
  if (h.world_size != meta.world_size || h.rank != r || h.parameters != meta.parameters ||
      h.shard_numel != c.layout.shard_numel || (steps >= 0 && h.steps != steps) || h.steps < 0 ||
      h.steps > meta.step) {
    throw InvalidInput(shard_path +
                       ": header does not match meta.json (world_size, rank, parameters, "
                       "shard size or steps)");
  }
  return h.steps;
}

}  // namespace

void VerifyCheckpoint(const std::string& path) {
  const OpenedCheckpoint c = OpenCheckpoint(path);
  std::int64_t steps = -1;
  for (int r = 0; r < c.meta_file.meta.world_size; ++r) {
    std::ifstream in;
    steps = OpenShard(path, r, c, steps, in);
  }
}

CheckpointMeta LoadCheckpoint(const std::string& path, ShardedAdamW& optimizer) {
  const OpenedCheckpoint c = OpenCheckpoint(path);
  const CheckpointMeta& meta = c.meta_file.meta;
  const OptimizerShardLayout& layout = c.layout;
  if (meta.parameters != optimizer.layout().numel) {
    throw InvalidInput(path + "/meta.json: parameters: the checkpoint holds " +
                       std::to_string(meta.parameters) + " parameters, this model has " +
                       std::to_string(optimizer.layout().numel) + " (another model config?)");
  }
  const at::TensorOptions fp32 = at::TensorOptions().dtype(at::kFloat);
  std::vector<at::Tensor> master, exp_avg, exp_avg_sq;
  std::int64_t steps = -1;
  for (int r = 0; r < meta.world_size; ++r) {
    const std::string shard_path = ShardPath(path, r);
    std::ifstream in;
    steps = OpenShard(path, r, c, steps, in);
    for (std::vector<at::Tensor>* out : {&master, &exp_avg, &exp_avg_sq}) {
      at::Tensor t = at::empty({layout.shard_numel}, fp32);
      in.read(reinterpret_cast<char*>(t.data_ptr<float>()),
              static_cast<std::streamsize>(layout.shard_numel *
                                           static_cast<std::int64_t>(sizeof(float))));
      if (!in) throw InvalidInput(shard_path + ": truncated");
      out->push_back(t);
    }
    if (in.peek() != std::char_traits<char>::eof()) {
      throw InvalidInput(shard_path + ": trailing bytes after the shard");
    }
  }
  auto whole = [&](const std::vector<at::Tensor>& shards) {
    return layout.Unshard(shards, meta.parameters);
  };
  optimizer.LoadFullState(whole(master), whole(exp_avg), whole(exp_avg_sq), steps);
  return meta;
}

}  // namespace hydraulis
