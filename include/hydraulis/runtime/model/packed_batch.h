// A packed variable-length micro-batch: the documents of one micro-batch laid end to end
// in one flat token sequence, with cu_seqlens marking where each starts. There is no
// padding: every token is real. Attention never crosses a cu_seqlens boundary and rotary
// positions restart at each document (docs/runtime.md).
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

namespace hydraulis {

struct PackedBatch {
  // int64 token ids, shape [total_tokens], on the device the model runs on.
  at::Tensor tokens;
  // Document boundaries (host): cu_seqlens[0] = 0, strictly increasing, back() =
  // total_tokens; document d is tokens[cu_seqlens[d], cu_seqlens[d + 1]).
  std::vector<std::int64_t> cu_seqlens;

  std::int64_t num_tokens() const { return cu_seqlens.empty() ? 0 : cu_seqlens.back(); }
  std::int64_t num_documents() const {
    return cu_seqlens.empty() ? 0 : static_cast<std::int64_t>(cu_seqlens.size()) - 1;
  }
  // Tokens that have a next-token target: every token but the last of its document.
  std::int64_t num_targets() const { return num_tokens() - num_documents(); }
};

// Packs `documents` (each non-empty, ids in [0, vocab)) in the given order.
// InvalidInput on an empty document or an id out of range.
// The tokens are placed on `device`.
PackedBatch PackDocuments(const std::vector<std::vector<std::int64_t>>& documents,
                          std::int64_t vocab, at::Device device = at::Device(at::kCPU));

// Checks the cu_seqlens invariants above and that tokens is a 1-D int64 tensor of
// num_tokens() elements; InvalidInput naming what is wrong.
void ValidatePackedBatch(const PackedBatch& batch);

// Position of every token inside its own document (0, 1, ..., len - 1 per document),
// int64 [total_tokens], on `tokens`' device.
at::Tensor PositionsInDocuments(const PackedBatch& batch);

// The next-token targets: `inputs` holds the packed index of every token that has a target
// and `targets` the id of the token after it in the same document. Both int64
// [num_targets()].
struct NextTokenTargets {
  at::Tensor inputs;
  at::Tensor targets;
};
NextTokenTargets NextTokenTargetsOf(const PackedBatch& batch);

}  // namespace hydraulis
