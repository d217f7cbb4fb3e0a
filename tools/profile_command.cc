// `hydraulis profile`: fits the planner's cost model (method.md 2.1) on this engine. For each
// scheme (tp x pp) it times forward+backward of one pipeline stage on single documents and
// packed micro-batches (StageProfiler), fits T(mb) = sum_i (a s_i^2 + b s_i) + c by
// non-negative least squares, and writes a profile in the project's format with the
// engine's analytic memory model (docs/runtime.md, "Profiler"). Schemes with tp > 1 need tp
// ranks: with --nproc N it starts N ranks of itself (as train does), otherwise it joins a
// torchrun-style job, or runs as one process when every scheme has tp = 1.
#include <ATen/Parallel.h>
#include <fmt/core.h>

#include <unistd.h>
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "commands.h"
#include "hydraulis/base/error.h"
#include "hydraulis/base/file_io.h"
#include "hydraulis/cost/capacity.h"
#include "hydraulis/cost/time_fit.h"
#include "hydraulis/data/lengths.h"
#include "hydraulis/runtime/communication/comm_group.h"
#include "hydraulis/runtime/job/profile_ranks.h"
#include "hydraulis/runtime/job/stage_profiler.h"
#include "hydraulis/runtime/model/transformer.h"
#include "hydraulis/spec/model_config.h"
#include "hydraulis/spec/spec_io.h"
#include "launcher.h"
#include "number_flags.h"

