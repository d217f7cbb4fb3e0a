// How one micro-batch's documents lie on the cp ranks of a context-parallel pipeline stage,
// and what that costs. A document is either placed whole on one cp rank or sharded over
// all of them: split into 2*cp chunks, rank r holding chunk r and chunk 2*cp-1-r (head plus
// mirrored tail), so that every rank's share of the causal attention work is about equal.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "hydraulis/cost/time_model.h"

namespace hydraulis {

// The rank value, in the plan format, of a document sharded over every cp rank.
inline constexpr int kSharded = -1;

// Where each document of one micro-batch (in the micro-batch's order) lies on the cp ranks
// of a context-parallel stage: the ranks that hold it, ascending and distinct, 1 to cp of
// them. One rank: the document is whole there. k > 1 ranks: it is cut into 2*k chunks and
// the j-th of its ranks holds chunk j and chunk 2*k-1-j (head plus mirrored tail), so that
// each of the k ranks gets about 1/k of its causal attention work. Different documents of
// one micro-batch may use different k and different ranks. Empty for cp = 1 pipelines
// (every document whole on the one rank). Stored flat (one rank list and its offsets), so
// that laying out a micro-batch allocates nothing per document.
class CpLayout {
 public:
  CpLayout() = default;
  // `documents` documents, each sharded over all `cp` ranks (Megatron-LM's rule).
  static CpLayout EveryRank(std::size_t documents, int cp);

  std::size_t size() const { return starts_.empty() ? 0 : starts_.size() - 1; }
  bool empty() const { return size() == 0; }
  // The ranks of document `document` (ascending).
  std::span<const int> Ranks(std::size_t document) const {
    return {ranks_.data() + starts_[document],
            static_cast<std::size_t>(starts_[document + 1] - starts_[document])};
  }
  // How many ranks hold document `document` (its k).
  int Width(std::size_t document) const { return starts_[document + 1] - starts_[document]; }

  void Clear() {
    starts_.clear();
    ranks_.clear();
  }
  // Appends a document held by `ranks` (ascending, distinct: CpLayoutError checks).
  void Add(std::span<const int> ranks);
  // Appends a document whole on `rank`.
  void AddWhole(int rank) {
    const int r[1] = {rank};
    Add(r);
  }
  // Appends a document over every one of `cp` ranks.
  void AddEvery(int cp);
  friend bool operator==(const CpLayout&, const CpLayout&) = default;

