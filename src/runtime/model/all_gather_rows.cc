#include "hydraulis/runtime/model/all_gather_rows.h"

#include <torch/csrc/autograd/custom_function.h>

#include <cstdint>
#include <vector>

namespace hydraulis {
namespace {

// The group travels through autograd's saved data as an integer, as in transformer.cc:
// IValue has no slot for a raw pointer.
struct AllGatherRowsFunction : public torch::autograd::Function<AllGatherRowsFunction> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& rows,
                            CommGroup* group) {
    ctx->saved_data["group"] = reinterpret_cast<std::int64_t>(group);
    const at::Tensor shard = rows.detach().contiguous();
    std::vector<std::int64_t> sizes = shard.sizes().vec();
    sizes[0] *= group->size();
    at::Tensor full = at::empty(sizes, shard.options());
    group->AllGather(shard, full);
    return full;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    CommGroup& group = *reinterpret_cast<CommGroup*>(ctx->saved_data["group"].toInt());
    const at::Tensor full = grads[0].contiguous();
    std::vector<std::int64_t> sizes = full.sizes().vec();
    sizes[0] /= group.size();
    at::Tensor shard = at::empty(sizes, full.options());
    group.ReduceScatterSum(full, shard);
    return {shard, at::Tensor()};
  }
};

}  // namespace

at::Tensor AllGatherRows(const at::Tensor& rows, CommGroup& group) {
  return AllGatherRowsFunction::apply(rows, &group);
}

}  // namespace hydraulis
