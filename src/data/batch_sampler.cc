#include "hydraulis/data/batch_sampler.h"

#include <algorithm>
#include <numeric>

#include "hydraulis/base/error.h"
#include "hydraulis/base/rng.h"

namespace hydraulis {

BatchSampler::BatchSampler(std::span<const std::int64_t> dataset, const SamplerOptions& options)
    : dataset_(dataset), options_(options) {
  if (dataset_.empty()) throw InvalidInput("batch sampler: the dataset has no documents");
  for (std::size_t i = 0; i < dataset_.size(); ++i) {
    if (dataset_[i] < 1) {
      throw InvalidInput("batch sampler: document " + std::to_string(i) + " has length " +
                         std::to_string(dataset_[i]) + "; lengths must be >= 1");
    }
  }
  if (options_.documents_per_batch < 0) {
    throw InvalidInput("documents-per-batch must be >= 0 (0 samples by token budget), got " +
                       std::to_string(options_.documents_per_batch));
  }
  if (options_.documents_per_batch == 0 && options_.tokens_per_batch < 1) {
    throw InvalidInput("tokens-per-batch must be >= 1, got " +
                       std::to_string(options_.tokens_per_batch));
  }
  if (options_.max_len < 1) {
    throw InvalidInput("max-len must be >= 1, got " + std::to_string(options_.max_len));
  }
  if (options_.documents_per_batch == 0) {
    // A batch may span epochs, but a budget that needs tens of millions of documents per
    // batch (a huge budget, or --max-len 1) would take the planner hours and the sampler
    // gigabytes: refuse it with the arithmetic instead of spinning.
    double mean = 0;
    for (std::int64_t s : dataset_) mean += static_cast<double>(std::min(s, options_.max_len));
    mean /= static_cast<double>(dataset_.size());
    const double documents = static_cast<double>(options_.tokens_per_batch) / mean;
    if (documents > static_cast<double>(kMaxDocumentsPerBatch)) {
      throw InvalidInput("tokens-per-batch " + std::to_string(options_.tokens_per_batch) +
                         " with documents of " + std::to_string(mean) +
                         " tokens on average (cut to max-len " + std::to_string(options_.max_len) +
                         ") means about " + std::to_string(static_cast<std::int64_t>(documents)) +
                         " documents per batch, more than " +
                         std::to_string(kMaxDocumentsPerBatch) + " (planning time grows with it)");
    }
  } else if (options_.documents_per_batch > kMaxDocumentsPerBatch) {
    throw InvalidInput("documents-per-batch " + std::to_string(options_.documents_per_batch) +
                       " is more than " + std::to_string(kMaxDocumentsPerBatch));
  }
  Reshuffle();
}

void BatchSampler::Reshuffle() {
  order_.resize(dataset_.size());
  std::iota(order_.begin(), order_.end(), std::int64_t{0});
  // Mix the epoch into the seed so every epoch has its own reproducible order.
  Rng rng(options_.seed * 0x9e3779b97f4a7c15ULL + static_cast<std::uint64_t>(position_.epoch));
  rng.Shuffle(std::span<std::int64_t>(order_));
}

void BatchSampler::Restore(const SamplerPosition& position) {
  if (position.epoch < 0 || position.offset < 0 ||
      position.offset > static_cast<std::int64_t>(dataset_.size())) {
    throw InvalidInput("batch sampler: invalid position (epoch " + std::to_string(position.epoch) +
                       ", offset " + std::to_string(position.offset) + ")");
  }
  position_ = position;
  Reshuffle();
}

std::int64_t BatchSampler::PeekDocument() {
  // The end of an epoch and the start of the next are the same place in the stream.
  if (position_.offset == static_cast<std::int64_t>(order_.size())) {
    ++position_.epoch;
    position_.offset = 0;
    Reshuffle();
  }
  return order_[static_cast<std::size_t>(position_.offset)];
}

std::int64_t BatchSampler::TakeDocument() {
  const std::int64_t index = PeekDocument();
  ++position_.offset;
  return index;
}

SampledBatch BatchSampler::Next() {
  SampledBatch batch;
  if (options_.documents_per_batch > 0) {
    const auto count = static_cast<std::size_t>(options_.documents_per_batch);
    // Reserve at most an epoch: a very large count grows as it goes rather than up front.
    batch.lengths.reserve(std::min(count, dataset_.size()));
    batch.dataset_indices.reserve(std::min(count, dataset_.size()));
    for (std::size_t i = 0; i < count; ++i) {
      const std::int64_t index = TakeDocument();
      batch.lengths.push_back(
          std::min(dataset_[static_cast<std::size_t>(index)], options_.max_len));
      batch.dataset_indices.push_back(index);
    }
    return batch;
  }
  std::int64_t remaining = options_.tokens_per_batch;
  while (remaining > 0) {
    if (options_.whole_documents && !batch.lengths.empty()) {
      // Taken when the batch ends nearer the budget with it than without it.
      const std::int64_t next = PeekDocument();
      if (std::min(dataset_[static_cast<std::size_t>(next)], options_.max_len) - remaining >
          remaining) {
        break;
      }
    }
    const std::int64_t index = TakeDocument();
    const std::int64_t whole =
        std::min(dataset_[static_cast<std::size_t>(index)], options_.max_len);
    const std::int64_t len = options_.whole_documents ? whole : std::min(whole, remaining);
    batch.lengths.push_back(len);
    batch.dataset_indices.push_back(index);
    remaining -= len;
  }
  return batch;
}

}  // namespace hydraulis
