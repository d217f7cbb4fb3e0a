#include "hydraulis/runtime/checkpoint.h"

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "hydraulis/base/error.h"
#include "hydraulis/base/file_io.h"
#include "hydraulis/base/json_text.h"
#include "hydraulis/runtime/distributed.h"

namespace hydraulis {
namespace {

namespace fs = std::filesystem;

constexpr char kMagic[8] = {'H', 'Y', 'D', 'C', 'K', 'P', 'T', '1'};
constexpr char kFormat[] = "hydraulis.checkpoint/1";

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

void WriteShard(const std::string& path, const ShardHeader& header,
                const ShardedAdamW::ShardState& state) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(kMagic, sizeof(kMagic));
    out.write(reinterpret_cast<const char*>(&header), sizeof(header));
    for (const at::Tensor* t : {&state.master, &state.exp_avg, &state.exp_avg_sq}) {
      const at::Tensor c = t->contiguous();
      out.write(reinterpret_cast<const char*>(c.data_ptr<float>()),
                static_cast<std::streamsize>(c.numel() * static_cast<std::int64_t>(sizeof(float))));
    }
    out.flush();
    if (!out) throw Error("checkpoint: cannot write " + tmp);
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) throw Error("checkpoint: cannot rename " + tmp + " to " + path + ": " + ec.message());
}

}  // namespace

void SaveCheckpoint(const std::string& dir, CheckpointMeta meta, const ShardedAdamW& optimizer,
                    CommGroup& world) {
  const std::string name = "step-" + Padded(meta.step, 8);
  const std::string step_dir = dir + "/" + name;
  std::error_code ec;
  fs::create_directories(step_dir, ec);
  if (ec) throw Error("checkpoint: cannot create " + step_dir + ": " + ec.message());
  const ShardedAdamW::ShardState state = optimizer.shard_state();
  const ShardHeader header{world.size(), world.rank(), optimizer.layout().numel,
                           optimizer.shard_numel(), state.steps};
  WriteShard(ShardPath(step_dir, world.rank()), header, state);
  // meta.json and `latest` only once every shard is in place.
  world.Barrier();
  if (world.rank() == 0) {
    meta.world_size = world.size();
    meta.parameters = optimizer.layout().numel;
    nlohmann::json j;
    j["format"] = kFormat;
    j["step"] = meta.step;
    j["sampler"] = {{"epoch", meta.sampler_epoch}, {"offset", meta.sampler_offset}};
    j["seed"] = meta.seed;
    j["world_size"] = meta.world_size;
    j["parameters"] = meta.parameters;
    WriteFileAtomically(step_dir + "/meta.json", j.dump(2) + "\n");
    WriteFileAtomically(dir + "/latest", name + "\n");
  }
  world.Barrier();
}

std::optional<std::string> LatestCheckpoint(const std::string& dir) {
  const std::string latest = dir + "/latest";
  if (!fs::exists(latest)) return std::nullopt;
  std::string name = ReadFileText(latest);
  while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
  const std::string path = dir + "/" + name;
  if (name.empty() || !fs::exists(path + "/meta.json")) {
    throw InvalidInput(latest + ": names '" + name + "', which is not a complete checkpoint");
  }
  return path;
}

CheckpointMeta LoadCheckpoint(const std::string& path, ShardedAdamW& optimizer) {
  const std::string meta_path = path + "/meta.json";
  const nlohmann::json j = ParseJson(ReadFileText(meta_path), meta_path);
  CheckpointMeta meta;
  try {
    if (j.at("format").get<std::string>() != kFormat) {
      throw InvalidInput(meta_path + ": format: expected " + std::string(kFormat));
    }
    meta.step = j.at("step").get<std::int64_t>();
    meta.sampler_epoch = j.at("sampler").at("epoch").get<std::int64_t>();
    meta.sampler_offset = j.at("sampler").at("offset").get<std::int64_t>();
    meta.seed = j.at("seed").get<std::uint64_t>();
    meta.world_size = j.at("world_size").get<int>();
    meta.parameters = j.at("parameters").get<std::int64_t>();
  } catch (const nlohmann::json::exception& e) {
    throw InvalidInput(meta_path + ": " + e.what());
  }
  if (meta.parameters != optimizer.layout().numel) {
    throw InvalidInput(meta_path + ": parameters: the checkpoint holds " +
                       std::to_string(meta.parameters) + " parameters, this model has " +
                       std::to_string(optimizer.layout().numel) + " (another model config?)");
  }
  if (meta.world_size < 1) throw InvalidInput(meta_path + ": world_size: must be >= 1");
  const at::TensorOptions fp32 = at::TensorOptions().dtype(at::kFloat);
  std::vector<at::Tensor> master, exp_avg, exp_avg_sq;
  std::int64_t steps = -1;
  for (int r = 0; r < meta.world_size; ++r) {
    const std::string file = ShardPath(path, r);
    std::ifstream in(file, std::ios::binary);
    if (!in) throw InvalidInput(file + ": cannot open (checkpoint shard missing)");
    char magic[sizeof(kMagic)];
    ShardHeader h{};
    in.read(magic, sizeof(magic));
    in.read(reinterpret_cast<char*>(&h), sizeof(h));
    if (!in || std::memcmp(magic, kMagic, sizeof(kMagic)) != 0) {
      throw InvalidInput(file + ": not a hydraulis checkpoint shard (bad header)");
    }
    if (h.world_size != meta.world_size || h.rank != r || h.parameters != meta.parameters ||
        h.shard_numel * h.world_size < h.parameters || (steps >= 0 && h.steps != steps)) {
      throw InvalidInput(file +
                         ": header does not match meta.json (world_size, rank, "
                         "parameters or steps)");
    }
    steps = h.steps;
    for (std::vector<at::Tensor>* out : {&master, &exp_avg, &exp_avg_sq}) {
      at::Tensor t = at::empty({h.shard_numel}, fp32);
      in.read(
          reinterpret_cast<char*>(t.data_ptr<float>()),
          static_cast<std::streamsize>(h.shard_numel * static_cast<std::int64_t>(sizeof(float))));
      if (!in) throw InvalidInput(file + ": truncated");
      out->push_back(t);
    }
    if (in.peek() != std::char_traits<char>::eof()) {
      throw InvalidInput(file + ": trailing bytes after the shard");
    }
  }
  auto whole = [&](const std::vector<at::Tensor>& shards) {
    return at::cat(shards).slice(0, 0, meta.parameters);
  };
  optimizer.LoadFullState(whole(master), whole(exp_avg), whole(exp_avg_sq), steps);
  return meta;
}

}  // namespace hydraulis
