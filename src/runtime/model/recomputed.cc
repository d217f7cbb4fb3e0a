#include "recomputed.h"

#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/custom_class.h>

#include <utility>

namespace hydraulis {
namespace {

// The function travels through autograd's saved data as a capsule: IValue holds no
// std::function, and the node, not the forward's caller, must own it until the backward.
struct HeldFunction : torch::CustomClassHolder {
  explicit HeldFunction(TensorFunction f) : fn(std::move(f)) {}
  TensorFunction fn;
};

struct Recompute : public torch::autograd::Function<Recompute> {
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx,
                                                at::TensorList inputs, const TensorFunction& fn) {
    ctx->save_for_backward(inputs.vec());
    ctx->saved_data["fn"] = c10::IValue::make_capsule(c10::make_intrusive<HeldFunction>(fn));
    // Grad mode is off here (autograd's rule for a custom forward): nothing inside is kept.
    return fn(inputs.vec());
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const torch::autograd::variable_list saved = ctx->get_saved_variables();
    const auto held =
        c10::static_intrusive_pointer_cast<HeldFunction>(ctx->saved_data["fn"].toCapsule());
    // Fresh leaves, so the nested backward stops at them and leaves their gradients there.
    std::vector<at::Tensor> inputs;
    inputs.reserve(saved.size());
    for (const at::Tensor& t : saved) {
      at::Tensor leaf = t.detach();
      leaf.requires_grad_(t.requires_grad());
      inputs.push_back(std::move(leaf));
    }
    std::vector<at::Tensor> outputs;
    {
      at::AutoGradMode enable(true);
      outputs = held->fn(inputs);
    }
    std::vector<at::Tensor> roots, root_grads;
    for (std::size_t i = 0; i < outputs.size(); ++i) {
      if (outputs[i].requires_grad() && grads[i].defined()) {
        roots.push_back(outputs[i]);
        root_grads.push_back(grads[i]);
      }
    }
    if (!roots.empty()) torch::autograd::backward(roots, root_grads);
    torch::autograd::variable_list result;
    for (const at::Tensor& leaf : inputs) {
      result.push_back(leaf.requires_grad() ? leaf.grad() : at::Tensor());
    }
    result.emplace_back();  // for fn
    return result;
  }
};

}  // namespace

std::vector<at::Tensor> Recomputed(const TensorFunction& fn,
                                   const std::vector<at::Tensor>& inputs) {
  bool any = false;
  for (const at::Tensor& t : inputs) any = any || t.requires_grad();
  if (!at::GradMode::is_enabled() || !any) return fn(inputs);
  // As a TensorList: autograd tracks the tensors of a list argument only in that type.
  return Recompute::apply(at::TensorList(inputs), fn);
}

}  // namespace hydraulis
