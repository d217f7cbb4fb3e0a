// The optimizer's bucket-major shard layout: exact layouts on small cases, the layout before
// buckets as the one-bucket case, and Shard/Unshard as inverses on random sizes.
#include "hydraulis/runtime/step/shard_layout.h"

#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <random>
#include <vector>

#include "hydraulis/base/error.h"

namespace hydraulis {
namespace {

TEST(OptimizerShardLayoutTest, OneBucketIsTheContiguousLayoutBeforeBuckets) {
  for (int ranks : {1, 2, 3, 8}) {
    for (std::int64_t numel : {1, 7, 48, 1001}) {
      const OptimizerShardLayout l = MakeOptimizerShardLayout(numel, ranks, 0);
      const std::int64_t shard = (numel + ranks - 1) / ranks;  // the old ceil(N / W)
      ASSERT_EQ(l.buckets.size(), 1u);
      EXPECT_EQ(l.shard_numel, shard);
      EXPECT_EQ(l.padded_numel, shard * ranks);
      const at::Tensor v = at::arange(l.padded_numel, at::kFloat);
      for (int r = 0; r < ranks; ++r) {
        EXPECT_TRUE(at::equal(l.Shard(v, r), v.slice(0, shard * r, shard * (r + 1))));
      }
      // A bucket as large as the vector is the same layout.
      EXPECT_EQ(MakeOptimizerShardLayout(numel, ranks, numel * 2).shard_numel, shard);
    }
  }
}

TEST(OptimizerShardLayoutTest, BucketsAreRoundedToTheRanksAndCutIntoOnePiecePerRank) {
  // 47 elements, 3 ranks, buckets of 10 -> 12: [0,12) [12,24) [24,36) [36,48), 4 per rank.
  const OptimizerShardLayout l = MakeOptimizerShardLayout(47, 3, 10);
  EXPECT_EQ(l.bucket_elements, 12);
  ASSERT_EQ(l.buckets.size(), 4u);
  for (std::size_t b = 0; b < 4; ++b) {
    EXPECT_EQ(l.buckets[b].offset, 12 * static_cast<std::int64_t>(b));
    EXPECT_EQ(l.buckets[b].numel, 12);
    EXPECT_EQ(l.buckets[b].piece, 4);
    EXPECT_EQ(l.buckets[b].shard_offset, 4 * static_cast<std::int64_t>(b));
  }
  EXPECT_EQ(l.padded_numel, 48);
  EXPECT_EQ(l.shard_numel, 16);
  const at::Tensor v = at::arange(48, at::kLong);
  const at::Tensor expected =
      at::cat({at::arange(4, 8, at::kLong), at::arange(16, 20, at::kLong),
               at::arange(28, 32, at::kLong), at::arange(40, 44, at::kLong)});
  EXPECT_TRUE(at::equal(l.Shard(v, 1), expected));
  EXPECT_EQ(l.BucketOf(0), 0);
  EXPECT_EQ(l.BucketOf(11), 0);
  EXPECT_EQ(l.BucketOf(12), 1);
  EXPECT_EQ(l.BucketOf(47), 3);
  // A short last bucket: 40 elements in buckets of 12 leave 4, padded to 6 (2 per rank).
  const OptimizerShardLayout s = MakeOptimizerShardLayout(40, 3, 12);
  ASSERT_EQ(s.buckets.size(), 4u);
  EXPECT_EQ(s.buckets[3].numel, 6);
  EXPECT_EQ(s.buckets[3].piece, 2);
  EXPECT_EQ(s.padded_numel, 42);
  EXPECT_EQ(s.shard_numel, 14);
}

TEST(OptimizerShardLayoutTest, UnshardInvertsShardOnRandomSizes) {
  std::mt19937_64 rng(5);
  for (int trial = 0; trial < 200; ++trial) {
    const int ranks = 1 + static_cast<int>(rng() % 9);
    const std::int64_t numel = 1 + static_cast<std::int64_t>(rng() % 500);
    const std::int64_t bucket = static_cast<std::int64_t>(rng() % 120);
    const OptimizerShardLayout l = MakeOptimizerShardLayout(numel, ranks, bucket);
    // Every element is in exactly one bucket, every bucket a multiple of the ranks.
    std::int64_t covered = 0;
    for (const ShardBucket& b : l.buckets) {
      EXPECT_EQ(b.offset, covered);
      EXPECT_EQ(b.numel % ranks, 0);
      EXPECT_EQ(b.shard_offset * ranks, b.offset);
      covered += b.numel;
    }
    EXPECT_EQ(covered, l.padded_numel);
    EXPECT_GE(l.padded_numel, numel);
    EXPECT_LT(l.padded_numel - numel, ranks);  // only the last bucket is padded
    const at::Tensor padded = at::randn({l.padded_numel}, at::kDouble);
    std::vector<at::Tensor> shards;
    for (int r = 0; r < ranks; ++r) shards.push_back(l.Shard(padded, r));
    EXPECT_TRUE(at::equal(l.Unshard(shards, numel), padded.slice(0, 0, numel)))
        << ranks << " ranks, " << numel << " elements, buckets of " << bucket;
  }
}

TEST(OptimizerShardLayoutTest, BadSizesAreInvalidInput) {
  EXPECT_THROW(MakeOptimizerShardLayout(10, 0, 0), InvalidInput);
  EXPECT_THROW(MakeOptimizerShardLayout(-1, 2, 0), InvalidInput);
  EXPECT_THROW(MakeOptimizerShardLayout(10, 2, -4), InvalidInput);
  try {
    MakeOptimizerShardLayout(std::int64_t{1} << 40, 1, 2);
    FAIL() << "2^39 buckets accepted";
  } catch (const InvalidInput& e) {
    EXPECT_NE(std::string(e.what()).find("more than 65536 buckets"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace hydraulis
