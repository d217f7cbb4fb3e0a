#include "hydraulis/cost/shard_layout.h"

#include <gtest/gtest.h>

#include <vector>

#include "hydraulis/base/error.h"

namespace hydraulis {
namespace {

TEST(ShardChunkTest, ChunksTileTheDocumentAndDifferByAtMostOneToken) {
  for (int cp : {1, 2, 3, 5, 6}) {
    for (std::int64_t length : {1, 2, 3, 5, 11, 12, 13, 127, 4096}) {
      std::int64_t next = 0, smallest = length, largest = 0;
      for (int k = 0; k < 2 * cp; ++k) {
        const TokenRange r = ShardChunk(length, cp, k);
        EXPECT_EQ(r.begin, next);
        next = r.end;
        smallest = std::min(smallest, r.Size());
        largest = std::max(largest, r.Size());
      }
      EXPECT_EQ(next, length);
      EXPECT_LE(largest - smallest, 1);
    }
  }
}

TEST(RankChunksTest, RankTakesItsHeadAndTheMirroredTail) {
  // 10 tokens over cp = 2: chunks [0,3) [3,6) [6,8) [8,10).
  const auto r0 = RankChunks(10, 2, 0), r1 = RankChunks(10, 2, 1);
  EXPECT_EQ(r0[0].begin, 0);
  EXPECT_EQ(r0[0].end, 3);
  EXPECT_EQ(r0[1].begin, 8);
  EXPECT_EQ(r0[1].end, 10);
  EXPECT_EQ(r1[0].begin, 3);
  EXPECT_EQ(r1[0].end, 6);
  EXPECT_EQ(r1[1].begin, 6);
  EXPECT_EQ(r1[1].end, 8);
  EXPECT_EQ(RankShardTokens(10, 2, 0) + RankShardTokens(10, 2, 1), 10);
}

// The holder of every chunk, read back through RankChunks, is that very chunk.
TEST(HolderOfChunkTest, NamesTheRankAndSlotWhoseChunkItIs) {
  for (int cp : {1, 2, 3, 4}) {
    for (std::int64_t length : {1, 5, 13, 64}) {
      std::vector<int> held(static_cast<std::size_t>(cp), 0);
      for (int c = 0; c < 2 * cp; ++c) {
        const ChunkHolder h = HolderOfChunk(cp, c);
        ASSERT_GE(h.rank, 0);
        ASSERT_LT(h.rank, cp);
        const TokenRange mine = RankChunks(length, cp, h.rank)[static_cast<std::size_t>(h.slot)];
        const TokenRange chunk = ShardChunk(length, cp, c);
        EXPECT_EQ(mine.begin, chunk.begin) << "cp " << cp << " chunk " << c;
        EXPECT_EQ(mine.end, chunk.end) << "cp " << cp << " chunk " << c;
        ++held[static_cast<std::size_t>(h.rank)];
      }
      for (int n : held) EXPECT_EQ(n, 2);
    }
  }
  EXPECT_EQ(HolderOfChunk(3, 5).rank, 0);
  EXPECT_EQ(HolderOfChunk(3, 5).slot, 1);
  EXPECT_EQ(HolderOfChunk(3, 2).rank, 2);
  EXPECT_EQ(HolderOfChunk(3, 2).slot, 0);
}

TEST(RankSegmentsTest, EveryTokenOnExactlyOneRank) {
  const std::vector<std::int64_t> lengths = {7, 2, 13, 1, 5};
  const ShardLayout layout = {kSharded, 1, kSharded, 0, 2};
  const int cp = 3;
  std::vector<std::vector<int>> owner(lengths.size());
  for (std::size_t i = 0; i < lengths.size(); ++i) owner[i].assign(lengths[i], 0);
  for (int rank = 0; rank < cp; ++rank) {
    int last_doc = -1;
    for (const RankSegment& s : RankSegments(lengths, layout, cp, rank)) {
      EXPECT_GE(s.document, last_doc);  // documents in micro-batch order
      last_doc = s.document;
      EXPECT_GT(s.range.Size(), 0);
      for (auto t = s.range.begin; t < s.range.end; ++t) ++owner[s.document][t];
    }
  }
  for (const auto& doc : owner) {
    for (int n : doc) EXPECT_EQ(n, 1);
  }
  // A 2-token document sharded over 3 ranks leaves rank 2 without a chunk of it.
  const auto rank2 = RankSegments(std::vector<std::int64_t>{2}, ShardLayout{kSharded}, 3, 2);
  EXPECT_TRUE(rank2.empty());
}

TEST(RankSegmentsTest, EmptyLayoutIsOneRankAndBadLayoutsAreNamed) {
  const std::vector<std::int64_t> lengths = {3, 4};
  const auto all = RankSegments(lengths, {}, 1, 0);
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[1].range.end, 4);
  EXPECT_THROW(RankSegments(lengths, ShardLayout{0}, 2, 0), InvalidInput);
  EXPECT_THROW(RankSegments(lengths, ShardLayout{0, 2}, 2, 0), InvalidInput);
  EXPECT_THROW(RankSegments(lengths, ShardLayout{0, 1}, 2, 2), InvalidInput);
}

}  // namespace
}  // namespace hydraulis
