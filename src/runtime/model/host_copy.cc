#include "hydraulis/runtime/model/host_copy.h"

#include <cstring>

namespace hydraulis {
namespace {

template <typename T>
at::Tensor Copied(const std::vector<T>& values, at::ScalarType dtype, at::Device device) {
  const auto n = static_cast<std::int64_t>(values.size());
  if (!device.is_cuda()) {
    at::Tensor out = at::empty({n}, at::TensorOptions().dtype(dtype));
    if (n > 0) std::memcpy(out.data_ptr(), values.data(), values.size() * sizeof(T));
    return out;
  }
  at::Tensor host = at::empty({n}, at::TensorOptions().dtype(dtype).pinned_memory(true));
  if (n > 0) std::memcpy(host.data_ptr(), values.data(), values.size() * sizeof(T));
  return host.to(device, dtype, /*non_blocking=*/true);
}

}  // namespace

at::Tensor IndicesOn(const std::vector<std::int64_t>& values, at::Device device) {
  return Copied(values, at::kLong, device);
}

at::Tensor IndicesOn(const std::vector<std::int32_t>& values, at::Device device) {
  return Copied(values, at::kInt, device);
}

}  // namespace hydraulis
