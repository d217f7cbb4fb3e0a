#include "hydraulis/runtime/step/adamw.h"

#include <cmath>
#include <string>

#include "hydraulis/base/error.h"

namespace hydraulis {

void ValidateAdamWOptions(const AdamWOptions& o) {
  auto check = [](bool ok, const std::string& field, double value) {
    if (!ok)
      throw InvalidInput("AdamW options: " + field + ": out of range, got " +
                         std::to_string(value));
  };
  check(o.lr >= 0.0, "lr", o.lr);  // 0: a run that changes no parameter, for checks
  check(o.beta1 >= 0.0 && o.beta1 < 1.0, "beta1", o.beta1);
  check(o.beta2 >= 0.0 && o.beta2 < 1.0, "beta2", o.beta2);
  check(o.eps > 0.0, "eps", o.eps);
  check(o.weight_decay >= 0.0, "weight_decay", o.weight_decay);
  check(o.clip_grad >= 0.0 && std::isfinite(o.clip_grad), "clip_grad", o.clip_grad);
}

AdamWKernel DefaultAdamWKernel(const at::Device& device) {
  return device.is_cuda() ? AdamWKernel::kFused : AdamWKernel::kReference;
}

void AdamWUpdate(const at::Tensor& param, const at::Tensor& grad, const at::Tensor& exp_avg,
                 const at::Tensor& exp_avg_sq, std::int64_t step, const AdamWOptions& o,
                 AdamWKernel kernel) {
  if (kernel == AdamWKernel::kFused) {
    // The step count as the kernel reads it (a float tensor on the parameters' device, as
    // torch.optim keeps it for fused): set by a fill, not copied from the host.
    const at::Tensor steps = at::full({}, static_cast<double>(step), param.options());
    at::_fused_adamw_({param}, {grad}, {exp_avg}, {exp_avg_sq}, {}, {steps}, o.lr, o.beta1, o.beta2,
                      o.weight_decay, o.eps, /*amsgrad=*/false, /*maximize=*/false);
    return;
  }
  // The statement order and scalar arithmetic of torch/csrc/api/src/optim/adamw.cpp, so the
  // update is bit-identical to torch::optim::AdamW's.
  at::Tensor p = param;
  if (o.weight_decay != 0) p.mul_(1 - o.lr * o.weight_decay);
  const double bias_correction1 = 1 - std::pow(o.beta1, static_cast<double>(step));
  const double bias_correction2 = 1 - std::pow(o.beta2, static_cast<double>(step));
  exp_avg.mul_(o.beta1).add_(grad, 1 - o.beta1);
  exp_avg_sq.mul_(o.beta2).addcmul_(grad, grad, 1 - o.beta2);
  const at::Tensor denom = (exp_avg_sq.sqrt() / std::sqrt(bias_correction2)).add_(o.eps);
  const double step_size = o.lr / bias_correction1;
  p.addcdiv_(exp_avg, denom, -step_size);
}

}  // namespace hydraulis
