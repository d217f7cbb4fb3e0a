#include "hydraulis/runtime/model/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>

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
  return at::tensor(cu, at::kInt).to(device);
}

at::Tensor PackedCausalAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                 const std::vector<std::int64_t>& cu_seqlens,
                                 const at::Tensor& cu_seqlens_device) {
  if (!UsesFlashAttention(q.device(), q.scalar_type(), q.size(-1)) || cu_seqlens.size() < 2) {
    return DenseCausalAttention(q, k, v, cu_seqlens);
  }
  std::int64_t max_len = 0;
  for (std::size_t d = 0; d + 1 < cu_seqlens.size(); ++d) {
    max_len = std::max(max_len, cu_seqlens[d + 1] - cu_seqlens[d]);
  }
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

at::Tensor DenseCausalAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                const std::vector<std::int64_t>& cu_seqlens) {
  const std::int64_t heads = q.size(1);
  const std::int64_t group = heads / k.size(1);
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(2)));
  std::vector<at::Tensor> outputs;
  outputs.reserve(cu_seqlens.size());
  for (std::size_t d = 0; d + 1 < cu_seqlens.size(); ++d) {
    const std::int64_t begin = cu_seqlens[d];
    const std::int64_t end = cu_seqlens[d + 1];
    const std::int64_t len = end - begin;
    at::Tensor qd = q.slice(0, begin, end).transpose(0, 1);  // [heads, len, dim]
    at::Tensor kd = k.slice(0, begin, end).transpose(0, 1);  // [kv_heads, len, dim]
    at::Tensor vd = v.slice(0, begin, end).transpose(0, 1);
    if (group > 1) {
      kd = kd.repeat_interleave(group, 0);
      vd = vd.repeat_interleave(group, 0);
    }
    at::Tensor scores = at::matmul(qd, kd.transpose(1, 2)) * scale;  // [heads, len, len]
    at::Tensor future = at::ones({len, len}, q.options().dtype(at::kBool)).triu(1);
    scores = scores.masked_fill(future, -std::numeric_limits<float>::infinity());
    at::Tensor out = at::matmul(at::softmax(scores, -1), vd);  // [heads, len, dim]
    outputs.push_back(out.transpose(0, 1));
  }
  if (outputs.empty()) return at::empty({0, heads, q.size(2)}, q.options());
  return at::cat(outputs, 0);
}

at::Tensor ApplyRotary(const at::Tensor& x, const at::Tensor& positions, double theta) {
  const std::int64_t dim = x.size(2);
  const std::int64_t half = dim / 2;
  // Frequencies in double, then fp32, so they do not depend on the input's precision path.
  at::Tensor exponents =
      at::arange(0, half, x.options().dtype(at::kDouble)) * (2.0 / static_cast<double>(dim));
  at::Tensor inv_freq = at::pow(theta, -exponents).to(at::kFloat);
  at::Tensor angles = positions.to(at::kFloat).unsqueeze(1) * inv_freq.unsqueeze(0);
  at::Tensor full = at::cat({angles, angles}, 1).unsqueeze(1);  // [tokens, 1, dim]
  at::Tensor cos = full.cos().to(x.scalar_type());
  at::Tensor sin = full.sin().to(x.scalar_type());
  at::Tensor x1 = x.slice(2, 0, half);
  at::Tensor x2 = x.slice(2, half, dim);
  at::Tensor rotated = at::cat({-x2, x1}, 2);
  return x * cos + rotated * sin;
}

}  // namespace hydraulis
