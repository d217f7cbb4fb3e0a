#include "hydraulis/runtime/model/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include <torch/csrc/autograd/custom_function.h>

#include "hydraulis/base/error.h"
#include "hydraulis/runtime/model/host_copy.h"

namespace hydraulis {

namespace {

// The flash kernels' limits on the head dimension.
constexpr std::int64_t kFlashHeadDimMultiple = 8;
constexpr std::int64_t kFlashMaxHeadDim = 256;

}  // namespace

bool UsesFlashAttention(at::Device device, at::ScalarType dtype, std::int64_t head_dim) {
  return device.is_cuda() && (dtype == at::kBFloat16 || dtype == at::kHalf) &&
         head_dim % kFlashHeadDimMultiple == 0 && head_dim <= kFlashMaxHeadDim;
}

at::Tensor CuSeqlensOnDevice(const std::vector<std::int64_t>& cu_seqlens, at::Device device) {
  std::vector<std::int32_t> cu(cu_seqlens.begin(), cu_seqlens.end());
  return IndicesOn(cu, device);
}

std::int64_t LongestSegment(const std::vector<std::int64_t>& cu_seqlens) {
  std::int64_t longest = 0;
  for (std::size_t i = 0; i + 1 < cu_seqlens.size(); ++i) {
    longest = std::max(longest, cu_seqlens[i + 1] - cu_seqlens[i]);
  }
  return longest;
}

at::Tensor PackedCausalAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                 const std::vector<std::int64_t>& cu_seqlens,
                                 const at::Tensor& cu_seqlens_device) {
  if (!UsesFlashAttention(q.device(), q.scalar_type(), q.size(-1)) || cu_seqlens.size() < 2) {
    return SdpaCausalAttention(q, k, v, cu_seqlens);
  }
  const std::int64_t max_len = LongestSegment(cu_seqlens);
  const at::Tensor cu =
      cu_seqlens_device.defined() ? cu_seqlens_device : CuSeqlensOnDevice(cu_seqlens, q.device());
  // Differentiable: autograd's formula for _flash_attention_forward is the flash backward
  // kernel. The kernel reads key/value head h / (heads / kv_heads) for query head h, the
  // LLaMA grouping DenseCausalAttention spells out.
  return std::get<0>(at::_flash_attention_forward(q.contiguous(), k.contiguous(), v.contiguous(),
                                                  cu, cu, max_len, max_len, /*dropout_p=*/0.0,
                                                  /*is_causal=*/true,
                                                  /*return_debug_mask=*/false));
}

namespace {

// Document by document over cu_seqlens: attend(q, k, v) of each document, heads first
// ([heads, len, dim], key/value heads repeated for grouped queries), its result [heads, len,
// dim] put back token-first and concatenated.
template <typename Attend>
at::Tensor PerDocument(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                       const std::vector<std::int64_t>& cu_seqlens, const Attend& attend) {
  const std::int64_t heads = q.size(1);
  const std::int64_t group = heads / k.size(1);
  std::vector<at::Tensor> outputs;
  outputs.reserve(cu_seqlens.size());
  for (std::size_t d = 0; d + 1 < cu_seqlens.size(); ++d) {
    const std::int64_t begin = cu_seqlens[d];
    const std::int64_t end = cu_seqlens[d + 1];
    at::Tensor qd = q.slice(0, begin, end).transpose(0, 1);  // [heads, len, dim]
    at::Tensor kd = k.slice(0, begin, end).transpose(0, 1);  // [kv_heads, len, dim]
    at::Tensor vd = v.slice(0, begin, end).transpose(0, 1);
    if (group > 1) {
      kd = kd.repeat_interleave(group, 0);
      vd = vd.repeat_interleave(group, 0);
    }
    outputs.push_back(attend(qd, kd, vd).transpose(0, 1));
  }
  if (outputs.empty()) return at::empty({0, heads, q.size(2)}, q.options());
  return at::cat(outputs, 0);
}

}  // namespace

