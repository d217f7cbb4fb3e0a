// Unit conversions shared by the simulator's sources (not a public header).
#pragma once

namespace hydraulis::sim_units {

inline constexpr double kMsPerSecond = 1e3;
inline constexpr double kUsPerMs = 1e3;
inline constexpr double kBytesPerGigabyte = 1e9;
inline constexpr double kBitsPerByte = 8.0;

}  // namespace hydraulis::sim_units
