// Causal self-attention over a packed variable-length micro-batch: each document attends
// only to itself (a block-diagonal causal mask), with grouped-query heads. This is the one
// kernel a GPU build replaces with variable-length flash attention.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

namespace hydraulis {

// q: [total_tokens, heads, head_dim]; k, v: [total_tokens, kv_heads, head_dim] with
// kv_heads dividing heads (query head h reads key/value head h / (heads / kv_heads), as in
// LLaMA). cu_seqlens as in PackedBatch. Returns [total_tokens, heads, head_dim]:
// softmax(q k^T / sqrt(head_dim) + causal mask) v computed document by document, so no
// token ever sees a token of another document. Differentiable.
at::Tensor PackedCausalAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                 const std::vector<std::int64_t>& cu_seqlens);

// Rotary position embedding (the "rotate half" convention of LLaMA): rotates each
// [.., head_dim] vector of x ([total_tokens, n, head_dim]) by angles position * theta^(-2i /
// head_dim). positions: int64 [total_tokens]. head_dim must be even.
at::Tensor ApplyRotary(const at::Tensor& x, const at::Tensor& positions, double theta);

}  // namespace hydraulis
