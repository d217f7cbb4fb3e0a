// Seeded global-batch sampling from a length dataset, by token budget or document count.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace hydraulis {

struct SamplerOptions {
  std::int64_t tokens_per_batch = 200'000;  // budget per global batch (tokens, >= 1)
  std::int64_t max_len = 32'768;            // context length: documents are cut to it (>= 1)
  std::uint64_t seed = 1;
  // Documents per global batch (>= 0). 0 samples by token budget; > 0 samples exactly this
  // many documents per batch (each cut to max_len) and tokens_per_batch is not used.
  std::int64_t documents_per_batch = 0;
  // By token budget, no document is cut to the budget: one that does not fit what is left
  // of it is taken whole when the batch then ends nearer the budget than without it (it
  // overshoots by no more than it would fall short), else it starts the next batch. A batch
  // is within half a document of the budget, or one document longer than it.
  bool whole_documents = false;
};

// Where the sampler stands: epoch and offset into that epoch's shuffled order.
struct SamplerPosition {
  std::int64_t epoch = 0;
  std::int64_t offset = 0;
};

// One sampled batch: the (truncated) lengths and the dataset index of each document.
struct SampledBatch {
  std::vector<std::int64_t> lengths;
  std::vector<std::int64_t> dataset_indices;
};

// Takes documents from a per-epoch shuffled order, each cut to max_len. By token budget:
// until the budget is reached, the last document cut to what remains of it (so a budget
// below one document's length yields that document cut to the budget), or with
// whole_documents, as near the budget as whole documents come. By document count:
// exactly documents_per_batch documents. Batches run on across epoch ends. The shuffle of
// epoch e is seeded with (seed, e), so a restored position sees the same data.
class BatchSampler {
 public:
  // Most documents one batch may hold (ten times the largest batch the planner's scaling
  // benchmark plans, docs/benchmarks.md); options implying more are InvalidInput.
  static constexpr std::int64_t kMaxDocumentsPerBatch = 10'000'000;

  // `dataset` (lengths >= 1, at least one) must outlive the sampler. InvalidInput on an
  // empty dataset, a length < 1 or invalid options (including a budget that would mean
  // more than kMaxDocumentsPerBatch documents per batch).
  BatchSampler(std::span<const std::int64_t> dataset, const SamplerOptions& options);

  // The next global batch; never empty.
  SampledBatch Next();
  // Where the next batch starts; Restore(position()) on a sampler with the same dataset
  // and options continues with exactly the same batches.
  SamplerPosition position() const { return position_; }
  // InvalidInput when epoch < 0 or offset is outside [0, dataset size].
  void Restore(const SamplerPosition& position);

 private:
  void Reshuffle();
  // The dataset index of the next document in the stream, rolling over to a new epoch.
  std::int64_t TakeDocument();
  // The index TakeDocument would return, without taking it.
  std::int64_t PeekDocument();

  std::span<const std::int64_t> dataset_;
  SamplerOptions options_;
  SamplerPosition position_;
  std::vector<std::int64_t> order_;
};

}  // namespace hydraulis
