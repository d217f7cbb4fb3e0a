// How one micro-batch's documents lie on the cp ranks of a context-parallel pipeline stage,
// and what that costs. A document is either placed whole on one cp rank or sharded over
// all of them: split into 2*cp chunks, rank r holding chunk r and chunk 2*cp-1-r (head plus
// mirrored tail), so that every rank's share of the causal attention work is about equal.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "hydraulis/cost/time_model.h"

namespace hydraulis {

// The rank value of a document sharded over every cp rank.
inline constexpr int kSharded = -1;

// Per document of one micro-batch (in the micro-batch's order): the cp rank that holds it
// whole, or kSharded. Empty for cp = 1 pipelines (every document whole on the one rank).
using ShardLayout = std::vector<int>;

// Chunk k (0 <= k < 2*cp) of a sharded document of `length` tokens: [begin, end) in the
// document's own positions. Chunks differ by at most one token; the first length % (2*cp)
// chunks hold the extra one. Chunks of a document shorter than 2*cp tokens can be empty.
struct TokenRange {
  std::int64_t begin = 0;
  std::int64_t end = 0;
  std::int64_t Size() const { return end - begin; }
};
TokenRange ShardChunk(std::int64_t length, int cp, int chunk);

// The two chunks cp rank `rank` holds of a sharded document: chunk rank, then chunk
// 2*cp-1-rank (in this order in the rank's local tokens).
std::array<TokenRange, 2> RankChunks(std::int64_t length, int cp, int rank);

// Who holds chunk `chunk` (0 <= chunk < 2*cp) of a sharded document: the cp rank, and which
// of its two chunks it is (slot 0: its head chunk `rank`, slot 1: its tail chunk
// 2*cp-1-rank), so that a rank's RankChunks(...)[slot] is this chunk.
struct ChunkHolder {
  int rank = 0;
  int slot = 0;
};
ChunkHolder HolderOfChunk(int cp, int chunk);

// Tokens of a sharded document that cp rank `rank` holds.
std::int64_t RankShardTokens(std::int64_t length, int cp, int rank);

// One contiguous run of a rank's local tokens: tokens [range.begin, range.end) of the
// micro-batch's document `document` (an index into the micro-batch), in local order.
struct RankSegment {
  int document = 0;
  TokenRange range;
};

// The segments cp rank `rank` holds, in local order: the micro-batch's documents in order;
// a document placed on `rank` is one segment, a sharded one its two chunks (empty chunks
// are left out), a document placed elsewhere nothing. `layout` empty means cp = 1.
// InvalidInput when the layout does not match the lengths or names a rank outside [0, cp).
std::vector<RankSegment> RankSegments(std::span<const std::int64_t> lengths,
                                      const ShardLayout& layout, int cp, int rank);

}  // namespace hydraulis
