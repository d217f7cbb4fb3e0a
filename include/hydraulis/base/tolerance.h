// How the planning layers compare estimated times (ms): one convention everywhere. Two
// times are equal when they differ by at most kRelativeTolerance of the larger magnitude,
// with a floor of 1 ms (so times near zero compare absolutely). Sums of the same costs
// taken in different orders round differently; comparing through these helpers keeps such
// noise from flipping a choice, so plans are the same on every rank and every run.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>

namespace hydraulis {

// "No bound" / "not reachable": the one infinity of the planning layers.
inline constexpr double kInf = std::numeric_limits<double>::infinity();

inline constexpr double kRelativeTolerance = 1e-9;

// The tolerance around `reference` (ms): kRelativeTolerance * max(1, |reference|).
inline double ToleranceMs(double reference) {
  return kRelativeTolerance * std::max(1.0, std::abs(reference));
}

// `a` is below `b` by more than the tolerance. A finite `a` is always below kInf.
inline bool DefinitelyLess(double a, double b) {
  if (std::isinf(b)) return a < b;
  return a < b - ToleranceMs(b);
}

// Relative room between a lower bound and the exact time it bounds, when the two sum the
// same costs in different orders.
inline constexpr double kLowerBoundRounding = 1e-10;

// Whether any time at least `lower_bound` fails DefinitelyLess(time, limit): a candidate
// whose bound says so can be skipped without changing what DefinitelyLess would choose.
inline bool CannotComeBelow(double lower_bound, double limit) {
  return !DefinitelyLess(lower_bound * (1 - kLowerBoundRounding), limit);
}

// `a` and `b` are equal within the tolerance of the larger magnitude.
inline bool NearlyEqual(double a, double b) {
  if (std::isinf(a) || std::isinf(b)) return a == b;
  return std::abs(a - b) <= ToleranceMs(std::max(std::abs(a), std::abs(b)));
}

}  // namespace hydraulis
