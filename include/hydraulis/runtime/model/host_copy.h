// Index arrays built on the host (token ids, positions, document boundaries, gather rows)
// as tensors on the compute device, copied without stopping the host.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

namespace hydraulis {

// `values` as an int64 (int32) tensor on `device`. On a GPU they go through pinned host
// memory and a non-blocking copy on the current stream: a copy from pageable memory is
// staged by CUDA synchronously, so the host would wait for the GPU to drain its queue at
// every micro-batch. The pinned block comes from PyTorch's caching host allocator, which
// records the copy's stream and does not hand the block out again before the copy is done,
// so the caller may drop the returned tensor's source at once. On the CPU: a plain tensor.
at::Tensor IndicesOn(const std::vector<std::int64_t>& values, at::Device device);
at::Tensor IndicesOn(const std::vector<std::int32_t>& values, at::Device device);

}  // namespace hydraulis
