// Capacity of a scheme: the most tokens one micro-batch may hold on one GPU's memory,
// from the memory model of method.md 2.1 with a fixed optimizer layout.
#pragma once

#include <cstdint>

#include "hydraulis/cost/shard_layout.h"
#include "hydraulis/spec/profile.h"
#include "hydraulis/spec/strategy.h"

namespace hydraulis {

// Micro-batches are padded to this many tokens (variable-length attention kernels).
inline constexpr std::int64_t kTokenAlignment = 128;

// Model-state bytes per GPU of `scheme` when optimizer states live in `layout`.
double ModelStateBytes(const Profile& profile, const Scheme& scheme, const OptimizerLayout& layout);

// Gathered key/value bytes per token over activation bytes per token of a tp group
// (cost/shard_layout.h ShardCost::kv_memory_ratio): bf16 keys and values of kv_heads /
// tp heads of hidden / heads values each, against the profile's activation bytes per
// hidden unit, both per layer.
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