at::Tensor SdpaCausalAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                               const std::vector<std::int64_t>& cu_seqlens) {
  // Equal query and key segments: each document attends to itself, is_causal.
  return SdpaVarlenCausalAttention(q, k, v, cu_seqlens, cu_seqlens);
}

at::Tensor DenseCausalAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                const std::vector<std::int64_t>& cu_seqlens) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(2)));
  return PerDocument(
      q, k, v, cu_seqlens, [&](const at::Tensor& qd, const at::Tensor& kd, const at::Tensor& vd) {
        const std::int64_t len = qd.size(1);
        at::Tensor scores = at::matmul(qd, kd.transpose(1, 2)) * scale;  // [heads, len, len]
        at::Tensor future = at::ones({len, len}, q.options().dtype(at::kBool)).triu(1);
        scores = scores.masked_fill(future, -std::numeric_limits<float>::infinity());
        return at::matmul(at::softmax(scores, -1), vd);  // [heads, len, dim]
      });
}

namespace {

// InvalidInput unless both offset arrays cover their tensors and each key segment holds at
// least its query segment's rows.
void CheckVarlenOffsets(const at::Tensor& q, const at::Tensor& k,
                        const std::vector<std::int64_t>& cu_q,
                        const std::vector<std::int64_t>& cu_k) {
  if (cu_q.size() != cu_k.size() || cu_q.empty() || cu_q.front() != 0 || cu_k.front() != 0 ||
      cu_q.back() != q.size(0) || cu_k.back() != k.size(0)) {
    throw InvalidInput(
        "varlen attention: cu_seqlens_q and cu_seqlens_k must have one entry "
        "per segment plus one, start at 0 and end at the query rows (" +
        std::to_string(q.size(0)) + ") and key rows (" + std::to_string(k.size(0)) + ")");
  }
  for (std::size_t i = 0; i + 1 < cu_q.size(); ++i) {
    const std::int64_t lq = cu_q[i + 1] - cu_q[i], lk = cu_k[i + 1] - cu_k[i];
    if (lq < 0 || lk < lq) {
      throw InvalidInput("varlen attention: segment " + std::to_string(i) + " has " +
                         std::to_string(lq) + " queries and " + std::to_string(lk) +
                         " keys; a bottom-right causal segment needs at least as many keys");
    }
  }
}

}  // namespace

at::Tensor VarlenCausalAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                 const std::vector<std::int64_t>& cu_seqlens_q,
                                 const std::vector<std::int64_t>& cu_seqlens_k,
                                 const at::Tensor& cu_seqlens_q_device,
                                 const at::Tensor& cu_seqlens_k_device) {
  CheckVarlenOffsets(q, k, cu_seqlens_q, cu_seqlens_k);
  if (!UsesFlashAttention(q.device(), q.scalar_type(), q.size(-1)) || cu_seqlens_q.size() < 2) {
    return SdpaVarlenCausalAttention(q, k, v, cu_seqlens_q, cu_seqlens_k);
  }
  const std::int64_t max_q = LongestSegment(cu_seqlens_q);
  const std::int64_t max_k = LongestSegment(cu_seqlens_k);
  const at::Tensor cu_q = cu_seqlens_q_device.defined()
                              ? cu_seqlens_q_device
                              : CuSeqlensOnDevice(cu_seqlens_q, q.device());
  const at::Tensor cu_k = cu_seqlens_k_device.defined()
                              ? cu_seqlens_k_device
                              : CuSeqlensOnDevice(cu_seqlens_k, q.device());
  // Not verified on a GPU yet (gpu_test's VarlenFlashMatchesDense checks it against the dense
  // reference): ATen's flash attention is flash-attention 2.5+, whose causal mask with more
  // keys than queries is aligned to the bottom right, the alignment this function promises.
  return std::get<0>(at::_flash_attention_forward(q.contiguous(), k.contiguous(), v.contiguous(),
                                                  cu_q, cu_k, max_q, max_k, /*dropout_p=*/0.0,
                                                  /*is_causal=*/true,
                                                  /*return_debug_mask=*/false));
}

