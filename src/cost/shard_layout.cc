#include "hydraulis/cost/shard_layout.h"

#include <algorithm>
#include <string>

#include "hydraulis/base/error.h"

namespace hydraulis {

TokenRange ShardChunk(std::int64_t length, int cp, int chunk) {
  const std::int64_t chunks = 2 * static_cast<std::int64_t>(cp);
  const std::int64_t q = length / chunks, extra = length % chunks;
  const std::int64_t k = chunk;
  const std::int64_t begin = k * q + std::min(k, extra);
  return {begin, begin + q + (k < extra ? 1 : 0)};
}

std::array<TokenRange, 2> RankChunks(std::int64_t length, int cp, int rank) {
  return {ShardChunk(length, cp, rank), ShardChunk(length, cp, 2 * cp - 1 - rank)};
}

std::int64_t RankShardTokens(std::int64_t length, int cp, int rank) {
  const auto chunks = RankChunks(length, cp, rank);
  return chunks[0].Size() + chunks[1].Size();
}

std::vector<RankSegment> RankSegments(std::span<const std::int64_t> lengths,
                                      const ShardLayout& layout, int cp, int rank) {
  if (cp < 1 || rank < 0 || rank >= cp) {
    throw InvalidInput("shard layout: rank " + std::to_string(rank) + " is outside a cp group of " +
                       std::to_string(cp));
  }
  if (!layout.empty() && layout.size() != lengths.size()) {
    throw InvalidInput("shard layout: " + std::to_string(layout.size()) + " entries for " +
                       std::to_string(lengths.size()) + " documents");
  }
  std::vector<RankSegment> segments;
  for (std::size_t i = 0; i < lengths.size(); ++i) {
    const int doc = static_cast<int>(i);
    const int where = layout.empty() ? 0 : layout[i];
    if (where != kSharded && (where < 0 || where >= cp)) {
      throw InvalidInput("shard layout: document " + std::to_string(i) + " is placed on rank " +
                         std::to_string(where) + ", outside a cp group of " + std::to_string(cp));
    }
    if (where == rank) {
      segments.push_back({doc, {0, lengths[i]}});
    } else if (where == kSharded) {
      for (const TokenRange& r : RankChunks(lengths[i], cp, rank)) {
        if (r.Size() > 0) segments.push_back({doc, r});
      }
    }
  }
  return segments;
}

}  // namespace hydraulis

namespace hydraulis {
namespace {

// Memory comparisons allow for the rounding of sums of doubles: a micro-batch exactly at
// capacity must fit when every document is sharded.
constexpr double kMemorySlack = 1e-9;

bool Fits(double memory, double capacity) { return memory <= capacity * (1 + kMemorySlack); }

ShardLayout AllSharded(std::size_t n) { return ShardLayout(n, kSharded); }

}  // namespace

ShardLayout LayOutMicroBatch(std::span<const std::int64_t> lengths, const ShardCost& cost) {
  if (cost.cp <= 1) return {};
  const std::size_t n = lengths.size();
  std::vector<std::size_t> order(n);
  for (std::size_t i = 0; i < n; ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t x, std::size_t y) { return lengths[x] > lengths[y]; });
  ShardLayout layout(n, 0);
  double unsharded_ms = 0;
  for (std::int64_t s : lengths) unsharded_ms += cost.whole.DocumentMs(s);
  for (std::size_t i : order) {
    const double whole = cost.whole.DocumentMs(lengths[i]);
    if (whole > unsharded_ms / cost.cp + cost.kv_ms_per_token * static_cast<double>(lengths[i])) {
      layout[i] = kSharded;
      unsharded_ms -= whole;
    }
  }
  std::vector<double> load(static_cast<std::size_t>(cost.cp), 0.0);
  std::vector<double> memory(static_cast<std::size_t>(cost.cp), 0.0);
  for (std::size_t i = 0; i < n; ++i) {
    if (layout[i] != kSharded) continue;
    for (int r = 0; r < cost.cp; ++r) {
      load[static_cast<std::size_t>(r)] += cost.ShardedDocumentMs(lengths[i]);
      memory[static_cast<std::size_t>(r)] += cost.ShardedMemoryTokens(lengths[i]);
    }
  }
  for (std::size_t i : order) {
    if (layout[i] == kSharded) continue;
    const double tokens = static_cast<double>(lengths[i]);
    int best = -1;
    for (int r = 0; r < cost.cp; ++r) {
      const auto ri = static_cast<std::size_t>(r);
      if (!Fits(memory[ri] + tokens, cost.rank_capacity_tokens)) continue;
      if (best < 0 || load[ri] < load[static_cast<std::size_t>(best)]) best = r;
    }
    if (best >= 0) {
      layout[i] = best;
      load[static_cast<std::size_t>(best)] += cost.whole.DocumentMs(lengths[i]);
      memory[static_cast<std::size_t>(best)] += tokens;
    } else {
      layout[i] = kSharded;
      for (int r = 0; r < cost.cp; ++r) {
        load[static_cast<std::size_t>(r)] += cost.ShardedDocumentMs(lengths[i]);
        memory[static_cast<std::size_t>(r)] += cost.ShardedMemoryTokens(lengths[i]);
      }
    }
  }
  const bool fits = std::all_of(memory.begin(), memory.end(),
                                [&](double m) { return Fits(m, cost.rank_capacity_tokens); });
  ShardLayout all = AllSharded(n);
  if (!fits || LaidOutStageMs(lengths, all, cost) < LaidOutStageMs(lengths, layout, cost)) {
    return all;
  }
  return layout;
}

double LaidOutStageMs(std::span<const std::int64_t> lengths, const ShardLayout& layout,
                      const ShardCost& cost) {
  if (layout.empty()) {
    double t = cost.whole.c_ms;
    for (std::int64_t s : lengths) t += cost.whole.DocumentMs(s);
    return t;
  }
  std::vector<double> load(static_cast<std::size_t>(cost.cp), 0.0);
  for (std::size_t i = 0; i < lengths.size(); ++i) {
    if (layout[i] == kSharded) {
      const double t = cost.ShardedDocumentMs(lengths[i]);
      for (double& l : load) l += t;
    } else {
      load.at(static_cast<std::size_t>(layout[i])) += cost.whole.DocumentMs(lengths[i]);
    }
  }
  return cost.whole.c_ms + *std::max_element(load.begin(), load.end());
}

std::vector<double> RankMemoryTokens(std::span<const std::int64_t> lengths,
                                     const ShardLayout& layout, const ShardCost& cost) {
  std::vector<double> memory(static_cast<std::size_t>(std::max(cost.cp, 1)), 0.0);
  for (std::size_t i = 0; i < lengths.size(); ++i) {
    if (layout.empty()) {
      memory[0] += static_cast<double>(lengths[i]);
    } else if (layout[i] == kSharded) {
      for (double& m : memory) m += cost.ShardedMemoryTokens(lengths[i]);
    } else {
      memory.at(static_cast<std::size_t>(layout[i])) += static_cast<double>(lengths[i]);
    }
  }
  return memory;
}

}  // namespace hydraulis
