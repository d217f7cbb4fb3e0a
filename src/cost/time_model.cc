#include "hydraulis/cost/time_model.h"

namespace hydraulis {

double TimeModel::MicroBatchMs(std::span<const std::int64_t> lengths) const {
  double total = c_ms;
  for (auto s : lengths) total += DocumentMs(s);
  return total;
}

}  // namespace hydraulis
