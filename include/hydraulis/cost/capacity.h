// Capacity of a scheme: the most tokens one micro-batch may hold on one GPU's memory,
// from the memory model of method.md 2.1 with a fixed optimizer layout.
#pragma once

#include <cstdint>

#include "hydraulis/spec/profile.h"
#include "hydraulis/spec/strategy.h"

namespace hydraulis {

// Micro-batches are padded to this many tokens (variable-length attention kernels).
inline constexpr std::int64_t kTokenAlignment = 128;

// Model-state bytes per GPU of `scheme` when optimizer states live in `layout`.
double ModelStateBytes(const Profile& profile, const Scheme& scheme, const OptimizerLayout& layout);

// Capacity in tokens before alignment (may be negative when the model does not fit).
// cp splits each micro-batch's tokens over cp GPUs, so it multiplies the capacity.
double RawCapacityTokens(const Profile& profile, const Scheme& scheme,
                         const OptimizerLayout& layout);

// Capacity rounded down to a multiple of kTokenAlignment; 0 when nothing fits.
std::int64_t CapacityTokens(const Profile& profile, const Scheme& scheme,
                            const OptimizerLayout& layout);

}  // namespace hydraulis
