#include "hydraulis/runtime/model/gradients.h"

#include <ATen/core/grad_mode.h>

namespace hydraulis {

void ZeroGradients(const Transformer& model) {
  for (const NamedParameter& named : model.named_parameters()) {
    const at::Tensor& p = named.value;
    at::Tensor& grad = p.mutable_grad();
    if (grad.defined()) {
      grad.detach_();
      grad.zero_();
    } else {
      grad = at::zeros_like(p);
    }
    if (named.main_grad.defined()) {
      // Allocated here on first use (in place: the handle is shared with the model).
      if (named.main_grad.sizes() != p.sizes()) named.main_grad.resize_(p.sizes());
      named.main_grad.zero_();
    }
  }
}

void AccumulateMainGradients(const Transformer& model) {
  at::NoGradGuard no_grad;
  for (const NamedParameter& p : model.named_parameters()) {
    if (!p.main_grad.defined()) continue;
    at::Tensor& grad = p.value.mutable_grad();
    if (!grad.defined()) continue;
    p.main_grad.add_(grad);
    grad.zero_();
  }
}

}  // namespace hydraulis
