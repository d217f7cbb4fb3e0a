// The input of the strategy proposal (method.md 2.4): a dataset's document lengths,
// truncated to the context length and counted in bins of a fixed length resolution.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace hydraulis {

// Documents whose (truncated) length lies in ((index - 1) R, index R], R the resolution.
// The exact sums are kept, not only the count, so the cost of a bin is that of its real
// documents rather than of `documents` copies of its upper bound.
struct HistogramBin {
  std::int64_t index = 0;         // k >= 1
  std::int64_t upper_tokens = 0;  // min(k R, max_len): the longest length the bin admits
  std::int64_t longest = 0;       // longest document actually in the bin (tokens)
  std::int64_t documents = 0;     // >= 1 (only non-empty bins are kept)
  std::int64_t tokens = 0;        // sum of lengths
  // Sum of squared lengths; a double because it can pass 2^63 on very large datasets.
  double squared_tokens = 0;
};

struct LengthHistogram {
  std::int64_t resolution_tokens = 0;  // R
  std::int64_t max_len = 0;            // documents were truncated to this many tokens
  std::vector<HistogramBin> bins;      // non-empty bins only, ascending index
  std::int64_t documents = 0;
  std::int64_t tokens = 0;               // after truncation
  std::int64_t truncated_documents = 0;  // documents longer than max_len
};

// Bins `lengths` (each >= 1, at least one) after truncating each to max_len (>= 1) at a
// resolution of resolution_tokens (>= 1). InvalidInput naming the value otherwise.
LengthHistogram BuildLengthHistogram(std::span<const std::int64_t> lengths, std::int64_t max_len,
                                     std::int64_t resolution_tokens);

}  // namespace hydraulis
