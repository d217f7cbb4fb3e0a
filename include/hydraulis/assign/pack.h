// Stage 2 of the data assignment: pack one pipeline's documents into micro-batches within
// its capacity, choosing the number of micro-batches, to minimise its exact 1F1B time.
#pragma once

#include <span>
#include <vector>

#include "hydraulis/assign/pipeline_relaxation.h"
#include "hydraulis/assign/problem.h"

namespace hydraulis {

struct PackOptions {
  // Micro-batch counts tried above the smallest feasible one (pp > 1 only; >= 0).
  int extra_micro_batch_counts = 16;
  // Improvement passes of the move/swap local search per micro-batch count (>= 0).
  int local_search_passes = 8;
  // Optional cache of 1F1B relaxations (not owned). When set, pp > 1 pipelines also try
  // packings shaped like the relaxation's optimum: small micro-batches at both ends.
  RelaxationTable* relaxations = nullptr;
  // cp > 1 pipelines also try RankBinPack's packings (more micro-batches, documents whole
  // on their ranks) and keep the fastest; off only to measure what they buy.
  bool rank_bins = true;
  // Over rank subsets, RankBinPack shards a document no rank holds over the fewest ranks
  // (the least exchange); with this, the packing that shards it over every rank is tried
  // too, and the faster kept. Off only to measure what it buys.
  bool rank_bins_over_every_rank = true;
};

struct PackResult {
  MicroBatches micro_batches;
  double ms = 0;  // exact 1F1B time
};

// Packs `docs` (indices into problem.lengths, each no longer than the capacity) for
// `pipeline`. With pp == 1 and cp == 1 the time is sum of document costs + v*c, so it
// minimises v (first-fit and best-fit decreasing on tokens). With pp > 1 it tries each v from the
// smallest feasible upward, balances micro-batch times under the capacity (longest
// first, then moves and swaps out of the slowest micro-batch), orders the micro-batches
// for the 1F1B schedule, and keeps the v with the least exact time. For cp > 1 it also
// tries RankBinPack from the fewest micro-batches the ranks' memory allows upward (see
// PackOptions::rank_bins). Deterministic.
PackResult PackPipeline(const AssignProblem& problem, const PipelineModel& pipeline,
                        std::span<const int> docs, const PackOptions& options = {});

// Packs `docs` into exactly `v` micro-batches balancing their times under the capacity
// (used by PackPipeline and the KK baseline). Returns false when it finds no packing.
bool BalancedPack(const AssignProblem& problem, const PipelineModel& pipeline,
                  std::span<const int> docs, int v, int local_search_passes, MicroBatches& out);

// Packs `docs` into micro-batches whose document work follows `target_ms` (execution
// order): longest first, each document to the micro-batch furthest below its target that
// has room. Empty micro-batches are dropped. Returns false when a document finds no room.
bool ShapedPack(const AssignProblem& problem, const PipelineModel& pipeline,
                std::span<const int> docs, std::span<const double> target_ms, MicroBatches& out);

// Packs the documents of a cp > 1 pipeline into exactly `v` micro-batches by their cp
// ranks: documents no rank can hold whole (longer than its memory) are sharded, each into
// the micro-batch whose slowest rank is least loaded; the others, longest first, go whole
// to the least-loaded rank (over all v * cp ranks) whose memory and micro-batch still have
// room. Sharding pays the key/value exchange on every rank, so several documents placed
// whole side by side are much cheaper, but MinCountPack's fullest micro-batches leave no
// rank room for them. Empty micro-batches are dropped. Returns false when a document finds
// no room. The micro-batches' layouts are LayOutMicroBatch's, as for every packing.
bool RankBinPack(const AssignProblem& problem, const PipelineModel& pipeline,
                 std::span<const int> docs, int v, MicroBatches& out);

// `docs` ordered longest first, ties by index (the order every packer and dispatcher
// walks documents in).
std::vector<int> LongestFirst(std::span<const std::int64_t> lengths, std::span<const int> docs);

// Fewest micro-batches first-fit/best-fit decreasing finds for `docs` under `capacity`.
MicroBatches MinCountPack(std::span<const std::int64_t> lengths, std::span<const int> docs,
                          std::int64_t capacity);

}  // namespace hydraulis
