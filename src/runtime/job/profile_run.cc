#include "hydraulis/runtime/job/profile_run.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <utility>

#include "hydraulis/base/error.h"
#include "hydraulis/cost/capacity.h"
#include "hydraulis/data/lengths.h"
#include "hydraulis/runtime/job/stage_profiler.h"
#include "hydraulis/runtime/model/transformer.h"
#include "hydraulis/spec/model_config.h"
#include "hydraulis/spec/spec_io.h"
#include "profile_ranks.h"

namespace hydraulis {
namespace {

// A micro-batch whose fixed cost c is at most this share of its time keeps the device busy
// (the profile's informational utilization_tokens).
constexpr double kUtilizationOverheadShare = 0.1;

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

// The <1, tp, 1> scheme whose fit a cp scheme keeps for its documents placed whole.
Scheme PlacedScheme(const Scheme& s) { return Scheme{1, s.tp, 1}; }

// Ranks one profiled block runs on: cp * tp (pp is timed as one stage on those ranks).
int BlockRanks(const Scheme& s) { return s.cp * s.tp; }

std::vector<int> TensorParallelDegrees(const std::vector<Scheme>& schemes) {
  std::set<int> tps;
  for (const Scheme& s : schemes) tps.insert(s.tp);
  return {tps.begin(), tps.end()};
}

}  // namespace

void RequireGrowingFit(const Scheme& scheme, const TimeModel& fit, const ProfileOptions& options) {
  if (fit.a_ms_per_token2 != 0 || fit.b_ms_per_token != 0) return;
  // The user's choice of samples, not a fault of the run: what to change, with the values.
  throw InvalidInput("profile: the fit of " + SchemeName(scheme) +
                     " has a = b = 0: its measured times do not grow with tokens, so the "
                     "samples were too short or too noisy to fit; rerun with a larger "
                     "--max-len (now " +
                     std::to_string(options.max_len) + ") or more --repeats (now " +
                     std::to_string(options.repeats) + "); no profile was written");
}

namespace {

// The profile of `fits` (one per scheme) on `world_size` ranks. InvalidInput when a fit does
// not grow with tokens (RequireGrowingFit).
Profile ProfileOf(const ModelConfig& model, const ProfileOptions& options, int world_size,
                  const std::vector<TimeFit>& fits, const std::vector<double>& kv_ms_per_token) {
  Profile profile;
  profile.model = model.shape;
  profile.cluster.gpus_per_node = world_size;
  profile.cluster.gpu_memory_bytes = options.memory_bytes;
  profile.memory =
      EngineMemoryModel(model, TensorParallelDegrees(options.schemes), options.compute.recompute);
  profile.recompute = options.compute.recompute;
  for (std::size_t i = 0; i < options.schemes.size(); ++i) {
    const Scheme& scheme = options.schemes[i];
    const TimeModel& m = fits[i].model;
    RequireGrowingFit(scheme, m, options);
    profile.schemes.push_back({scheme, m.a_ms_per_token2, m.b_ms_per_token, m.c_ms});
    profile.schemes.back().kv_ms_per_token = kv_ms_per_token[i];
    int& u = profile.utilization_tokens_by_tp[scheme.tp];
    u = std::max(u, UtilizationTokens(m));
  }
  // The strict parser again, so nothing is returned that the planner would reject.
  return ParseProfile(ProfileToJson(profile), "the measured profile");
}

}  // namespace

void CheckProfileOptions(const ProfileOptions& options, int ranks) {
  const ModelConfig model = LoadModelConfig(options.model);
  for (const Scheme& s : options.schemes) {
    try {
      ValidateTensorParallel(model, s.tp);
      ModelPart::Stage(model, 0, s.pp);
    } catch (const InvalidInput& e) {
      throw InvalidInput("--schemes: " + std::to_string(s.tp) + "x" + std::to_string(s.pp) +
                         " does not split " + options.model + ": " + e.what());
    }
  }
  for (const Scheme& s : options.schemes) {
    if (s.cp == 1) continue;
    // One stage: a cp scheme keeps its <1, tp, 1> fit for placed documents, and that fit is
    // of a single stage (docs/design.md derives cp schemes the same way).
    const std::string name =
        std::to_string(s.cp) + "x" + std::to_string(s.tp) + "x" + std::to_string(s.pp);
    if (s.pp != 1) {
      throw InvalidInput("--schemes: " + name +
                         ": cp schemes are profiled with pp 1 only (CPxTPx1)");
    }
    if (std::find(options.schemes.begin(), options.schemes.end(), PlacedScheme(s)) ==
        options.schemes.end()) {
      // --schemes names a cp = 1 scheme TPxPP: <1, tp, 1> is "{tp}x1".
      const std::string placed = std::to_string(s.tp) + "x1";
      throw InvalidInput("--schemes: " + name + " keeps the fit of " + placed +
                         " for documents placed whole: list " + placed + " too");
    }
    if (ranks < BlockRanks(s)) {
      throw InvalidInput("--schemes: cp = " + std::to_string(s.cp) +
                         " x tp = " + std::to_string(s.tp) + " needs " +
                         std::to_string(BlockRanks(s)) + " ranks: give --nproc " +
                         std::to_string(BlockRanks(s)) + " (or run under torchrun)");
    }
  }
  if (options.memory_bytes <= 0) throw InvalidInput("--memory-bytes: must be > 0");
  // Before minutes of timing: a budget that cannot hold one aligned micro-batch beside
  // the parameters and optimizer state would write a profile of capacity 0.
  Profile probe;
  probe.model = model.shape;
  probe.cluster.gpus_per_node = std::max(1, ranks);
  probe.cluster.gpu_memory_bytes = options.memory_bytes;
  probe.memory =
      EngineMemoryModel(model, TensorParallelDegrees(options.schemes), options.compute.recompute);
  for (const Scheme& s : options.schemes) {
    if (CapacityTokens(probe, s, OptimizerLayout{std::max(1, ranks), 1, 1}) <= 0) {
      throw InvalidInput("--memory-bytes " + std::to_string(options.memory_bytes) + ": scheme " +
                         SchemeName(s) + " cannot hold a micro-batch of " +
                         std::to_string(kTokenAlignment) +
                         " tokens beside the model's parameters and optimizer state; give "
                         "more memory");
    }
  }
}

namespace {

// The micro-batches every scheme is timed on, drawn from --lengths.
std::vector<std::vector<std::int64_t>> ProfileBatches(const ProfileOptions& options) {
  std::vector<std::int64_t> pool;
  try {
    pool = ReadLengths(options.lengths);
  } catch (const InvalidInput& e) {
    throw InvalidInput(std::string("--lengths: ") + e.what());
  }
  ProfileBatchOptions batch_options;
  batch_options.min_len = std::min(options.min_len, options.max_len);
  batch_options.max_len = options.max_len;
  batch_options.packed = options.packed;
  batch_options.seed = options.seed;
  return ProfileMicroBatches(pool, batch_options);
}

StageProfileOptions TimingOf(const ProfileOptions& options) {
  StageProfileOptions timing;
  timing.warmup = options.warmup;
  timing.repeats = options.repeats;
  timing.seed = options.seed;
  timing.compute = options.compute;
  return timing;
}

// GPU ranks time their tp groups over NCCL, as training runs them.
std::unique_ptr<ProfileRanks> MakeProfileRanks(const DistributedOptions& distributed,
                                               const ComputeOptions& compute,
                                               const std::vector<int>& tps,
                                               const std::set<std::pair<int, int>>& cp_blocks) {
  DistributedOptions on_device = distributed;
  if (compute.device == DeviceKind::kCuda) {
    on_device.backend = CommBackend::kNccl;
    on_device.device_index = compute.device_index;
  }
  return std::make_unique<ProfileRanks>(on_device, std::set<int>(tps.begin(), tps.end()),
                                        cp_blocks);
}

// This rank's samples of scheme `s`: its cp x tp block's for a cp scheme, else its tp
// group's (no group: a single process).
std::vector<TimeSample> TimeScheme(const ModelConfig& model, const Scheme& s, ProfileRanks* ranks,
                                   const std::vector<std::vector<std::int64_t>>& batches,
                                   const StageProfileOptions& timing) {
  if (s.cp > 1) {
    const ProfileRanks::ContextParallelGroups g = ranks->ContextParallelBlock(s.cp, s.tp);
    return ProfileShardedStage(model, *g.cp, g.tp, *g.block, batches, timing);
  }
  CommGroup* group = ranks == nullptr ? nullptr : ranks->TensorParallelGroup(BlockRanks(s));
  return ProfileStage(model, s.pp, group, batches, timing);
}

}  // namespace

ProfileRun RunProfile(const ProfileOptions& options, const DistributedOptions* distributed,
                      const ProfileProgress& progress) {
  CheckProfileOptions(options, distributed != nullptr ? distributed->world_size : 1);
  const ModelConfig model = LoadModelConfig(options.model);
  const std::vector<int> tps = TensorParallelDegrees(options.schemes);
  // The blocks of ranks that time together: tp groups, and the cp x tp blocks of the cp
  // schemes.
  std::set<int> blocks(tps.begin(), tps.end());
  std::set<std::pair<int, int>> cp_blocks;
  for (const Scheme& s : options.schemes) {
    blocks.insert(BlockRanks(s));
    if (s.cp > 1) cp_blocks.insert({s.cp, s.tp});
  }
  const int max_block = *blocks.rbegin();
  if (distributed == nullptr && max_block > 1) {
    throw InvalidInput("--schemes: tp = " + std::to_string(max_block) + " needs " +
                       std::to_string(max_block) + " ranks: give --nproc " +
                       std::to_string(max_block) + " (or run under torchrun)");
  }
  at::set_num_threads(1);
  CheckComputeAvailable(options.compute);
  UseDevice(options.compute);

  const std::vector<std::vector<std::int64_t>> batches = ProfileBatches(options);
  const StageProfileOptions timing = TimingOf(options);

  ProfileRun run;
  std::unique_ptr<ProfileRanks> ranks;
  if (distributed != nullptr) {
    ranks = MakeProfileRanks(*distributed, options.compute, tps, cp_blocks);
    run.rank = ranks->rank();
    run.world_size = ranks->world_size();
  }
  const bool chief = run.rank == 0;
  const std::size_t n = options.schemes.size();
  std::vector<TimeFit> fits(n);
  std::vector<std::vector<TimeSample>> samples(n);
  std::vector<double> kv(n, 0.0);
  // cp = 1 schemes first: a cp scheme's fit starts from its <1, tp, 1> fit.
  for (const bool sharded : {false, true}) {
    for (std::size_t i = 0; i < n; ++i) {
      const Scheme& s = options.schemes[i];
      if ((s.cp > 1) != sharded) continue;
      const int block = BlockRanks(s);
      if (ranks == nullptr || ranks->Runs(block)) {
        const auto start = std::chrono::steady_clock::now();
        std::vector<TimeSample> timed = TimeScheme(model, s, ranks.get(), batches, timing);
        if (chief) {
          if (sharded) {
            const auto placed = static_cast<std::size_t>(
                std::find(options.schemes.begin(), options.schemes.end(), PlacedScheme(s)) -
                options.schemes.begin());
            const ShardedTimeFit fit = FitShardedTimeModel(timed, fits[placed].model, s.cp);
            fits[i] = fit.fit;
            kv[i] = fit.kv_ms_per_token;
          } else {
            fits[i] = FitTimeModel(timed);
          }
          samples[i] = std::move(timed);
          const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
          if (progress) progress(s, samples[i].size(), took.count());
        }
      }
      // Ranks outside every full block wait here; rank 0's block's samples are kept.
      if (ranks) ranks->Barrier();
    }
  }
  if (chief) {
    run.profile = ProfileOf(model, options, run.world_size, fits, kv);
    run.fits = std::move(fits);
    run.samples = std::move(samples);
  }
  if (ranks) ranks->Barrier();  // rank 0 hosts the store: no rank may still need it
  return run;
}

std::string ProfileSamplesToJson(const ProfileRun& run) {
  nlohmann::ordered_json raw = nlohmann::ordered_json::array();
  for (std::size_t i = 0; i < run.samples.size(); ++i) {
    const Scheme& s = run.profile.schemes[i].scheme;
    nlohmann::ordered_json entry = {{"tp", s.tp}, {"pp", s.pp}};
    // cp schemes' samples are all-sharded micro-batches; cp = 1 entries stay as they were.
    if (s.cp > 1) entry = {{"cp", s.cp}, {"tp", s.tp}, {"pp", s.pp}};
    entry["samples"] = nlohmann::ordered_json::array();
    for (const TimeSample& t : run.samples[i]) {
      const double fitted =
          s.cp > 1 ? ShardedMicroBatchMs(run.fits[i].model, s.cp,
                                         run.profile.schemes[i].kv_ms_per_token, t.lengths)
                   : run.fits[i].model.MicroBatchMs(t.lengths);
      entry["samples"].push_back({{"lengths", t.lengths}, {"ms", t.ms}, {"fitted_ms", fitted}});
    }
    raw.push_back(entry);
  }
  return raw.dump(1) + "\n";
}

}  // namespace hydraulis
