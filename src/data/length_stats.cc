#include "hydraulis/data/length_stats.h"

#include <algorithm>
#include <bit>
#include <limits>
#include <string>

#include "hydraulis/base/error.h"

namespace hydraulis {
namespace {

constexpr double kP50 = 0.50;
constexpr double kP90 = 0.90;
constexpr double kP99 = 0.99;
// Absorbs the rounding of q * n (0.29 * 100 is 28.999...) so the index is the exact one.
constexpr double kRankSlack = 1e-9;
constexpr std::int64_t kInt64Max = std::numeric_limits<std::int64_t>::max();

std::size_t PercentileRank(std::size_t n, double q) {
  const auto rank = static_cast<std::size_t>(q * static_cast<double>(n) + kRankSlack);
  return std::min(rank, n - 1);
}

std::int64_t SaturatingMul(std::int64_t a, std::int64_t b) {
  std::int64_t out = 0;
  return __builtin_mul_overflow(a, b, &out) ? kInt64Max : out;
}

// Index of the bucket holding `len` (>= 1).
std::size_t BucketOf(std::int64_t len, const LengthStatsOptions& o) {
  const auto below = static_cast<std::uint64_t>(len - 1);
  if (o.resolution_tokens > 0) {
    return static_cast<std::size_t>(below / static_cast<std::uint64_t>(o.resolution_tokens));
  }
  // Bucket k >= 1 holds (f 2^(k-1), f 2^k]: exactly the lengths with floor((len-1)/f) in
  // [2^(k-1), 2^k), whose bit width is k.
  return static_cast<std::size_t>(
      std::bit_width(below / static_cast<std::uint64_t>(o.first_bucket_tokens)));
}

// Inclusive upper end of bucket k, saturating at int64's maximum.
std::int64_t BucketTop(std::size_t k, const LengthStatsOptions& o) {
  if (o.resolution_tokens > 0) {
    return SaturatingMul(static_cast<std::int64_t>(k) + 1, o.resolution_tokens);
  }
  std::int64_t top = o.first_bucket_tokens;
  for (std::size_t i = 0; i < k; ++i) top = SaturatingMul(top, 2);
  return top;
}

}  // namespace

std::int64_t SortedPercentile(std::span<const std::int64_t> sorted, double q) {
  if (sorted.empty()) throw InvalidInput("percentile of an empty dataset");
  if (!(q >= 0 && q <= 1)) throw InvalidInput("percentile: q must be in [0, 1]");
  return sorted[PercentileRank(sorted.size(), q)];
}

void ValidateLengthStatsOptions(const LengthStatsOptions& options) {
  if (options.max_len < 0) {
    throw InvalidInput("max-len must be >= 0 (0: no cut), got " + std::to_string(options.max_len));
  }
  if (options.resolution_tokens < 0) {
    throw InvalidInput("resolution must be >= 0 (0: powers of two), got " +
                       std::to_string(options.resolution_tokens));
  }
  if (options.first_bucket_tokens < 1) {
    throw InvalidInput("first bucket must be >= 1 token, got " +
                       std::to_string(options.first_bucket_tokens));
  }
}

LengthStats ComputeLengthStats(std::span<const std::int64_t> lengths,
                               const LengthStatsOptions& options) {
  if (lengths.empty()) throw InvalidInput("length statistics: the dataset has no documents");
  ValidateLengthStatsOptions(options);
  LengthStats stats;
  stats.documents = static_cast<std::int64_t>(lengths.size());
  std::vector<std::int64_t> cut(lengths.begin(), lengths.end());
  for (std::size_t i = 0; i < cut.size(); ++i) {
    std::int64_t& len = cut[i];
    if (len < 1) {
      throw InvalidInput("length statistics: document " + std::to_string(i) + " has length " +
                         std::to_string(len) + "; lengths must be >= 1");
    }
    if (options.max_len > 0 && len > options.max_len) {
      ++stats.truncated_documents;
      stats.truncated_tokens += len - options.max_len;
      len = options.max_len;
    }
    if (__builtin_add_overflow(stats.tokens, len, &stats.tokens)) {
      throw InvalidInput("length statistics: the total token count overflows int64");
    }
  }
  const auto [min_it, max_it] = std::minmax_element(cut.begin(), cut.end());
  stats.min = *min_it;
  stats.max = *max_it;
  stats.mean = static_cast<double>(stats.tokens) / static_cast<double>(stats.documents);

  const std::size_t num_buckets = BucketOf(stats.max, options) + 1;
  if (num_buckets > static_cast<std::size_t>(kMaxLengthBuckets)) {
    throw InvalidInput("length statistics: " + std::to_string(num_buckets) +
                       " buckets at resolution " + std::to_string(options.resolution_tokens) +
                       " up to " + std::to_string(stats.max) + " tokens exceed the limit of " +
                       std::to_string(kMaxLengthBuckets) + "; widen the resolution or set max-len");
  }
  stats.buckets.resize(num_buckets);
  std::vector<double> squares(num_buckets, 0.0);
  double total_squares = 0;
  for (std::int64_t len : cut) {
    const std::size_t k = BucketOf(len, options);
    const double square = static_cast<double>(len) * static_cast<double>(len);
    ++stats.buckets[k].documents;
    stats.buckets[k].tokens += len;  // bounded by stats.tokens, checked above
    squares[k] += square;
    total_squares += square;
  }
  for (std::size_t k = 0; k < num_buckets; ++k) {
    LengthBucket& b = stats.buckets[k];
    b.min_tokens = k == 0 ? 1 : BucketTop(k - 1, options) + 1;
    b.max_tokens = BucketTop(k, options);
    // No document exceeds max_len, so the last bucket ends there rather than at a power of two.
    if (options.max_len > 0) b.max_tokens = std::min(b.max_tokens, options.max_len);
    b.document_share = static_cast<double>(b.documents) / static_cast<double>(stats.documents);
    b.token_share = static_cast<double>(b.tokens) / static_cast<double>(stats.tokens);
    b.square_share = squares[k] / total_squares;
  }

  // Three selections instead of a sort: each later rank lies in the part the previous
  // nth_element left above its pivot.
  auto select = [&cut](std::size_t from, std::size_t rank) {
    std::nth_element(cut.begin() + static_cast<std::ptrdiff_t>(from),
                     cut.begin() + static_cast<std::ptrdiff_t>(rank), cut.end());
    return cut[rank];
  };
  const std::size_t r50 = PercentileRank(cut.size(), kP50);
  const std::size_t r90 = PercentileRank(cut.size(), kP90);
  const std::size_t r99 = PercentileRank(cut.size(), kP99);
  stats.p50 = select(0, r50);
  stats.p90 = select(r50, r90);
  stats.p99 = select(r90, r99);
  return stats;
}

}  // namespace hydraulis