at::Tensor SdpaVarlenCausalAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                     const std::vector<std::int64_t>& cu_seqlens_q,
                                     const std::vector<std::int64_t>& cu_seqlens_k) {
  CheckVarlenOffsets(q, k, cu_seqlens_q, cu_seqlens_k);
  const std::int64_t group = q.size(1) / k.size(1);
  std::vector<at::Tensor> outputs;
  outputs.reserve(cu_seqlens_q.size());
  for (std::size_t i = 0; i + 1 < cu_seqlens_q.size(); ++i) {
    const std::int64_t lq = cu_seqlens_q[i + 1] - cu_seqlens_q[i];
    const std::int64_t lk = cu_seqlens_k[i + 1] - cu_seqlens_k[i];
    if (lq == 0) continue;  // an empty chunk: no output row
    // [1, heads, len, dim]: the CPU flash kernel takes 4-d inputs with equal head counts.
    at::Tensor qs = q.slice(0, cu_seqlens_q[i], cu_seqlens_q[i + 1]).transpose(0, 1).unsqueeze(0);
    at::Tensor ks = k.slice(0, cu_seqlens_k[i], cu_seqlens_k[i + 1]).transpose(0, 1);
    at::Tensor vs = v.slice(0, cu_seqlens_k[i], cu_seqlens_k[i + 1]).transpose(0, 1);
    // enable_gqa: query head h reads key/value head h / group inside the kernel, with no
    // repeated copies of k and v (nor their gradients' sums in backward).
    const bool gqa = group > 1;
    at::Tensor out;
    if (lq == lk) {
      out = at::scaled_dot_product_attention(qs, ks.unsqueeze(0), vs.unsqueeze(0), {}, 0.0,
                                             /*is_causal=*/true, std::nullopt, gqa);
    } else {
      // Query j sits at key row lk - lq + j: it sees keys up to there.
      const at::Tensor visible = at::ones({lq, lk}, q.options().dtype(at::kBool)).tril(lk - lq);
      out = at::scaled_dot_product_attention(qs, ks.unsqueeze(0), vs.unsqueeze(0), visible, 0.0,
                                             /*is_causal=*/false, std::nullopt, gqa);
    }
    outputs.push_back(out.squeeze(0).transpose(0, 1));
  }
  if (outputs.empty()) {
    // No query (a cp rank without tokens, or only empty chunks): as the dense reference, the
    // empty result lies on the autograd path of q, k and v.
    return q.narrow(0, 0, 0) + k.narrow(0, 0, 0).sum() + v.narrow(0, 0, 0).sum();
  }
  return at::cat(outputs, 0);
}