 private:
  std::vector<int> starts_;  // size() + 1 offsets into ranks_ once a document is added
  std::vector<int> ranks_;
};

// A layout from the plan format's entries, per document: {rank} (whole there), {kSharded}
// (over every one of the cp ranks) or its ranks. The ranks are checked by CpLayoutError, not
// here.
CpLayout CpLayoutFromPlaces(const std::vector<std::vector<int>>& places, int cp);

// "" when `layout` is a valid layout of `documents` documents on a cp group of `cp`, else
// what is wrong, naming the document (its ranks empty, outside [0, cp), repeated or not
// ascending). An empty layout is valid for cp = 1 (or no documents) only.
std::string CpLayoutError(const CpLayout& layout, std::size_t documents, int cp);

// Chunk c (0 <= c < 2*k) of a document of `length` tokens sharded over k ranks: [begin, end)
// in the document's own positions. Chunks differ by at most one token; the first
// length % (2*k) chunks hold the extra one. Chunks of a document shorter than 2*k tokens can
// be empty.
struct TokenRange {
  std::int64_t begin = 0;
  std::int64_t end = 0;
  std::int64_t Size() const { return end - begin; }
};
TokenRange ShardChunk(std::int64_t length, int k, int chunk);

// The two chunks the j-th of a document's k ranks holds: chunk j, then chunk 2*k-1-j (in
// this order in the rank's local tokens).
std::array<TokenRange, 2> RankChunks(std::int64_t length, int k, int position);

// Who holds chunk `chunk` (0 <= chunk < 2*k) of a document over k ranks: the position of the
// rank among the document's ranks, and which of its two chunks it is (slot 0: its head chunk
// `position`, slot 1: its tail chunk 2*k-1-position), so that RankChunks(...)[slot] is this
// chunk.
struct ChunkHolder {
  int rank = 0;  // position among the document's ranks
  int slot = 0;
};
ChunkHolder HolderOfChunk(int k, int chunk);

// Tokens of a document over k ranks that its j-th rank holds.
std::int64_t RankShardTokens(std::int64_t length, int k, int position);

// One contiguous run of a rank's local tokens: tokens [range.begin, range.end) of the
// micro-batch's document `document` (an index into the micro-batch), in local order.
struct RankSegment {
  int document = 0;
  TokenRange range;
};

// The segments cp rank `rank` holds, in local order: the micro-batch's documents in order;
// a document whole on `rank` is one segment, one sharded over ranks including `rank` its two
// chunks (empty chunks are left out), any other nothing. `layout` empty means cp = 1.
// InvalidInput when the layout does not match the lengths or is not valid (CpLayoutError).
std::vector<RankSegment> RankSegments(std::span<const std::int64_t> lengths, const CpLayout& layout,
                                      int cp, int rank);

// Which layouts the rule may choose (LayOutMicroBatch).
enum class CpLayoutSpace {
  // Each document over any 1 <= k <= cp of the ranks (ours).
  kAnySubset,
  // Each document whole on one rank or over all of them: the space before subsets, kept
  // for Megatron-LM's hybrid context parallelism, whose groups are blocks of ranks.
  kWholeOrEvery,
  // Every document over all cp ranks: Megatron-LM's THD rule, the static-cp baseline.
  kEveryRank,
};

// The space's name ("subsets", "whole-or-every", "every-rank") and back; InvalidInput
// naming `what` and the allowed names otherwise.
std::string CpLayoutSpaceName(CpLayoutSpace space);
CpLayoutSpace ParseCpLayoutSpace(std::string_view name, std::string_view what = "cp layouts");

// What a micro-batch costs on one stage of a cp pipeline, and the memory each cp rank has.
struct ShardCost {
  int cp = 1;
  // A document placed whole on one cp rank costs that rank whole.DocumentMs(s); every
  // micro-batch costs whole.c_ms once (the ranks run in parallel).
  TimeModel whole;
  // A document sharded over all cp ranks costs every rank whole.DocumentMs(s) / cp (its
  // chunks balance the causal work) plus kv_ms_per_token * s (the key/value exchange,
  // exposed): the profile's figure for the scheme.
  double kv_ms_per_token = 0;
  // A document over k ranks exchanges (k - 1) / k of its keys and values through each of
  // them: kv_unit_*_ms_per_token * (k - 1) / k per token, at NVLink speed when its k ranks
  // share a node (intra) and at the network's otherwise (inter). MakeShardCost derives both
  // from kv_ms_per_token.
  double kv_unit_intra_ms_per_token = 0;
  double kv_unit_inter_ms_per_token = 0;
  // Cp ranks per node: ranks r and q share a node when r / ranks_per_node == q /
  // ranks_per_node (the stage's GPUs are consecutive from a node boundary, spec/placement.h).
  // >= cp: the whole group is in one node.
  int ranks_per_node = 1 << 30;
  // Bytes of the gathered keys and values one rank keeps per token of a sharded document
  // that other ranks hold, over the activation bytes of one of its own tokens.
  double kv_memory_ratio = 0;
  // Memory of one cp rank in tokens of its own activations.
  double rank_capacity_tokens = 0;
  CpLayoutSpace space = CpLayoutSpace::kAnySubset;

