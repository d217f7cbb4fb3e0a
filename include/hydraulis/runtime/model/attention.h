// Causal self-attention over a packed variable-length micro-batch: each document attends
// only to itself (a block-diagonal causal mask), with grouped-query heads. This is the one
// kernel the CUDA path replaces with variable-length flash attention.
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
//
// On a CUDA device in bf16 or fp16 with head_dim a multiple of 8 up to 256, this is one
// call of ATen's variable-length flash attention over the whole packed batch (cumulative
// sequence lengths, causal, grouped-query heads natively; no per-document loop, no
// padding); elsewhere (the CPU, fp32) it is SdpaCausalAttention, document by document.
// `cu_seqlens_device`, when defined, is cu_seqlens as int32 on q's device (made once per
// micro-batch by the caller, not once per layer).
at::Tensor PackedCausalAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                 const std::vector<std::int64_t>& cu_seqlens,
                                 const at::Tensor& cu_seqlens_device = {});

// Segment i of the queries ([cu_seqlens_q[i], cu_seqlens_q[i + 1]) of q) attends to
// segment i of the keys and values ([cu_seqlens_k[i], cu_seqlens_k[i + 1]) of k, v), which
// holds at least as many rows, causally with the mask aligned to the bottom right: the
// queries are the last rows of the key segment, so query j of a segment of lq queries and
// lk keys sees keys [0, lk - lq + j]. With cu_seqlens_q == cu_seqlens_k this is
// PackedCausalAttention. Context parallelism's query chunk of a document against the
// document's keys up to the chunk's end is one such segment. Shapes, grouped-query heads,
// the flash path and the optional device copies of the offsets as in PackedCausalAttention
// (flash attention 2.1+ aligns a causal mask to the bottom right). Differentiable, also
// with no segment at all: the empty result then gives q, k and v zero gradients.
// InvalidInput when the offsets do not describe q and k or a key segment is shorter than its
// query segment.
at::Tensor VarlenCausalAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                 const std::vector<std::int64_t>& cu_seqlens_q,
                                 const std::vector<std::int64_t>& cu_seqlens_k,
                                 const at::Tensor& cu_seqlens_q_device = {},
                                 const at::Tensor& cu_seqlens_k_device = {});

// The longest segment of `cu_seqlens` (0 without one): the flash kernels' max_q / max_k.
std::int64_t LongestSegment(const std::vector<std::int64_t>& cu_seqlens);

// Whether PackedCausalAttention takes the flash path for q on `device` in `dtype` with
// head dimension `head_dim`.
bool UsesFlashAttention(at::Device device, at::ScalarType dtype, std::int64_t head_dim);

// cu_seqlens as an int32 tensor on `device`, the form the flash kernel reads.
at::Tensor CuSeqlensOnDevice(const std::vector<std::int64_t>& cu_seqlens, at::Device device);

// Document by document through ATen's scaled_dot_product_attention (causal, no mask), whose
// CPU kernel is a flash-style blocked one: no [heads, len, len] score matrix is
// materialised, and the blocks above the diagonal are skipped. Key/value heads are repeated
// for grouped queries first (the CPU kernel takes equal head counts). DenseCausalAttention's
// values to rounding.
at::Tensor SdpaCausalAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                               const std::vector<std::int64_t>& cu_seqlens);

// The reference: dense softmax attention document by document, in q's dtype and device.
at::Tensor DenseCausalAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                const std::vector<std::int64_t>& cu_seqlens);

// VarlenCausalAttention off the flash path: segment by segment through
// at::scaled_dot_product_attention, is_causal where a segment has as many keys as queries,
// else a boolean bottom-right causal mask; on the CPU both take its blocked flash kernel
// (3-5x the dense path's speed on a 3,072-token document, and no score matrix kept for
// backward). Differentiable; offsets checked as VarlenCausalAttention's.
at::Tensor SdpaVarlenCausalAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                     const std::vector<std::int64_t>& cu_seqlens_q,
                                     const std::vector<std::int64_t>& cu_seqlens_k);

// The reference of VarlenCausalAttention: dense softmax attention segment by segment.
at::Tensor DenseVarlenCausalAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                      const std::vector<std::int64_t>& cu_seqlens_q,
                                      const std::vector<std::int64_t>& cu_seqlens_k);

// Rotary position embedding (the "rotate half" convention of LLaMA): rotates each
// [.., head_dim] vector of x ([total_tokens, n, head_dim]) by angles position * theta^(-2i /
// head_dim). positions: int64 [total_tokens]. head_dim must be even.
at::Tensor ApplyRotary(const at::Tensor& x, const at::Tensor& positions, double theta);

// The cos and sin ApplyRotary multiplies by, for `positions` (int64 [total_tokens]) and heads
// of `head_dim`: [total_tokens, 1, head_dim] in `dtype` on the positions' device. They depend
// on the positions only, so a micro-batch makes them once and every layer's q and k read
// them (instead of four trigonometric passes per layer).
struct RotaryTable {
  at::Tensor cos, sin;
};
RotaryTable MakeRotaryTable(const at::Tensor& positions, std::int64_t head_dim, double theta,
                            at::ScalarType dtype);
// ApplyRotary with a table made for x's head_dim and dtype; the same values.
at::Tensor ApplyRotary(const at::Tensor& x, const RotaryTable& table);

}  // namespace hydraulis
