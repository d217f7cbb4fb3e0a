#include "hydraulis/runtime/model/packed_batch.h"

#include <string>

#include "hydraulis/base/error.h"
#include "hydraulis/runtime/model/host_copy.h"

namespace hydraulis {

PackedBatch PackDocuments(const std::vector<std::vector<std::int64_t>>& documents,
                          std::int64_t vocab, at::Device device) {
  PackedBatch batch;
  std::vector<std::int64_t> tokens;
  batch.cu_seqlens.push_back(0);
  for (std::size_t d = 0; d < documents.size(); ++d) {
    if (documents[d].empty()) {
      throw InvalidInput("packed batch: document " + std::to_string(d) + " is empty");
    }
    for (std::int64_t id : documents[d]) {
      if (id < 0 || id >= vocab) {
        throw InvalidInput("packed batch: document " + std::to_string(d) + ": token id " +
                           std::to_string(id) + " outside [0, " + std::to_string(vocab) + ")");
      }
      tokens.push_back(id);
    }
    batch.cu_seqlens.push_back(static_cast<std::int64_t>(tokens.size()));
  }
  batch.tokens = IndicesOn(tokens, device);
  return batch;
}

void ValidatePackedBatch(const PackedBatch& batch) {
  const auto& cu = batch.cu_seqlens;
  if (cu.empty() || cu.front() != 0) {
    throw InvalidInput("packed batch: cu_seqlens must start with 0");
  }
  for (std::size_t i = 1; i < cu.size(); ++i) {
    if (cu[i] <= cu[i - 1]) {
      throw InvalidInput("packed batch: cu_seqlens must increase strictly, got " +
                         std::to_string(cu[i - 1]) + " then " + std::to_string(cu[i]) +
                         " at index " + std::to_string(i));
    }
  }
  if (!batch.tokens.defined() || batch.tokens.dim() != 1 ||
      batch.tokens.scalar_type() != at::kLong || batch.tokens.size(0) != cu.back()) {
    throw InvalidInput("packed batch: tokens must be a 1-D int64 tensor of " +
                       std::to_string(cu.back()) + " ids (cu_seqlens.back())");
  }
}

at::Tensor PositionsInDocuments(const PackedBatch& batch) {
  std::vector<std::int64_t> positions;
  positions.reserve(static_cast<std::size_t>(batch.num_tokens()));
  for (std::size_t d = 0; d + 1 < batch.cu_seqlens.size(); ++d) {
    for (std::int64_t p = 0; p < batch.cu_seqlens[d + 1] - batch.cu_seqlens[d]; ++p) {
      positions.push_back(p);
    }
  }
  return IndicesOn(positions, batch.tokens.device());
}

NextTokenTargets NextTokenTargetsOf(const PackedBatch& batch) {
  std::vector<std::int64_t> inputs;
  inputs.reserve(static_cast<std::size_t>(batch.num_targets()));
  for (std::size_t d = 0; d + 1 < batch.cu_seqlens.size(); ++d) {
    // The last token of a document has no next token inside the document.
    for (std::int64_t i = batch.cu_seqlens[d]; i + 1 < batch.cu_seqlens[d + 1]; ++i) {
      inputs.push_back(i);
    }
  }
  NextTokenTargets t;
  t.inputs = IndicesOn(inputs, batch.tokens.device());
  t.targets = batch.tokens.index_select(0, t.inputs + 1);
  return t;
}

}  // namespace hydraulis