  // A document's balanced share of the ranks, whole.DocumentMs(s) / cp, as an additive
  // model (a / cp, b / cp, the same c): no layout's time is below the sum of these shares.
  TimeModel Balanced() const {
    return {whole.a_ms_per_token2 / cp, whole.b_ms_per_token / cp, whole.c_ms};
  }
  // Exchange per token of a document over k ranks (0 for k = 1), intra-node or not.
  double ExchangeMsPerToken(int k, bool intra_node) const {
    if (k <= 1) return 0.0;
    return (intra_node ? kv_unit_intra_ms_per_token : kv_unit_inter_ms_per_token) * (k - 1) / k;
  }
  // Whether every one of `ranks` (ascending) is in the same node.
  bool IntraNode(std::span<const int> ranks) const {
    return ranks.front() / ranks_per_node == ranks.back() / ranks_per_node;
  }
  // One rank's time for a document of `tokens` tokens held by k ranks.
  double DocumentMs(std::int64_t tokens, int k, bool intra_node) const {
    return whole.DocumentMs(tokens) / k +
           ExchangeMsPerToken(k, intra_node) * static_cast<double>(tokens);
  }
  // One rank's time for a document sharded over all cp ranks.
  double ShardedDocumentMs(std::int64_t tokens) const {
    return whole.DocumentMs(tokens) / cp + kv_ms_per_token * static_cast<double>(tokens);
  }
  // The least time a document of `tokens` tokens can add to the slowest rank of its
  // micro-batch over every width and link (memory aside): a lower bound on every layout.
  double FloorDocumentMs(std::int64_t tokens) const;
  // The least exchange, summed over its ranks, that a document of `tokens` tokens adds to
  // the stage when it must be sharded over at least `min_width` (>= 2) ranks.
  double LeastExchangeWorkMs(std::int64_t tokens, int min_width) const;
  // The fewest ranks whose memory can hold a document of `tokens` tokens on their own (1
  // when one rank can; cp + 1 when not even all can).
  int MinWidth(std::int64_t tokens) const;
  // Whether a rank using `memory` tokens of it fits. Sums of doubles are allowed their
  // rounding, so a micro-batch exactly at capacity fits when every document is sharded.
  bool FitsRank(double memory) const { return memory <= rank_capacity_tokens * (1 + 1e-9); }
  // One rank's memory, in tokens of its own activations, for a document over k ranks: its
  // own share (tokens / k) plus the gathered keys and values of the rest.
  double MemoryTokens(std::int64_t tokens, int k) const {
    return static_cast<double>(tokens) / k * (1.0 + kv_memory_ratio * (k - 1));
  }
  double ShardedMemoryTokens(std::int64_t tokens) const { return MemoryTokens(tokens, cp); }
};

// Where the cp ranks of a stage sit, for the exchange's link.
struct CpTopology {
  // Cp ranks per node (ShardCost::ranks_per_node); 0: the whole group shares a node.
  int ranks_per_node = 0;
  // Exchange time per byte within a node over that across nodes (<= 1).
  double intra_over_inter = 1.0;
};

// The cost of a cp pipeline whose documents placed whole cost `whole`, with the given
// exchange and memory terms; each rank's memory is what a micro-batch of `capacity_tokens`
// needs when every document is sharded. For cp = 1 the rank holds the capacity itself.
// kv_ms_per_token is the exchange over all cp ranks, over the link `topology` gives them.
ShardCost MakeShardCost(int cp, const TimeModel& whole, std::int64_t capacity_tokens,
                        double kv_ms_per_token = 0, double kv_memory_ratio = 0,
                        const CpTopology& topology = {});

// The layout rule (docs/design.md, "Context parallelism"), deterministic; empty for cp = 1.
// For CpLayoutSpace::kWholeOrEvery: documents are taken longest first; the time rule marks
// the k longest documents whose whole time exceeds the balanced share of themselves and
// every shorter document plus their own exchange. For each j = 0..k one candidate layout
// shards the j longest over every rank and places the others whole, longest first, on the
// cp rank with the least time so far whose memory still holds them (the lowest such rank on
// ties; one that fits no rank is sharded), then shards documents of the slowest rank while
// that lowers the slowest rank's time. The fastest candidate that fits every rank's memory
// wins (ties: the fewest sharded documents), or every document sharded when that is faster
// or nothing else fits (a micro-batch within the pipeline's capacity always fits that way).
// For kAnySubset, also a list schedule over widths: documents longest first, each on the
// width k and the k least-loaded ranks with room (within one node, or the group's least
// loaded) that give the least projected stage time, max(the slowest rank, the ranks' mean
// with every document still to place), run with widths capped at cp, cp/2, ..., 2; and a
// list schedule that puts each document over the fewest ranks whose memory holds it where it
// ends soonest (documents tile the ranks, the least exchange); each list schedule is
// followed by moves of the slowest rank's documents. The fastest layout wins (ties: the
// first). kEveryRank: every document over every rank.
CpLayout LayOutMicroBatch(std::span<const std::int64_t> lengths, const ShardCost& cost);

// One stage's time for the micro-batch laid out by `layout`: whole.c_ms plus the largest
// cp rank's time. For cp = 1 (empty layout) c plus the documents' times in their order.
double LaidOutStageMs(std::span<const std::int64_t> lengths, const CpLayout& layout,
                      const ShardCost& cost);

// Each cp rank's memory in tokens of its own activations under `layout`.
std::vector<double> RankMemoryTokens(std::span<const std::int64_t> lengths, const CpLayout& layout,
                                     const ShardCost& cost);

}  // namespace hydraulis