at::Tensor DenseVarlenCausalAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                      const std::vector<std::int64_t>& cu_seqlens_q,
                                      const std::vector<std::int64_t>& cu_seqlens_k) {
  CheckVarlenOffsets(q, k, cu_seqlens_q, cu_seqlens_k);
  const std::int64_t heads = q.size(1);
  const std::int64_t group = heads / k.size(1);
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(2)));
  std::vector<at::Tensor> outputs;
  outputs.reserve(cu_seqlens_q.size());
  for (std::size_t i = 0; i + 1 < cu_seqlens_q.size(); ++i) {
    const std::int64_t lq = cu_seqlens_q[i + 1] - cu_seqlens_q[i];
    const std::int64_t lk = cu_seqlens_k[i + 1] - cu_seqlens_k[i];
    at::Tensor qs = q.slice(0, cu_seqlens_q[i], cu_seqlens_q[i + 1]).transpose(0, 1);
    at::Tensor ks = k.slice(0, cu_seqlens_k[i], cu_seqlens_k[i + 1]).transpose(0, 1);
    at::Tensor vs = v.slice(0, cu_seqlens_k[i], cu_seqlens_k[i + 1]).transpose(0, 1);
    if (group > 1) {
      ks = ks.repeat_interleave(group, 0);
      vs = vs.repeat_interleave(group, 0);
    }
    at::Tensor scores = at::matmul(qs, ks.transpose(1, 2)) * scale;  // [heads, lq, lk]
    // Query j sits at key row lk - lq + j: keys after that are its future.
    at::Tensor future = at::ones({lq, lk}, q.options().dtype(at::kBool)).triu(1 + lk - lq);
    scores = scores.masked_fill(future, -std::numeric_limits<float>::infinity());
    outputs.push_back(at::matmul(at::softmax(scores, -1), vs).transpose(0, 1));
  }
  if (outputs.empty()) {
    // No query (a cp rank without tokens): the empty result still lies on the autograd path
    // of q, k and v (zero gradients, sums over no element), so such a rank runs the same
    // backward as the others instead of failing for want of a graph.
    return q.narrow(0, 0, 0) + k.narrow(0, 0, 0).sum() + v.narrow(0, 0, 0).sum();
  }
  return at::cat(outputs, 0);
}

RotaryTable MakeRotaryTable(const at::Tensor& positions, std::int64_t head_dim, double theta,
                            at::ScalarType dtype) {
  const std::int64_t half = head_dim / 2;
  // Frequencies in double, then fp32, so they do not depend on the input's precision path.
  at::Tensor exponents = at::arange(0, half, positions.options().dtype(at::kDouble)) *
                         (2.0 / static_cast<double>(head_dim));
  at::Tensor inv_freq = at::pow(theta, -exponents).to(at::kFloat);
  at::Tensor angles = positions.to(at::kFloat).unsqueeze(1) * inv_freq.unsqueeze(0);
  at::Tensor full = at::cat({angles, angles}, 1).unsqueeze(1);  // [tokens, 1, dim]
  return {full.cos().to(dtype), full.sin().to(dtype)};
}

namespace {

// out = x * cos + rotate_half(x) * sin, with rotate_half(x) = [-x2, x1], as one autograd node:
// out1 = x1 c - x2 s and out2 = x2 c + x1 s (cos and sin repeat over the two halves), so
// dx1 = g1 c + g2 s and dx2 = g2 c - g1 s. Written with multiply-adds into halves of one
// output, it makes no rotated copy, no negation and no zero-filled slice gradients.
struct RotaryFunction : public torch::autograd::Function<RotaryFunction> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                            const at::Tensor& cos, const at::Tensor& sin) {
    ctx->save_for_backward({cos, sin});
    return Rotate(x, cos, sin, /*inverse=*/false);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    return {Rotate(grads[0], saved[0], saved[1], /*inverse=*/true), at::Tensor(), at::Tensor()};
  }
  // The rotation by +angle (forward) or -angle (its transpose, for the gradient).
  static at::Tensor Rotate(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                           bool inverse) {
    const std::int64_t dim = x.size(2);
    const std::int64_t half = dim / 2;
    at::Tensor out = at::mul(x, cos);
    const double sign = inverse ? -1.0 : 1.0;
    out.slice(2, 0, half).addcmul_(x.slice(2, half, dim), sin.slice(2, 0, half), -sign);
    out.slice(2, half, dim).addcmul_(x.slice(2, 0, half), sin.slice(2, half, dim), sign);
    return out;
  }
};

}  // namespace

at::Tensor ApplyRotary(const at::Tensor& x, const RotaryTable& table) {
  return RotaryFunction::apply(x, table.cos, table.sin);
}

at::Tensor ApplyRotary(const at::Tensor& x, const at::Tensor& positions, double theta) {
  return ApplyRotary(x, MakeRotaryTable(positions, x.size(2), theta, x.scalar_type()));
}

}  // namespace hydraulis
