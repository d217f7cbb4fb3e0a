// Seeded global-batch sampling from a length dataset by token budget.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace hydraulis {

struct SamplerOptions {
  std::int64_t tokens_per_batch = 200'000;  // budget per global batch (tokens, >= 1)
  std::int64_t max_len = 32'768;            // context length: documents are cut to it (>= 1)
  std::uint64_t seed = 1;
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

// Appends documents of a per-epoch shuffled order until the token budget is reached: each
// document is cut to max_len, and the last one to what remains of the budget. The
// shuffle of epoch e is seeded with (seed, e), so a restored position sees the same data.
class BatchSampler {
 public:
  BatchSampler(std::span<const std::int64_t> dataset, const SamplerOptions& options);

  SampledBatch Next();
  SamplerPosition position() const { return position_; }
  void Restore(const SamplerPosition& position);

 private:
  void Reshuffle();

  std::span<const std::int64_t> dataset_;
  SamplerOptions options_;
  SamplerPosition position_;
  std::vector<std::int64_t> order_;
};

}  // namespace hydraulis
