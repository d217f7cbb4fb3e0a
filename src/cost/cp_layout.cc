#include "hydraulis/cost/cp_layout.h"

#include <algorithm>
#include <limits>
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

ChunkHolder HolderOfChunk(int cp, int chunk) {
  return chunk < cp ? ChunkHolder{chunk, 0} : ChunkHolder{2 * cp - 1 - chunk, 1};
}

std::int64_t RankShardTokens(std::int64_t length, int cp, int rank) {
  const auto chunks = RankChunks(length, cp, rank);
  return chunks[0].Size() + chunks[1].Size();
}

std::vector<RankSegment> RankSegments(std::span<const std::int64_t> lengths, const CpLayout& layout,
                                      int cp, int rank) {
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

CpLayout AllSharded(std::size_t n) { return CpLayout(n, kSharded); }

// One candidate of the rule: the first `forced` documents of `order` (longest first)
// sharded, the others placed whole longest first on the least-loaded rank that holds them
// (sharded when none does), then documents of the slowest rank sharded while that helps.
// Returns false when a rank ends over its memory.
bool LayOut(std::span<const std::int64_t> lengths, const ShardCost& shard_cost,
            const std::vector<std::size_t>& order, std::size_t forced, CpLayout& layout) {
  // A copy: the compiler need not reload its fields after every store to the loads below.
  const ShardCost cost = shard_cost;
  const std::size_t n = lengths.size();
  const auto ranks = static_cast<std::size_t>(cost.cp);
  layout.assign(n, 0);
  thread_local std::vector<double> load, memory;  // scratch: no allocation per call
  load.assign(ranks, 0.0);
  memory.assign(ranks, 0.0);
  auto shard = [&](std::size_t i) {
    layout[i] = kSharded;
    for (std::size_t r = 0; r < ranks; ++r) {
      load[r] += cost.ShardedDocumentMs(lengths[i]);
      memory[r] += cost.ShardedMemoryTokens(lengths[i]);
    }
  };
  for (std::size_t k = 0; k < forced; ++k) shard(order[k]);
  for (std::size_t k = forced; k < n; ++k) {
    const std::size_t i = order[k];
    const double tokens = static_cast<double>(lengths[i]);
    // The least-loaded rank with room (the first on ties), without a branch per rank.
    std::size_t best = ranks;
    double best_load = std::numeric_limits<double>::infinity();
    for (std::size_t r = 0; r < ranks; ++r) {
      const double l = cost.FitsRank(memory[r] + tokens) ? load[r] : best_load;
      best = l < best_load ? r : best;
      best_load = std::min(l, best_load);
    }
    if (best == ranks) {
      shard(i);
      continue;
    }
    layout[i] = static_cast<int>(best);
    load[best] += cost.whole.DocumentMs(lengths[i]);
    memory[best] += tokens;
  }
  // Sharding a document placed on the slowest rank helps when the rank it leaves gains more
  // than every rank loses to its share: few documents of similar length, where balancing
  // whole documents cannot even out.
  while (true) {
    const auto slowest =
        static_cast<std::size_t>(std::max_element(load.begin(), load.end()) - load.begin());
    double best_max = load[slowest];
    std::size_t best_doc = n;
    for (std::size_t i : order) {
      if (layout[i] != static_cast<int>(slowest)) continue;
      const double share = cost.ShardedDocumentMs(lengths[i]);
      const double share_memory = cost.ShardedMemoryTokens(lengths[i]);
      double new_max = 0;
      bool fits = true;
      for (std::size_t r = 0; r < ranks; ++r) {
        const bool own = r == slowest;
        new_max =
            std::max(new_max, load[r] - (own ? cost.whole.DocumentMs(lengths[i]) : 0.0) + share);
        fits = fits && cost.FitsRank(memory[r] - (own ? static_cast<double>(lengths[i]) : 0.0) +
                                     share_memory);
      }
      if (fits && new_max < best_max) {
        best_max = new_max;
        best_doc = i;
      }
    }
    if (best_doc == n) break;
    load[slowest] -= cost.whole.DocumentMs(lengths[best_doc]);
    memory[slowest] -= static_cast<double>(lengths[best_doc]);
    shard(best_doc);
  }
  return std::all_of(memory.begin(), memory.end(), [&](double m) { return cost.FitsRank(m); });
}

}  // namespace

ShardCost MakeShardCost(int cp, const TimeModel& whole, std::int64_t capacity_tokens,
                        double kv_ms_per_token, double kv_memory_ratio) {
  ShardCost c;
  c.cp = cp;
  c.whole = whole;
  c.kv_ms_per_token = kv_ms_per_token;
  c.kv_memory_ratio = kv_memory_ratio;
  c.rank_capacity_tokens = c.ShardedMemoryTokens(capacity_tokens);
  return c;
}

CpLayout LayOutMicroBatch(std::span<const std::int64_t> lengths, const ShardCost& cost) {
  if (cost.cp <= 1) return {};
  const std::size_t n = lengths.size();
  if (cost.shard_every_document) return AllSharded(n);
  thread_local std::vector<std::size_t> order;  // scratch: no allocation per call
  order.resize(n);
  for (std::size_t i = 0; i < n; ++i) order[i] = i;
  // Longest first, ties in micro-batch order (a stable order without stable_sort's buffer).
  std::sort(order.begin(), order.end(), [&](std::size_t x, std::size_t y) {
    return lengths[x] != lengths[y] ? lengths[x] > lengths[y] : x < y;
  });
  // How many of the longest documents the time rule would shard: each whose whole time
  // exceeds the balanced share of it and the documents after it plus its own exchange.
  double unsharded_ms = 0;
  for (std::int64_t s : lengths) unsharded_ms += cost.whole.DocumentMs(s);
  std::size_t long_documents = 0;
  for (std::size_t i : order) {
    const double whole = cost.whole.DocumentMs(lengths[i]);
    if (whole <= unsharded_ms / cost.cp + cost.kv_ms_per_token * static_cast<double>(lengths[i])) {
      break;
    }
    ++long_documents;
    unsharded_ms -= whole;
  }
  // Ties go to the fewest sharded documents (the least communication).
  CpLayout best, candidate;
  double best_ms = std::numeric_limits<double>::infinity();
  for (std::size_t forced = 0; forced <= long_documents; ++forced) {
    if (!LayOut(lengths, cost, order, forced, candidate)) continue;
    const double ms = LaidOutStageMs(lengths, candidate, cost);
    if (ms < best_ms) {
      best_ms = ms;
      best.swap(candidate);  // LayOut rewrites all of `candidate`
    }
  }
  CpLayout all = AllSharded(n);
  if (best.empty() || LaidOutStageMs(lengths, all, cost) < best_ms) return all;
  return best;
}

double LaidOutStageMs(std::span<const std::int64_t> lengths, const CpLayout& layout,
                      const ShardCost& cost) {
  if (layout.empty()) {
    double t = cost.whole.c_ms;
    for (std::int64_t s : lengths) t += cost.whole.DocumentMs(s);
    return t;
  }
  thread_local std::vector<double> load;  // scratch: no allocation per call
  load.assign(static_cast<std::size_t>(cost.cp), 0.0);
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

std::vector<double> RankMemoryTokens(std::span<const std::int64_t> lengths, const CpLayout& layout,
                                     const ShardCost& cost) {
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
