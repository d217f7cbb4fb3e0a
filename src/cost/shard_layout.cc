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

ChunkHolder HolderOfChunk(int cp, int chunk) {
  return chunk < cp ? ChunkHolder{chunk, 0} : ChunkHolder{2 * cp - 1 - chunk, 1};
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
