#include "hydraulis/propose/histogram.h"

#include <algorithm>
#include <string>

#include "hydraulis/base/error.h"

namespace hydraulis {
namespace {

// Bounds the bin array (one slot per possible bin); the DP is quadratic in the bins, so a
// finer histogram would not be usable anyway.
constexpr std::int64_t kMaxHistogramSlots = std::int64_t{1} << 24;

}  // namespace

LengthHistogram BuildLengthHistogram(std::span<const std::int64_t> lengths, std::int64_t max_len,
                                     std::int64_t resolution_tokens) {
  if (max_len < 1) {
    throw InvalidInput("max-len: must be >= 1 token, got " + std::to_string(max_len));
  }
  if (resolution_tokens < 1) {
    throw InvalidInput("resolution: must be >= 1 token, got " + std::to_string(resolution_tokens));
  }
  if (lengths.empty()) throw InvalidInput("lengths: the dataset has no documents");
  LengthHistogram h;
  h.resolution_tokens = resolution_tokens;
  h.max_len = max_len;
  // One slot per possible bin: ceil(max_len / R) of them, at most max_len.
  const std::int64_t slots = (max_len - 1) / resolution_tokens + 1;
  if (slots > kMaxHistogramSlots) {
    throw InvalidInput("resolution: " + std::to_string(resolution_tokens) +
                       " tokens over max-len " + std::to_string(max_len) + " makes " +
                       std::to_string(slots) + " bins, more than " +
                       std::to_string(kMaxHistogramSlots) + "; widen the resolution");
  }
  std::vector<HistogramBin> all(static_cast<std::size_t>(slots));
  for (std::size_t i = 0; i < lengths.size(); ++i) {
    const std::int64_t original = lengths[i];
    if (original < 1) {
      throw InvalidInput("lengths[" + std::to_string(i) + "]: must be >= 1 token, got " +
                         std::to_string(original));
    }
    const std::int64_t s = std::min(original, max_len);
    if (original > max_len) ++h.truncated_documents;
    HistogramBin& bin = all[static_cast<std::size_t>((s - 1) / resolution_tokens)];
    ++bin.documents;
    bin.tokens += s;
    bin.squared_tokens += static_cast<double>(s) * static_cast<double>(s);
    bin.longest = std::max(bin.longest, s);
    ++h.documents;
    h.tokens += s;
  }
  for (std::int64_t k = 0; k < slots; ++k) {
    HistogramBin& bin = all[static_cast<std::size_t>(k)];
    if (bin.documents == 0) continue;
    bin.index = k + 1;
    bin.upper_tokens = std::min((k + 1) * resolution_tokens, max_len);
    h.bins.push_back(bin);
  }
  return h;
}

}  // namespace hydraulis
