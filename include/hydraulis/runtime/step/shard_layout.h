// How the ZeRO-1 optimizer cuts the flat parameter vector over the ranks (Megatron's
// bucket-major layout): the vector is cut into buckets of `bucket_elements` (a multiple of
// the rank count; the last bucket shorter, padded to a multiple of it), each bucket into one
// equal piece per rank, and rank r owns piece r of every bucket. A bucket's gradients are
// then summed by one reduce-scatter and its parameters rebuilt by one all-gather, each over
// a contiguous range of the vector, and a rank's shard is its pieces in bucket order.
// One bucket is the layout of checkpoints written before buckets.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

#include "hydraulis/spec/ddp_buckets.h"

namespace hydraulis {

struct ShardBucket {
  std::int64_t offset = 0;        // first element in the padded flat vector
  std::int64_t numel = 0;         // elements, padding included (a multiple of ranks)
  std::int64_t piece = 0;         // numel / ranks: what each rank owns
  std::int64_t shard_offset = 0;  // where the pieces of this bucket start in every shard
};

// How the ZeRO-1 optimizer cuts the flat parameter vector into buckets and shards; named for
// the optimizer so that it does not read as a layout of tokens (cost/cp_layout.h).
struct OptimizerShardLayout {
  int ranks = 1;
  std::int64_t bucket_elements = 0;  // of every bucket but the last (a multiple of ranks)
  std::vector<ShardBucket> buckets;  // in vector order
  std::int64_t padded_numel = 0;     // sum of the buckets' numel (>= the vector's)
  std::int64_t shard_numel = 0;      // padded_numel / ranks: the same on every rank

  // The bucket holding padded-vector element `element`.
  int BucketOf(std::int64_t element) const;
  // Rank `rank`'s shard of `padded` ([padded_numel]) as a new tensor [shard_numel].
  at::Tensor Shard(const at::Tensor& padded, int rank) const;
  // The vector ([numel] of `numel` elements) whose shards `shards` are, one per rank in
  // rank order, each [shard_numel].
  at::Tensor Unshard(const std::vector<at::Tensor>& shards, std::int64_t numel) const;
};

// The layout of `numel` elements over `ranks` ranks with buckets of `bucket_elements`,
// rounded up to a multiple of `ranks` (0: one bucket). InvalidInput on ranks < 1, numel < 0,
// bucket_elements < 0, or more than 2^16 buckets.
OptimizerShardLayout MakeOptimizerShardLayout(std::int64_t numel, int ranks,
                                              std::int64_t bucket_elements);

}  // namespace hydraulis
