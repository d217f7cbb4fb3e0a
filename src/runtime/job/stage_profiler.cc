#include "hydraulis/runtime/job/stage_profiler.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <string>

#include "hydraulis/base/error.h"
#include "hydraulis/base/median.h"
#include "hydraulis/base/rng.h"
#include "hydraulis/cost/recomputed_profile.h"
#include "hydraulis/runtime/communication/comm_group.h"
#include "hydraulis/runtime/model/context_parallel_attention.h"
#include "hydraulis/runtime/model/gradients.h"
#include "hydraulis/runtime/model/local_tokens.h"
#include "hydraulis/runtime/model/packed_batch.h"

namespace hydraulis {
namespace {

constexpr double kFp32Bytes = 4;
// Bytes per parameter in the compute layout (fp32 weight + fp32 gradient) and in the
// optimizer layout (fp32 master weight + AdamW's two fp32 moments).
constexpr double kComputeStateBytes = 8;
constexpr double kOptimizerStateBytes = 12;
// Keeps the token ids apart from any other use of the seed (the model's initialisation).
constexpr std::uint64_t kTokenStream = 0x70726f66696c65ULL;

}  // namespace

ModelPart ProfiledStagePart(const ModelConfig& config, int pp) {
  ModelPart part = ModelPart::Stage(config, 0, pp);
  part.has_head = true;
  return part;
}

std::vector<std::vector<std::int64_t>> ProfileMicroBatches(std::span<const std::int64_t> pool,
                                                           const ProfileBatchOptions& options) {
  if (options.min_len < 1) {
    throw InvalidInput("profile: min_len must be >= 1, got " + std::to_string(options.min_len));
  }
  if (options.max_len < options.min_len) {
    throw InvalidInput("profile: max_len (" + std::to_string(options.max_len) +
                       ") must be >= min_len (" + std::to_string(options.min_len) + ")");
  }
  if (options.packed < 0) {
    throw InvalidInput("profile: packed must be >= 0, got " + std::to_string(options.packed));
  }
  if (options.packed > 0 && pool.empty()) {
    throw InvalidInput("profile: packed micro-batches need a non-empty length pool");
  }
  for (std::size_t i = 0; i < pool.size(); ++i) {
    if (pool[i] < 1) {
      throw InvalidInput("profile: length pool[" + std::to_string(i) + "] must be >= 1, got " +
                         std::to_string(pool[i]));
    }
  }
  std::vector<std::vector<std::int64_t>> out;
  // Two points per octave: the quadratic term only shows at the long end, the constant
  // only at the short end, so both ends get as many points as the middle.
  for (std::int64_t p = options.min_len; p < options.max_len; p *= 2) {
    out.push_back({p});
    const std::int64_t mid = p + p / 2;
    if (mid > p && mid < options.max_len) out.push_back({mid});
  }
  out.push_back({options.max_len});

  Rng rng(options.seed);
  for (int j = 0; j < options.packed; ++j) {
    const std::int64_t budget = std::max<std::int64_t>(1, options.max_len * (j % 4 + 1) / 4);
    std::vector<std::int64_t> batch;
    std::int64_t left = budget;
    while (left > 0) {
      const std::int64_t drawn = pool[static_cast<std::size_t>(rng.Below(pool.size()))];
      const std::int64_t length = std::min({drawn, options.max_len, left});
      batch.push_back(length);
      left -= length;
    }
    out.push_back(std::move(batch));
  }
  return out;
}

namespace {

void CheckTiming(const StageProfileOptions& options,
                 const std::vector<std::vector<std::int64_t>>& micro_batches) {
  if (options.warmup < 0) {
    throw InvalidInput("profile: warmup must be >= 0, got " + std::to_string(options.warmup));
  }
  if (options.repeats < 1) {
    throw InvalidInput("profile: repeats must be >= 1, got " + std::to_string(options.repeats));
  }
  if (micro_batches.empty()) throw InvalidInput("profile: no micro-batch to time");
}

// Each micro-batch's documents as random token ids (deterministic in the seed, so every
// rank of a group builds the same), packed.
std::vector<PackedBatch> RandomBatches(const ModelConfig& config,
                                       const std::vector<std::vector<std::int64_t>>& micro_batches,
                                       std::uint64_t seed, at::Device device) {
  Rng rng(seed ^ kTokenStream);
  const auto vocab = static_cast<std::uint64_t>(config.shape.vocab);
  std::vector<PackedBatch> batches;
  for (std::size_t j = 0; j < micro_batches.size(); ++j) {
    std::vector<std::vector<std::int64_t>> documents;
    for (const std::int64_t length : micro_batches[j]) {
      if (length < 1) {
        throw InvalidInput("profile: micro-batch " + std::to_string(j) +
                           " has a document of length " + std::to_string(length));
      }
      std::vector<std::int64_t>& doc = documents.emplace_back();
      doc.reserve(static_cast<std::size_t>(length));
      for (std::int64_t t = 0; t < length; ++t) {
        doc.push_back(static_cast<std::int64_t>(rng.Below(vocab)));
      }
    }
    if (documents.empty()) {
      throw InvalidInput("profile: micro-batch " + std::to_string(j) + " has no document");
    }
    batches.push_back(PackDocuments(documents, config.shape.vocab, device));
  }
  return batches;
}

// Runs forward_backward(j) for every micro-batch, options.warmup untimed passes then
// options.repeats timed ones, round-robin; the samples' times are the medians of the
// passes, each the maximum over `group`'s ranks (nullptr: this rank alone), which meet at a
// barrier before every timed run so no rank's time includes waiting for a late peer.
std::vector<TimeSample> TimePasses(const std::vector<std::vector<std::int64_t>>& micro_batches,
                                   const StageProfileOptions& options, CommGroup* group,
                                   const std::function<void(std::size_t)>& forward_backward) {
  const bool collective = group != nullptr && group->size() > 1;
  const auto n = static_cast<std::int64_t>(micro_batches.size());
  for (int pass = 0; pass < options.warmup; ++pass) {
    for (std::int64_t j = 0; j < n; ++j) forward_backward(static_cast<std::size_t>(j));
  }
  SynchronizeDevice(options.compute);
  at::Tensor ms = at::zeros({n, options.repeats}, at::TensorOptions().dtype(at::kDouble));
  auto ms_of = ms.accessor<double, 2>();
  for (int pass = 0; pass < options.repeats; ++pass) {
    for (std::int64_t j = 0; j < n; ++j) {
      if (collective) group->Barrier();
      const auto start = std::chrono::steady_clock::now();
      forward_backward(static_cast<std::size_t>(j));
      SynchronizeDevice(options.compute);
      const std::chrono::duration<double, std::milli> took =
          std::chrono::steady_clock::now() - start;
      ms_of[j][pass] = took.count();
    }
  }
  // A group is as slow as its slowest rank.
  if (collective) group->AllReduceMax(ms);
  std::vector<TimeSample> samples;
  for (std::int64_t j = 0; j < n; ++j) {
    std::vector<double> runs;
    for (int pass = 0; pass < options.repeats; ++pass) runs.push_back(ms_of[j][pass]);
    samples.push_back({micro_batches[static_cast<std::size_t>(j)], Median(std::move(runs))});
  }
  return samples;
}

}  // namespace

std::vector<TimeSample> ProfileStage(const ModelConfig& config, int pp, CommGroup* tp_group,
                                     const std::vector<std::vector<std::int64_t>>& micro_batches,
                                     const StageProfileOptions& options) {
  CheckTiming(options, micro_batches);
  const Transformer model(config, options.seed, tp_group, ProfiledStagePart(config, pp),
                          options.compute);
  ZeroGradients(model);  // allocated once, so every timed backward accumulates as in training
  const std::vector<PackedBatch> batches =
      RandomBatches(config, micro_batches, options.seed, TorchDevice(options.compute));
  return TimePasses(micro_batches, options, tp_group, [&](std::size_t j) {
    const at::Tensor logits = model.ForwardStage(batches[j], at::Tensor());
    SummedTokenLoss(logits, batches[j]).sum.backward();
  });
}

std::vector<TimeSample> ProfileShardedStage(
    const ModelConfig& config, CommGroup& cp_group, CommGroup* tp_group, CommGroup& block_group,
    const std::vector<std::vector<std::int64_t>>& micro_batches,
    const StageProfileOptions& options) {
  CheckTiming(options, micro_batches);
  const int cp = cp_group.size();
  if (cp < 2) throw InvalidInput("profile: a sharded stage needs cp >= 2 ranks");
  const Transformer model(config, options.seed, tp_group, ProfiledStagePart(config, 1),
                          options.compute);
  ZeroGradients(model);
  const at::Device device = TorchDevice(options.compute);
  const std::vector<PackedBatch> batches =
      RandomBatches(config, micro_batches, options.seed, device);
  // Every document over every rank: this rank's zigzag chunks of each, as the trainer runs
  // them.
  std::vector<LocalTokens> tokens;
  std::vector<ContextParallelRows> rows;
  for (std::size_t j = 0; j < batches.size(); ++j) {
    const CpLayout layout = CpLayout::EveryRank(micro_batches[j].size(), cp);
    const LocalTokenLayout local =
        MakeLocalTokenLayout(micro_batches[j], layout, cp, cp_group.rank());
    tokens.push_back(LocalTokensOf(batches[j].tokens, local));
    rows.push_back(MakeContextParallelRows(local, device));
  }
  return TimePasses(micro_batches, options, &block_group, [&](std::size_t j) {
    const at::Tensor logits = model.ForwardStageContextParallel(tokens[j], rows[j], cp_group, {});
    SummedTokenLoss(logits, tokens[j].targets).sum.backward();
  });
}

double ActivationBytesPerTokenHiddenLayer(const ModelConfig& config, int tp, Recompute mode,
                                          bool flash_attention) {
  ValidateTensorParallel(config, tp);
  return kFp32Bytes * ActivationElementsPerTokenLayer(config.shape, tp, mode, flash_attention) /
         (static_cast<double>(config.shape.hidden) / tp);
}

MemoryModel EngineMemoryModel(const ModelConfig& config, std::span<const int> tps, Recompute mode,
                              bool flash_attention) {
  const ModelSpec& s = config.shape;
  const double hidden = s.hidden;
  const double kv_width = static_cast<double>(s.kv_heads) * config.head_dim();
  // wq, wo (hidden x hidden), wk, wv (kv_width x hidden), three ffn x hidden, two norms.
  const double params_per_layer =
      2 * hidden * hidden + 2 * kv_width * hidden + 3.0 * s.ffn * hidden + 2 * hidden;
  MemoryModel m;
  for (const int tp : tps) {
    m.activation_bytes_by_tp[tp] =
        ActivationBytesPerTokenHiddenLayer(config, tp, mode, flash_attention);
  }
  m.state_bytes_per_h2_layer =
      (kComputeStateBytes + kOptimizerStateBytes) * params_per_layer / (hidden * hidden);
  m.optimizer_share = kOptimizerStateBytes / (kComputeStateBytes + kOptimizerStateBytes);
  m.context_bytes = 0;
  m.reserved_bytes = 0;
  return m;
}

}  // namespace hydraulis
