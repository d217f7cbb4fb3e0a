#include "runtime/testing/gradient_sync.h"

#include <cstdint>
#include <string>

#include "hydraulis/base/error.h"
#include "hydraulis/runtime/communication/comm_group.h"

namespace hydraulis {

std::vector<double> AllReduceGradientSync::SumAcrossRanks(const std::vector<double>& local) {
  at::Tensor t = at::tensor(local, at::TensorOptions().dtype(at::kDouble)).contiguous();
  group_.AllReduceSum(t);
  const double* data = t.data_ptr<double>();
  return std::vector<double>(data, data + t.numel());
}

void AllReduceGradientSync::ReduceGradients(const std::vector<at::Tensor>& parameters) {
  std::vector<at::Tensor> flat;
  flat.reserve(parameters.size());
  for (const at::Tensor& p : parameters) {
    if (!p.grad().defined()) {
      throw InternalError(
          "AllReduceGradientSync: a parameter has no gradient (ZeroGradients "
          "must run first, also on ranks without micro-batches)");
    }
    flat.push_back(p.grad().reshape({-1}));
  }
  at::Tensor buffer = at::cat(flat);
  group_.AllReduceSum(buffer);
  std::int64_t offset = 0;
  for (const at::Tensor& p : parameters) {
    at::Tensor grad = p.mutable_grad();
    const std::int64_t n = grad.numel();
    grad.copy_(buffer.slice(0, offset, offset + n).view(grad.sizes()));
    offset += n;
  }
}

}  // namespace hydraulis
