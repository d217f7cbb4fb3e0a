// How many long documents a batch draws: what `propose` sizes its strategies for batches
// with several long documents by (--top-documents; docs/propose.md, "Defaults").
#pragma once

#include <cstdint>
#include <span>

namespace hydraulis {

// The number of documents longer than `threshold` tokens (lengths cut at `max_len`) that a
// batch of `tokens_per_batch` tokens draws at quantile `quantile` (in (0, 1)): the smallest
// k >= 0 with P(X > k) <= 1 - quantile, X the count of such documents in a batch, Poisson
// with mean (the batch's expected documents) x (their share of the documents). A batch
// draws documents independently in proportion to their frequency (BatchSampler), so X is
// binomial; Poisson is its limit for the many documents of a batch. 0 when no document is
// longer than `threshold`. InvalidInput on empty lengths, a length < 1, max_len < 1,
// tokens_per_batch < 1 or a quantile outside (0, 1).
int LongDocumentsPerBatch(std::span<const std::int64_t> lengths, std::int64_t max_len,
                          std::int64_t tokens_per_batch, std::int64_t threshold, double quantile);

}  // namespace hydraulis
