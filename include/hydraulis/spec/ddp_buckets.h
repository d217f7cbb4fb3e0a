// The gradient/parameter buckets of the ZeRO-1 layout, as Megatron's --ddp-bucket-size cuts
// them: shared by the runtime that cuts them and the simulator that times them.
#pragma once

#include <cstdint>

namespace hydraulis {

// Megatron's default bucket (40M elements): few collectives per step, each large enough to
// run at bandwidth.
inline constexpr std::int64_t kDefaultBucketElements = 40'000'000;

// Each bucket costs two collectives per step: more than this many is a bucket far too small
// for the model (and a layout of billions of entries), refused.
inline constexpr std::int64_t kMaxBuckets = std::int64_t{1} << 16;

}  // namespace hydraulis
