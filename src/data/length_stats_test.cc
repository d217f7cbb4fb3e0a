// Length statistics: a hand-checked example, a brute-force oracle on random data, and the
// published statistics of the real Wikipedia lengths.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <numeric>
#include <string>
#include <vector>

#include "../base/test_support.h"
#include "hydraulis/base/error.h"
#include "hydraulis/base/rng.h"
#include "hydraulis/data/length_stats.h"
#include "hydraulis/data/lengths.h"

namespace hydraulis {
namespace {

using Lengths = std::vector<std::int64_t>;
using test_support::InvalidInputMessage;

const std::string kWikipediaLengths =
    std::string(HYDRAULIS_SOURCE_DIR) + "/../shared/data/wikipedia-doc-lengths.txt";

TEST(LengthStatsTest, HandCheckedExample) {
  const Lengths data = {257, 1, 128, 1000, 129, 256};
  const LengthStats s = ComputeLengthStats(data);
  EXPECT_EQ(s.documents, 6);
  EXPECT_EQ(s.tokens, 1771);
  EXPECT_EQ(s.min, 1);
  EXPECT_EQ(s.max, 1000);
  EXPECT_DOUBLE_EQ(s.mean, 1771.0 / 6);
  // Sorted: 1 128 129 256 257 1000; p50 is the 4th (more than half are <= 256).
  EXPECT_EQ(s.p50, 256);
  EXPECT_EQ(s.p90, 1000);
  EXPECT_EQ(s.p99, 1000);
  EXPECT_EQ(s.truncated_documents, 0);
  ASSERT_EQ(s.buckets.size(), 4u);
  const std::int64_t lo[] = {1, 129, 257, 513}, hi[] = {128, 256, 512, 1024};
  const std::int64_t docs[] = {2, 2, 1, 1}, tokens[] = {129, 385, 257, 1000};
  const double squares[] = {1.0 + 128 * 128, 129.0 * 129 + 256 * 256, 257.0 * 257, 1e6};
  const double total_squares = squares[0] + squares[1] + squares[2] + squares[3];
  for (std::size_t k = 0; k < 4; ++k) {
    SCOPED_TRACE(k);
    EXPECT_EQ(s.buckets[k].min_tokens, lo[k]);
    EXPECT_EQ(s.buckets[k].max_tokens, hi[k]);
    EXPECT_EQ(s.buckets[k].documents, docs[k]);
    EXPECT_EQ(s.buckets[k].tokens, tokens[k]);
    EXPECT_DOUBLE_EQ(s.buckets[k].document_share, static_cast<double>(docs[k]) / 6);
    EXPECT_DOUBLE_EQ(s.buckets[k].token_share, static_cast<double>(tokens[k]) / 1771);
    EXPECT_DOUBLE_EQ(s.buckets[k].square_share, squares[k] / total_squares);
  }
  // The longest document holds 56% of the tokens but 81% of the attention cost.
  EXPECT_GT(s.buckets[3].square_share, 0.8);
}

TEST(LengthStatsTest, CutToMaxLenAndEqualWidthBuckets) {
  const Lengths data = {50, 100, 101, 250, 5000, 700};
  LengthStatsOptions o;
  o.max_len = 300;
  o.resolution_tokens = 100;
  const LengthStats s = ComputeLengthStats(data, o);
  EXPECT_EQ(s.truncated_documents, 2);
  EXPECT_EQ(s.truncated_tokens, 4700 + 400);
  EXPECT_EQ(s.tokens, 50 + 100 + 101 + 250 + 300 + 300);
  EXPECT_EQ(s.max, 300);
  ASSERT_EQ(s.buckets.size(), 3u);
  EXPECT_EQ(s.buckets[0].documents, 2);  // [1, 100]
  EXPECT_EQ(s.buckets[1].documents, 1);  // [101, 200]
  EXPECT_EQ(s.buckets[2].documents, 3);  // [201, 300]
  EXPECT_EQ(s.buckets[2].min_tokens, 201);
  EXPECT_EQ(s.buckets[2].max_tokens, 300);
  // A power-of-two histogram ends at the context length, not at the next power of two.
  o.resolution_tokens = 0;
  const LengthStats p = ComputeLengthStats(data, o);
  ASSERT_EQ(p.buckets.size(), 3u);
  EXPECT_EQ(p.buckets.back().min_tokens, 257);
  EXPECT_EQ(p.buckets.back().max_tokens, 300);
  EXPECT_EQ(p.buckets.back().documents, 2);
}

// A direct transcription of the definitions, for comparison.
LengthStats Oracle(Lengths data, const LengthStatsOptions& o) {
  LengthStats s;
  for (auto& x : data) {
    if (o.max_len > 0 && x > o.max_len) {
      ++s.truncated_documents;
      s.truncated_tokens += x - o.max_len;
      x = o.max_len;
    }
  }
  std::sort(data.begin(), data.end());
  const auto n = static_cast<std::int64_t>(data.size());
  s.documents = n;
  s.tokens = std::accumulate(data.begin(), data.end(), std::int64_t{0});
  s.min = data.front();
  s.max = data.back();
  // Smallest L with more than q n documents at most L, with q in percent to stay exact.
  auto percentile = [&](std::int64_t percent) {
    for (std::int64_t x : data) {
      const auto at_most = std::upper_bound(data.begin(), data.end(), x) - data.begin();
      if (100 * at_most > percent * n) return x;
    }
    return data.back();
  };
  s.p50 = percentile(50);
  s.p90 = percentile(90);
  s.p99 = percentile(99);
  std::int64_t lo = 1, hi = o.resolution_tokens > 0 ? o.resolution_tokens : o.first_bucket_tokens;
  while (true) {
    LengthBucket b;
    b.min_tokens = lo;
    b.max_tokens = o.max_len > 0 ? std::min(hi, o.max_len) : hi;
    for (std::int64_t x : data) {
      if (x >= lo && x <= hi) {
        ++b.documents;
        b.tokens += x;
      }
    }
    s.buckets.push_back(b);
    if (hi >= s.max) break;
    lo = hi + 1;
    hi = o.resolution_tokens > 0 ? hi + o.resolution_tokens : 2 * hi;
  }
  return s;
}

TEST(LengthStatsTest, MatchesTheOracleOnRandomData) {
  Rng rng(99);
  for (int trial = 0; trial < 60; ++trial) {
    SCOPED_TRACE(trial);
    const auto n = 1 + static_cast<std::size_t>(rng.Below(300));
    const auto spread = 1 + rng.Below(trial % 2 ? 5000 : 40);
    Lengths data(n);
    for (auto& x : data) x = 1 + static_cast<std::int64_t>(rng.Below(spread));
    LengthStatsOptions o;
    o.max_len = trial % 3 == 0 ? 0 : 1 + static_cast<std::int64_t>(rng.Below(3000));
    o.resolution_tokens = trial % 4 == 0 ? 1 + static_cast<std::int64_t>(rng.Below(700)) : 0;
    o.first_bucket_tokens = trial % 5 == 0 ? 1 + static_cast<std::int64_t>(rng.Below(200)) : 128;
    const LengthStats want = Oracle(data, o);
    const LengthStats got = ComputeLengthStats(data, o);
    EXPECT_EQ(got.documents, want.documents);
    EXPECT_EQ(got.tokens, want.tokens);
    EXPECT_EQ(got.min, want.min);
    EXPECT_EQ(got.max, want.max);
    EXPECT_EQ(got.p50, want.p50);
    EXPECT_EQ(got.p90, want.p90);
    EXPECT_EQ(got.p99, want.p99);
    EXPECT_EQ(got.truncated_documents, want.truncated_documents);
    EXPECT_EQ(got.truncated_tokens, want.truncated_tokens);
    ASSERT_EQ(got.buckets.size(), want.buckets.size());
    double docs = 0, tokens = 0, squares = 0;
    for (std::size_t k = 0; k < got.buckets.size(); ++k) {
      SCOPED_TRACE("bucket " + std::to_string(k));
      EXPECT_EQ(got.buckets[k].min_tokens, want.buckets[k].min_tokens);
      EXPECT_EQ(got.buckets[k].max_tokens, want.buckets[k].max_tokens);
      EXPECT_EQ(got.buckets[k].documents, want.buckets[k].documents);
      EXPECT_EQ(got.buckets[k].tokens, want.buckets[k].tokens);
      docs += got.buckets[k].document_share;
      tokens += got.buckets[k].token_share;
      squares += got.buckets[k].square_share;
    }
    EXPECT_NEAR(docs, 1.0, 1e-12);
    EXPECT_NEAR(tokens, 1.0, 1e-12);
    EXPECT_NEAR(squares, 1.0, 1e-12);
  }
}

TEST(LengthStatsTest, SortedPercentile) {
  Lengths sorted(100);
  std::iota(sorted.begin(), sorted.end(), std::int64_t{1});
  EXPECT_EQ(SortedPercentile(sorted, 0), 1);
  EXPECT_EQ(SortedPercentile(sorted, 0.5), 51);
  // 0.29 * 100 is 28.999... in floating point; the rank is still 29.
  EXPECT_EQ(SortedPercentile(sorted, 0.29), 30);
  EXPECT_EQ(SortedPercentile(sorted, 0.999), 100);
  EXPECT_EQ(SortedPercentile(sorted, 1), 100);
  const Lengths one = {7};
  EXPECT_EQ(SortedPercentile(one, 0.5), 7);
  InvalidInputMessage([] { SortedPercentile({}, 0.5); });
  InvalidInputMessage([&] { SortedPercentile(sorted, 1.5); });
}

TEST(LengthStatsTest, RejectsInvalidInput) {
  const Lengths data = {1, 2};
  InvalidInputMessage([] { ComputeLengthStats({}); });
  const Lengths zero = {3, 0};
  EXPECT_NE(InvalidInputMessage([&] { ComputeLengthStats(zero); }).find("document 1"),
            std::string::npos);
  InvalidInputMessage([&] { ComputeLengthStats(data, {-1, 0, 128}); });
  InvalidInputMessage([&] { ComputeLengthStats(data, {0, -1, 128}); });
  InvalidInputMessage([&] { ComputeLengthStats(data, {0, 0, 0}); });
  const Lengths huge = {1, 5'000'000};
  EXPECT_NE(InvalidInputMessage([&] {
              ComputeLengthStats(huge, {0, 1, 128});
            }).find("buckets"),
            std::string::npos);
  // The cut bounds the bucket count, so the same resolution works with a context length.
  EXPECT_EQ(ComputeLengthStats(huge, {32'768, 1, 128}).buckets.size(), 32'768u);
  // Power-of-two buckets stay few even for the longest representable length.
  const Lengths extreme = {1, INT64_MAX / 2};
  const LengthStats s = ComputeLengthStats(extreme);
  EXPECT_EQ(s.buckets.back().documents, 1);
  EXPECT_LE(s.buckets.size(), 64u);
}

TEST(LengthStatsTest, RealWikipediaLengths) {
  if (!std::filesystem::exists(kWikipediaLengths)) {
    GTEST_SKIP() << kWikipediaLengths << " is absent";
  }
  const Lengths data = ReadLengths(kWikipediaLengths);
  const LengthStats s = ComputeLengthStats(data);
  // Published in shared/data/README.md: mean 1,014, median 347, p90 2,112, p99 10,921,
  // max 1,823,777 over 1,000,000 documents.
  EXPECT_EQ(s.documents, 1'000'000);
  EXPECT_EQ(s.tokens, 1'013'648'780);
  EXPECT_NEAR(s.mean, 1014, 0.5);
  EXPECT_EQ(s.p50, 347);
  EXPECT_EQ(s.p90, 2112);
  EXPECT_EQ(s.p99, 10'921);
  EXPECT_EQ(s.max, 1'823'777);
  EXPECT_EQ(s.min, 1);
  ASSERT_EQ(s.buckets.size(), 15u);  // up to (1,048,576, 2,097,152]
  EXPECT_EQ(s.buckets.back().min_tokens, 1'048'577);
  EXPECT_EQ(s.buckets.back().max_tokens, 2'097'152);

  // Cut to a 32K context, as the published runs are.
  const LengthStats cut = ComputeLengthStats(data, {32'768, 0, 128});
  EXPECT_EQ(cut.truncated_documents, 1304);
  EXPECT_EQ(cut.truncated_tokens, 33'838'124);
  EXPECT_EQ(cut.tokens, s.tokens - cut.truncated_tokens);
  EXPECT_EQ(cut.max, 32'768);
  ASSERT_EQ(cut.buckets.size(), 9u);
  // The last bucket, (16,384, 32,768], also holds every cut document.
  EXPECT_EQ(cut.buckets.back().documents,
            std::count_if(data.begin(), data.end(), [](std::int64_t x) { return x > 16'384; }));
  // The long tail: under 1% of the documents, about 12% of the tokens, but about half of
  // the quadratic (attention) cost.
  const LengthBucket& tail = cut.buckets.back();
  EXPECT_LT(tail.document_share, 0.01);
  EXPECT_GT(tail.square_share, 0.4);
  EXPECT_GT(tail.square_share, 3 * tail.token_share);
}

}  // namespace
}  // namespace hydraulis
