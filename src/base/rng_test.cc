#include "hydraulis/base/rng.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <vector>

namespace hydraulis {
namespace {

TEST(RngTest, SameSeedSameSequence) {
  Rng a(42), b(42), c(43);
  bool differs = false;
  for (int i = 0; i < 100; ++i) {
    auto x = a.Next();
    EXPECT_EQ(x, b.Next());
    differs |= x != c.Next();
  }
  EXPECT_TRUE(differs);
}

TEST(RngTest, BelowStaysInRangeAndCoversIt) {
  Rng r(7);
  std::vector<int> hits(10, 0);
  for (int i = 0; i < 10000; ++i) {
    auto x = r.Below(10);
    ASSERT_LT(x, 10u);
    ++hits[x];
  }
  for (int h : hits) EXPECT_GT(h, 800);
}

TEST(RngTest, ShuffleIsAPermutationAndReproducible) {
  std::vector<int> v(100), w;
  std::iota(v.begin(), v.end(), 0);
  w = v;
  Rng a(1), b(1);
  a.Shuffle(std::span<int>(v));
  b.Shuffle(std::span<int>(w));
  EXPECT_EQ(v, w);
  std::vector<int> sorted = v;
  std::sort(sorted.begin(), sorted.end());
  for (int i = 0; i < 100; ++i) EXPECT_EQ(sorted[i], i);
  EXPECT_FALSE(std::is_sorted(v.begin(), v.end()));
}

}  // namespace
}  // namespace hydraulis