namespace hydraulis::tools {
namespace {

struct ProfileArgs {
  std::string model;
  std::string schemes = "1x1";
  std::string lengths = "data/wikipedia-sample-lengths.txt";
  std::string output;
  std::string samples_json;
  int nproc = 0;
  std::int64_t max_len = 2048;
  std::int64_t min_len = 32;
  int packed = 8;
  int warmup = 1;
  int repeats = 3;
  // The A800's 80 GB as the published profiles give it: the GPU the planner plans for.
  std::int64_t memory_bytes = 85198897152;
  std::uint64_t seed = 1;
  int master_port = 0;
  double timeout_s = 1800;
};

// A micro-batch whose fixed cost c is at most this share of its time keeps the device busy
// (the profile's informational utilization_tokens).
constexpr double kUtilizationOverheadShare = 0.1;

// What the profile is measured under, set before the process starts because OpenBLAS and
// glibc read them when they load: one BLAS thread per rank (tp ranks share the cores), and a
// malloc that keeps freed memory (no mmap of its own per large tensor, no returning of the
// heap to the kernel), as a GPU's caching allocator keeps device memory. Without the latter
// every large tensor is page-faulted afresh: on this machine that made long micro-batches
// up to 2x slower and the fit's worst error 40% instead of 10-20%, i.e. the profile
// measured the kernel rather than the engine. Training should run under the same settings
// (docs/runtime.md, "Profiler").
constexpr std::pair<const char*, const char*> kTimingEnvironment[] = {
    {"OMP_NUM_THREADS", "1"},
    {"OPENBLAS_NUM_THREADS", "1"},
    {"GLIBC_TUNABLES", kAllocatorTunables},
};

bool HasTimingEnvironment() {
  for (const auto& [name, value] : kTimingEnvironment) {
    const char* current = std::getenv(name);
    if (current == nullptr || std::string(current) != value) return false;
  }
  return true;
}

void SetTimingEnvironment() {
  for (const auto& [name, value] : kTimingEnvironment) setenv(name, value, 1);
}

// Re-executes this command with kTimingEnvironment (once: the new process has it). Returns
// only when that fails, after a warning; the profile is then measured as things are.
void RestartWithTimingEnvironment() {
  SetTimingEnvironment();
  std::vector<std::string> args = CommandLine();
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  execv("/proc/self/exe", argv.data());
  fmt::print(stderr, "hydraulis: warning: could not restart with {}=1 and {}: {}\n",
             kTimingEnvironment[0].first, kTimingEnvironment[2].first, std::strerror(errno));
}

// "1x1,2x1" -> schemes (tp x pp), in the given order. InvalidInput naming --schemes.
std::vector<Scheme> ParseSchemes(const std::string& text) {
  std::vector<Scheme> out;
  std::size_t begin = 0;
  while (begin <= text.size()) {
    std::size_t end = text.find(',', begin);
    if (end == std::string::npos) end = text.size();
    const std::string item = text.substr(begin, end - begin);
    const std::size_t x = item.find('x');
    Scheme s;
    try {
      if (x == std::string::npos || x == 0 || x + 1 == item.size()) throw std::invalid_argument("");
      std::size_t used = 0;
      s.tp = std::stoi(item.substr(0, x), &used);
      if (used != x) throw std::invalid_argument("");
      s.pp = std::stoi(item.substr(x + 1), &used);
      if (used != item.size() - x - 1) throw std::invalid_argument("");
    } catch (const std::exception&) {
      throw InvalidInput("--schemes: " + QuoteForMessage(item) + " is not TPxPP (e.g. 2x1)");
    }
    if (s.tp < 1 || s.pp < 1) {
      throw InvalidInput("--schemes: " + QuoteForMessage(item) + ": tp and pp must be >= 1");
    }
    if (std::find(out.begin(), out.end(), s) != out.end()) {
      throw InvalidInput("--schemes: " + QuoteForMessage(item) + " is listed twice");
    }
    out.push_back(s);
    begin = end + 1;
  }
  return out;
}

// The smallest aligned micro-batch whose fixed cost is at most kUtilizationOverheadShare
// of its time under `m` (one document of s tokens: a s^2 + b s >= c (1 - share) / share).
int UtilizationTokens(const TimeModel& m) {
  const double need = m.c_ms * (1 - kUtilizationOverheadShare) / kUtilizationOverheadShare;
  double s = 0;
  if (m.a_ms_per_token2 > 0) {
    const double a = m.a_ms_per_token2, b = m.b_ms_per_token;
    s = (-b + std::sqrt(b * b + 4 * a * need)) / (2 * a);
  } else if (m.b_ms_per_token > 0) {
    s = need / m.b_ms_per_token;
  }
  const double aligned = std::ceil(std::max(s, 1.0) / kTokenAlignment) * kTokenAlignment;
  return static_cast<int>(std::min(aligned, 1e9));
}

// Profiling takes minutes: a file that cannot be written should fail before, not after.
void RequireFolderOf(const std::string& path, const std::string& flag) {
  const std::filesystem::path folder = std::filesystem::path(path).parent_path();
  std::error_code error;
  if (!folder.empty() && !std::filesystem::is_directory(folder, error)) {
    throw InvalidInput(flag + ": folder " + folder.string() + " of " + path + " does not exist");
  }
}

int RunProfile(const ProfileArgs& a) {
  const std::vector<Scheme> schemes = ParseSchemes(a.schemes);
  const ModelConfig model = LoadModelConfig(a.model);
  int max_tp = 1;
  std::set<int> tps;
  for (const Scheme& s : schemes) {
    try {
      ValidateTensorParallel(model, s.tp);
      ModelPart::Stage(model, 0, s.pp);
    } catch (const InvalidInput& e) {
      throw InvalidInput("--schemes: " + std::to_string(s.tp) + "x" + std::to_string(s.pp) +
                         " does not split " + a.model + ": " + e.what());
    }
    max_tp = std::max(max_tp, s.tp);
    tps.insert(s.tp);
  }
  if (a.nproc > 0 && a.nproc < max_tp) {
    throw InvalidInput("--nproc: " + std::to_string(a.nproc) +
                       " cannot run tp = " + std::to_string(max_tp) + " (it needs at least " +
                       std::to_string(max_tp) + " ranks)");
  }
  if (a.memory_bytes <= 0) throw InvalidInput("--memory-bytes: must be > 0");
  {
    // Before minutes of timing: a budget that cannot hold one aligned micro-batch beside
    // the parameters and optimizer state would write a profile of capacity 0.
    const char* env_world = std::getenv("WORLD_SIZE");
    const int ranks = a.nproc > 0 ? a.nproc : (env_world != nullptr ? std::atoi(env_world) : 1);
    Profile probe;
    probe.model = model.shape;
    probe.cluster.gpus_per_node = std::max(1, ranks);
    probe.cluster.gpu_memory_bytes = a.memory_bytes;
    probe.memory = EngineMemoryModel(model, std::vector<int>(tps.begin(), tps.end()));
    for (const Scheme& s : schemes) {
      if (CapacityTokens(probe, s, OptimizerLayout{std::max(1, ranks), 1, 1}) <= 0) {
        throw InvalidInput("--memory-bytes " + std::to_string(a.memory_bytes) + ": scheme " +
                           SchemeName(s) + " cannot hold a micro-batch of " +
                           std::to_string(kTokenAlignment) +
                           " tokens beside the model's parameters and optimizer state; give "
                           "more memory");
      }
    }
  }
  if (a.nproc > 0 && !IsLaunchedRank()) {
    SetTimingEnvironment();  // the ranks inherit it
    return LaunchSelf(CommandLine(), a.nproc, a.master_port);
  }
  if (!HasTimingEnvironment()) RestartWithTimingEnvironment();
  const bool distributed = a.nproc > 0 || std::getenv("RANK") != nullptr;
  if (!distributed && max_tp > 1) {
    throw InvalidInput("--schemes: tp = " + std::to_string(max_tp) + " needs " +
                       std::to_string(max_tp) + " ranks: give --nproc " + std::to_string(max_tp) +
                       " (or run under torchrun)");
  }
  if (a.memory_bytes <= 0) throw InvalidInput("--memory-bytes: must be > 0");
  // One intra-op thread per rank: the profile describes one rank's compute, not the host's.
  at::set_num_threads(1);

  RequireFolderOf(a.output, "--output");
  if (!a.samples_json.empty()) RequireFolderOf(a.samples_json, "--samples-json");
  std::vector<std::int64_t> pool;
  try {
    pool = ReadLengths(a.lengths);
  } catch (const InvalidInput& e) {
    throw InvalidInput(std::string("--lengths: ") + e.what());
  }
  ProfileBatchOptions batch_options;
  batch_options.min_len = std::min(a.min_len, a.max_len);
  batch_options.max_len = a.max_len;
  batch_options.packed = a.packed;
  batch_options.seed = a.seed;
  const std::vector<std::vector<std::int64_t>> batches = ProfileMicroBatches(pool, batch_options);
  StageProfileOptions options;
  options.warmup = a.warmup;
  options.repeats = a.repeats;
  options.seed = a.seed;

  std::unique_ptr<ProfileRanks> ranks;
  int rank = 0;
  int world_size = 1;
  if (distributed) {
    DistributedOptions dist = DistributedOptionsFromEnvironment();
    dist.timeout = std::chrono::milliseconds(static_cast<std::int64_t>(a.timeout_s * 1000));
    if (a.nproc > 0 && dist.world_size != a.nproc) {
      throw InvalidInput("profile: WORLD_SIZE " + std::to_string(dist.world_size) + " != --nproc " +
                         std::to_string(a.nproc));
    }
    ranks = std::make_unique<ProfileRanks>(dist, tps);
    rank = ranks->rank();
    world_size = ranks->world_size();
  }

  const bool chief = rank == 0;
  std::vector<TimeFit> fits;
  nlohmann::ordered_json raw = nlohmann::ordered_json::array();
  for (const Scheme& s : schemes) {
    if (ranks == nullptr || ranks->Runs(s.tp)) {
      const auto start = std::chrono::steady_clock::now();
      CommGroup* group = ranks == nullptr ? nullptr : ranks->TensorParallelGroup(s.tp);
      const std::vector<TimeSample> samples = ProfileStage(model, s.pp, group, batches, options);
      if (chief) {
        fits.push_back(FitTimeModel(samples));
        nlohmann::ordered_json entry = {{"tp", s.tp}, {"pp", s.pp}};
        entry["samples"] = nlohmann::ordered_json::array();
        for (const TimeSample& t : samples) {
          entry["samples"].push_back({{"lengths", t.lengths},
                                      {"ms", t.ms},
                                      {"fitted_ms", fits.back().model.MicroBatchMs(t.lengths)}});
        }
        raw.push_back(entry);
        const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
        fmt::print(stderr, "profiled {}: {} micro-batches in {:.0f} s\n", SchemeName(s),
                   samples.size(), took.count());
      }
    }
    // Ranks outside every full block wait here; rank 0's block's samples are kept.
    if (ranks) ranks->Barrier();
  }

  if (chief) {
    Profile profile;
    profile.model = model.shape;
    profile.cluster.gpus_per_node = world_size;
    profile.cluster.gpu_memory_bytes = a.memory_bytes;
    const std::vector<int> tp_list(tps.begin(), tps.end());
    profile.memory = EngineMemoryModel(model, tp_list);
    for (std::size_t i = 0; i < schemes.size(); ++i) {
      const TimeModel& m = fits[i].model;
      if (m.a_ms_per_token2 == 0 && m.b_ms_per_token == 0) {
        throw Error("profile: the fit of " + SchemeName(schemes[i]) +
                    " has a = b = 0 (time does not grow with tokens); rerun with more --repeats "
                    "or a larger --max-len");
      }
      profile.schemes.push_back({schemes[i], m.a_ms_per_token2, m.b_ms_per_token, m.c_ms});
      int& u = profile.utilization_tokens_by_tp[schemes[i].tp];
      u = std::max(u, UtilizationTokens(m));
    }
    // The strict parser again, so nothing is written that the planner would reject.
    const std::string json = ProfileToJson(profile);
    const Profile checked = ParseProfile(json, a.output);
    WriteFileAtomically(a.output, json);
    if (!a.samples_json.empty()) WriteFileAtomically(a.samples_json, raw.dump(1) + "\n");

    const OptimizerLayout layout{world_size, 1, 1};
    fmt::print("{:<10} {:>14} {:>12} {:>10} {:>9} {:>9} {:>9} {:>10}\n", "scheme", "a ms/tok^2",
               "b ms/tok", "c ms", "R^2", "max rel", "rms rel", "capacity");
    for (std::size_t i = 0; i < schemes.size(); ++i) {
      const TimeFit& f = fits[i];
      fmt::print("{:<10} {:>14.4e} {:>12.4e} {:>10.3f} {:>9.4f} {:>9.3f} {:>9.3f} {:>10}\n",
                 SchemeName(schemes[i]), f.model.a_ms_per_token2, f.model.b_ms_per_token,
                 f.model.c_ms, f.r_squared, f.max_relative_error, f.rms_relative_error,
                 CapacityTokens(checked, schemes[i], layout));
    }
    fmt::print("wrote {} (capacity in tokens per micro-batch with the optimizer over {} rank{})\n",
               a.output, world_size, world_size == 1 ? "" : "s");
  }
  if (ranks) ranks->Barrier();  // rank 0 hosts the store: no rank may still need it
  return 0;
}

}  // namespace

Command AddProfileCommand(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "profile", "Fit the cost model of a model's schemes on this engine (docs/runtime.md)");
  auto a = std::make_shared<ProfileArgs>();
  cmd->add_option("--model", a->model, "model config JSON")->required();
  cmd->add_option("--schemes", a->schemes, "comma-separated TPxPP schemes, e.g. 1x1,2x1,1x2")
      ->capture_default_str();
  cmd->add_option("--output,-o", a->output, "profile JSON to write (rank 0)")->required();
  cmd->add_option("--samples-json", a->samples_json,
                  "also write every measured micro-batch and its fitted time (rank 0)");
  cmd->add_option("--nproc", a->nproc,
                  "start this many ranks here (>= the largest tp); without it, join a "
                  "torchrun/Slurm job, or run alone when every tp is 1")
      ->check(PositiveNumber());
  cmd->add_option("--max-len", a->max_len, "longest document and largest micro-batch timed")
      ->check(PositiveNumber())
      ->capture_default_str();
  cmd->add_option("--min-len", a->min_len, "shortest single document timed")
      ->check(PositiveNumber())
      ->capture_default_str();
  cmd->add_option("--packed", a->packed, "packed micro-batches timed (besides single documents)")
      ->check(NonNegativeNumber())
      ->capture_default_str();
  cmd->add_option("--lengths", a->lengths, "document lengths the packed micro-batches draw from")
      ->capture_default_str();
  cmd->add_option("--warmup", a->warmup, "untimed passes before timing")
      ->check(NonNegativeNumber())
      ->capture_default_str();
  cmd->add_option("--repeats", a->repeats, "timed passes; each sample is their median")
      ->check(PositiveNumber())
      ->capture_default_str();
  cmd->add_option("--memory-bytes", a->memory_bytes,
                  "memory per rank the profile's capacities are computed for")
      ->check(PositiveNumber())
      ->capture_default_str();
  cmd->add_option("--seed", a->seed, "model initialisation, token ids and packed lengths")
      ->capture_default_str();
  cmd->add_option("--master-port", a->master_port, "rendezvous port with --nproc (0: a free one)")
      ->check(CLI::Range(0, 65535));
  cmd->add_option("--timeout-s", a->timeout_s,
                  "a rank that died or hangs fails the others after this long (idle ranks wait "
                  "at a barrier while a scheme runs, so it must exceed the longest scheme)")
      ->check(PositiveNumber())
      ->capture_default_str();
  return [a] { return RunProfile(*a); };
}

}  // namespace hydraulis::tools
