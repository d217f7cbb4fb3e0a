// Summary statistics and a bucketed histogram of document lengths: the numbers that decide
// which parallel strategies a dataset needs (how many long documents, and how much of the
// quadratic attention cost they carry).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace hydraulis {

struct LengthStatsOptions {
  // Context length (tokens, >= 0): > 0 cuts every document to it first, as the sampler
  // does; 0 keeps documents whole.
  std::int64_t max_len = 0;
  // Bucket width (tokens, >= 0): 0 makes power-of-two buckets [1, first_bucket_tokens],
  // (first, 2 first], (2 first, 4 first], ...; > 0 makes equal buckets [1, w], (w, 2w], ...
  std::int64_t resolution_tokens = 0;
  // Upper end of the first power-of-two bucket (tokens, >= 1).
  std::int64_t first_bucket_tokens = 128;
};

// One histogram bucket: documents whose (cut) length lies in [min_tokens, max_tokens].
struct LengthBucket {
  std::int64_t min_tokens = 0;
  std::int64_t max_tokens = 0;
  std::int64_t documents = 0;
  std::int64_t tokens = 0;
  double document_share = 0;  // documents / all documents, in [0, 1]
  double token_share = 0;     // tokens / all tokens
  double square_share = 0;    // sum of length^2 / the dataset's: its share of attention cost
};

struct LengthStats {
  std::int64_t documents = 0;
  std::int64_t tokens = 0;  // after the cut to max_len
  std::int64_t min = 0;
  std::int64_t max = 0;
  double mean = 0;
  // Percentiles: the smallest length L with more than q of all documents at most L long.
  std::int64_t p50 = 0;
  std::int64_t p90 = 0;
  std::int64_t p99 = 0;
  std::int64_t truncated_documents = 0;  // documents longer than max_len
  std::int64_t truncated_tokens = 0;     // tokens they lost
  // Consecutive buckets from 1 up to the one holding max, empty ones included.
  std::vector<LengthBucket> buckets;
};

// The q-th percentile (q in [0, 1]) as defined in LengthStats, of lengths sorted
// ascending (not empty). 1 gives the maximum.
std::int64_t SortedPercentile(std::span<const std::int64_t> sorted, double q);

// InvalidInput naming the option when one is out of range; lets a caller reject options
// before loading a large dataset.
void ValidateLengthStatsOptions(const LengthStatsOptions& options);

// Statistics of `lengths` (each >= 1, at least one) under `options`. InvalidInput on an
// empty dataset, a length < 1, an option out of range, or more than kMaxLengthBuckets
// buckets (a fine resolution over very long documents; set max_len or widen it).
LengthStats ComputeLengthStats(std::span<const std::int64_t> lengths,
                               const LengthStatsOptions& options = {});

inline constexpr std::int64_t kMaxLengthBuckets = 1'000'000;

}  // namespace hydraulis
