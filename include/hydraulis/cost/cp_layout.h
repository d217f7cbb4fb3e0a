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
using CpLayout = std::vector<int>;

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
std::vector<RankSegment> RankSegments(std::span<const std::int64_t> lengths, const CpLayout& layout,
                                      int cp, int rank);

// What a micro-batch costs on one stage of a cp pipeline, and the memory each cp rank has.
struct ShardCost {
  int cp = 1;
  // A document placed whole on one cp rank costs that rank whole.DocumentMs(s); every
  // micro-batch costs whole.c_ms once (the ranks run in parallel).
  TimeModel whole;
  // A sharded document of s tokens costs every rank whole.DocumentMs(s) / cp (its chunks
  // balance the causal work) plus kv_ms_per_token * s (the key/value exchange, exposed).
  double kv_ms_per_token = 0;
  // Bytes of the gathered keys and values one rank keeps per token of a sharded document
  // that other ranks hold, over the activation bytes of one of its own tokens.
  double kv_memory_ratio = 0;
  // Memory of one cp rank in tokens of its own activations.
  double rank_capacity_tokens = 0;
  // Megatron-LM's rule instead of ours: every document of a micro-batch is sharded (its
  // THD context parallelism splits every sequence into 2 * cp chunks); the static-cp
  // baseline.
  bool shard_every_document = false;

  // A document's balanced share of the ranks, whole.DocumentMs(s) / cp, as an additive
  // model (a / cp, b / cp, the same c): no layout's time is below the sum of these shares.
  TimeModel Balanced() const {
    return {whole.a_ms_per_token2 / cp, whole.b_ms_per_token / cp, whole.c_ms};
  }
  // One rank's time for a sharded document of `tokens` tokens.
  double ShardedDocumentMs(std::int64_t tokens) const {
    return whole.DocumentMs(tokens) / cp + kv_ms_per_token * static_cast<double>(tokens);
  }
  // Whether a rank using `memory` tokens of it fits. Sums of doubles are allowed their
  // rounding, so a micro-batch exactly at capacity fits when every document is sharded.
  bool FitsRank(double memory) const { return memory <= rank_capacity_tokens * (1 + 1e-9); }
  // One rank's memory, in tokens of its own activations, for a sharded document: its own
  // share (tokens / cp) plus the gathered keys and values of the rest.
  double ShardedMemoryTokens(std::int64_t tokens) const {
    return static_cast<double>(tokens) / cp * (1.0 + kv_memory_ratio * (cp - 1));
  }
};

// The cost of a cp pipeline whose documents placed whole cost `whole`, with the given
// exchange and memory terms; each rank's memory is what a micro-batch of `capacity_tokens`
// needs when every document is sharded. For cp = 1 the rank holds the capacity itself.
ShardCost MakeShardCost(int cp, const TimeModel& whole, std::int64_t capacity_tokens,
                        double kv_ms_per_token = 0, double kv_memory_ratio = 0);

// The layout rule (docs/design.md, "Context parallelism"), deterministic; empty for
// cp = 1. Documents are taken longest first. The time rule marks the k longest documents
// whose whole time exceeds the balanced share of themselves and every shorter document plus
// their own exchange (whole(s) > W / cp + kv_ms_per_token * s). For each j = 0..k one
// candidate layout shards the j longest and places the others whole, longest first, on the
// cp rank with the least time so far whose memory still holds them (the lowest such rank on
// ties; one that fits no rank is sharded), then shards documents of the slowest rank while
// that lowers the slowest rank's time. The fastest candidate that fits every rank's memory
// wins (ties: the fewest sharded documents), or every document sharded when that is faster
// or nothing else fits (a micro-batch within the pipeline's capacity always fits that way).
CpLayout LayOutMicroBatch(std::span<const std::int64_t> lengths, const ShardCost& cost);

// One stage's time for the micro-batch laid out by `layout`: whole.c_ms plus the largest
// cp rank's time. For cp = 1 (empty layout) c plus the documents' times in their order.
double LaidOutStageMs(std::span<const std::int64_t> lengths, const CpLayout& layout,
                      const ShardCost& cost);

// Each cp rank's memory in tokens of its own activations under `layout`.
std::vector<double> RankMemoryTokens(std::span<const std::int64_t> lengths, const CpLayout& layout,
                                     const ShardCost& cost);

}  // namespace hydraulis
