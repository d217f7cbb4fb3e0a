// Capacity of a scheme: the most tokens one micro-batch may hold on one GPU's memory,
// from the memory model of method.md 2.1 with a fixed optimizer layout.
#pragma once

#include <cstdint>

#include "hydraulis/cost/cp_layout.h"
#include "hydraulis/spec/profile.h"
#include "hydraulis/spec/strategy.h"

namespace hydraulis {

// Micro-batches are padded to this many tokens (variable-length attention kernels).
inline constexpr std::int64_t kTokenAlignment = 128;

// Model-state bytes per GPU of `scheme` when optimizer states live in `layout`.
double ModelStateBytes(const Profile& profile, const Scheme& scheme, const OptimizerLayout& layout);

// The memory a rank needs for the keys and values it gathers of one token of a sharded
// document, over the memory of one of its own tokens (ShardCost::kv_memory_ratio): the
// gathered keys and values live one layer at a time (backward gathers them again), while a
// rank keeps every layer's activations of its own tokens.
double KvMemoryRatio(const Profile& profile, int tp);

// Capacity in tokens before alignment (may be negative when the model does not fit).
// cp splits each micro-batch's tokens over cp GPUs, so it multiplies the capacity, less
// the keys and values each rank gathers of the others' tokens: a micro-batch of T tokens
// sharded over every rank needs T / cp * (1 + KvMemoryRatio * (cp - 1)) tokens' worth of a
// rank's memory, and every micro-batch within the capacity fits that way.
double RawCapacityTokens(const Profile& profile, const Scheme& scheme,
                         const OptimizerLayout& layout);

// Capacity rounded down to a multiple of kTokenAlignment; 0 when nothing fits.
std::int64_t CapacityTokens(const Profile& profile, const Scheme& scheme,
                            const OptimizerLayout& layout);

// The cost of a micro-batch on one stage of `scheme` (fitted as `entry`) whose micro-batch
// capacity is `capacity_tokens`: the rank memory is what a micro-batch at that capacity
// needs when every document is sharded.
ShardCost MakeShardCost(const Profile& profile, const SchemeProfile& entry,
                        std::int64_t capacity_tokens);

}  // namespace hydraulis
