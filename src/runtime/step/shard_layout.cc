#include "hydraulis/runtime/step/shard_layout.h"

#include <algorithm>
#include <string>

#include "hydraulis/base/error.h"

namespace hydraulis {

OptimizerShardLayout MakeOptimizerShardLayout(std::int64_t numel, int ranks,
                                              std::int64_t bucket_elements) {
  if (ranks < 1) throw InvalidInput("shard layout: ranks must be >= 1");
  if (numel < 0) throw InvalidInput("shard layout: numel must be >= 0");
  if (bucket_elements < 0) {
    throw InvalidInput("shard layout: bucket_elements must be >= 0, got " +
                       std::to_string(bucket_elements));
  }
  auto round_up = [ranks](std::int64_t n) { return (n + ranks - 1) / ranks * ranks; };
  OptimizerShardLayout layout;
  layout.ranks = ranks;
  // One bucket when none is asked for or the vector fits in one; then the pieces are the
  // contiguous shards of the layout before buckets.
  layout.bucket_elements =
      bucket_elements == 0 ? round_up(std::max<std::int64_t>(numel, 1)) : round_up(bucket_elements);
  if ((numel + layout.bucket_elements - 1) / layout.bucket_elements > kMaxBuckets) {
    throw InvalidInput("buckets of " + std::to_string(bucket_elements) + " elements cut " +
                       std::to_string(numel) + " parameters into more than " +
                       std::to_string(kMaxBuckets) + " buckets (two collectives each per step)");
  }
  std::int64_t offset = 0;
  do {
    ShardBucket b;
    b.offset = offset;
    b.numel = std::min(layout.bucket_elements, round_up(numel - offset));
    if (b.numel == 0) b.numel = ranks;  // an empty vector still has one (padding) bucket
    b.piece = b.numel / ranks;
    b.shard_offset = offset / ranks;
    layout.buckets.push_back(b);
    offset += b.numel;
  } while (offset < numel);
  layout.padded_numel = offset;
  layout.shard_numel = offset / ranks;
  return layout;
}

int OptimizerShardLayout::BucketOf(std::int64_t element) const {
  return static_cast<int>(std::min<std::int64_t>(element / bucket_elements,
                                                 static_cast<std::int64_t>(buckets.size()) - 1));
}

at::Tensor OptimizerShardLayout::Shard(const at::Tensor& padded, int rank) const {
  at::Tensor shard = at::empty({shard_numel}, padded.options());
  for (const ShardBucket& b : buckets) {
    shard.slice(0, b.shard_offset, b.shard_offset + b.piece)
        .copy_(padded.slice(0, b.offset + b.piece * rank, b.offset + b.piece * (rank + 1)));
  }
  return shard;
}

at::Tensor OptimizerShardLayout::Unshard(const std::vector<at::Tensor>& shards,
                                         std::int64_t numel) const {
  if (static_cast<int>(shards.size()) != ranks || numel > padded_numel) {
    throw InternalError("OptimizerShardLayout::Unshard: " + std::to_string(shards.size()) +
                        " shards for " + std::to_string(ranks) + " ranks");
  }
  at::Tensor padded = at::empty({padded_numel}, shards[0].options());
  for (int r = 0; r < ranks; ++r) {
    for (const ShardBucket& b : buckets) {
      padded.slice(0, b.offset + b.piece * r, b.offset + b.piece * (r + 1))
          .copy_(shards[static_cast<std::size_t>(r)].slice(0, b.shard_offset,
                                                           b.shard_offset + b.piece));
    }
  }
  return padded.slice(0, 0, numel);
}

}  // namespace hydraulis
