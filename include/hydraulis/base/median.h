// The median of a sample, as the profiler and the calibration take it.
#pragma once

#include <algorithm>
#include <vector>

namespace hydraulis {

// The middle value of `values`, the mean of the two middle ones for an even count; 0 for none.
inline double Median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

}  // namespace hydraulis
