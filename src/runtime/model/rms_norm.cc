#include "hydraulis/runtime/model/rms_norm.h"

#include <torch/csrc/autograd/custom_function.h>

namespace hydraulis {
namespace {

// y = cast(x * r) * w with r = rsqrt(mean(x^2) + eps) per row, in fp32. With g the output
// gradient and gx = g * x: dw = sum_rows(gx * r) and, per row, dx = r * (g * w) - x * r^3 *
// (gx . w) / n. Both sums over gx are matrix-vector products, so backward reads x and g once
// to make gx and never keeps the normalised input.
struct FusedRmsNorm : public torch::autograd::Function<FusedRmsNorm> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                            const at::Tensor& weight, double eps) {
    const at::Tensor x2 = x.reshape({-1, x.size(-1)});
    const at::Tensor xf = x2.to(at::kFloat);
    const double n = static_cast<double>(x2.size(1));
    // The norm is one reduction pass with no x^2 temporary.
    const at::Tensor norm = at::linalg_vector_norm(xf, 2, {-1}, /*keepdim=*/true);
    const at::Tensor rstd = at::rsqrt(norm.square().div_(n).add_(eps));
    at::Tensor y = at::mul(xf, rstd);
    if (x.scalar_type() != at::kFloat) y = y.to(x.scalar_type());
    y.mul_(weight);
    ctx->save_for_backward({x2, weight, rstd});
    return y.view(x.sizes());
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor xf = saved[0].to(at::kFloat);
    const at::Tensor wf = saved[1].to(at::kFloat);
    const at::Tensor& rstd = saved[2];  // [rows, 1]
    const at::Tensor g = grads[0].reshape(xf.sizes()).to(at::kFloat);
    const double n = static_cast<double>(xf.size(1));
    const at::Tensor gx = at::mul(g, xf);
    const at::Tensor r = rstd.squeeze(1);
    const at::Tensor dweight = at::mv(gx.t(), r).to(saved[1].scalar_type());
    // Per row: r^3 * (gx . w) / n.
    const at::Tensor coef = at::mv(gx, wf).mul_(r.pow(3)).div_(n).unsqueeze(1);
    at::Tensor dx = at::mul(g, wf);
    dx.mul_(rstd);
    dx.addcmul_(xf, coef, -1);
    return {dx.to(saved[0].scalar_type()).view(grads[0].sizes()), dweight, at::Tensor()};
  }
};

}  // namespace

at::Tensor RmsNorm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  return FusedRmsNorm::apply(x, weight, eps);
}

}  // namespace hydraulis
