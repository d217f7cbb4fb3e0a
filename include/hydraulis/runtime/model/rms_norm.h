#pragma once

#include <ATen/ATen.h>

namespace hydraulis {

// LLaMA's RMSNorm over the last dimension: x * rsqrt(mean(x^2) + eps) * weight, normalised in
// fp32 and cast back to x's dtype before the weight (as transformers' LlamaRMSNorm and
// Megatron do under bf16). One autograd node whose backward is written out (two
// matrix-vector products and three elementwise passes, in fp32) instead of autograd's chain
// of about a dozen passes, which also kept the normalised input alive; it saves x, the
// weight and one fp32 value per row.
at::Tensor RmsNorm(const at::Tensor& x, const at::Tensor& weight, double eps);

}  // namespace hydraulis
