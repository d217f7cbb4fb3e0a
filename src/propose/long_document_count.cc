#include "hydraulis/propose/long_document_count.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "hydraulis/base/error.h"

namespace hydraulis {

int LongDocumentsPerBatch(std::span<const std::int64_t> lengths, std::int64_t max_len,
                          std::int64_t tokens_per_batch, std::int64_t threshold, double quantile) {
  if (lengths.empty()) throw InvalidInput("long documents per batch: no lengths");
  if (max_len < 1 || tokens_per_batch < 1) {
    throw InvalidInput("long documents per batch: max_len and tokens_per_batch must be >= 1");
  }
  if (!(quantile > 0 && quantile < 1)) {
    throw InvalidInput("long documents per batch: quantile must be in (0, 1), got " +
                       std::to_string(quantile));
  }
  double tokens = 0;
  std::int64_t long_documents = 0;
  for (const std::int64_t s : lengths) {
    if (s < 1) throw InvalidInput("long documents per batch: a length < 1");
    const std::int64_t cut = std::min(s, max_len);
    tokens += static_cast<double>(cut);
    if (cut > threshold) ++long_documents;
  }
  if (long_documents == 0) return 0;
  const auto documents = static_cast<double>(lengths.size());
  const double per_batch = static_cast<double>(tokens_per_batch) / (tokens / documents);
  const double mean = per_batch * static_cast<double>(long_documents) / documents;
  // P(X <= k) summed term by term; the terms are computed in logs, so a large mean does
  // not underflow exp(-mean) before the terms that matter.
  double below = 0;
  for (int k = 0;; ++k) {
    below += std::exp(static_cast<double>(k) * std::log(mean) - mean - std::lgamma(k + 1.0));
    if (1 - below <= 1 - quantile) return k;
  }
}

}  // namespace hydraulis
