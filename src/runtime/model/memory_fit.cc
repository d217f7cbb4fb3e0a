#include "hydraulis/runtime/model/memory_fit.h"

#include <cstdio>

#include "hydraulis/base/error.h"
#include "hydraulis/spec/model.h"

namespace hydraulis {
namespace {

std::string Bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int u = 0;
  while (bytes >= 1024 && u < 6) {
    bytes /= 1024;
    ++u;
  }
  char text[64];
  std::snprintf(text, sizeof(text), "%.1f %s", bytes, units[u]);
  return text;
}

// A count that may be far beyond int64 (it is a double for that reason): exact digits
// while they are exact, else three significant digits.
std::string Count(double count) {
  char text[64];
  std::snprintf(text, sizeof(text), count < 1e15 ? "%.0f" : "%.3g", count);
  return text;
}

}  // namespace

void CheckModelMemoryFits(const ModelConfig& config, double bytes_per_parameter,
                          const std::string& what, const ComputeOptions& compute) {
  const double parameters = ModelParameterCount(config);
  const double needed = parameters * bytes_per_parameter;
  const double have = static_cast<double>(DeviceMemoryBytes(compute));
  if (needed > have) {
    throw InvalidInput("the model (" + Count(parameters) + " parameters) needs at least " +
                       Bytes(needed) + " " + what + "; " +
                       (compute.device == DeviceKind::kCuda
                            ? "GPU " + std::to_string(compute.device_index)
                            : std::string("this machine")) +
                       " has " + Bytes(have));
  }
}

}  // namespace hydraulis
