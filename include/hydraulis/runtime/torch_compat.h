// The one place for differences between the libtorch versions the runtime builds against:
// Debian 12's libtorch 1.13 (CPU, tested here) and PyTorch 2.x wheels (GPU builds; NOT
// tested in this repository yet). The code of this slice (ATen tensor ops, autograd,
// CPU generators, torch::optim::AdamW) uses only APIs that are the same in both, and
// sidesteps the one behavioural difference it met (Optimizer::zero_grad zeroes in place in
// 1.13 but sets gradients to undefined by default in 2.x) with its own ZeroGradients. So
// this header only names and checks the version; c10d's ProcessGroup/Backend split (2.0)
// will add its shims here when the distributed runtime arrives.
#pragma once

#include <torch/version.h>

#include <string>

#define HYDRAULIS_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) ||            \
   (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

static_assert(HYDRAULIS_TORCH_AT_LEAST(1, 13), "hydraulis needs libtorch 1.13 or newer");

namespace hydraulis {

// "1.13.0" and the like, for logs and error messages.
inline std::string TorchVersionString() { return TORCH_VERSION; }

}  // namespace hydraulis
